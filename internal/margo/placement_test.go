package margo

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// device parses the full capabilities document after mutate changed it.
func device(t testing.TB, mutate func(t testing.TB, doc map[string]any)) *Capabilities {
	t.Helper()
	doc := loadCapabilities(t)
	if mutate != nil {
		mutate(t, doc)
	}
	return mustParseCapabilities(t, toJSON(t, doc), fullDeviceID)
}

// props applies several pointer assignments (nil deletes).
func props(kv ...any) func(t testing.TB, doc map[string]any) {
	return func(t testing.TB, doc map[string]any) {
		for i := 0; i < len(kv); i += 2 {
			p, v := kv[i].(string), kv[i+1]
			if v == nil {
				del(t, doc, p)
			} else {
				set(t, doc, p, v)
			}
		}
	}
}

func example2Description(t testing.TB) *ApplicationDescription {
	t.Helper()
	return mustParse(t, readFile(t, example2), MediaTypeYAML).Description
}

// placementFields returns the fields of a not-placeable error.
func placementFields(t testing.TB, err error) []lifecycle.FieldError {
	t.Helper()
	e := problemOf(t, err, lifecycle.EINVALID)
	require.Equal(t, ProblemNotPlaceable, e.Type, "error %v", err)
	return e.Fields
}

func TestChooseProfileExample2(t *testing.T) {
	d := example2Description(t)
	const helm, compose = "com-northstartida-digitron-orchestrator-helm-a", "com-northstartida-digitron-orchestrator-compose-a"
	helmOnly := []any{"helm"}
	tests := []struct {
		name   string
		mutate func(t testing.TB, doc map[string]any)
		want   string   // profile id, or "" when nothing fits
		why    []string // one reason per profile when nothing fits
	}{
		{"fits helm", nil, helm, nil},
		{"fits only compose", props("/properties/supportedDeploymentTypes", []any{"compose"}), compose, nil},
		{"helm misfit falls back to compose", props("/properties/memory", "512Mi"), compose, nil},
		{"bluetooth is enough for ethernet-or-bluetooth", props(
			"/properties/supportedDeploymentTypes", helmOnly,
			"/properties/interfaces", []any{map[string]any{"type": "bluetooth"}}), helm, nil},
		{"too few cores", props(
			"/properties/supportedDeploymentTypes", helmOnly,
			"/properties/cpus", []any{map[string]any{"cores": 1, "architecture": "amd64"}}), "",
			[]string{"needs 1.5 cores, device has 1", "device supports [helm], profile is compose"}},
		{"no CPUs", props("/properties/supportedDeploymentTypes", helmOnly, "/properties/cpus", nil), "",
			[]string{"needs 1.5 cores, device reports no CPUs", "device supports [helm], profile is compose"}},
		{"wrong architecture", props(
			"/properties/supportedDeploymentTypes", helmOnly,
			"/properties/cpus", []any{map[string]any{"cores": 8, "architecture": "arm64"}}), "",
			[]string{"needs architecture amd64, device has [arm64]", "device supports [helm], profile is compose"}},
		{"no architecture", props(
			"/properties/supportedDeploymentTypes", helmOnly,
			"/properties/cpus", []any{map[string]any{"cores": 8}}), "",
			[]string{"needs architecture amd64, device reports no CPU architecture", "device supports [helm], profile is compose"}},
		{"too little memory", props("/properties/supportedDeploymentTypes", helmOnly, "/properties/memory", "512Mi"), "",
			[]string{"needs 1024Mi memory, device has 512Mi", "device supports [helm], profile is compose"}},
		{"memory not reported", props("/properties/supportedDeploymentTypes", helmOnly, "/properties/memory", nil), "",
			[]string{"needs 1024Mi memory, device reports none", "device supports [helm], profile is compose"}},
		{"exactly enough memory, too little storage", props(
			"/properties/supportedDeploymentTypes", helmOnly, "/properties/memory", "1Gi", "/properties/storage", "8Gi"), "",
			[]string{"needs 10Gi storage, device has 8Gi", "device supports [helm], profile is compose"}},
		{"no GPU", props(
			"/properties/supportedDeploymentTypes", helmOnly,
			"/properties/peripherals", []any{map[string]any{"type": "display", "manufacturer": "Dell"}}), "",
			[]string{"propertySelector /peripherals ContainsAll: no element matches /type In [gpu] and /manufacturer In [NVIDIA]", "device supports [helm], profile is compose"}},
		{"a GPU and something by NVIDIA, but no NVIDIA GPU", props(
			"/properties/supportedDeploymentTypes", helmOnly,
			"/properties/peripherals", []any{
				map[string]any{"type": "gpu", "manufacturer": "AMD"},
				map[string]any{"type": "camera", "manufacturer": "NVIDIA"},
			}), "",
			[]string{"propertySelector /peripherals ContainsAll: no element matches /type In [gpu] and /manufacturer In [NVIDIA]", "device supports [helm], profile is compose"}},
		{"peripherals not reported", props("/properties/supportedDeploymentTypes", helmOnly, "/properties/peripherals", nil), "",
			[]string{"propertySelector /peripherals ContainsAll: absent", "device supports [helm], profile is compose"}},
		{"wifi only", props(
			"/properties/supportedDeploymentTypes", helmOnly,
			"/properties/interfaces", []any{map[string]any{"type": "wifi"}}), "",
			[]string{"propertySelector /interfaces ContainsAll: no element matches /type In [ethernet, bluetooth]", "device supports [helm], profile is compose"}},
		{"custom only", props("/properties/supportedDeploymentTypes", []any{"custom"}), "",
			[]string{"device supports [custom], profile is helm", "device supports [custom], profile is compose"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caps := device(t, tt.mutate)
			p, err := ChooseProfile(d, caps, "")
			if tt.want != "" {
				require.NoError(t, err, "ChooseProfile(...): %s", describeErr(err))
				if p.ID != tt.want {
					t.Errorf("ChooseProfile(...) = %s, want %s", p.ID, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ChooseProfile(...) = %s, want not-placeable", p.ID)
			}
			var why []string
			for i, f := range placementFields(t, err) {
				assert.Equal(t, idx("/deploymentProfiles", i), f.Pointer)
				why = append(why, f.Detail)
			}
			if !reflect.DeepEqual(why, tt.why) {
				t.Errorf("ChooseProfile(...) reasons = %q, want %q", why, tt.why)
			}
		})
	}
}

func TestChooseProfileNonHosting(t *testing.T) {
	d := example2Description(t)
	caps := mustParseCapabilities(t, []byte(`{"properties":{"id":"gw","vendor":"v","modelNumber":"m","serialNumber":"s"}}`), "gw")
	_, err := ChooseProfile(d, caps, "")
	fields := placementFields(t, err)
	require.Len(t, fields, 2)
	assert.Equal(t, "the device does not host workloads (it reports no workload-hosting properties), profile is helm", fields[0].Detail)
	assert.Equal(t, "the device does not host workloads (it reports no workload-hosting properties), profile is compose", fields[1].Detail)

	// A hosting device that lists no deployment types fits nothing either.
	caps = device(t, props("/properties/supportedDeploymentTypes", nil))
	_, err = ChooseProfile(d, caps, "")
	fields = placementFields(t, err)
	assert.Equal(t, "the device reports no supportedDeploymentTypes, profile is helm", fields[0].Detail)

	_, err = ChooseProfile(d, nil, "")
	fields = placementFields(t, err)
	assert.Equal(t, "the device has reported no capabilities, profile is helm", fields[0].Detail)

	_, err = ChooseProfile(nil, caps, "")
	problemOf(t, err, lifecycle.EINTERNAL)
}

func TestChooseProfileExplicit(t *testing.T) {
	d := example2Description(t)
	const helm, compose = "com-northstartida-digitron-orchestrator-helm-a", "com-northstartida-digitron-orchestrator-compose-a"

	// The full device fits both; the explicit choice wins over the order.
	p, err := ChooseProfile(d, device(t, nil), compose)
	require.NoError(t, err)
	assert.Equal(t, compose, p.ID)
	assert.Equal(t, ProfileCompose, p.Type)

	_, err = ChooseProfile(d, device(t, nil), "com-northstartida-digitron-orchestrator-helm-b")
	e := problemOf(t, err, lifecycle.EINVALID)
	assert.Equal(t, ProblemUnknownProfile, e.Type)
	assert.Equal(t, []string{"/profileId"}, fieldPointersOf(e))

	// The named profile must fit, even when another one would.
	_, err = ChooseProfile(d, device(t, props("/properties/memory", "512Mi")), helm)
	fields := placementFields(t, err)
	assert.Equal(t, []lifecycle.FieldError{{Pointer: "/deploymentProfiles/0", Detail: "needs 1024Mi memory, device has 512Mi"}}, fields)

	_, err = ChooseProfile(d, device(t, props("/properties/supportedDeploymentTypes", []any{"helm"})), compose)
	fields = placementFields(t, err)
	assert.Equal(t, []lifecycle.FieldError{{Pointer: "/deploymentProfiles/1", Detail: "device supports [helm], profile is compose"}}, fields)
}

// yamlMap reads a YAML mapping the way the description parser keeps
// deviceConstraints.
func yamlMap(t testing.TB, src string) map[string]any {
	t.Helper()
	o, err := readYAML([]byte(src))
	require.NoError(t, err, src)
	return plain(o).(map[string]any)
}

// operatorDevice is the full device plus properties and labels that the
// operator table needs.
func operatorDevice(t testing.TB) *Capabilities {
	return device(t, func(t testing.TB, doc map[string]any) {
		set(t, doc, "/properties/maxTemperature", 85)
		set(t, doc, "/properties/firmwareBuild", "12")
		set(t, doc, "/properties/a~b", map[string]any{"c/d": "e"})
		set(t, doc, "/properties/nothing", nil)
		set(t, doc, "/properties/ratio", 0.25)
		set(t, doc, "/properties/mixed", []any{"x", map[string]any{"k": "v"}})
	})
}

// TestChooseProfileOperators evaluates one selector per case against the
// full device, as the only eligibility rule of a compose profile.
func TestChooseProfileOperators(t *testing.T) {
	caps := operatorDevice(t)
	tests := []struct {
		name string
		rule string // one eligibility rule, YAML
		why  string // "" when it matches
	}{
		// In
		{"In scalar", `propertySelector: {matchExpressions: [{key: /vendor, operator: In, values: [Other, Northstar Devices]}]}`, ""},
		{"In scalar misses", `propertySelector: {matchExpressions: [{key: /vendor, operator: In, values: [Other]}]}`,
			"propertySelector /vendor In [Other]: device has Northstar Devices"},
		{"In is case-sensitive", `propertySelector: {matchExpressions: [{key: /vendor, operator: In, values: [northstar devices]}]}`,
			"propertySelector /vendor In [northstar devices]: device has Northstar Devices"},
		{"In array item", `propertySelector: {matchExpressions: [{key: /supportedDeploymentTypes, operator: In, values: [custom, compose]}]}`, ""},
		{"In number by value", `propertySelector: {matchExpressions: [{key: /cpus/0/cores, operator: In, values: [4.0]}]}`, ""},
		{"In number is not a string", `propertySelector: {matchExpressions: [{key: /cpus/0/cores, operator: In, values: ["4"]}]}`,
			`propertySelector /cpus/0/cores In ["4"]: device has 4`},
		{"In boolean", `propertySelector: {matchExpressions: [{key: /otelCollector, operator: In, values: [true]}]}`, ""},
		{"In absent", `propertySelector: {matchExpressions: [{key: /hypervisor, operator: In, values: [kvm]}]}`,
			"propertySelector /hypervisor In [kvm]: absent"},
		{"In array of objects", `propertySelector: {matchExpressions: [{key: /peripherals, operator: In, values: [gpu]}]}`,
			"propertySelector /peripherals In [gpu]: device has [an object, an object], which only ContainsAll and ContainsAny can match"},
		{"In object", `propertySelector: {matchExpressions: [{key: /cpus/0, operator: In, values: [amd64]}]}`,
			"propertySelector /cpus/0 In [amd64]: device has an object, which only ContainsAll and ContainsAny can match"},
		{"In null", `propertySelector: {matchExpressions: [{key: /nothing, operator: In, values: [x]}]}`,
			"propertySelector /nothing In [x]: device has null, which only ContainsAll and ContainsAny can match"},
		{"In escaped pointer", `propertySelector: {matchExpressions: [{key: /a~0b/c~1d, operator: In, values: [e]}]}`, ""},
		{"In array index", `propertySelector: {matchExpressions: [{key: /interfaces/2/type, operator: In, values: [bluetooth]}]}`, ""},
		{"In index out of range", `propertySelector: {matchExpressions: [{key: /interfaces/3/type, operator: In, values: [usb]}]}`,
			"propertySelector /interfaces/3/type In [usb]: absent"},
		{"In index with a leading zero", `propertySelector: {matchExpressions: [{key: /interfaces/02/type, operator: In, values: [bluetooth]}]}`,
			"propertySelector /interfaces/02/type In [bluetooth]: absent"},
		// NotIn
		{"NotIn scalar", `propertySelector: {matchExpressions: [{key: /vendor, operator: NotIn, values: [Other]}]}`, ""},
		{"NotIn scalar hit", `propertySelector: {matchExpressions: [{key: /vendor, operator: NotIn, values: [Northstar Devices]}]}`,
			"propertySelector /vendor NotIn [Northstar Devices]: device has Northstar Devices"},
		{"NotIn array", `propertySelector: {matchExpressions: [{key: /supportedDeploymentTypes, operator: NotIn, values: [custom]}]}`, ""},
		{"NotIn array hit", `propertySelector: {matchExpressions: [{key: /supportedDeploymentTypes, operator: NotIn, values: [helm]}]}`,
			"propertySelector /supportedDeploymentTypes NotIn [helm]: device has [helm, compose]"},
		{"NotIn absent", `propertySelector: {matchExpressions: [{key: /hypervisor, operator: NotIn, values: [kvm]}]}`,
			"propertySelector /hypervisor NotIn [kvm]: absent"},
		{"NotIn on objects", `propertySelector: {matchExpressions: [{key: /mixed, operator: NotIn, values: [y]}]}`,
			"propertySelector /mixed NotIn [y]: device has [x, an object], which only ContainsAll and ContainsAny can match"},
		// Exists, DoesNotExist
		{"Exists", `propertySelector: {matchExpressions: [{key: /peripherals/0/model, operator: Exists}]}`, ""},
		{"Exists null", `propertySelector: {matchExpressions: [{key: /nothing, operator: Exists}]}`, ""},
		{"Exists whole document", `propertySelector: {matchExpressions: [{key: "", operator: Exists}]}`, ""},
		{"Exists absent", `propertySelector: {matchExpressions: [{key: /peripherals/1/model, operator: Exists}]}`,
			"propertySelector /peripherals/1/model Exists: absent"},
		{"DoesNotExist", `propertySelector: {matchExpressions: [{key: /hypervisor, operator: DoesNotExist}]}`, ""},
		{"DoesNotExist present", `propertySelector: {matchExpressions: [{key: /vendor, operator: DoesNotExist}]}`,
			"propertySelector /vendor DoesNotExist: present: device has Northstar Devices"},
		// Gt, Lt
		{"Gt", `propertySelector: {matchExpressions: [{key: /maxTemperature, operator: Gt, values: [70]}]}`, ""},
		{"Gt equal", `propertySelector: {matchExpressions: [{key: /maxTemperature, operator: Gt, values: [85]}]}`,
			"propertySelector /maxTemperature Gt [85]: device has 85"},
		{"Gt fraction", `propertySelector: {matchExpressions: [{key: /ratio, operator: Gt, values: [0.2]}]}`, ""},
		{"Gt numeric string value", `propertySelector: {matchExpressions: [{key: /maxTemperature, operator: Gt, values: ["84.5"]}]}`, ""},
		{"Gt numeric string property", `propertySelector: {matchExpressions: [{key: /firmwareBuild, operator: Gt, values: [9]}]}`, ""},
		{"Gt not a number", `propertySelector: {matchExpressions: [{key: /vendor, operator: Gt, values: [1]}]}`,
			"propertySelector /vendor Gt [1]: device has Northstar Devices, not a number"},
		{"Gt absent", `propertySelector: {matchExpressions: [{key: /hypervisor, operator: Gt, values: [1]}]}`,
			"propertySelector /hypervisor Gt [1]: absent"},
		{"Lt", `propertySelector: {matchExpressions: [{key: /maxTemperature, operator: Lt, values: [90]}]}`, ""},
		{"Lt fails", `propertySelector: {matchExpressions: [{key: /cpus/1/cores, operator: Lt, values: [2.5]}]}`,
			"propertySelector /cpus/1/cores Lt [2.5]: device has 2.5"},
		{"Lt on an array", `propertySelector: {matchExpressions: [{key: /supportedRuntimes, operator: Lt, values: [1]}]}`,
			"propertySelector /supportedRuntimes Lt [1]: device has [oci], not a number"},
		// ContainsAll, ContainsAny
		{"ContainsAll one element satisfies all", `propertySelector: {matchExpressions: [{key: /peripherals, operator: ContainsAll, itemSelector: {matchExpressions: [
			{key: /type, operator: In, values: [gpu]}, {key: /manufacturer, operator: In, values: [NVIDIA]}]}}]}`, ""},
		{"ContainsAll split over two elements", `propertySelector: {matchExpressions: [{key: /peripherals, operator: ContainsAll, itemSelector: {matchExpressions: [
			{key: /type, operator: In, values: [gpu]}, {key: /manufacturer, operator: In, values: [Dell]}]}}]}`,
			"propertySelector /peripherals ContainsAll: no element matches /type In [gpu] and /manufacturer In [Dell]"},
		{"ContainsAll with DoesNotExist", `propertySelector: {matchExpressions: [{key: /peripherals, operator: ContainsAll, itemSelector: {matchExpressions: [
			{key: /model, operator: DoesNotExist}, {key: /type, operator: In, values: [display]}]}}]}`, ""},
		{"ContainsAll with Gt", `propertySelector: {matchExpressions: [{key: /cpus, operator: ContainsAll, itemSelector: {matchExpressions: [
			{key: /cores, operator: Gt, values: [3]}, {key: /architecture, operator: In, values: [amd64]}]}}]}`, ""},
		{"ContainsAll nested", `propertySelector: {matchExpressions: [{key: "", operator: Exists}, {key: /mixed, operator: ContainsAny, itemSelector: {matchExpressions: [
			{key: /k, operator: In, values: [v]}]}}]}`, ""},
		{"ContainsAny one condition", `propertySelector: {matchExpressions: [{key: /peripherals, operator: ContainsAny, itemSelector: {matchExpressions: [
			{key: /type, operator: In, values: [camera]}, {key: /manufacturer, operator: In, values: [Dell]}]}}]}`, ""},
		{"ContainsAny none", `propertySelector: {matchExpressions: [{key: /peripherals, operator: ContainsAny, itemSelector: {matchExpressions: [
			{key: /type, operator: In, values: [camera]}, {key: /manufacturer, operator: In, values: [AMD]}]}}]}`,
			"propertySelector /peripherals ContainsAny: no element matches /type In [camera] or /manufacturer In [AMD]"},
		{"ContainsAny not an array", `propertySelector: {matchExpressions: [{key: /vendor, operator: ContainsAny, itemSelector: {matchExpressions: [{key: /a, operator: Exists}]}}]}`,
			"propertySelector /vendor ContainsAny: device has Northstar Devices, not an array"},
		{"ContainsAll absent", `propertySelector: {matchExpressions: [{key: /gpus, operator: ContainsAll, itemSelector: {matchExpressions: [{key: /a, operator: Exists}]}}]}`,
			"propertySelector /gpus ContainsAll: absent"},
		{"ContainsAll on scalars with the empty pointer", `propertySelector: {matchExpressions: [{key: /supportedRuntimes, operator: ContainsAll, itemSelector: {matchExpressions: [{key: "", operator: In, values: [oci]}]}}]}`, ""},
		// AND within a selector: the first failing expression is the reason.
		{"AND", `propertySelector: {matchExpressions: [{key: /vendor, operator: Exists}, {key: /maxTemperature, operator: Lt, values: [50]}, {key: /hypervisor, operator: Exists}]}`,
			"propertySelector /maxTemperature Lt [50]: device has 85"},
		{"empty selector", `propertySelector: {matchExpressions: []}`, ""},
		{"empty rule", `{}`, ""},
		// labelSelector
		{"label In", `labelSelector: {matchExpressions: [{key: example.com/site, operator: In, values: [plant-alfa]}]}`, ""},
		{"label In misses", `labelSelector: {matchExpressions: [{key: example.com/site, operator: In, values: [plant-beta]}]}`,
			"labelSelector example.com/site In [plant-beta]: device has plant-alfa"},
		{"label In array", `labelSelector: {matchExpressions: [{key: example.com/wasm.package.format, operator: In, values: [.aot]}]}`, ""},
		{"label In boolean", `labelSelector: {matchExpressions: [{key: example.com/gpu, operator: In, values: [true]}]}`, ""},
		{"label In boolean misses", `labelSelector: {matchExpressions: [{key: example.com/gpu, operator: In, values: [false]}]}`,
			"labelSelector example.com/gpu In [false]: device has true"},
		{"label key is exact", `labelSelector: {matchExpressions: [{key: Example.com/site, operator: Exists}]}`,
			"labelSelector Example.com/site Exists: absent"},
		{"label key is not a pointer", `labelSelector: {matchExpressions: [{key: /example.com~1site, operator: Exists}]}`,
			"labelSelector /example.com~1site Exists: absent"},
		{"label DoesNotExist", `labelSelector: {matchExpressions: [{key: example.com/os, operator: DoesNotExist}]}`, ""},
		{"label Gt", `labelSelector: {matchExpressions: [{key: example.com/zone, operator: Gt, values: [0]}]}`, ""},
		{"label Lt", `labelSelector: {matchExpressions: [{key: example.com/zone, operator: Lt, values: [1]}]}`,
			"labelSelector example.com/zone Lt [1]: device has 1"},
		{"label NotIn array", `labelSelector: {matchExpressions: [{key: example.com/ports, operator: NotIn, values: [22, 23]}]}`, ""},
		{"label NotIn array hit", `labelSelector: {matchExpressions: [{key: example.com/ports, operator: NotIn, values: [443]}]}`,
			"labelSelector example.com/ports NotIn [443]: device has [80, 443]"},
		{"label ContainsAny", `labelSelector: {matchExpressions: [{key: example.com/ports, operator: ContainsAny, itemSelector: {matchExpressions: [{key: /x, operator: Exists}]}}]}`,
			"labelSelector example.com/ports ContainsAny: no element matches /x Exists"},
		// Both selectors of one rule must match.
		{"property and label", `{propertySelector: {matchExpressions: [{key: /vendor, operator: Exists}]}, labelSelector: {matchExpressions: [{key: example.com/site, operator: In, values: [plant-alfa]}]}}`, ""},
		{"property matches, label does not", `{propertySelector: {matchExpressions: [{key: /vendor, operator: Exists}]}, labelSelector: {matchExpressions: [{key: example.com/site, operator: NotIn, values: [plant-alfa]}]}}`,
			"labelSelector example.com/site NotIn [plant-alfa]: device has plant-alfa"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dc := yamlMap(t, "eligibilityRules:\n  - "+tt.rule+"\n")
			require.Empty(t, constraintProblems(dc), "compileConstraints")
			d := &ApplicationDescription{ID: "app", DeploymentProfiles: []DeploymentProfile{{Type: ProfileCompose, ID: "p", DeviceConstraints: dc}}}
			p, err := ChooseProfile(d, caps, "")
			if tt.why == "" {
				require.NoError(t, err, "ChooseProfile(...): %s", describeErr(err))
				assert.Equal(t, "p", p.ID)
				return
			}
			if err == nil {
				t.Fatalf("ChooseProfile(...) = %s, want not-placeable", p.ID)
			}
			fields := placementFields(t, err)
			require.Len(t, fields, 1)
			if fields[0].Detail != tt.why {
				t.Errorf("ChooseProfile(...) = %q,\n                     want %q", fields[0].Detail, tt.why)
			}
		})
	}
}

// TestChooseProfileRules: eligibility rules are OR-ed (Margo's
// device-constraints SUP).
func TestChooseProfileRules(t *testing.T) {
	caps := operatorDevice(t)
	tests := []struct {
		name string
		dc   string
		why  string
	}{
		{"second rule matches", `
eligibilityRules:
  - labelSelector: {matchExpressions: [{key: example.com/site, operator: In, values: [plant-beta]}]}
  - labelSelector: {matchExpressions: [{key: example.com/site, operator: In, values: [plant-alfa]}]}
`, ""},
		{"no rule matches", `
eligibilityRules:
  - labelSelector: {matchExpressions: [{key: example.com/site, operator: In, values: [plant-beta]}]}
  - propertySelector: {matchExpressions: [{key: /vendor, operator: In, values: [Acme]}]}
`, "matches none of its 2 eligibility rules; rule 0: labelSelector example.com/site In [plant-beta]: device has plant-alfa"},
		{"no rules", "eligibilityRules: []\n", ""},
		{"null rules", "eligibilityRules:\n", ""},
		{"capacity before eligibility", `
capacityRequirements: {cpu: {cores: 64}}
eligibilityRules:
  - labelSelector: {matchExpressions: [{key: example.com/site, operator: In, values: [plant-beta]}]}
`, "needs 64 cores, device has 6.5"},
		{"one core", "capacityRequirements: {cpu: {cores: 1}}\n", ""},
		{"one core on a half-core device", "capacityRequirements: {cpu: {cores: 7}}\n", "needs 7 cores, device has 6.5"},
		{"any of two architectures", "capacityRequirements: {cpu: {cores: 0.5, architectures: [arm64, amd64]}}\n", ""},
		{"none of two architectures", "capacityRequirements: {cpu: {cores: 0.5, architectures: [arm64, riscv64]}}\n",
			"needs one of architectures [arm64, riscv64], device has [amd64]"},
		{"empty architectures", "capacityRequirements: {cpu: {cores: 0.5, architectures: []}}\n", ""},
		{"memory in Ti", "capacityRequirements: {memory: 1Ti}\n", "needs 1Ti memory, device has 16Gi"},
		{"exact memory and storage", "capacityRequirements: {memory: 16384Mi, storage: 512Gi}\n", ""},
		{"unknown members ignored", "capacityRequirements: {gpu: 1}\nx-acme-extensions: {}\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dc := yamlMap(t, tt.dc)
			d := &ApplicationDescription{ID: "app", DeploymentProfiles: []DeploymentProfile{{Type: ProfileHelm, ID: "p", DeviceConstraints: dc}}}
			_, err := ChooseProfile(d, caps, "")
			if tt.why == "" {
				require.NoError(t, err, "ChooseProfile(...): %s", describeErr(err))
				return
			}
			fields := placementFields(t, err)
			if fields[0].Detail != tt.why {
				t.Errorf("ChooseProfile(...) = %q, want %q", fields[0].Detail, tt.why)
			}
		})
	}
}

func TestChooseProfileFractionalCores(t *testing.T) {
	// 0.7 + 0.1 is 0.7999999999999999 in float64; the device has 0.8 cores.
	caps := device(t, props("/properties/cpus", []any{map[string]any{"cores": 0.7}, map[string]any{"cores": 0.1}}))
	d := &ApplicationDescription{ID: "app", DeploymentProfiles: []DeploymentProfile{{Type: ProfileHelm, ID: "p",
		DeviceConstraints: yamlMap(t, "capacityRequirements: {cpu: {cores: 0.8}}\n")}}}
	_, err := ChooseProfile(d, caps, "")
	require.NoError(t, err, describeErr(err))
}

// TestConstraintProblems: constraints placement cannot read are
// refused with their pointers, and make their profile not fit.
func TestConstraintProblems(t *testing.T) {
	expr := func(e string) string {
		return "eligibilityRules:\n  - propertySelector: {matchExpressions: [" + e + "]}\n"
	}
	const e0 = "/eligibilityRules/0/propertySelector/matchExpressions/0"
	tests := []struct {
		name string
		dc   string
		want []string
	}{
		{"capacityRequirements a string", "capacityRequirements: lots\n", []string{"/capacityRequirements"}},
		{"cpu without cores", "capacityRequirements: {cpu: {architectures: [amd64]}}\n", []string{"/capacityRequirements/cpu/cores"}},
		{"negative cores", "capacityRequirements: {cpu: {cores: -1}}\n", []string{"/capacityRequirements/cpu/cores"}},
		{"cores a string", "capacityRequirements: {cpu: {cores: \"2\"}}\n", []string{"/capacityRequirements/cpu/cores"}},
		{"unknown architecture", "capacityRequirements: {cpu: {cores: 1, architectures: [x86, arm]}}\n", []string{"/capacityRequirements/cpu/architectures/0"}},
		{"architectures a string", "capacityRequirements: {cpu: {cores: 1, architectures: amd64}}\n", []string{"/capacityRequirements/cpu/architectures"}},
		{"memory in GB", "capacityRequirements: {memory: 1GB}\n", []string{"/capacityRequirements/memory"}},
		{"storage a number", "capacityRequirements: {storage: 10}\n", []string{"/capacityRequirements/storage"}},
		{"rules a mapping", "eligibilityRules: {a: 1}\n", []string{"/eligibilityRules"}},
		{"rule a string", "eligibilityRules: [x]\n", []string{"/eligibilityRules/0"}},
		{"selector a list", "eligibilityRules: [{labelSelector: []}]\n", []string{"/eligibilityRules/0/labelSelector"}},
		{"selector without expressions", "eligibilityRules: [{propertySelector: {}}]\n", []string{"/eligibilityRules/0/propertySelector/matchExpressions"}},
		{"expression a string", expr("x"), []string{e0}},
		{"no key", expr("{operator: Exists}"), []string{e0 + "/key"}},
		{"key not a pointer", expr("{key: vendor, operator: Exists}"), []string{e0 + "/key"}},
		{"key with a bad escape", expr("{key: /a~2b, operator: Exists}"), []string{e0 + "/key"}},
		{"key a number", expr("{key: 1, operator: Exists}"), []string{e0 + "/key"}},
		{"no operator", expr("{key: /vendor}"), []string{e0 + "/operator"}},
		{"unknown operator", expr("{key: /vendor, operator: Equals, values: [x]}"), []string{e0 + "/operator"}},
		{"operator in lower case", expr("{key: /vendor, operator: in, values: [x]}"), []string{e0 + "/operator"}},
		{"In without values", expr("{key: /vendor, operator: In}"), []string{e0 + "/values"}},
		{"In with empty values", expr("{key: /vendor, operator: In, values: []}"), []string{e0 + "/values"}},
		{"In values a string", expr("{key: /vendor, operator: In, values: x}"), []string{e0 + "/values"}},
		{"In with mixed values", expr("{key: /vendor, operator: In, values: [a, 1]}"), []string{e0 + "/values"}},
		{"In with two booleans", expr("{key: /vendor, operator: In, values: [true, false]}"), []string{e0 + "/values"}},
		{"In with a list value", expr("{key: /vendor, operator: In, values: [[a]]}"), []string{e0 + "/values"}},
		{"NotIn with null", expr("{key: /vendor, operator: NotIn, values: [null]}"), []string{e0 + "/values"}},
		{"Gt with two values", expr("{key: /x, operator: Gt, values: [1, 2]}"), []string{e0 + "/values"}},
		{"Lt with a word", expr("{key: /x, operator: Lt, values: [ten]}"), []string{e0 + "/values/0"}},
		{"Lt with 0x10", expr("{key: /x, operator: Lt, values: [\"0x10\"]}"), []string{e0 + "/values/0"}},
		{"Exists with values", expr("{key: /x, operator: Exists, values: [1]}"), []string{e0 + "/values"}},
		{"ContainsAll without itemSelector", expr("{key: /x, operator: ContainsAll}"), []string{e0 + "/itemSelector"}},
		{"ContainsAny with values", expr("{key: /x, operator: ContainsAny, values: [a], itemSelector: {matchExpressions: [{key: /t, operator: Exists}]}}"), []string{e0 + "/values"}},
		{"itemSelector without expressions", expr("{key: /x, operator: ContainsAll, itemSelector: {matchExpressions: []}}"), []string{e0 + "/itemSelector/matchExpressions"}},
		{"itemSelector a list", expr("{key: /x, operator: ContainsAll, itemSelector: []}"), []string{e0 + "/itemSelector"}},
		{"bad nested expression", expr("{key: /x, operator: ContainsAll, itemSelector: {matchExpressions: [{key: t, operator: In, values: [a]}]}}"),
			[]string{e0 + "/itemSelector/matchExpressions/0/key"}},
		{"itemSelector on In", expr("{key: /x, operator: In, values: [a], itemSelector: {matchExpressions: [{key: /t, operator: Exists}]}}"), []string{e0 + "/itemSelector"}},
		{"several", "capacityRequirements: {memory: x, storage: y}\n" + expr("{key: v, operator: Nope}"),
			[]string{"/capacityRequirements/memory", "/capacityRequirements/storage", e0 + "/key", e0 + "/operator"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dc := yamlMap(t, tt.dc)
			fe := constraintProblems(dc)
			var got []string
			for _, f := range fe {
				got = append(got, f.Pointer)
				assert.NotEmpty(t, f.Detail)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("compileConstraints(...) = %q, want %q\n%v", got, tt.want, fe)
			}
			// A profile whose constraints cannot be read does not fit.
			d := &ApplicationDescription{ID: "app", DeploymentProfiles: []DeploymentProfile{{Type: ProfileHelm, ID: "p", DeviceConstraints: dc}}}
			_, err := ChooseProfile(d, device(t, nil), "")
			fields := placementFields(t, err)
			assert.Equal(t, "deviceConstraints"+fe[0].Pointer+" "+fe[0].Detail, fields[0].Detail)
		})
	}

	// Example 2's constraints are valid.
	for _, p := range example2Description(t).DeploymentProfiles {
		assert.Empty(t, constraintProblems(p.DeviceConstraints), "compileConstraints(%s)", p.ID)
	}
}

func TestChooseProfileDeterministic(t *testing.T) {
	d := example2Description(t)
	caps := device(t, props("/properties/supportedDeploymentTypes", []any{"helm"}, "/properties/memory", "1Mi"))
	_, first := ChooseProfile(d, caps, "")
	for range 20 {
		_, err := ChooseProfile(d, caps, "")
		require.Equal(t, first, err)
	}
}

func BenchmarkChooseProfile(b *testing.B) {
	d := example2Description(b)
	// The helm profile passes every capacity check and fails on the last
	// eligibility expression; compose then fits: the longest path.
	caps := device(b, props("/properties/interfaces", []any{map[string]any{"type": "usb"}}))
	for b.Loop() {
		if p, err := ChooseProfile(d, caps, ""); err != nil || p.Type != ProfileCompose {
			b.Fatal(p.ID, err)
		}
	}
}

// TestChooseProfileBothInterfaces: to need an ethernet AND a bluetooth
// interface, a profile writes two ContainsAll expressions.
func TestChooseProfileBothInterfaces(t *testing.T) {
	dc := yamlMap(t, `
eligibilityRules:
  - propertySelector:
      matchExpressions:
        - {key: /interfaces, operator: ContainsAll, itemSelector: {matchExpressions: [{key: /type, operator: In, values: [ethernet]}]}}
        - {key: /interfaces, operator: ContainsAll, itemSelector: {matchExpressions: [{key: /type, operator: In, values: [bluetooth]}]}}
`)
	d := &ApplicationDescription{ID: "app", DeploymentProfiles: []DeploymentProfile{{Type: ProfileHelm, ID: "p", DeviceConstraints: dc}}}
	_, err := ChooseProfile(d, device(t, nil), "")
	require.NoError(t, err, describeErr(err))

	caps := device(t, props("/properties/interfaces", []any{map[string]any{"type": "ethernet"}}))
	_, err = ChooseProfile(d, caps, "")
	fields := placementFields(t, err)
	assert.Equal(t, "propertySelector /interfaces ContainsAll: no element matches /type In [bluetooth]", fields[0].Detail)
}

// constraintProblems returns the problems compileConstraints finds in dc.
func constraintProblems(dc map[string]any) []lifecycle.FieldError {
	_, fe := compileConstraints(dc)
	return fe
}

func TestPlacementIgnoresIdentity(t *testing.T) {
	tests := []struct {
		dc   string // "" for no deviceConstraints
		want bool
	}{
		{"", true},
		{"capacityRequirements: {cpu: {cores: 1}}\n", true},
		{"eligibilityRules:\n  - propertySelector: {matchExpressions: [{key: /vendor, operator: In, values: [Acme]}]}\n", true},
		{"eligibilityRules:\n  - labelSelector: {matchExpressions: [{key: id, operator: In, values: [x]}]}\n", true},
		{"eligibilityRules:\n  - propertySelector: {matchExpressions: [{key: /id, operator: In, values: [d1]}]}\n", false},
		{"eligibilityRules:\n  - propertySelector: {matchExpressions: [{key: /serialNumber, operator: Exists}]}\n", false},
		{"eligibilityRules:\n  - propertySelector: {matchExpressions: [{key: \"\", operator: Exists}]}\n", false},
		{"eligibilityRules: 3\n", false},
	}
	for _, tt := range tests {
		var dc map[string]any
		if tt.dc != "" {
			dc = yamlMap(t, tt.dc)
		}
		d := &ApplicationDescription{ID: "app", DeploymentProfiles: []DeploymentProfile{{Type: ProfileHelm, ID: "a"}, {Type: ProfileHelm, ID: "p", DeviceConstraints: dc}}}
		if got := d.PlacementIgnoresIdentity(); got != tt.want {
			t.Errorf("PlacementIgnoresIdentity(%q) = %v, want %v", tt.dc, got, tt.want)
		}
	}
}
