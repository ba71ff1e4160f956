package margo

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

const (
	capabilitiesFull = "testdata/capabilities-full.json"
	fullDeviceID     = "plant-alfa-zone1-edge01"
)

// loadCapabilities returns the full valid capabilities document as plain Go
// values to mutate.
func loadCapabilities(t testing.TB) map[string]any {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(readFile(t, capabilitiesFull), &doc))
	return doc
}

func mustParseCapabilities(t testing.TB, raw []byte, deviceID string) *Capabilities {
	t.Helper()
	c, err := ParseCapabilities(raw, deviceID)
	require.NoError(t, err, "ParseCapabilities: %s", describeErr(err))
	return c
}

// problemOf returns err as a *lifecycle.Error, failing the test if it is not
// one with the given code.
func problemOf(t testing.TB, err error, code lifecycle.Code) *lifecycle.Error {
	t.Helper()
	var e *lifecycle.Error
	require.True(t, errors.As(err, &e), "error %v (%T) is not a *lifecycle.Error", err, err)
	require.Equal(t, code, e.Code, "error %v", err)
	require.NotEmpty(t, e.Message)
	for _, f := range e.Fields {
		assert.NotEmpty(t, f.Detail, "field %s has no detail", f.Pointer)
	}
	return e
}

func fieldPointersOf(e *lifecycle.Error) []string {
	var ps []string
	for _, f := range e.Fields {
		ps = append(ps, f.Pointer)
	}
	return ps
}

func TestParseCapabilitiesFull(t *testing.T) {
	raw := readFile(t, capabilitiesFull)
	c := mustParseCapabilities(t, raw, fullDeviceID)

	assert.Equal(t, fullDeviceID, c.DeviceID)
	assert.Equal(t, "Northstar Devices", c.Vendor)
	assert.Equal(t, "NS-EDGE-4000", c.ModelNumber)
	assert.Equal(t, "SN-0042", c.SerialNumber)
	assert.Equal(t, []CPU{{Cores: 4, Architecture: "amd64"}, {Cores: 2.5, Architecture: "amd64"}}, c.CPUs)
	assert.Equal(t, 6.5, c.TotalCores)
	assert.Equal(t, []string{"amd64"}, c.Architectures)
	assert.Equal(t, "16Gi", c.Memory)
	assert.Equal(t, uint64(16)<<30, c.MemoryBytes)
	assert.Equal(t, "512Gi", c.Storage)
	assert.Equal(t, uint64(512)<<30, c.StorageBytes)
	assert.Equal(t, []Peripheral{{Type: "gpu", Manufacturer: "NVIDIA", Model: "RTX A2000"}, {Type: "display", Manufacturer: "Dell"}}, c.Peripherals)
	assert.Equal(t, []CommunicationInterface{{Type: "ethernet"}, {Type: "wifi"}, {Type: "bluetooth"}}, c.Interfaces)
	assert.True(t, c.OtelCollector)
	assert.Equal(t, []string{"oci"}, c.SupportedRuntimes)
	assert.Equal(t, []ProfileType{ProfileHelm, ProfileCompose}, c.SupportedDeploymentTypes)
	assert.True(t, c.Hosting())

	// Unknown members of properties are kept; numbers are canonical.
	assert.Equal(t, "2.1.0", c.Properties["firmwareVersion"])
	assert.Equal(t, []any{
		map[string]any{"cores": int64(4), "architecture": "amd64"},
		map[string]any{"cores": 2.5, "architecture": "amd64"},
	}, c.Properties["cpus"])
	assert.Equal(t, map[string]any{
		"example.com/site":                "plant-alfa",
		"example.com/zone":                int64(1),
		"example.com/gpu":                 true,
		"example.com/wasm.package.format": []any{".wasm", ".aot"},
		"example.com/ports":               []any{int64(80), int64(443)},
	}, c.Labels)

	// The JSON holds the same content as the input, compact and sorted.
	var got, want any
	require.NoError(t, json.Unmarshal(c.JSON, &got))
	require.NoError(t, json.Unmarshal(raw, &want))
	assert.Equal(t, want, got)
	assert.True(t, strings.HasPrefix(string(c.JSON), `{"labels":{"example.com/gpu":true,`), "JSON = %s", c.JSON)
	assert.NotContains(t, string(c.JSON), "\n")
	assert.NotContains(t, string(c.JSON), `": `)

	// Reading the JSON back gives the same result.
	again := mustParseCapabilities(t, c.JSON, fullDeviceID)
	if !reflect.DeepEqual(again, c) {
		t.Errorf("ParseCapabilities(JSON) = %+v, want %+v", again, c)
	}
}

// TestParseCapabilitiesCanonical: two spellings of one document give the
// same bytes.
func TestParseCapabilitiesCanonical(t *testing.T) {
	a := `{"properties":{"id":"d1","vendor":"v","modelNumber":"m","serialNumber":"s","cpus":[{"cores":4.0}]},"labels":{"b":1e3,"a":"x"}}`
	b := "{\n  \"labels\": {\"a\": \"x\", \"b\": 1000},\n  \"properties\": {\"serialNumber\": \"s\", \"modelNumber\": \"m\", \"vendor\": \"v\", \"id\": \"d1\", \"cpus\": [{\"cores\": 4}]}\n}"
	ca := mustParseCapabilities(t, []byte(a), "d1")
	cb := mustParseCapabilities(t, []byte(b), "d1")
	want := `{"labels":{"a":"x","b":1000},"properties":{"cpus":[{"cores":4}],"id":"d1","modelNumber":"m","serialNumber":"s","vendor":"v"}}`
	assert.Equal(t, want, string(ca.JSON))
	assert.Equal(t, want, string(cb.JSON))
	assert.Equal(t, ca, cb)
}

func TestParseCapabilitiesNonHosting(t *testing.T) {
	raw := `{"properties":{"id":"gw-1/child-7","vendor":"v","modelNumber":"m","serialNumber":""}}`
	c := mustParseCapabilities(t, []byte(raw), "gw-1/child-7")
	assert.False(t, c.Hosting(), "Hosting() of a device without hosting properties")
	assert.Nil(t, c.Labels)
	assert.Empty(t, c.SupportedDeploymentTypes)

	// Any one hosting member makes it a hosting device.
	raw = `{"properties":{"id":"d","vendor":"v","modelNumber":"m","serialNumber":"s","otelCollector":false}}`
	assert.True(t, mustParseCapabilities(t, []byte(raw), "d").Hosting())
}

func TestParseCapabilitiesMemorySpellings(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"1Ki", 1 << 10, true},
		{"1024Mi", 1 << 30, true},
		{"16Gi", 16 << 30, true},
		{"64 Gi", 64 << 30, true}, // as Margo's own capabilities examples write it
		{"2Ti", 2 << 40, true},
		{"3Pi", 3 << 50, true},
		{"15Ei", 15 << 60, true},
		{"0Mi", 0, true},
		{"0016Gi", 16 << 30, true},
		{"16Ei", 0, false}, // 2^64
		{"99999999999999999999Ki", 0, false},
		{"16GB", 0, false},
		{"16G", 0, false},
		{"16gi", 0, false},
		{"1.5Gi", 0, false},
		{"-1Gi", 0, false},
		{"1024", 0, false},
		{"", 0, false},
		{"16  Gi", 0, false},
		{" 16Gi", 0, false},
	}
	for _, tt := range tests {
		got, msg := parseQuantity(tt.in)
		if (msg == "") != tt.ok || got != tt.want {
			t.Errorf("parseQuantity(%q) = %d, %q; want %d, ok %v", tt.in, got, msg, tt.want, tt.ok)
		}
	}
}

// TestParseCapabilitiesDefects breaks the full document in one way per case
// and expects exactly the listed problems.
func TestParseCapabilitiesDefects(t *testing.T) {
	tests := []struct {
		name   string
		mutate mutation
		want   []string
	}{
		{"no properties", delM("/properties"), []string{"/properties"}},
		{"properties not an object", setM("/properties", []any{}), []string{"/properties"}},
		{"unknown top-level member", setM("/apiVersion", "device.margo.org/v1alpha1"), []string{"/apiVersion"}},
		{"extension not an object", setM("/x-acme-extensions", "B7"), []string{"/x-acme-extensions"}},
		{"misnamed extension", setM("/x-Acme-extensions", map[string]any{}), []string{"/x-Acme-extensions"}},
		{"extension without suffix", setM("/x-acme", map[string]any{}), []string{"/x-acme"}},
		{"no id", delM("/properties/id"), []string{"/properties/id"}},
		{"id with a space", setM("/properties/id", "edge 01"), []string{"/properties/id"}},
		{"id with an empty segment", setM("/properties/id", "gw//child"), []string{"/properties/id"}},
		{"id too long", setM("/properties/id", strings.Repeat("a", MaxDeviceIDLength+1)), []string{"/properties/id"}},
		{"no vendor", delM("/properties/vendor"), []string{"/properties/vendor"}},
		{"vendor null", setM("/properties/vendor", nil), []string{"/properties/vendor"}},
		{"modelNumber a number", setM("/properties/modelNumber", 4000), []string{"/properties/modelNumber"}},
		{"no serialNumber", delM("/properties/serialNumber"), []string{"/properties/serialNumber"}},
		{"serialNumber too long", setM("/properties/serialNumber", strings.Repeat("x", MaxPropertyLength+1)), []string{"/properties/serialNumber"}},
		{"cpus not an array", setM("/properties/cpus", map[string]any{}), []string{"/properties/cpus"}},
		{"cpu without cores", delM("/properties/cpus/1/cores"), []string{"/properties/cpus/1/cores"}},
		{"cpu cores zero", setM("/properties/cpus/0/cores", 0), []string{"/properties/cpus/0/cores"}},
		{"cpu cores negative", setM("/properties/cpus/0/cores", -2), []string{"/properties/cpus/0/cores"}},
		{"cpu cores a string", setM("/properties/cpus/0/cores", "4"), []string{"/properties/cpus/0/cores"}},
		{"cpu cores huge", setM("/properties/cpus/0/cores", 1e9), []string{"/properties/cpus/0/cores"}},
		{"cpu architecture unknown", setM("/properties/cpus/1/architecture", "riscv64"), []string{"/properties/cpus/1/architecture"}},
		{"cpu not an object", setM("/properties/cpus/0", 4), []string{"/properties/cpus/0"}},
		{"memory in GB", setM("/properties/memory", "16GB"), []string{"/properties/memory"}},
		{"memory a number", setM("/properties/memory", 16), []string{"/properties/memory"}},
		{"storage overflows", setM("/properties/storage", "16Ei"), []string{"/properties/storage"}},
		{"peripheral without type", delM("/properties/peripherals/0/type"), []string{"/properties/peripherals/0/type"}},
		{"peripheral type unknown", setM("/properties/peripherals/1/type", "keyboard"), []string{"/properties/peripherals/1/type"}},
		{"peripheral manufacturer a number", setM("/properties/peripherals/0/manufacturer", 10), []string{"/properties/peripherals/0/manufacturer"}},
		{"interface type unknown", setM("/properties/interfaces/2/type", "zigbee"), []string{"/properties/interfaces/2/type"}},
		{"otelCollector a string", setM("/properties/otelCollector", "true"), []string{"/properties/otelCollector"}},
		{"no runtimes listed", setM("/properties/supportedRuntimes", []any{}), []string{"/properties/supportedRuntimes"}},
		{"runtime unknown", setM("/properties/supportedRuntimes", []any{"oci", "wasm"}), []string{"/properties/supportedRuntimes/1"}},
		{"deployment type helm.v3", setM("/properties/supportedDeploymentTypes/0", "helm.v3"), []string{"/properties/supportedDeploymentTypes/0"}},
		{"deployment types a string", setM("/properties/supportedDeploymentTypes", "helm"), []string{"/properties/supportedDeploymentTypes"}},
		{"labels an array", setM("/labels", []any{"a"}), []string{"/labels"}},
		{"label value an object", setM("/labels/site", map[string]any{"a": 1}), []string{"/labels/site"}},
		{"label value null", setM("/labels/site", nil), []string{"/labels/site"}},
		{"label array of booleans", setM("/labels/flags", []any{true}), []string{"/labels/flags/0"}},
		{"label array mixed", setM("/labels/mixed", []any{"a", 1, "b"}), []string{"/labels/mixed/1"}},
		{"label string too long", setM("/labels/long", strings.Repeat("x", MaxLabelValueLength+1)), []string{"/labels/long"}},
		{"label key with a slash", func(t testing.TB, doc map[string]any) {
			doc["labels"].(map[string]any)["example.com/bad"] = map[string]any{}
		}, []string{"/labels/example.com~1bad"}},
		{"label key too long", func(t testing.TB, doc map[string]any) {
			doc["labels"].(map[string]any)[strings.Repeat("k", MaxLabelKeyLength+1)] = "v"
		}, []string{"/labels/" + strings.Repeat("k", MaxLabelKeyLength+1)}},
		{"several at once", func(t testing.TB, doc map[string]any) {
			del(t, doc, "/properties/vendor")
			set(t, doc, "/properties/memory", "lots")
			set(t, doc, "/kind", "DeviceCapabilitiesManifest")
		}, []string{"/kind", "/properties/vendor", "/properties/memory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := loadCapabilities(t)
			tt.mutate(t, doc)
			c, err := ParseCapabilities(toJSON(t, doc), fullDeviceID)
			if err == nil {
				t.Fatalf("ParseCapabilities(...) accepted it: %s", c.JSON)
			}
			e := problemOf(t, err, lifecycle.EINVALID)
			assert.Equal(t, ProblemInvalidCapabilities, e.Type)
			if got := fieldPointersOf(e); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseCapabilities(...) pointers = %q, want %q\n%s", got, tt.want, describeErr(err))
			}
		})
	}
}

// TestParseCapabilitiesEmptyValues: what rc.3 allows and a strict reader
// might wrongly refuse.
func TestParseCapabilitiesAccepts(t *testing.T) {
	tests := []struct {
		name   string
		mutate mutation
	}{
		{"empty vendor", setM("/properties/vendor", "")},
		{"empty peripherals", setM("/properties/peripherals", []any{})},
		{"cpu without architecture", delM("/properties/cpus/0/architecture")},
		{"fractional cores", setM("/properties/cpus/0/cores", 0.5)},
		{"unknown member inside a cpu", setM("/properties/cpus/0/vendorName", "Intel")},
		{"repeated runtime", setM("/properties/supportedRuntimes", []any{"oci", "oci", "custom"})},
		{"empty label array", setM("/labels/none", []any{})},
		{"label array of floats", setM("/labels/ratios", []any{0.5, 1.5})},
		{"child device id", func(t testing.TB, doc map[string]any) {
			set(t, doc, "/properties/id", fullDeviceID+"/plc-7")
		}},
		{"unknown property object", setM("/properties/installContext", map[string]any{"a": []any{1, nil}})},
		{"several extensions", func(t testing.TB, doc map[string]any) {
			doc["x-b-2-extensions"] = map[string]any{}
			doc["x-wfm-extensions"] = map[string]any{"k": nil}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := loadCapabilities(t)
			tt.mutate(t, doc)
			id, _ := doc["properties"].(map[string]any)["id"].(string)
			c := mustParseCapabilities(t, toJSON(t, doc), id)
			again := mustParseCapabilities(t, c.JSON, id)
			assert.Equal(t, c, again)
		})
	}
	doc := loadCapabilities(t)
	set(t, doc, "/properties/supportedRuntimes", []any{"oci", "oci", "custom"})
	c := mustParseCapabilities(t, toJSON(t, doc), fullDeviceID)
	assert.Equal(t, []string{"oci", "custom"}, c.SupportedRuntimes)
}

func TestParseCapabilitiesDeviceIDMismatch(t *testing.T) {
	raw := readFile(t, capabilitiesFull)
	_, err := ParseCapabilities(raw, "another-device")
	e := problemOf(t, err, lifecycle.EINVALID)
	assert.Equal(t, ProblemDeviceIDMismatch, e.Type)
	assert.Equal(t, []string{"/properties/id"}, fieldPointersOf(e))

	// With other problems too, the mismatch still names the type, and every
	// problem is listed.
	doc := loadCapabilities(t)
	del(t, doc, "/properties/vendor")
	_, err = ParseCapabilities(toJSON(t, doc), "another-device")
	e = problemOf(t, err, lifecycle.EINVALID)
	assert.Equal(t, ProblemDeviceIDMismatch, e.Type)
	assert.Equal(t, []string{"/properties/id", "/properties/vendor"}, fieldPointersOf(e))

	// An id that is not a device id at all is invalid, not a mismatch.
	doc = loadCapabilities(t)
	set(t, doc, "/properties/id", "not valid")
	_, err = ParseCapabilities(toJSON(t, doc), fullDeviceID)
	e = problemOf(t, err, lifecycle.EINVALID)
	assert.Equal(t, ProblemInvalidCapabilities, e.Type)
}

func TestParseCapabilitiesMalformed(t *testing.T) {
	tests := []struct {
		name string
		raw  string
	}{
		{"empty", ""},
		{"not JSON", "properties: {}"},
		{"array", `[{"properties":{}}]`},
		{"string", `"x"`},
		{"null", `null`},
		{"truncated", `{"properties":{"id":"d"`},
		{"trailing data", `{"properties":{}} {}`},
		{"duplicate member", `{"properties":{"id":"a","id":"b"}}`},
		{"invalid UTF-8", "{\"properties\":{\"id\":\"\xff\"}}"},
		{"NaN", `{"properties":{"cpus":[{"cores":NaN}]}}`},
		{"33 levels", `{"properties":{"x":` + strings.Repeat("[", MaxDeviceDepth-1) + strings.Repeat("]", MaxDeviceDepth-1) + `}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCapabilities([]byte(tt.raw), "d")
			e := problemOf(t, err, lifecycle.EMALFORMED)
			assert.Equal(t, ProblemMalformedCapabilities, e.Type)
		})
	}
	// 32 levels are fine.
	raw := `{"properties":{"id":"d","vendor":"v","modelNumber":"m","serialNumber":"s","x":` +
		strings.Repeat("[", MaxDeviceDepth-2) + strings.Repeat("]", MaxDeviceDepth-2) + `}}`
	mustParseCapabilities(t, []byte(raw), "d")
}

func TestParseCapabilitiesHostile(t *testing.T) {
	head := `{"properties":{"id":"d","vendor":"v","modelNumber":"m","serialNumber":"s",`
	many := func(n int, item string) string {
		return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
	}
	labels := make([]string, MaxLabels+1)
	for i := range labels {
		labels[i] = fmt.Sprintf(`"l%d":"v"`, i)
	}
	tests := []struct {
		name     string
		raw      string
		code     lifecycle.Code
		pointers []string
	}{
		{"oversize", head + `"x":"` + strings.Repeat("a", MaxCapabilitiesSize) + `"}}`, lifecycle.ETOOLARGE, nil},
		{"150k-deep, oversize", `{"properties":` + strings.Repeat("[", 150_000) + strings.Repeat("]", 150_000) + `}`, lifecycle.ETOOLARGE, nil},
		{"100k-deep", `{"properties":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `}`, lifecycle.EMALFORMED, nil},
		{"100-deep objects", strings.Repeat(`{"a":`, 100) + strings.Repeat("}", 100), lifecycle.EMALFORMED, nil},
		{"too many values", head + `"x":[` + many(110_000, "0") + `]}}`, lifecycle.ETOOLARGE, nil},
		{"too many cpus", head + `"cpus":[` + many(MaxCPUs+1, `{"cores":1}`) + `]}}`, lifecycle.EINVALID, []string{"/properties/cpus"}},
		{"too many peripherals", head + `"peripherals":[` + many(MaxPeripherals+1, `{"type":"gpu"}`) + `]}}`, lifecycle.EINVALID, []string{"/properties/peripherals"}},
		{"too many interfaces", head + `"interfaces":[` + many(MaxInterfaces+1, `{"type":"usb"}`) + `]}}`, lifecycle.EINVALID, []string{"/properties/interfaces"}},
		{"too many runtimes", head + `"supportedRuntimes":[` + many(MaxTypeListLength+1, `"oci"`) + `]}}`, lifecycle.EINVALID, []string{"/properties/supportedRuntimes"}},
		{"too many labels", head + `"cpus":[]},"labels":{` + strings.Join(labels, ",") + `}}`, lifecycle.EINVALID, []string{"/labels"}},
		{"huge label array", head + `"cpus":[]},"labels":{"a":[` + many(MaxLabelItems+1, "1") + `]}}`, lifecycle.EINVALID, []string{"/labels/a"}},
		{"every cpu wrong", head + `"cpus":[` + many(MaxCPUs, `{"cores":"x"}`) + `]}}`, lifecycle.EINVALID, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCapabilities([]byte(tt.raw), "d")
			e := problemOf(t, err, tt.code)
			assert.LessOrEqual(t, len(e.Message), 1000)
			assert.LessOrEqual(t, len(e.Fields), MaxProblems)
			if tt.pointers != nil {
				assert.Equal(t, tt.pointers, fieldPointersOf(e))
			}
			switch tt.code {
			case lifecycle.ETOOLARGE:
				assert.Equal(t, ProblemCapabilitiesTooLarge, e.Type)
			case lifecycle.EMALFORMED:
				assert.Equal(t, ProblemMalformedCapabilities, e.Type)
			}
		})
	}
}

// TestParseCapabilitiesCanonicalTooLarge: a document within the input bound
// whose canonical form is not (1e20 is written out in full) is refused, so
// that every accepted document reads back from its JSON.
func TestParseCapabilitiesCanonicalTooLarge(t *testing.T) {
	head := `{"properties":{"id":"d","vendor":"v","modelNumber":"m","serialNumber":"s","x":[`
	n := (MaxCapabilitiesSize - len(head) - 10) / 5
	raw := head + strings.TrimSuffix(strings.Repeat("1e20,", n), ",") + `]}}`
	require.LessOrEqual(t, len(raw), MaxCapabilitiesSize)
	_, err := ParseCapabilities([]byte(raw), "d")
	e := problemOf(t, err, lifecycle.ETOOLARGE)
	assert.Equal(t, ProblemCapabilitiesTooLarge, e.Type)
}

func TestValidDeviceID(t *testing.T) {
	for _, id := range []string{"a", "plant-alfa-zone1-edge01", "gw/child", "A.b_c~d-e/f", strings.Repeat("a", MaxDeviceIDLength)} {
		assert.True(t, ValidDeviceID(id), "ValidDeviceID(%q)", id)
	}
	for _, id := range []string{"", "/a", "a/", "a//b", "a b", "a/*", "ä", strings.Repeat("a", MaxDeviceIDLength+1)} {
		assert.False(t, ValidDeviceID(id), "ValidDeviceID(%q)", id)
	}
}

// FuzzParseCapabilities reads arbitrary bytes as a capabilities document. It
// must never panic; every refusal is a *lifecycle.Error with a documented
// code; every accepted document reads back from its JSON to the same
// Capabilities and the same JSON; and placement of example 2 on it neither
// panics nor returns anything but a profile or "not-placeable".
func FuzzParseCapabilities(f *testing.F) {
	full := readFile(f, capabilitiesFull)
	f.Add(full, fullDeviceID)
	c, err := ParseCapabilities(full, fullDeviceID)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(c.JSON, fullDeviceID)
	f.Add([]byte(`{"properties":{"id":"gw/c","vendor":"","modelNumber":"m","serialNumber":"s"}}`), "gw/c")
	f.Add([]byte(`{"properties":{"id":"d","vendor":"v","modelNumber":"m","serialNumber":"s","cpus":[{"cores":1e0},{"cores":0.1}],"memory":"64 Gi","supportedDeploymentTypes":["compose"]},"labels":{"a":[1,2.5],"b":-0.0,"c":""}}`), "d")
	f.Add([]byte(`{"properties":{"id":"d"},"x-a-extensions":{},"labels":{"k":[]}}`), "d")
	desc, err := ParseDescription(readFile(f, example2), MediaTypeYAML)
	if err != nil {
		f.Fatal(err)
	}
	allowed := map[lifecycle.Code]bool{lifecycle.EMALFORMED: true, lifecycle.EINVALID: true, lifecycle.ETOOLARGE: true}
	check := func(t *testing.T, raw []byte, deviceID string) {
		c, err := ParseCapabilities(raw, deviceID)
		if err != nil {
			var e *lifecycle.Error
			if !errors.As(err, &e) || !allowed[e.Code] {
				t.Fatalf("ParseCapabilities(...) error %T %v, want a *lifecycle.Error with a documented code", err, err)
			}
			if e.Code == lifecycle.EINVALID && (len(e.Fields) == 0 || len(e.Fields) > MaxProblems) {
				t.Fatalf("ParseCapabilities(...) EINVALID with %d fields", len(e.Fields))
			}
			return
		}
		if c.DeviceID != deviceID {
			t.Fatalf("ParseCapabilities(...) accepted device id %q for path %q", c.DeviceID, deviceID)
		}
		again, err := ParseCapabilities(c.JSON, deviceID)
		if err != nil {
			t.Fatalf("accepted, but its JSON is refused: %v\n%s", err, c.JSON)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("ParseCapabilities(JSON) = %+v, want %+v", again, c)
		}
		if _, err := ChooseProfile(desc.Description, c, ""); err != nil && lifecycle.ErrorType(err) != ProblemNotPlaceable {
			t.Fatalf("ChooseProfile(example 2, ...) = %v, want a profile or not-placeable", err)
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, deviceID string) {
		check(t, raw, deviceID)
		// Mutations rarely keep the path and the document in agreement;
		// also read the document as PUT to the id it names.
		var doc struct {
			Properties struct {
				ID string `json:"id"`
			} `json:"properties"`
		}
		if json.Unmarshal(raw, &doc) == nil && doc.Properties.ID != deviceID {
			check(t, raw, doc.Properties.ID)
		}
	})
}

// BenchmarkParseCapabilities parses a full capabilities document (as stored
// and read back at every creation) and a small one such as devices send.
func BenchmarkParseCapabilities(b *testing.B) {
	full, err := os.ReadFile("testdata/capabilities-full.json")
	require.NoError(b, err)
	var id struct {
		Properties struct {
			ID string `json:"id"`
		} `json:"properties"`
	}
	require.NoError(b, json.Unmarshal(full, &id))
	small := []byte(`{"properties": {"id": "d1", "cpus": [{"cores": 2, "architecture": "amd64"}], "memory": "1Gi", "model": "m", "storage": "1Gi", "vendor": "v", "modelNumber": "m", "serialNumber": "s", "supportedRuntimes": ["oci"], "supportedDeploymentTypes": ["compose"]}}`)
	for _, c := range []struct {
		name, id string
		doc      []byte
	}{{"full", id.Properties.ID, full}, {"small", "d1", small}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseCapabilities(c.doc, c.id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
