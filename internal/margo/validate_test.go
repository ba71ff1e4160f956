package margo

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// loadBase returns the valid lifecycle document as plain Go values to mutate.
func loadBase(t testing.TB) map[string]any {
	t.Helper()
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(readFile(t, lifecycleBase), &doc))
	return doc
}

func toYAML(t testing.TB, doc any) []byte {
	t.Helper()
	b, err := yaml.Marshal(doc)
	require.NoError(t, err)
	return b
}

func toJSON(t testing.TB, doc any) []byte {
	t.Helper()
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return b
}

// walk follows pointer p (unescaped tokens, no ~ in test pointers) to the
// parent of its last token.
func walk(t testing.TB, doc any, p string) (any, string) {
	t.Helper()
	tokens := strings.Split(p, "/")[1:]
	cur := doc
	for _, tok := range tokens[:len(tokens)-1] {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			require.NoError(t, err, "pointer %s", p)
			cur = c[i]
		default:
			t.Fatalf("pointer %s: cannot walk into %T", p, cur)
		}
	}
	return cur, tokens[len(tokens)-1]
}

// set sets the member or item at p ("-" as the last token appends).
func set(t testing.TB, doc map[string]any, p string, v any) {
	t.Helper()
	parentPath := p[:strings.LastIndex(p, "/")]
	parent, last := walk(t, doc, p)
	switch c := parent.(type) {
	case map[string]any:
		c[last] = v
	case []any:
		if last == "-" {
			// Appending changes the slice header: store it in the grandparent.
			set(t, doc, parentPath, append(c, v))
			return
		}
		i, err := strconv.Atoi(last)
		require.NoError(t, err)
		c[i] = v
	default:
		t.Fatalf("pointer %s: parent is %T", p, parent)
	}
}

// del removes the member at p.
func del(t testing.TB, doc map[string]any, p string) {
	t.Helper()
	parent, last := walk(t, doc, p)
	m, ok := parent.(map[string]any)
	require.True(t, ok, "del %s: parent is %T", p, parent)
	require.Contains(t, m, last, "del %s", p)
	delete(m, last)
}

// pointers returns the field pointers of an EINVALID description error.
func pointers(t testing.TB, err error) []string {
	t.Helper()
	var e *lifecycle.Error
	require.True(t, errors.As(err, &e), "error %v is not a *lifecycle.Error", err)
	require.Equal(t, lifecycle.EINVALID, e.Code, "error %v", err)
	require.Equal(t, ProblemInvalid, e.Type)
	var ps []string
	for _, f := range e.Fields {
		ps = append(ps, f.Pointer)
		if f.Detail == "" {
			t.Errorf("field %s has no detail", f.Pointer)
		}
	}
	return ps
}

type mutation func(t testing.TB, doc map[string]any)

func setM(p string, v any) mutation {
	return func(t testing.TB, doc map[string]any) { set(t, doc, p, v) }
}

func delM(p string) mutation {
	return func(t testing.TB, doc map[string]any) { del(t, doc, p) }
}

func profiles(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"type": "helm", "id": fmt.Sprintf("p%d", i), "components": []any{map[string]any{"name": fmt.Sprintf("c%d", i)}}}
	}
	return out
}

// TestParseOneDefect mutates the valid base document in exactly one way per
// case and expects exactly the listed problems, read from YAML and from JSON.
func TestParseOneDefect(t *testing.T) {
	tests := []struct {
		name   string
		mutate mutation
		want   []string
	}{
		// top level
		{"apiVersion missing", delM("/apiVersion"), []string{"/apiVersion"}},
		{"apiVersion not v1", setM("/apiVersion", "margo.org/v1-alpha1"), []string{"/apiVersion"}},
		{"apiVersion not a string", setM("/apiVersion", 1), []string{"/apiVersion"}},
		{"id missing", delM("/id"), []string{"/id"}},
		{"id with uppercase and underscore", setM("/id", "Com_Northstar"), []string{"/id"}},
		{"id with a dot", setM("/id", "com.northstar"), []string{"/id"}},
		{"id too long", setM("/id", strings.Repeat("a", 201)), []string{"/id"}},
		{"id empty", setM("/id", ""), []string{"/id"}},
		// metadata
		{"metadata missing", delM("/metadata"), []string{"/metadata"}},
		{"metadata a list", setM("/metadata", []any{"x"}), []string{"/metadata"}},
		{"metadata.name missing", delM("/metadata/name"), []string{"/metadata/name"}},
		{"metadata.name too long", setM("/metadata/name", strings.Repeat("n", MaxNameLength+1)), []string{"/metadata/name"}},
		{"metadata.version missing", delM("/metadata/version"), []string{"/metadata/version"}},
		{"metadata.version latest", setM("/metadata/version", "latest"), []string{"/metadata/version"}},
		{"metadata.version four numbers", setM("/metadata/version", "2.0.0.0"), []string{"/metadata/version"}},
		{"metadata.version build metadata", setM("/metadata/version", "2.0.0+build.1"), []string{"/metadata/version"}},
		{"metadata.version a number", setM("/metadata/version", 2.5), []string{"/metadata/version"}},
		{"metadata.catalog a string", setM("/metadata/catalog", "x"), []string{"/metadata/catalog"}},
		// deployment profiles
		{"deploymentProfiles missing", delM("/deploymentProfiles"), []string{"/deploymentProfiles"}},
		{"deploymentProfiles empty", setM("/deploymentProfiles", []any{}), []string{"/deploymentProfiles"}},
		{"too many profiles", func(t testing.TB, doc map[string]any) {
			set(t, doc, "/deploymentProfiles", append(doc["deploymentProfiles"].([]any), profiles(MaxProfiles)...))
		}, []string{"/deploymentProfiles"}},
		{"profile type helm.v3", setM("/deploymentProfiles/0/type", "helm.v3"), []string{"/deploymentProfiles/0/type"}},
		{"profile type unknown", setM("/deploymentProfiles/1/type", "docker"), []string{"/deploymentProfiles/1/type"}},
		{"profile type missing", delM("/deploymentProfiles/1/type"), []string{"/deploymentProfiles/1/type"}},
		{"profile id missing", delM("/deploymentProfiles/0/id"), []string{"/deploymentProfiles/0/id"}},
		{"profile id duplicate", setM("/deploymentProfiles/1/id", "com-northstartida-digitron-orchestrator-helm-a"), []string{"/deploymentProfiles/1/id"}},
		{"profile not a mapping", setM("/deploymentProfiles/-", "helm"), []string{"/deploymentProfiles/2"}},
		{"profile components empty", setM("/deploymentProfiles/-", map[string]any{"type": "custom", "id": "x", "components": []any{}}),
			[]string{"/deploymentProfiles/2/components"}},
		{"profile components missing", setM("/deploymentProfiles/-", map[string]any{"type": "custom", "id": "x"}),
			[]string{"/deploymentProfiles/2/components"}},
		{"component name missing", setM("/deploymentProfiles/0/components/-", map[string]any{"properties": map[string]any{}}),
			[]string{"/deploymentProfiles/0/components/2/name"}},
		{"component name duplicate in profile", setM("/deploymentProfiles/0/components/-", map[string]any{"name": "database-services"}),
			[]string{"/deploymentProfiles/0/components/2/name"}},
		{"component name uppercase", setM("/deploymentProfiles/0/components/-", map[string]any{"name": "Extra_Chart"}),
			[]string{"/deploymentProfiles/0/components/2/name"}},
		{"component revision a number", setM("/deploymentProfiles/0/components/0/properties/revision", 2.3),
			[]string{"/deploymentProfiles/0/components/0/properties/revision"}},
		{"component wait a string", setM("/deploymentProfiles/0/components/0/properties/wait", "yes"),
			[]string{"/deploymentProfiles/0/components/0/properties/wait"}},
		{"deviceConstraints a list", setM("/deploymentProfiles/0/deviceConstraints", []any{}), []string{"/deploymentProfiles/0/deviceConstraints"}},
		// parameters
		{"parameters a list", setM("/parameters", []any{}), []string{"/parameters"}},
		{"too many parameters", func(t testing.TB, doc map[string]any) {
			ps := doc["parameters"].(map[string]any)
			for i := range MaxParameters {
				ps[fmt.Sprintf("p%03d", i)] = map[string]any{"targets": []any{map[string]any{"pointer": "x", "components": []any{"database-services"}}}}
			}
		}, []string{"/parameters"}},
		{"schema a mapping", setM("/configuration/schema", map[string]any{}), []string{"/configuration/schema"}},
		{"parameter targets missing", delM("/parameters/siteId/targets"), []string{"/parameters/siteId/targets"}},
		{"parameter targets empty", setM("/parameters/siteId/targets", []any{}), []string{"/parameters/siteId/targets"}},
		{"target pointer empty", setM("/parameters/idpName/targets/0/pointer", ""), []string{"/parameters/idpName/targets/0/pointer"}},
		{"target components empty", setM("/parameters/idpName/targets/1/components", []any{}), []string{"/parameters/idpName/targets/1/components"}},
		{"target component unknown", setM("/parameters/pollFrequency/targets/0/components/1", "database"),
			[]string{"/parameters/pollFrequency/targets/0/components/1"}},
		{"target component not a string", setM("/parameters/idpName/targets/0/components/0", 7), []string{"/parameters/idpName/targets/0/components/0"}},
		{"parameter name escaped", func(t testing.TB, doc map[string]any) {
			doc["parameters"].(map[string]any)["a~b/c"] = map[string]any{"targets": []any{map[string]any{"pointer": "x", "components": []any{"nope"}}}}
		}, []string{"/parameters/a~0b~1c/targets/0/components/0"}},
		{"parameter value a mapping", setM("/parameters/siteId/value", map[string]any{"a": 1}), []string{"/parameters/siteId/value"}},
		{"default below minValue", setM("/parameters/pollFrequency/value", 10), []string{"/parameters/pollFrequency/value"}},
		{"default too precise", setM("/parameters/cpuLimit/value", 1.25), []string{"/parameters/cpuLimit/value"}},
		{"default not an option", setM("/parameters/logLevel/value", "trace"), []string{"/parameters/logLevel/value"}},
		{"default wrong type", setM("/parameters/idpName/value", true), []string{"/parameters/idpName/value"}},
		// configuration
		{"configuration sections missing", delM("/configuration/sections"), []string{"/configuration/sections"}},
		{"configuration schema missing", func(t testing.TB, doc map[string]any) {
			set(t, doc, "/configuration", map[string]any{"sections": []any{}})
		}, []string{"/configuration/schema"}},
		{"section name missing", delM("/configuration/sections/2/name"), []string{"/configuration/sections/2/name"}},
		{"setting names unknown parameter", setM("/configuration/sections/0/settings/1/parameter", "site"),
			[]string{"/configuration/sections/0/settings/1/parameter"}},
		{"setting names unknown schema", setM("/configuration/sections/0/settings/1/schema", "optional"),
			[]string{"/configuration/sections/0/settings/1/schema"}},
		{"second setting for a parameter", setM("/configuration/sections/4/settings/-",
			map[string]any{"parameter": "pollFrequency", "name": "Again", "schema": "pollRange"}),
			[]string{"/configuration/sections/4/settings/1/parameter"}},
		{"setting name missing", delM("/configuration/sections/1/settings/0/name"), []string{"/configuration/sections/1/settings/0/name"}},
		{"setting immutable a string", setM("/configuration/sections/1/settings/0/immutable", "yes"),
			[]string{"/configuration/sections/1/settings/0/immutable"}},
		{"schema name duplicate", setM("/configuration/schema/-", map[string]any{"name": "email", "dataType": "string"}),
			[]string{"/configuration/schema/8/name"}},
		{"schema dataType missing", delM("/configuration/schema/0/dataType"), []string{"/configuration/schema/0/dataType"}},
		{"schema dataType unknown", setM("/configuration/schema/0/dataType", "text"), []string{"/configuration/schema/0/dataType"}},
		{"minValue above maxValue", setM("/configuration/schema/3/minValue", 400), []string{"/configuration/schema/3/minValue"}},
		{"integer bound not an integer", setM("/configuration/schema/3/maxValue", 360.5), []string{"/configuration/schema/3/maxValue"}},
		{"minLength negative", setM("/configuration/schema/4/minLength", -1), []string{"/configuration/schema/4/minLength"}},
		{"minLength above maxLength", setM("/configuration/schema/4/maxLength", 2), []string{"/configuration/schema/4/minLength"}},
		{"maxLength on an integer", setM("/configuration/schema/3/maxLength", 5), []string{"/configuration/schema/3/maxLength"}},
		{"maxPrecision on a string", setM("/configuration/schema/0/maxPrecision", 2), []string{"/configuration/schema/0/maxPrecision"}},
		{"maxPrecision negative", setM("/configuration/schema/5/maxPrecision", -2), []string{"/configuration/schema/5/maxPrecision"}},
		{"regexMatch does not compile", setM("/configuration/schema/1/regexMatch", "(.*@"), []string{"/configuration/schema/1/regexMatch"}},
		{"allowEmpty a string", setM("/configuration/schema/0/allowEmpty", "no"), []string{"/configuration/schema/0/allowEmpty"}},
		{"options empty", setM("/configuration/schema/7/options", []any{}), []string{"/configuration/schema/7/options"}},
		{"option of the wrong type", setM("/configuration/schema/7/options/2", 3), []string{"/configuration/schema/7/options/2"}},
		{"option listed twice", setM("/configuration/schema/7/options/2", "debug"), []string{"/configuration/schema/7/options/2"}},
		// lifecycle
		{"lifecycle a list", setM("/lifecycle", []any{"upgrade"}), []string{"/lifecycle"}},
		{"lifecycle unknown section", setM("/lifecycle/upgrades", map[string]any{}), []string{"/lifecycle/upgrades"}},
		{"lifecycle typo minUpgradeFom", func(t testing.TB, doc map[string]any) {
			set(t, doc, "/lifecycle/upgrade/minUpgradeFom", "1.5")
			del(t, doc, "/lifecycle/upgrade/minUpgradeFrom")
		}, []string{"/lifecycle/upgrade/minUpgradeFom"}},
		{"minUpgradeFrom not a version", setM("/lifecycle/upgrade/minUpgradeFrom", "1.5.x"), []string{"/lifecycle/upgrade/minUpgradeFrom"}},
		{"minUpgradeFrom equals own version", setM("/lifecycle/upgrade/minUpgradeFrom", "2"), []string{"/lifecycle/upgrade/minUpgradeFrom"}},
		{"minUpgradeFrom above own version", setM("/lifecycle/upgrade/minUpgradeFrom", "2.0.1"), []string{"/lifecycle/upgrade/minUpgradeFrom"}},
		{"minUpgradeFrom a number", setM("/lifecycle/upgrade/minUpgradeFrom", 1.5), []string{"/lifecycle/upgrade/minUpgradeFrom"}},
		{"drain unknown member", setM("/lifecycle/upgrade/drain/timout", "5m"), []string{"/lifecycle/upgrade/drain/timout"}},
		{"drain required a string", setM("/lifecycle/upgrade/drain/required", "yes"), []string{"/lifecycle/upgrade/drain/required"}},
		{"drain timeout not a duration", setM("/lifecycle/upgrade/drain/timeout", "10 minutes"), []string{"/lifecycle/upgrade/drain/timeout"}},
		{"drain timeout zero", setM("/lifecycle/upgrade/drain/timeout", "0s"), []string{"/lifecycle/upgrade/drain/timeout"}},
		{"drain timeout a number", setM("/lifecycle/upgrade/drain/timeout", 600), []string{"/lifecycle/upgrade/drain/timeout"}},
		{"drain onTimeout unknown", setM("/lifecycle/upgrade/drain/onTimeout", "retry"), []string{"/lifecycle/upgrade/drain/onTimeout"}},
		{"drain a string", setM("/lifecycle/upgrade/drain", "yes"), []string{"/lifecycle/upgrade/drain"}},
		{"strategy unknown", setM("/lifecycle/upgrade/strategies/1", "canary"), []string{"/lifecycle/upgrade/strategies/1"}},
		{"strategy repeated", setM("/lifecycle/upgrade/strategies/1", "recreate"), []string{"/lifecycle/upgrade/strategies/1"}},
		{"strategies empty", setM("/lifecycle/upgrade/strategies", []any{}), []string{"/lifecycle/upgrade/strategies"}},
		{"strategies a string", setM("/lifecycle/upgrade/strategies", "recreate"), []string{"/lifecycle/upgrade/strategies"}},
		{"rollback allowed a string", setM("/lifecycle/rollback/allowed", "yes"), []string{"/lifecycle/rollback/allowed"}},
		{"rollback minVersion equals own", setM("/lifecycle/rollback/minVersion", "2.0.0"), []string{"/lifecycle/rollback/minVersion"}},
		{"rollback minVersion above own", setM("/lifecycle/rollback/minVersion", "3.0.0"), []string{"/lifecycle/rollback/minVersion"}},
		{"rollback window negative", setM("/lifecycle/rollback/window", "-1h"), []string{"/lifecycle/rollback/window"}},
		{"rollback window in days", setM("/lifecycle/rollback/window", "3d"), []string{"/lifecycle/rollback/window"}},
		{"rollback reason too long", setM("/lifecycle/rollback/reason", strings.Repeat("r", lifecycle.MaxReasonLength+1)), []string{"/lifecycle/rollback/reason"}},
		{"rollback unknown member", setM("/lifecycle/rollback/allow", true), []string{"/lifecycle/rollback/allow"}},
		{"lifecycle parameter unknown", setM("/lifecycle/parameters/greeting", map[string]any{"onUpgrade": "keep"}), []string{"/lifecycle/parameters/greeting"}},
		{"onUpgrade unknown", setM("/lifecycle/parameters/idpName/onUpgrade", "merge"), []string{"/lifecycle/parameters/idpName/onUpgrade"}},
		{"onUpgrade empty", setM("/lifecycle/parameters/idpName/onUpgrade", ""), []string{"/lifecycle/parameters/idpName/onUpgrade"}},
		{"lifecycle parameter unknown member", setM("/lifecycle/parameters/idpName/onUpgrad", "keep"), []string{"/lifecycle/parameters/idpName/onUpgrad"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := loadBase(t)
			tt.mutate(t, doc)
			for _, enc := range []struct {
				mediaType string
				raw       []byte
			}{{MediaTypeYAML, toYAML(t, doc)}, {MediaTypeJSON, toJSON(t, doc)}} {
				p, err := ParseDescription(enc.raw, enc.mediaType)
				if err == nil {
					t.Fatalf("%s: ParseDescription accepted the document (%v)", enc.mediaType, p.Description.Lifecycle)
				}
				if got := pointers(t, err); !slices.Equal(got, tt.want) {
					t.Errorf("%s: pointers = %v, want %v\n%s", enc.mediaType, got, tt.want, describeErr(err))
				}
			}
		})
	}
	if len(tests) < 25 {
		t.Errorf("only %d one-defect cases", len(tests))
	}
}

// TestParseManyDefects checks that every problem is reported at once.
func TestParseManyDefects(t *testing.T) {
	doc := loadBase(t)
	set(t, doc, "/apiVersion", "v2")
	set(t, doc, "/id", "Bad_ID")
	set(t, doc, "/metadata/version", "latest")
	set(t, doc, "/deploymentProfiles/1/type", "helm.v3")
	set(t, doc, "/deploymentProfiles/1/id", "com-northstartida-digitron-orchestrator-helm-a")
	set(t, doc, "/parameters/idpName/targets/0/components/0", "nope")
	set(t, doc, "/configuration/sections/0/settings/1/schema", "missing")
	set(t, doc, "/configuration/schema/3/minValue", 1000)
	set(t, doc, "/lifecycle/upgrade/drain/timeout", "forever")
	set(t, doc, "/lifecycle/upgrade/strategies", []any{"blueGreen", "blueGreen"})
	set(t, doc, "/lifecycle/rollback/allowed", "yes")
	set(t, doc, "/lifecycle/rollback/typo", 1)
	set(t, doc, "/lifecycle/parameters/nope", map[string]any{"onUpgrade": "reset"})
	want := []string{
		"/apiVersion",
		"/id",
		"/metadata/version",
		"/deploymentProfiles/1/type",
		"/deploymentProfiles/1/id",
		"/parameters/idpName/targets/0/components/0",
		"/configuration/schema/3/minValue",
		"/configuration/sections/0/settings/1/schema",
		"/lifecycle/upgrade/drain/timeout",
		"/lifecycle/rollback/typo",
		"/lifecycle/rollback/allowed",
		"/lifecycle/parameters/nope",
		"/lifecycle/upgrade/strategies/1",
	}
	for mediaType, raw := range map[string][]byte{MediaTypeYAML: toYAML(t, doc), MediaTypeJSON: toJSON(t, doc)} {
		_, err := ParseDescription(raw, mediaType)
		got := pointers(t, err)
		// The order is deterministic: the Margo data model's order.
		if !slices.Equal(got, want) {
			t.Errorf("pointers =\n%v\nwant\n%v\n%s", got, want, describeErr(err))
		}
	}
}

func TestParseProblemLimit(t *testing.T) {
	doc := loadBase(t)
	var bad []any
	for i := range 150 {
		bad = append(bad, map[string]any{"name": fmt.Sprintf("s%d", i), "dataType": "text"})
	}
	set(t, doc, "/configuration/schema", append(doc["configuration"].(map[string]any)["schema"].([]any), bad...))
	_, err := ParseDescription(toYAML(t, doc), MediaTypeYAML)
	var e *lifecycle.Error
	require.True(t, errors.As(err, &e))
	if len(e.Fields) != MaxProblems || !strings.Contains(e.Message, "150 problem") {
		t.Errorf("got %d fields and message %q, want %d fields and the total", len(e.Fields), e.Message, MaxProblems)
	}
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = deepCopy(e)
		}
		return l
	}
	return v
}

// collectPointers lists the pointer of every member and item of v.
func collectPointers(v any, p string, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			q := p + "/" + k
			*out = append(*out, q)
			collectPointers(e, q, out)
		}
	case []any:
		for i, e := range x {
			q := p + "/" + strconv.Itoa(i)
			*out = append(*out, q)
			collectPointers(e, q, out)
		}
	}
}

// TestParseTypeConfusion replaces every member and item of the valid base
// document, one at a time, with a value of every JSON type. Each document
// must be accepted or refused with EINVALID and field pointers: no panic, no
// other code.
func TestParseTypeConfusion(t *testing.T) {
	var all []string
	collectPointers(loadBase(t), "", &all)
	slices.Sort(all)
	replacements := []any{nil, "", int64(5), -1.5, true, []any{"a", 1}, map[string]any{"k": "v"}}
	base := loadBase(t)
	for _, p := range all {
		for _, r := range replacements {
			doc := deepCopy(base).(map[string]any)
			set(t, doc, p, r)
			// YAML and JSON read into the same tree (TestParseOneDefect);
			// JSON keeps the sweep fast.
			mediaType, raw := MediaTypeJSON, toJSON(t, doc)
			_, err := ParseDescription(raw, mediaType)
			if err == nil {
				continue
			}
			var e *lifecycle.Error
			if !errors.As(err, &e) || e.Code != lifecycle.EINVALID || len(e.Fields) == 0 {
				t.Errorf("%s := %#v (%s): %v, want EINVALID with fields", p, r, mediaType, err)
			}
		}
	}
}
