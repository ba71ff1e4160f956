package margo

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

var updateRenderGolden = flag.Bool("update-render-golden", false, "rewrite testdata/render-*.golden.yaml")

const (
	renderDeploymentID = "a3e2f5dc-912e-494f-8395-52cf3769bc06"
	renderHelmProfile  = "com-northstartida-digitron-orchestrator-helm-a"
	renderComposeProf  = "com-northstartida-digitron-orchestrator-compose-a"
	renderExample1     = "testdata/render-example-ApplicationDeployment-001-helm.yaml"
	renderExample2     = "testdata/render-example-ApplicationDeployment-002-gateway_directed_compose.yaml"
	renderGoldenHelm   = "testdata/render-helm-upgrade.golden.yaml"
)

func renderDescription(t testing.TB, path string) *ApplicationDescription {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	p, err := ParseDescription(raw, MediaTypeYAML)
	require.NoError(t, err)
	return p.Description
}

// renderExampleValues are the parameter values of Margo's deployment
// examples (which write every value as a string).
func renderExampleValues() map[string]any {
	return map[string]any{
		"adminName":          "Some One",
		"adminPrincipalName": "someone@somewhere.com",
		"cpuLimit":           "4",
		"idpClientId":        "123-ABC",
		"idpName":            "Azure AD",
		"idpProvider":        "aad",
		"idpUrl":             "https://123-abc.com",
		"memoryLimit":        "16384",
		"pollFrequency":      "120",
		"siteId":             "SID-123-ABC",
	}
}

// renderHelmInput renders Margo example 2's helm profile the way Margo's
// ApplicationDeployment example 1 shows it.
func renderHelmInput(t testing.TB) DeploymentInput {
	t.Helper()
	d := renderDescription(t, "testdata/ApplicationDescription-002-helm_and_compose.yaml")
	prof, ok := d.Profile(renderHelmProfile)
	require.True(t, ok)
	return DeploymentInput{
		DeploymentID: renderDeploymentID,
		DeviceID:     "edge-01",
		Name:         "com-northstartida-digitron-orchestrator-deployment",
		Namespace:    "margo-poc",
		Description:  d,
		Profile:      prof,
		Values:       renderExampleValues(),
		Extension:    Extension{Revision: 1, Operation: lifecycle.OperationInstall},
	}
}

func renderDecode(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(b, &m), "output is not YAML:\n%s", b)
	return m
}

func renderMust(t testing.TB, in DeploymentInput) []byte {
	t.Helper()
	b, err := RenderDeployment(in)
	require.NoError(t, err, "RenderDeployment: %v", err)
	return b
}

func TestRenderMatchesMargoHelmExample(t *testing.T) {
	got := renderDecode(t, renderMust(t, renderHelmInput(t)))
	want := renderDecode(t, readRenderFile(t, renderExample1))

	spec := got["spec"].(map[string]any)
	ext, ok := spec[DeploymentExtensionMember].(map[string]any)
	require.True(t, ok, "spec.%s missing", DeploymentExtensionMember)
	require.Equal(t, map[string]any{"revision": 1, "operation": "install", "toVersion": "1.2.1", "strategy": "recreate"}, ext)
	delete(spec, DeploymentExtensionMember)
	require.Equal(t, want, got, "the rendered document differs from Margo's ApplicationDeployment example 1 beyond the extension")
	checkRC3Shape(t, renderDecode(t, renderMust(t, renderHelmInput(t))))
}

func TestRenderMatchesMargoComposeExample(t *testing.T) {
	in := renderHelmInput(t)
	in.DeploymentID = "ad9b614e-8912-45f4-a523-372358765def"
	in.DeviceID = "gateway-01/edge-01"
	prof, ok := in.Description.Profile(renderComposeProf)
	require.True(t, ok)
	in.Profile = prof
	got := renderDecode(t, renderMust(t, in))
	want := renderDecode(t, readRenderFile(t, renderExample2))

	// The example's parameters: cpuLimit and memoryLimit target only helm
	// components, so a compose deployment has none of them.
	gs, ws := got["spec"].(map[string]any), want["spec"].(map[string]any)
	require.Equal(t, ws["parameters"], gs["parameters"])
	require.Equal(t, want["id"], got["id"])
	require.Equal(t, want["metadata"], got["metadata"])
	require.Equal(t, ws["applicationId"], gs["applicationId"])
	// The example still has the older packageLocation properties; ours are
	// the description's (repository, revision), as the newest shape has.
	require.Equal(t, []any{map[string]any{"name": "digitron-orchestrator-docker", "properties": map[string]any{
		"repository": "oci://northstarida.azurecr.io/compose/digitron-orchestrator", "revision": "1.0.9",
	}}}, gs["deploymentProfile"].(map[string]any)["components"])
	_, hasConstraints := gs["deploymentProfile"].(map[string]any)["deviceConstraints"]
	require.False(t, hasConstraints, "the compose profile has no deviceConstraints")
	checkRC3Shape(t, got)
}

func readRenderFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// renderUpgradeInput is an upgrade of the lifecycle example to 2.0 with a
// drain, values of every type.
func renderUpgradeInput(t testing.TB) DeploymentInput {
	t.Helper()
	d := renderDescription(t, "testdata/lifecycle-2.0.yaml")
	prof, ok := d.Profile(renderHelmProfile)
	require.True(t, ok)
	values := d.DefaultValues()
	values["siteId"] = "0123"
	values["adminName"] = "yes"
	values["cpuLimit"] = 2.0
	values["memoryLimit"] = int64(32768)
	return DeploymentInput{
		DeploymentID: renderDeploymentID,
		DeviceID:     "edge-01",
		Description:  d,
		Profile:      prof,
		Values:       values,
		Extension: Extension{
			Revision:    3,
			Operation:   lifecycle.OperationUpgrade,
			FromVersion: lifecycle.MustParseVersion("1.5"),
			Strategy:    lifecycle.StrategyBlueGreen,
			Drain:       d.Lifecycle.Upgrade.Drain,
		},
	}
}

// TestRenderGolden pins the exact bytes: formatting, member order, quoting.
// Run with -update-render-golden to rewrite the file after a deliberate
// change, and review the diff.
func TestRenderGolden(t *testing.T) {
	got := renderMust(t, renderUpgradeInput(t))
	if *updateRenderGolden {
		require.NoError(t, os.WriteFile(renderGoldenHelm, got, 0o644))
	}
	want := readRenderFile(t, renderGoldenHelm)
	if !bytes.Equal(got, want) {
		t.Fatalf("RenderDeployment output differs from %s:\ngot:\n%s", renderGoldenHelm, got)
	}
	checkRC3Shape(t, renderDecode(t, got))
}

// renderShuffled returns a deep copy of v whose maps were filled in a random
// order.
func renderShuffled(rng *rand.Rand, v any) any {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		out := make(map[string]any, rng.IntN(4))
		for _, k := range keys {
			out[k] = renderShuffled(rng, x[k])
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = renderShuffled(rng, e)
		}
		return out
	}
	return v
}

func TestRenderDeterministic(t *testing.T) {
	base := renderUpgradeInput(t)
	want := renderMust(t, base)
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 100 {
		in := base
		// A fresh description whose maps were built in another order.
		d := *base.Description
		params := make(map[string]Parameter)
		names := d.ParameterNames()
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		for _, n := range names {
			params[n] = d.Parameters[n]
		}
		d.Parameters = params
		d.DeploymentProfiles = slices.Clone(d.DeploymentProfiles)
		for pi, p := range d.DeploymentProfiles {
			p.Components = slices.Clone(p.Components)
			for ci, c := range p.Components {
				p.Components[ci].Properties = renderShuffled(rng, c.Properties).(map[string]any)
			}
			if p.DeviceConstraints != nil {
				p.DeviceConstraints = renderShuffled(rng, p.DeviceConstraints).(map[string]any)
			}
			d.DeploymentProfiles[pi] = p
		}
		in.Description = &d
		in.Profile, _ = d.Profile(renderHelmProfile)
		in.Values = renderShuffled(rng, base.Values).(map[string]any)
		got := renderMust(t, in)
		if !bytes.Equal(got, want) {
			t.Fatalf("render %d differs:\n%s\nwant:\n%s", i, got, want)
		}
	}
}

// renderTypeDescription is a one-profile description with one parameter
// per name, each targeting component c.
func renderTypeDescription(names ...string) *ApplicationDescription {
	d := &ApplicationDescription{
		APIVersion: APIVersion,
		ID:         "type-test",
		Version:    lifecycle.MustParseVersion("1.0.0"),
		DeploymentProfiles: []DeploymentProfile{{Type: ProfileHelm, ID: "p", Components: []Component{
			{Name: "c", Properties: map[string]any{"repository": "oci://example.com/c", "revision": "1.0.0"}},
		}}},
		Parameters: map[string]Parameter{},
	}
	for _, n := range names {
		d.Parameters[n] = Parameter{Targets: []Target{{Pointer: "values." + n, Components: []string{"c"}}}}
	}
	return d
}

func TestRenderValueTypesRoundTrip(t *testing.T) {
	values := map[string]any{
		"strInt": "4", "strNeg": "-7", "strOctal": "012", "strHex": "0x1F", "strFloat": "1.5", "strExp": "1e3",
		"strDotFloat": ".5", "strInf": ".inf", "strNaN": ".nan", "strTrue": "true", "strYes": "yes", "strY": "y",
		"strOff": "OFF", "strNull": "null", "strTilde": "~", "strEmpty": "", "strSexagesimal": "12:30",
		"strUnderscore": "1_000", "strDate": "2001-12-14", "strVersion": "1.0", "strSemver": "2.3.7",
		"strColon": "a: b", "strHash": "#x", "strDash": "-", "strMultiline": "line 1\nline 2\n",
		"strLead": "  lead", "strQuote": `say "hi"`, "strUnicode": "héllo ✓", "strCtl": "a\x01b",
		"strLong": strings.Repeat("word ", 60), "strMerge": "<<",
		"int": 4, "int64": int64(-9), "intMax": int64(math.MaxInt64), "uintMax": uint64(math.MaxUint64),
		"float": 1.0, "floatHalf": 0.5, "floatBig": 1e21, "floatSmall": 1e-7, "floatNeg": -2.25, "float32": float32(0.25),
		"jsonNumber": json.Number("12"), "bool": true, "boolFalse": false,
		"list": []any{"1", int64(2), 3.0, true}, "stringList": []string{"yes", "no"}, "emptyList": []any{},
	}
	names := make([]string, 0, len(values))
	for n := range values {
		names = append(names, n)
	}
	d := renderTypeDescription(names...)
	b := renderMust(t, DeploymentInput{DeploymentID: renderDeploymentID, DeviceID: "dev-1", Description: d,
		Profile: d.DeploymentProfiles[0], Values: values, Extension: Extension{Revision: 1, Operation: lifecycle.OperationInstall}})
	params := renderDecode(t, b)["spec"].(map[string]any)["parameters"].(map[string]any)
	require.Len(t, params, len(values))
	for name, in := range values {
		want, msg := normalizeValue(in)
		require.Empty(t, msg)
		got, msg := normalizeValue(params[name].(map[string]any)["value"])
		require.Empty(t, msg, "%s: decoded %T", name, params[name])
		if !reflect.DeepEqual(got, want) || reflect.TypeOf(got) != reflect.TypeOf(want) {
			t.Errorf("%s: rendered %#v reads back as %#v (%T), want %#v (%T)", name, in, got, got, want, want)
		}
	}
	// Strings a YAML 1.1 reader would take for something else are quoted.
	for _, s := range []string{`"yes"`, `"y"`, `"OFF"`, `"012"`, `"12:30"`, `"1_000"`, `".5"`, `"<<"`} {
		if !bytes.Contains(b, []byte("value: "+s+"\n")) {
			t.Errorf("value %s is not written double-quoted:\n%s", s, b)
		}
	}
	// Floats keep a decimal point and a signed exponent.
	for _, s := range []string{"value: 1.0\n", "value: 1.0e+21\n", "value: 1.0e-07\n", "value: 0.25\n", "value: 18446744073709551615\n"} {
		if !bytes.Contains(b, []byte(s)) {
			t.Errorf("output lacks %q:\n%s", s, b)
		}
	}
}

func TestRenderParameterTargets(t *testing.T) {
	d := &ApplicationDescription{
		APIVersion: APIVersion, ID: "targets", Version: lifecycle.MustParseVersion("1.0.0"),
		DeploymentProfiles: []DeploymentProfile{
			{Type: ProfileHelm, ID: "a", Components: []Component{{Name: "a1"}, {Name: "a2"}}},
			{Type: ProfileCompose, ID: "b", Components: []Component{{Name: "b1"}}},
		},
		Parameters: map[string]Parameter{
			"both": {Targets: []Target{
				{Pointer: "x", Components: []string{"b1", "a2", "a1"}},
				{Pointer: "y", Components: []string{"b1"}},
				{Pointer: "z", Components: []string{"a1"}},
			}},
			"onlyB":     {Value: "b", Targets: []Target{{Pointer: "B", Components: []string{"b1"}}}},
			"noValue":   {Targets: []Target{{Pointer: "n", Components: []string{"a1"}}}},
			"defaulted": {Value: int64(5), Targets: []Target{{Pointer: "d", Components: []string{"a2"}}}},
			"nilValue":  {Value: "default", Targets: []Target{{Pointer: "nv", Components: []string{"a1"}}}},
			"noTargets": {Value: "x"},
		},
	}
	in := DeploymentInput{DeploymentID: renderDeploymentID, DeviceID: "dev", Description: d, Profile: d.DeploymentProfiles[0],
		Values:    map[string]any{"both": "v", "onlyB": "set", "nilValue": nil},
		Extension: Extension{Revision: 1, Operation: lifecycle.OperationInstall}}
	doc := renderDecode(t, renderMust(t, in))
	got := doc["spec"].(map[string]any)["parameters"]
	want := map[string]any{
		"both": map[string]any{"value": "v", "targets": []any{
			map[string]any{"pointer": "x", "components": []any{"a2", "a1"}},
			map[string]any{"pointer": "z", "components": []any{"a1"}},
		}},
		"defaulted": map[string]any{"value": 5, "targets": []any{map[string]any{"pointer": "d", "components": []any{"a2"}}}},
		"nilValue":  map[string]any{"value": "default", "targets": []any{map[string]any{"pointer": "nv", "components": []any{"a1"}}}},
	}
	require.Equal(t, want, got)
	// Components without properties still carry the member rc.3 requires.
	comps := doc["spec"].(map[string]any)["deploymentProfile"].(map[string]any)["components"].([]any)
	require.Equal(t, map[string]any{"name": "a1", "properties": map[string]any{}}, comps[0])

	// With no parameter left, parameters is an empty mapping.
	in.Profile = d.DeploymentProfiles[1]
	in.Values = nil
	d.Parameters = map[string]Parameter{"noTargets": {Value: "x"}}
	doc = renderDecode(t, renderMust(t, in))
	require.Equal(t, map[string]any{}, doc["spec"].(map[string]any)["parameters"])
}

func TestRenderMetadataDefaults(t *testing.T) {
	in := renderHelmInput(t)
	in.Name, in.Namespace = "", ""
	md := renderDecode(t, renderMust(t, in))["metadata"].(map[string]any)
	require.Equal(t, map[string]any{
		"name":      "com-northstartida-digitron-orchestrator-a3e2f5dc",
		"namespace": DefaultNamespace,
		"deviceId":  "edge-01",
	}, md)
}

func TestRenderExtension(t *testing.T) {
	ext := func(in DeploymentInput) map[string]any {
		t.Helper()
		return renderDecode(t, renderMust(t, in))["spec"].(map[string]any)[DeploymentExtensionMember].(map[string]any)
	}
	base := renderUpgradeInput(t)

	in := base
	require.Equal(t, map[string]any{
		"revision": 3, "operation": "upgrade", "fromVersion": "1.5.0", "toVersion": "2.0.0", "strategy": "blueGreen",
		"drain": map[string]any{"required": true, "timeout": "10m0s", "onTimeout": "abort"},
	}, ext(in))

	// Install: no fromVersion, nothing to drain, default strategy.
	in = base
	in.Extension = Extension{Revision: 1, Operation: lifecycle.OperationInstall, Drain: &lifecycle.DrainPolicy{Required: true}}
	require.Equal(t, map[string]any{"revision": 1, "operation": "install", "toVersion": "2.0.0", "strategy": "recreate"}, ext(in))

	// Drain defaults are written out; a rollback keeps fromVersion.
	in = base
	in.Extension = Extension{Revision: 9, Operation: lifecycle.OperationRollback, FromVersion: lifecycle.MustParseVersion("2.1.0-rc.1"),
		Drain: &lifecycle.DrainPolicy{}}
	require.Equal(t, map[string]any{
		"revision": 9, "operation": "rollback", "fromVersion": "2.1.0-rc.1", "toVersion": "2.0.0", "strategy": "recreate",
		"drain": map[string]any{"required": false, "timeout": "10m0s", "onTimeout": "abort"},
	}, ext(in))

	in.Extension.Drain = &lifecycle.DrainPolicy{Required: true, Timeout: 90 * time.Second, OnTimeout: lifecycle.OnTimeoutProceed}
	in.Extension.Operation = lifecycle.OperationReconfigure
	require.Equal(t, map[string]any{"required": true, "timeout": "1m30s", "onTimeout": "proceed"}, ext(in)["drain"])
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*DeploymentInput)
		pointer string
	}{
		{"no description", func(in *DeploymentInput) { in.Description = nil }, "/description"},
		{"uppercase uuid", func(in *DeploymentInput) { in.DeploymentID = strings.ToUpper(in.DeploymentID) }, "/deploymentId"},
		{"not a uuid", func(in *DeploymentInput) { in.DeploymentID = "../../etc" }, "/deploymentId"},
		{"empty device", func(in *DeploymentInput) { in.DeviceID = "" }, "/deviceId"},
		{"bad device", func(in *DeploymentInput) { in.DeviceID = "edge 01" }, "/deviceId"},
		{"bad name", func(in *DeploymentInput) { in.Name = "Has_Capitals" }, "/name"},
		{"bad namespace", func(in *DeploymentInput) { in.Namespace = "a.b" }, "/namespace"},
		{"unknown profile", func(in *DeploymentInput) { in.Profile.ID = "nope" }, "/profile/id"},
		{"changed profile", func(in *DeploymentInput) { in.Profile.Components = in.Profile.Components[:1] }, "/profile"},
		{"unknown parameter", func(in *DeploymentInput) { in.Values["nope"] = "x" }, "/values/nope"},
		{"object value", func(in *DeploymentInput) { in.Values["siteId"] = map[string]any{"a": 1} }, "/values/siteId"},
		{"nested list", func(in *DeploymentInput) { in.Values["siteId"] = []any{[]any{1}} }, "/values/siteId"},
		{"NaN", func(in *DeploymentInput) { in.Values["cpuLimit"] = math.NaN() }, "/values/cpuLimit"},
		{"bad utf-8", func(in *DeploymentInput) { in.Values["siteId"] = "a\xffb" }, "/values/siteId"},
		{"bad value of a dropped parameter", func(in *DeploymentInput) {
			p, _ := in.Description.Profile(renderComposeProf)
			in.Profile = p
			in.Values["cpuLimit"] = math.Inf(1)
		}, "/values/cpuLimit"},
		{"revision 0", func(in *DeploymentInput) { in.Extension.Revision = 0 }, "/extension/revision"},
		{"remove", func(in *DeploymentInput) { in.Extension.Operation = lifecycle.OperationRemove }, "/extension/operation"},
		{"unknown operation", func(in *DeploymentInput) { in.Extension.Operation = "patch" }, "/extension/operation"},
		{"install with from", func(in *DeploymentInput) { in.Extension.Operation = lifecycle.OperationInstall }, "/extension/fromVersion"},
		{"upgrade without from", func(in *DeploymentInput) { in.Extension.FromVersion = lifecycle.Version{} }, "/extension/fromVersion"},
		{"unknown strategy", func(in *DeploymentInput) { in.Extension.Strategy = "canary" }, "/extension/strategy"},
		{"unsupported strategy", func(in *DeploymentInput) {
			in.Description.Lifecycle.Upgrade.Strategies = nil
		}, "/extension/strategy"},
		{"negative drain", func(in *DeploymentInput) { in.Extension.Drain = &lifecycle.DrainPolicy{Timeout: -time.Second} }, "/extension/drain/timeout"},
		{"bad onTimeout", func(in *DeploymentInput) { in.Extension.Drain = &lifecycle.DrainPolicy{OnTimeout: "retry"} }, "/extension/drain/onTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := renderUpgradeInput(t)
			d := *in.Description
			in.Description = &d
			tt.mutate(&in)
			b, err := RenderDeployment(in)
			require.Nil(t, b)
			var e *lifecycle.Error
			require.True(t, errors.As(err, &e), "RenderDeployment() error = %v, want *lifecycle.Error", err)
			require.Equal(t, lifecycle.EINVALID, e.Code)
			require.Equal(t, ProblemInvalidRender, e.Type)
			pointers := make([]string, len(e.Fields))
			for i, f := range e.Fields {
				pointers[i] = f.Pointer
			}
			require.Contains(t, pointers, tt.pointer, "fields: %+v", e.Fields)
		})
	}
}

var (
	rc3ExtensionKey = regexp.MustCompile(`^x-[a-z][a-z0-9-]*-extensions$`)
	rc3AppID        = regexp.MustCompile(`^[-a-z0-9]{1,200}$`)
	rc3DeviceID     = regexp.MustCompile(`^[A-Za-z0-9._~-]+(\/[A-Za-z0-9._~-]+)*(\/\*)?$`)
	rc3Revision     = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:_([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)
	rc3Timeout      = regexp.MustCompile(`^\d+m\d+s$`)
)

// checkRC3Shape asserts what rc.3's appDeploymentManifest requires of a
// document (without its annotations erratum), by hand.
func checkRC3Shape(t *testing.T, doc map[string]any) {
	t.Helper()
	keys := func(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
	allowed := func(where string, m map[string]any, names ...string) {
		t.Helper()
		for k := range m {
			if !slices.Contains(names, k) && !rc3ExtensionKey.MatchString(k) {
				t.Errorf("%s has member %q, which rc.3 does not allow", where, k)
			}
		}
	}
	require.Equal(t, []string{"id", "metadata", "spec"}, keys(doc), "top-level members (no apiVersion, no kind)")
	id, _ := doc["id"].(string)
	require.Regexp(t, renderUUIDPattern, id)

	md, ok := doc["metadata"].(map[string]any)
	require.True(t, ok, "metadata is an object")
	require.Equal(t, []string{"deviceId", "name", "namespace"}, keys(md), "metadata members (no annotations)")
	for _, k := range []string{"name", "namespace", "deviceId"} {
		s, ok := md[k].(string)
		require.True(t, ok && s != "", "metadata.%s is a non-empty string", k)
	}
	require.Regexp(t, rc3DeviceID, md["deviceId"])

	spec, ok := doc["spec"].(map[string]any)
	require.True(t, ok, "spec is an object")
	allowed("spec", spec, "applicationId", "deploymentProfile", "parameters")
	require.Regexp(t, rc3AppID, spec["applicationId"])
	for k, v := range spec {
		if rc3ExtensionKey.MatchString(k) {
			_, isObj := v.(map[string]any)
			require.True(t, isObj, "spec.%s is an object", k)
		}
	}

	dp, ok := spec["deploymentProfile"].(map[string]any)
	require.True(t, ok, "spec.deploymentProfile is an object")
	allowed("deploymentProfile", dp, "type", "components", "deviceConstraints")
	require.Contains(t, []any{"helm", "compose"}, dp["type"])
	comps, ok := dp["components"].([]any)
	require.True(t, ok, "deploymentProfile.components is an array")
	var names []string
	for i, cv := range comps {
		c, ok := cv.(map[string]any)
		require.True(t, ok, "component %d is an object", i)
		allowed("component", c, "name", "properties")
		name, ok := c["name"].(string)
		require.True(t, ok, "component %d has a name", i)
		names = append(names, name)
		props, ok := c["properties"].(map[string]any)
		require.True(t, ok, "component %s has properties", name)
		repo, _ := props["repository"].(string)
		require.True(t, strings.HasPrefix(repo, "oci://") && len(repo) > len("oci://"), "component %s repository %q", name, repo)
		rev, _ := props["revision"].(string)
		require.Regexp(t, rc3Revision, rev, "component %s revision", name)
		if v, ok := props["timeout"]; ok {
			require.Regexp(t, rc3Timeout, v, "component %s timeout", name)
		}
		if v, ok := props["wait"]; ok {
			_, isBool := v.(bool)
			require.True(t, isBool, "component %s wait is a boolean", name)
		}
	}
	if dc, ok := dp["deviceConstraints"]; ok {
		_, isObj := dc.(map[string]any)
		require.True(t, isObj, "deviceConstraints is an object")
	}

	params, ok := spec["parameters"].(map[string]any)
	if _, present := spec["parameters"]; present {
		require.True(t, ok, "spec.parameters is an object")
	}
	for name, pv := range params {
		p, ok := pv.(map[string]any)
		require.True(t, ok, "parameter %s is an object", name)
		require.Contains(t, p, "value", "parameter %s", name)
		targets, ok := p["targets"].([]any)
		require.True(t, ok && len(targets) > 0, "parameter %s has targets", name)
		for _, tv := range targets {
			tg, ok := tv.(map[string]any)
			require.True(t, ok, "parameter %s target is an object", name)
			_, ok = tg["pointer"].(string)
			require.True(t, ok, "parameter %s target has a pointer", name)
			tc, ok := tg["components"].([]any)
			require.True(t, ok && len(tc) > 0, "parameter %s target has components", name)
			for _, c := range tc {
				require.Contains(t, names, c, "parameter %s targets a component of the profile", name)
			}
		}
	}
}

// TestYAML11SpecialIsTheRegexp: yaml11Special's shortcut changes no answer
// of renderYAML11Special, on the strings it is about (every word and number
// form, with signs, dots and underscores) and on random strings of its
// alphabet and beyond, of every length around the shortcut's bound.
func TestYAML11SpecialIsTheRegexp(t *testing.T) {
	t.Parallel()
	cases := []string{"", "y", "Yes", "NO", "false", "FALSE", "False", "off", "~", "=", "<<", "null", "Null", "0b101", "-0b1_0",
		"0777", "+0_7", "12", "1_000", "0x1F", "-0xff_ff", "1:30", "190:20:30", "1.5", ".5", "-.5e+3", "1_0.2_5", "1:20.5",
		"6e7", "-1E-09", ".inf", "-.Inf", "+.INF", ".nan", ".NaN", "falsey", "yess", "nginx", "example.com/web:1.0", "1.0.0",
		"-", "+", ".", "..", "-.inf.", "1:60", "0.0.0.0", "12345678901", "TRUE ", " true"}
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "yYnNesoOfFaAlLtTrRuUuxXbB0123456789._:-+~=<>ie \n\"'#a"
	for range 200_000 {
		b := make([]byte, r.IntN(9))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	matched := 0
	for _, s := range cases {
		want := renderYAML11Special.MatchString(s)
		if got := yaml11Special(s); got != want {
			t.Fatalf("yaml11Special(%q) = %v, want %v (the regexp)", s, got, want)
		}
		if want {
			matched++
		}
	}
	require.Greater(t, matched, 1000, "the random strings include matches")
}

// TestPlainHeadIsTheEncoders: whenever appendPlainHead writes a document's
// head, its bytes are those of the YAML encoder given the head's nodes as
// render builds them; and it does write the heads of ordinary deployments
// (generated names, Margo-style device ids), so the comparison is not
// vacuous. The strings tried: every YAML 1.1 word and number form, dates,
// document markers, indicators, and random strings of the alphabets of
// device ids, Kubernetes names and UUIDs, with characters beyond them.
func TestPlainHeadIsTheEncoders(t *testing.T) {
	t.Parallel()
	encoded := func(id, name, namespace, deviceID string) []byte {
		r := renderer{}
		head := r.mapping("id", r.str(id, "/deploymentId"),
			"metadata", r.mapping("name", r.str(name, "/name"), "namespace", r.str(namespace, "/namespace"), "deviceId", r.str(deviceID, "/deviceId")))
		b, err := encodeDocument(head, 0)
		require.NoError(t, err)
		return b
	}
	words := []string{"", "y", "Y", "n", "No", "yes", "YES", "on", "Off", "true", "False", "null", "NULL", "~", "=", "<<", "-", ".", "..", "...", "---",
		"-a", "a-", ".a", "a.", "_a", "a_", "/a", "a/", "a//b", "a/*", "0", "12", "0x1F", "0o17", "0b101", "1_000", "1e3", "6E7", "1.5", "1:20", "190:20:30",
		".inf", "-.Inf", ".nan", "2001-12-14", "2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10 -5", "1.0.0", "v1.0", "nginx", "default",
		"app-0f8c1234", "d000123", "gw000042", "Device_7", "site-a/line-3/robot-1", "a~b", "a b", "a:b", "a#b", "a,b", "a[b", "é", "A", "Z9"}
	r := rand.New(rand.NewPCG(3, 4))
	pick := func(alphabet string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	const deviceAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._~-/ :#"
	const nameAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789-.yYnNoOeEsS"
	for range 20_000 {
		words = append(words, pick(deviceAlphabet, 1+r.IntN(12)), pick(nameAlphabet, 1+r.IntN(8)))
	}
	// Long strings (the encoder's width is unlimited, and plain words have
	// no space to break at anyway).
	words = append(words, "a"+strings.Repeat("b-", 126), "site/"+strings.Repeat("line.", 50), "a"+strings.Repeat(" b", 60))
	uuid := func() string {
		h := pick("0123456789abcdef", 32)
		if r.IntN(4) == 0 {
			h = pick("0123456789", 32) // digits only: numbers and dates must not be read into it
		}
		return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	}
	ids := []string{"00000000-0000-0000-0000-000000000000", "12345678-1234-1234-1234-123456789012", "0f8c1234-aaaa-4bbb-8ccc-0123456789ab", "0F8C1234-AAAA-4BBB-8CCC-0123456789AB", "not-a-uuid"}
	for range 2_000 {
		ids = append(ids, uuid())
	}
	wrote := 0
	for i, w := range words {
		id := ids[i%len(ids)]
		// each word in each position, the others ordinary
		for _, h := range [][4]string{{id, w, "default", "d1"}, {id, "app-0f8c1234", w, "d1"}, {id, "app-0f8c1234", "default", w}} {
			got, ok := appendPlainHead([]byte("x"), h[0], h[1], h[2], h[3])
			if !ok {
				require.Equal(t, "x", string(got), "appendPlainHead(%q) refused but appended", h)
				continue
			}
			wrote++
			if want := encoded(h[0], h[1], h[2], h[3]); string(got[1:]) != string(want) {
				t.Fatalf("appendPlainHead(%q) = %q, want %q (the encoder)", h, got[1:], want)
			}
		}
	}
	require.Greater(t, wrote, 10_000, "appendPlainHead writes most heads tried")
	_, ok := appendPlainHead(nil, "not-a-uuid", "app-0f8c1234", "default", "d1")
	require.False(t, ok, "an id that is not a canonical UUID goes to the encoder")
	for _, h := range [][4]string{{ids[2], "app-0f8c1234", "default", "d000123"}, {ids[1], "web.v2", "edge-1", "site-a/line-3/robot-1"}} {
		_, ok := appendPlainHead(nil, h[0], h[1], h[2], h[3])
		require.True(t, ok, "appendPlainHead(%q) writes an ordinary head", h)
	}
}
