package margo

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

const (
	example1      = "testdata/ApplicationDescription-001-hello_world.yaml"
	example2      = "testdata/ApplicationDescription-002-helm_and_compose.yaml"
	lifecycleBase = "testdata/lifecycle-2.0.yaml"
)

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return b
}

func mustParse(t testing.TB, raw []byte, mediaType string) *Parsed {
	t.Helper()
	p, err := ParseDescription(raw, mediaType)
	require.NoError(t, err, "ParseDescription: %s", describeErr(err))
	return p
}

func describeErr(err error) string {
	var e *lifecycle.Error
	if !errors.As(err, &e) {
		return ""
	}
	var b strings.Builder
	b.WriteString(e.Message)
	for _, f := range e.Fields {
		b.WriteString("\n  " + f.Pointer + ": " + f.Detail)
	}
	return b.String()
}

// generic decodes YAML or JSON into plain Go values with every number as
// float64, to compare content independently of the parser under test.
func generic(t *testing.T, raw []byte, asJSON bool) any {
	t.Helper()
	var v any
	if asJSON {
		require.NoError(t, json.Unmarshal(raw, &v))
	} else {
		require.NoError(t, yaml.Unmarshal(raw, &v))
	}
	return floats(v)
}

func floats(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = floats(e)
		}
	case []any:
		for i, e := range x {
			x[i] = floats(e)
		}
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	}
	return v
}

func TestParseExamples(t *testing.T) {
	for _, name := range []string{example1, example2, lifecycleBase} {
		t.Run(name, func(t *testing.T) {
			raw := readFile(t, name)
			p := mustParse(t, raw, MediaTypeYAML)

			// The JSON form holds the same content as the YAML.
			if got, want := generic(t, p.JSON, true), generic(t, raw, false); !reflect.DeepEqual(got, want) {
				t.Errorf("JSON form differs from the YAML:\n got %v\nwant %v", got, want)
			}
			// Reading the JSON form gives the same result.
			again := mustParse(t, p.JSON, MediaTypeJSON)
			if string(again.JSON) != string(p.JSON) {
				t.Errorf("JSON form is not stable:\n%s\n%s", p.JSON, again.JSON)
			}
			if !reflect.DeepEqual(again.Description, p.Description) {
				t.Errorf("description from JSON = %+v, want %+v", again.Description, p.Description)
			}
		})
	}
}

func TestParseExample1Model(t *testing.T) {
	d := mustParse(t, readFile(t, example1), MediaTypeYAML).Description
	want := &ApplicationDescription{
		APIVersion: "v1",
		ID:         "com-northstartida-hello-world",
		Metadata: Metadata{
			Name: "Hello World", Description: "A basic hello world application", Version: "1.0",
			Catalog: map[string]any{
				"application": map[string]any{
					"icon": "./resources/hw-logo.png", "tagline": "Northstar Industrial Application's hello world application.",
					"descriptionFile": "./resources/description.md", "releaseNotes": "./resources/release-notes.md",
					"licenseFile": "./resources/license.pdf", "site": "http://www.northstar-ida.com", "tags": []any{"monitoring"},
				},
				"author":       []any{map[string]any{"name": "Roger Wilkershank", "email": "rpwilkershank@northstar-ida.com"}},
				"organization": []any{map[string]any{"name": "Northstar Industrial Applications", "site": "http://northstar-ida.com"}},
			},
		},
		DeploymentProfiles: []DeploymentProfile{{
			Type: ProfileHelm, ID: "com-northstartida-hello-world-helm-a",
			Components: []Component{{Name: "hello-world", Properties: map[string]any{
				"repository": "oci://northstarida.azurecr.io/charts/hello-world", "revision": "1.0.1", "wait": true,
			}}},
		}},
		Parameters: map[string]Parameter{
			"greeting":          {Value: "Hello", Targets: []Target{{Pointer: "global.config.appGreeting", Components: []string{"hello-world"}}}},
			"greetingAddressee": {Value: "World", Targets: []Target{{Pointer: "global.config.appGreetingAddressee", Components: []string{"hello-world"}}}},
		},
		Configuration: Configuration{
			Sections: []Section{{Name: "General Settings", Settings: []Setting{
				{Parameter: "greeting", Name: "Greeting", Description: "The greeting to use.", Schema: "requireText"},
				{Parameter: "greetingAddressee", Name: "Greeting Addressee", Description: "The person, or group, the greeting addresses.", Schema: "requireText"},
			}}},
			Schema: []Schema{{Name: "requireText", DataType: DataString, MaxLength: ptrInt(45)}},
		},
		Version: lifecycle.MustParseVersion("1.0.0"),
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("ParseDescription(example 1) =\n%+v\nwant\n%+v", d, want)
	}
}

func ptrInt(i int64) *int64 { return &i }

func TestParseLifecycle(t *testing.T) {
	d := mustParse(t, readFile(t, lifecycleBase), MediaTypeYAML).Description
	v := func(s string) *lifecycle.Version { x := lifecycle.MustParseVersion(s); return &x }
	want := lifecycle.Lifecycle{
		Upgrade: lifecycle.UpgradePolicy{
			MinUpgradeFrom: v("1.5.0"),
			Drain:          &lifecycle.DrainPolicy{Required: true, Timeout: 10 * time.Minute, OnTimeout: lifecycle.OnTimeoutAbort},
			Strategies:     []lifecycle.Strategy{lifecycle.StrategyRecreate, lifecycle.StrategyBlueGreen},
		},
		Rollback: lifecycle.RollbackPolicy{
			Allowed: true, MinVersion: v("1.8.0"), Window: 72 * time.Hour,
			Reason: "2.0 migrates the schema; 1.7 and older cannot read it",
		},
		Parameters: map[string]lifecycle.ParameterPolicy{
			"idpName":       {OnUpgrade: lifecycle.OnUpgradeKeep},
			"pollFrequency": {OnUpgrade: lifecycle.OnUpgradeReset},
		},
	}
	if !reflect.DeepEqual(d.Lifecycle, want) {
		t.Errorf("Lifecycle = %+v, want %+v", d.Lifecycle, want)
	}
	if d.Version != lifecycle.MustParseVersion("2.0.0") || d.Metadata.Version != "2.0" {
		t.Errorf("Version = %s (%q), want 2.0.0 (\"2.0\")", d.Version, d.Metadata.Version)
	}
	if got := d.Lifecycle.Summary(); got.MinUpgradeFrom != "1.5.0" || !got.RollbackAllowed || got.RollbackMinVersion != "1.8.0" || !got.DrainRequired {
		t.Errorf("Summary() = %+v", got)
	}
	logLevels, ok := d.Schema("logLevels")
	if !ok || !reflect.DeepEqual(logLevels.Options, []any{"debug", "info", "warn", "error"}) {
		t.Errorf("Schema(logLevels) = %+v, %v", logLevels, ok)
	}
}

func TestParseLifecycleDefaults(t *testing.T) {
	doc := loadBase(t)
	set(t, doc, "/lifecycle", map[string]any{
		"upgrade":    map[string]any{"drain": map[string]any{}},
		"rollback":   nil,
		"parameters": map[string]any{"idpName": nil},
	})
	d := mustParse(t, toYAML(t, doc), MediaTypeYAML).Description
	want := lifecycle.Lifecycle{
		Upgrade: lifecycle.UpgradePolicy{Drain: &lifecycle.DrainPolicy{
			Required: true, Timeout: lifecycle.DefaultDrainTimeout, OnTimeout: lifecycle.OnTimeoutAbort}},
		Parameters: map[string]lifecycle.ParameterPolicy{"idpName": {}},
	}
	if !reflect.DeepEqual(d.Lifecycle, want) {
		t.Errorf("Lifecycle with defaults = %+v, want %+v", d.Lifecycle, want)
	}

	// No lifecycle section at all: the zero Lifecycle.
	d = mustParse(t, readFile(t, example2), MediaTypeYAML).Description
	if !reflect.DeepEqual(d.Lifecycle, lifecycle.Lifecycle{}) {
		t.Errorf("Lifecycle without section = %+v, want zero", d.Lifecycle)
	}
}

func TestParseToleratesLegacyKindAndExtensions(t *testing.T) {
	doc := loadBase(t)
	set(t, doc, "/kind", "ApplicationDescription")
	set(t, doc, "/x-acme-extensions", map[string]any{"anything": []any{1, 2}})
	p := mustParse(t, toYAML(t, doc), MediaTypeYAML)
	var back map[string]any
	require.NoError(t, json.Unmarshal(p.JSON, &back))
	if back["kind"] != "ApplicationDescription" || back["x-acme-extensions"] == nil {
		t.Errorf("JSON form lost unknown members: %s", p.JSON)
	}
}

func TestParseRegexDialects(t *testing.T) {
	for _, tt := range []struct {
		pattern  string
		ok       bool
		enforced bool
	}{
		{`.*@[a-z0-9.-]*`, true, true},
		{`^(http(s):\/\/.)[-a-zA-Z0-9@:%._\+~#=]{2,256}\.[a-z]{2,6}\b([-a-zA-Z0-9@:%_\+.~#?&//=]*)$`, true, true},
		{`(?=.*\d)(?=.*[a-z]).{8,}`, true, false}, // lookahead (ECMAScript, PCRE)
		{`(?<!x)y`, true, false},                  // lookbehind
		{`(a)b\1`, true, false},                   // backreference
		{`(?<n>a)\k<n>`, true, false},             // named backreference
		{`a++b`, true, false},                     // possessive
		{`(?>ab|a)c`, true, false},                // atomic group
		{`a{2,5000}`, true, false},                // repeat count above RE2's 1000
		{`[)(?=]x`, true, true},                   // lookahead-like text inside a class
		{`(`, false, false},
		{`a)`, false, false},
		{`[a-`, false, false},
		{`\`, false, false},
		{`(?=(`, false, false}, // not fixed by relaxing
		{`x**`, false, false},
	} {
		doc := loadBase(t)
		set(t, doc, "/configuration/schema/1/regexMatch", tt.pattern)
		p, err := ParseDescription(toYAML(t, doc), MediaTypeYAML)
		if (err == nil) != tt.ok {
			t.Errorf("regexMatch %q: error = %v, want ok %v", tt.pattern, err, tt.ok)
			continue
		}
		if err != nil {
			if got := pointers(t, err); !slices.Equal(got, []string{"/configuration/schema/1/regexMatch"}) {
				t.Errorf("regexMatch %q: pointers %v", tt.pattern, got)
			}
			continue
		}
		s, _ := p.Description.Schema("email")
		if _, enforced := s.Regexp(); enforced != tt.enforced {
			t.Errorf("regexMatch %q: enforced = %v, want %v", tt.pattern, enforced, tt.enforced)
		}
	}
}

func TestParseMediaTypes(t *testing.T) {
	raw := readFile(t, example1)
	js := mustParse(t, raw, MediaTypeYAML).JSON
	for _, tt := range []struct {
		mediaType string
		raw       []byte
		code      lifecycle.Code
	}{
		{"application/yaml", raw, ""},
		{"application/x-yaml", raw, ""},
		{"text/yaml; charset=utf-8", raw, ""},
		{"application/vnd.margo+yaml", raw, ""},
		{"application/json", js, ""},
		{"application/json; charset=UTF-8", js, ""},
		{"application/problem+json", js, ""},
		{"application/json", raw, lifecycle.EMALFORMED}, // YAML is not JSON
		{"application/yaml", js, ""},                    // but JSON is YAML
		{"text/plain", raw, lifecycle.EUNSUPPORTEDTYPE},
		{"", raw, lifecycle.EUNSUPPORTEDTYPE},
		{"application/yaml; charset=latin1", raw, lifecycle.EUNSUPPORTEDTYPE},
		{"application/", raw, lifecycle.EUNSUPPORTEDTYPE},
	} {
		_, err := ParseDescription(tt.raw, tt.mediaType)
		if got := lifecycle.ErrorCode(err); got != tt.code {
			t.Errorf("ParseDescription(…, %q) code = %q, want %q (%v)", tt.mediaType, got, tt.code, err)
		}
	}
}

func TestParseJSONStrict(t *testing.T) {
	for _, tt := range []struct {
		name, raw string
	}{
		{"trailing comma", `{"a":1,}`},
		{"comment", `{"a":1 /* c */}`},
		{"single quotes", `{'a':1}`},
		{"two values", `{"a":1}{"b":2}`},
		{"trailing garbage", `{"a":1} x`},
		{"NaN", `{"a":NaN}`},
		{"huge number", `{"a":1e999}`},
		{"invalid UTF-8", "{\"a\":\"\xff\"}"},
		{"truncated", `{"a":[1,2`},
		{"duplicate", `{"a":1,"a":2}`},
		{"duplicate nested", `{"b":{"a":1,"a":2}}`},
		{"empty", ``},
		{"whitespace", " \n"},
		{"array top", `[1]`},
		{"null top", `null`},
		{"string top", `"x"`},
		{"leading zero", `{"a":01}`},
		{"name not a string", `{1:2}`},
		{"missing colon", `{"a" 1}`},
		{"unterminated string", `{"a":"x}`},
		{"bad literal", `{"a":tru}`},
		{"extra close", `{"a":{}}}`},
		{"control character in string", "{\"a\":\"x\ny\"}"},
	} {
		_, err := ParseDescription([]byte(tt.raw), MediaTypeJSON)
		if lifecycle.ErrorCode(err) != lifecycle.EMALFORMED {
			t.Errorf("%s: ParseDescription(%q) = %v, want %s", tt.name, tt.raw, err, lifecycle.EMALFORMED)
		}
	}
}

// TestReadJSONTrailingComma: a trailing comma is named as such, at the
// comma's position.
func TestReadJSONTrailingComma(t *testing.T) {
	for _, raw := range []string{`{"a":1,}`, `{"a":[1,2,]}`, "{\"a\":1,\n}"} {
		_, err := readJSON([]byte(raw))
		require.Equal(t, lifecycle.EMALFORMED, lifecycle.ErrorCode(err), raw)
		require.Contains(t, err.Error(), "trailing comma", raw)
	}
	_, err := readJSON([]byte(`{"a":1,}`))
	require.Contains(t, err.Error(), "line 1, column 7: trailing comma before '}'")
}

// TestReadJSONLoneSurrogate: an escaped lone surrogate is valid JSON
// syntax (RFC 8259 section 8.2) and is read as U+FFFD, as encoding/json
// read it before the reader moved to jsontext.
func TestReadJSONLoneSurrogate(t *testing.T) {
	doc, err := readJSON([]byte(`{"a":"x\ud800y"}`))
	require.NoError(t, err)
	require.Equal(t, "x\uFFFDy", doc.m["a"])
}

func TestParseMalformedYAML(t *testing.T) {
	for _, tt := range []struct {
		name, raw, hint string
	}{
		{"empty", "", "empty"},
		{"only a comment", "# nothing\n", "empty"},
		{"scalar top", "hello\n", "top level must be a mapping"},
		{"list top", "- a\n- b\n", "top level must be a mapping"},
		{"duplicate key", "apiVersion: v1\nid: a\nid: b\n", "line 3"},
		{"duplicate nested key", "metadata:\n  name: a\n  name: b\n", "duplicate key \"name\""},
		{"duplicate key spelled differently", "1: a\n\"1\": b\n", "duplicate key"},
		{"two documents", "a: 1\n---\nb: 2\n", "more than one YAML document"},
		{"bad indentation", "a:\n  b: 1\n c: 2\n", "line"},
		{"unclosed flow", "a: [1, 2\n", "line"},
		{"tab indentation", "a:\n\tb: 1\n", "line"},
		{"merge key", "base: &b {x: 1}\nother:\n  <<: *b\n", "merge keys"},
		{"custom tag", "a: !secret value\n", "unsupported YAML tag"},
		{"binary tag", "a: !!binary aGVsbG8=\n", "unsupported YAML tag"},
		{"set tag", "a: !!set {x}\n", "unsupported YAML tag"},
		{"nan", "a: .nan\n", "JSON"},
		{"infinity", "a: -.inf\n", "JSON"},
		{"mapping key", "? [a, b]\n: c\n", "keys must be scalars"},
		{"unknown alias", "a: *nope\n", "unknown anchor"},
		{"recursive alias", "a: &x [*x]\n", "deeper"},
		{"bad int tag", "a: !!int hello\n", "line 1"},
		{"invalid UTF-8", "a: \"\xff\"\n", ""},
		{"binary garbage", "\x00\x01\x02\xff\xfe\x7f{[", ""},
		{"NUL in plain scalar", "a: b\x00c\n", ""},
	} {
		_, err := ParseDescription([]byte(tt.raw), MediaTypeYAML)
		var e *lifecycle.Error
		if !errors.As(err, &e) || e.Code != lifecycle.EMALFORMED || e.Type != ProblemMalformed {
			t.Errorf("%s: ParseDescription(%q) = %v, want %s", tt.name, tt.raw, err, lifecycle.EMALFORMED)
			continue
		}
		if !strings.Contains(e.Message, tt.hint) {
			t.Errorf("%s: message %q does not mention %q", tt.name, e.Message, tt.hint)
		}
	}
}

func TestParseScalarsAsJSON(t *testing.T) {
	raw := []byte(`apiVersion: v1
x:
  int: 0x1F
  octal: 0o17
  big: 18446744073709551615
  float: 1.0
  exp: 1e3
  neg0: -0.0
  tiny: 1e-9
  date: 2001-12-14
  null1: ~
  null2:
  bool: true
  yes: yes
  str: "1.0"
  ctl: "a\tb\u0001\"\\"
  unicode: "é€😀"
  1: numeric key
  true: bool key
`)
	// Not a valid description; read the tree directly.
	doc, err := readYAML(raw)
	require.NoError(t, err)
	got := string(appendJSON(nil, doc))
	want := `{"apiVersion":"v1","x":{"int":31,"octal":15,"big":18446744073709551615,"float":1.0,"exp":1000.0,"neg0":-0.0,"tiny":1e-09,"date":"2001-12-14","null1":null,"null2":null,"bool":true,"yes":"yes","str":"1.0","ctl":"a\tb\u0001\"\\","unicode":"é€😀","1":"numeric key","true":"bool key"}}`
	if got != want {
		t.Errorf("JSON form =\n%s\nwant\n%s", got, want)
	}
	back, err := readJSON([]byte(got))
	require.NoError(t, err)
	if again := string(appendJSON(nil, back)); again != got {
		t.Errorf("JSON form not stable:\n%s\n%s", again, got)
	}
	if !reflect.DeepEqual(plain(back), plain(doc)) {
		t.Errorf("JSON tree %v differs from YAML tree %v", plain(back), plain(doc))
	}
}
