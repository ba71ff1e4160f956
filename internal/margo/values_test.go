package margo

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

func fieldPointers(fe []lifecycle.FieldError) []string {
	var ps []string
	for _, f := range fe {
		ps = append(ps, f.Pointer)
	}
	return ps
}

func TestValidateValuesExample2(t *testing.T) {
	d := mustParse(t, readFile(t, example2), MediaTypeYAML).Description
	tests := []struct {
		name   string
		values map[string]any
		want   []string
	}{
		{"none", nil, nil},
		{"defaults", d.DefaultValues(), nil},
		{"all valid", map[string]any{
			"pollFrequency": 60, "siteId": "site-42", "idpName": "okta", "idpProvider": "oidc", "idpClientId": "abc",
			"idpUrl": "https://login.example.com/a", "adminName": "Ada", "adminPrincipalName": "ada@example.com",
			"cpuLimit": 1.5, "memoryLimit": int64(32768),
		}, nil},
		{"integer below min", map[string]any{"pollFrequency": 29}, []string{"/parameters/pollFrequency"}},
		{"integer above max", map[string]any{"pollFrequency": int64(361)}, []string{"/parameters/pollFrequency"}},
		{"integer at bounds", map[string]any{"pollFrequency": 30, "memoryLimit": uint64(16384)}, nil},
		{"integral float for integer (JSON)", map[string]any{"pollFrequency": 360.0}, nil},
		{"fraction for integer", map[string]any{"pollFrequency": 30.5}, []string{"/parameters/pollFrequency"}},
		{"string for integer", map[string]any{"pollFrequency": "30"}, []string{"/parameters/pollFrequency"}},
		{"json.Number", map[string]any{"pollFrequency": json.Number("45"), "cpuLimit": json.Number("2.5")}, nil},
		{"json.Number out of range", map[string]any{"cpuLimit": json.Number("1e999")}, []string{"/parameters/cpuLimit"}},
		{"double below min", map[string]any{"cpuLimit": 0.4}, []string{"/parameters/cpuLimit"}},
		{"double as integer", map[string]any{"cpuLimit": 2}, nil},
		{"double too precise", map[string]any{"cpuLimit": 1.25}, []string{"/parameters/cpuLimit"}},
		{"bool for double", map[string]any{"cpuLimit": true}, []string{"/parameters/cpuLimit"}},
		{"empty not allowed", map[string]any{"idpName": ""}, []string{"/parameters/idpName"}},
		{"nil not allowed", map[string]any{"idpName": nil}, []string{"/parameters/idpName"}},
		{"too long", map[string]any{"idpName": strings.Repeat("x", 46)}, []string{"/parameters/idpName"}},
		{"length in characters", map[string]any{"idpName": strings.Repeat("é", 45)}, nil},
		{"empty allowed skips minLength", map[string]any{"siteId": ""}, nil},
		{"too short", map[string]any{"siteId": "abc"}, []string{"/parameters/siteId"}},
		{"regex whole match", map[string]any{"adminPrincipalName": "ada@Example.com"}, []string{"/parameters/adminPrincipalName"}},
		{"regex no match", map[string]any{"adminPrincipalName": "ada"}, []string{"/parameters/adminPrincipalName"}},
		{"url regex", map[string]any{"idpUrl": "ftp://example.com"}, []string{"/parameters/idpUrl"}},
		{"unknown parameter", map[string]any{"greeting": "hi"}, []string{"/parameters/greeting"}},
		{"unknown parameter escaped", map[string]any{"a/b": 1}, []string{"/parameters/a~1b"}},
		{"object value", map[string]any{"siteId": map[string]any{"a": 1}}, []string{"/parameters/siteId"}},
		{"list for string", map[string]any{"siteId": []any{"abcdef"}}, []string{"/parameters/siteId"}},
		{"several, in name order", map[string]any{"pollFrequency": 1, "cpuLimit": 0.1, "zzz": 1, "adminName": ""},
			[]string{"/parameters/adminName", "/parameters/cpuLimit", "/parameters/pollFrequency", "/parameters/zzz"}},
	}
	for _, tt := range tests {
		got := d.ValidateValues(tt.values)
		if ps := fieldPointers(got); !slices.Equal(ps, tt.want) {
			t.Errorf("%s: ValidateValues(%v) = %v, want %v", tt.name, tt.values, got, tt.want)
		}
		for _, f := range got {
			if f.Detail == "" {
				t.Errorf("%s: %s has no detail", tt.name, f.Pointer)
			}
		}
	}
}

func TestDefaultAndMissingValues(t *testing.T) {
	d := mustParse(t, readFile(t, example2), MediaTypeYAML).Description
	defaults := d.DefaultValues()
	want := map[string]any{"idpName": "test", "pollFrequency": int64(30), "cpuLimit": int64(1), "memoryLimit": int64(16384)}
	if !reflect.DeepEqual(defaults, want) {
		t.Errorf("DefaultValues() = %v, want %v", defaults, want)
	}
	missing := fieldPointers(d.MissingValues(defaults))
	wantMissing := []string{"/parameters/adminName", "/parameters/adminPrincipalName", "/parameters/idpClientId", "/parameters/idpProvider", "/parameters/idpUrl"}
	if !slices.Equal(missing, wantMissing) {
		t.Errorf("MissingValues(defaults) = %v, want %v", missing, wantMissing)
	}
	defaults["idpName"] = ""
	if got := fieldPointers(d.MissingValues(defaults)); !slices.Contains(got, "/parameters/idpName") {
		t.Errorf("MissingValues with idpName \"\" = %v, want it listed", got)
	}

	err := d.CheckValues(map[string]any{"pollFrequency": 1}, true)
	var e *lifecycle.Error
	require.ErrorAs(t, err, &e)
	// Without the defaults merged in, the parameters that have them are
	// missing too.
	wantFields := []string{"/parameters/pollFrequency", "/parameters/adminName", "/parameters/adminPrincipalName", "/parameters/cpuLimit",
		"/parameters/idpClientId", "/parameters/idpName", "/parameters/idpProvider", "/parameters/idpUrl", "/parameters/memoryLimit"}
	if got := fieldPointers(e.Fields); e.Code != lifecycle.EINVALID || !slices.Equal(got, wantFields) {
		t.Errorf("CheckValues = %v %v, want EINVALID %v", e.Code, got, wantFields)
	}
	full := d.DefaultValues()
	for _, n := range []string{"adminName", "idpClientId", "idpProvider"} {
		full[n] = "x"
	}
	full["adminPrincipalName"] = "a@b"
	full["idpUrl"] = "https://example.com"
	require.NoError(t, d.CheckValues(full, true))
}

// TestValidateValuesSchemas covers the schema kinds the examples lack:
// booleans, arrays, select and multiselect.
func TestValidateValuesSchemas(t *testing.T) {
	raw := []byte(`apiVersion: v1
id: schemas
metadata: {name: Schemas, version: "1.0"}
deploymentProfiles:
  - {type: compose, id: c, components: [{name: app}]}
parameters:
  flag: {value: false, targets: [{pointer: FLAG, components: [app]}]}
  ports: {value: [80, 443], targets: [{pointer: PORTS, components: [app]}]}
  tags: {targets: [{pointer: TAGS, components: [app]}]}
  level: {value: info, targets: [{pointer: LEVEL, components: [app]}]}
  features: {value: [a], targets: [{pointer: FEATURES, components: [app]}]}
  ratio: {targets: [{pointer: RATIO, components: [app]}]}
  free: {targets: [{pointer: FREE, components: [app]}]}
  size: {value: 2, targets: [{pointer: SIZE, components: [app]}]}
configuration:
  sections:
    - name: All
      settings:
        - {parameter: flag, name: Flag, schema: bool}
        - {parameter: ports, name: Ports, schema: ports}
        - {parameter: tags, name: Tags, schema: tags}
        - {parameter: level, name: Level, schema: level}
        - {parameter: features, name: Features, schema: features}
        - {parameter: ratio, name: Ratio, schema: ratio}
        - {parameter: size, name: Size, schema: size}
  schema:
    - {name: bool, dataType: boolean}
    - {name: ports, dataType: "array[integer]", minValue: 1, maxValue: 65535}
    - {name: tags, dataType: "array[string]", maxLength: 3, allowEmpty: true}
    - {name: level, dataType: string, options: [debug, info, warn]}
    - {name: features, dataType: string, options: [a, b, c], multiselect: true, allowEmpty: true}
    - {name: ratio, dataType: double, minValue: -1, maxValue: 1, minPrecision: 1, maxPrecision: 2}
    - {name: size, dataType: integer, options: [1, 2, 4, 8]}
`)
	d := mustParse(t, raw, MediaTypeYAML).Description
	tests := []struct {
		values map[string]any
		want   []string
	}{
		{map[string]any{"flag": true}, nil},
		{map[string]any{"flag": "true"}, []string{"/parameters/flag"}},
		{map[string]any{"ports": []any{22, 8080}}, nil},
		{map[string]any{"ports": []int{22, 8080}}, nil},
		{map[string]any{"ports": []any{22, 70000, "x"}}, []string{"/parameters/ports/1", "/parameters/ports/2"}},
		{map[string]any{"ports": 22}, []string{"/parameters/ports"}},
		{map[string]any{"ports": []any{}}, []string{"/parameters/ports"}},
		{map[string]any{"ports": []any{[]any{1}}}, []string{"/parameters/ports"}},
		{map[string]any{"tags": []string{}}, nil},
		{map[string]any{"tags": []string{"abc", "abcd"}}, []string{"/parameters/tags/1"}},
		{map[string]any{"level": "warn"}, nil},
		{map[string]any{"level": "trace"}, []string{"/parameters/level"}},
		{map[string]any{"features": []any{"a", "c"}}, nil},
		{map[string]any{"features": []any{"a", "a"}}, []string{"/parameters/features/1"}},
		{map[string]any{"features": []any{"d"}}, []string{"/parameters/features/0"}},
		{map[string]any{"features": "a"}, []string{"/parameters/features"}},
		{map[string]any{"features": nil}, nil},
		{map[string]any{"ratio": 0.5}, nil},
		{map[string]any{"ratio": -0.25}, nil},
		{map[string]any{"ratio": 0.125}, []string{"/parameters/ratio"}},
		{map[string]any{"ratio": 1}, []string{"/parameters/ratio"}}, // no digit after the point
		{map[string]any{"ratio": 1.5}, []string{"/parameters/ratio"}},
		{map[string]any{"free": []any{"x", 1, true}}, nil}, // no setting: any plain value
		{map[string]any{"free": map[string]any{}}, []string{"/parameters/free"}},
		{map[string]any{"size": 4}, nil},
		{map[string]any{"size": 4.0}, nil},
		{map[string]any{"size": 3}, []string{"/parameters/size"}},
	}
	for _, tt := range tests {
		if got := fieldPointers(d.ValidateValues(tt.values)); !slices.Equal(got, tt.want) {
			t.Errorf("ValidateValues(%v) = %v, want %v", tt.values, d.ValidateValues(tt.values), tt.want)
		}
	}
}

func TestImmutable(t *testing.T) {
	d := mustParse(t, readFile(t, example2), MediaTypeYAML).Description
	for name, want := range map[string]bool{"idpName": true, "idpUrl": true, "pollFrequency": false, "nope": false} {
		if got := d.Immutable(name); got != want {
			t.Errorf("Immutable(%q) = %v, want %v", name, got, want)
		}
	}
}
