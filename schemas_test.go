package wfm_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/wfm-dev/wfm"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
)

// compileSchema compiles the schema at fragment (a JSON pointer, "" for the
// root) of the embedded schemas/<file>, loaded under its own $id.
func compileSchema(t testing.TB, file, fragment string) *jsonschema.Schema {
	t.Helper()
	raw, err := fs.ReadFile(wfm.Schemas, "schemas/"+file)
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	id, _ := doc.(map[string]any)["$id"].(string)
	require.True(t, strings.HasSuffix(id, "/schemas/"+file), "$id of %s is %q", file, id)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource(id, doc))
	s, err := c.Compile(id + "#" + fragment)
	require.NoError(t, err)
	return s
}

// instance converts a Go value (as encoding/json or yaml.v3 decode it) to
// what the validator reads, through JSON.
func instance(t testing.TB, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err)
	return inst
}

// TestDescriptionsMatchLifecycleSchema validates the lifecycle section of
// every application description in the repository's test data
// (internal/**/testdata/*.yaml with a lifecycle section) and examples
// (examples/**/*.yaml) against schemas/lifecycle.schema.json, and checks
// that wfm's parser accepts each of them too.
func TestDescriptionsMatchLifecycleSchema(t *testing.T) {
	schema := compileSchema(t, "lifecycle.schema.json", "")
	var files []string
	for _, root := range []string{"internal", "examples"} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			ext := filepath.Ext(p)
			if d.IsDir() || (ext != ".yaml" && ext != ".yml") {
				return nil
			}
			if root == "internal" && filepath.Base(filepath.Dir(p)) != "testdata" {
				return nil
			}
			files = append(files, p)
			return nil
		})
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		require.NoError(t, err)
	}
	checked := 0
	for _, p := range files {
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		var doc map[string]any
		if yaml.Unmarshal(raw, &doc) != nil {
			continue // not one YAML mapping: not a description
		}
		section, has := doc["lifecycle"]
		isExample := strings.HasPrefix(p, "examples"+string(filepath.Separator))
		if !has && !(isExample && doc["deploymentProfiles"] != nil) {
			continue
		}
		checked++
		if err := schema.Validate(instance(t, section)); err != nil {
			t.Errorf("%s: the lifecycle section breaks the schema: %v", p, err)
		}
		if _, err := margo.ParseDescription(raw, margo.MediaTypeYAML); err != nil {
			t.Errorf("%s: wfm refuses it: %v", p, err)
		}
	}
	require.NotZero(t, checked, "no description with a lifecycle section found in %v", files)
	t.Logf("%d descriptions checked", checked)
}

// baseDescription is the description the property test puts each generated
// lifecycle section into: version 2.0.0, parameters greeting and logLevel.
const baseDescription = `{"apiVersion":"v1","id":"acme-prop","metadata":{"name":"Prop","version":"2.0.0"},
"deploymentProfiles":[{"type":"compose","id":"p","components":[{"name":"c","properties":{}}]}],
"parameters":{"greeting":{"value":"hi","targets":[{"pointer":"G","components":["c"]}]},
"logLevel":{"value":"info","targets":[{"pointer":"L","components":["c"]}]}}`

var baseVersion = lifecycle.MustParseVersion("2.0.0")

// The differences between the schema and wfm's parser: rules a JSON Schema
// cannot express, listed in docs/sup/lifecycle.md ("What the schema cannot
// express"). The schema accepts what they refuse; nothing else differs.
const (
	diffOrder     = "version not lower than the description's own (SemVer precedence)"
	diffUint64    = "a number in a version beyond 2^64-1"
	diffRange     = "a duration outside its field's range, or beyond Go's duration limits"
	diffParameter = "a parameter name the description does not define"
)

// inexpressible returns, by JSON pointer into the description, each place of
// section where one of the listed differences applies: a value the schema
// accepts (its syntax is right) and wfm refuses for a reason the schema
// cannot see.
func inexpressible(section any) map[string]string {
	out := map[string]string{}
	obj := func(v any) map[string]any { m, _ := v.(map[string]any); return m }
	version := func(p string, v any) {
		s, ok := v.(string)
		if !ok || !versionSyntax(s) {
			return
		}
		ver, err := lifecycle.ParseVersion(s)
		switch {
		case err != nil:
			out[p] = diffUint64
		case lifecycle.Compare(ver, baseVersion) >= 0:
			out[p] = diffOrder
		}
	}
	duration := func(p string, v any, f lifecycle.DurationField) {
		s, ok := v.(string)
		if !ok || !durationSyntax(s) {
			return
		}
		if d, err := time.ParseDuration(s); err != nil || !lifecycle.DurationRangeOf(f).Contains(d) {
			out[p] = diffRange
		}
	}
	l := obj(section)
	if u := obj(l["upgrade"]); u != nil {
		version("/lifecycle/upgrade/minUpgradeFrom", u["minUpgradeFrom"])
		if d := obj(u["drain"]); d != nil {
			duration("/lifecycle/upgrade/drain/timeout", d["timeout"], lifecycle.DurationDrainTimeout)
		}
	}
	if r := obj(l["rollback"]); r != nil {
		version("/lifecycle/rollback/minVersion", r["minVersion"])
		duration("/lifecycle/rollback/window", r["window"], lifecycle.DurationRollbackWindow)
	}
	if ps := obj(l["parameters"]); ps != nil {
		for name := range ps {
			if name != "" && name != "greeting" && name != "logLevel" {
				out["/lifecycle/parameters/"+lifecycle.EscapePointer(name)] = diffParameter
			}
		}
	}
	return out
}

// versionSyntax and durationSyntax are the schema's own patterns, so that
// inexpressible names only what the schema accepts.
var versionSyntax, durationSyntax = schemaPattern("version"), schemaPattern("duration")

func schemaPattern(def string) func(string) bool {
	raw, err := fs.ReadFile(wfm.Schemas, "schemas/lifecycle.schema.json")
	if err != nil {
		panic(err)
	}
	var doc struct {
		Defs map[string]struct {
			Pattern   string `json:"pattern"`
			MaxLength int    `json:"maxLength"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		panic(err)
	}
	d := doc.Defs[def]
	re := regexp.MustCompile(d.Pattern)
	return func(s string) bool {
		return re.MatchString(s) && (d.MaxLength == 0 || len([]rune(s)) <= d.MaxLength)
	}
}

// agreement checks one lifecycle section (a JSON value) against both the
// schema and wfm's parser: whatever the parser accepts, the schema accepts;
// whatever the schema refuses, the parser refuses; and where the schema
// accepts and the parser refuses, every problem the parser names is at a
// place where a listed difference applies. It returns the differences seen.
func agreement(t testing.TB, schema *jsonschema.Schema, sectionJSON []byte, fuzzing bool) []string {
	t.Helper()
	var section any
	dec := json.NewDecoder(bytes.NewReader(sectionJSON))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&section))
	desc := baseDescription + `,"lifecycle":` + string(sectionJSON) + `}`
	_, perr := margo.ParseDescription([]byte(desc), margo.MediaTypeJSON)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(sectionJSON))
	require.NoError(t, err)
	serr := schema.Validate(inst)
	switch {
	case perr == nil && serr != nil:
		t.Fatalf("wfm accepts and the schema refuses %s: %v", sectionJSON, serr)
	case perr != nil && fuzzing && unreadable(perr):
		return nil // not a document at all (invalid UTF-8, too deep, too large): no section to compare
	case perr != nil && serr != nil:
		var le *lifecycle.Error
		require.ErrorAs(t, perr, &le, "%s", sectionJSON)
		require.Equal(t, "invalid-description", le.Type, "%s: %v", sectionJSON, perr)
		return nil
	case perr == nil:
		return nil
	}
	// The schema accepts, wfm refuses: only for the listed differences.
	var le *lifecycle.Error
	require.ErrorAs(t, perr, &le, "%s", sectionJSON)
	diffs := inexpressible(section)
	var seen []string
	for _, f := range le.Fields {
		why, listed := diffs[f.Pointer]
		if !listed {
			t.Fatalf("the schema accepts %s, wfm refuses it at %s (%s), and no listed difference applies there", sectionJSON, f.Pointer, f.Detail)
		}
		seen = append(seen, why)
	}
	require.NotEmpty(t, seen, "%s: %v", sectionJSON, perr)
	return seen
}

// TestLifecycleSchemaAgreesWithParser generates lifecycle sections from the
// section's grammar, with valid values and invalid mutations at every
// level, and checks agreement on each. Every listed difference must show up
// at least once, so the list is neither stale nor vacuous.
func TestLifecycleSchemaAgreesWithParser(t *testing.T) {
	schema := compileSchema(t, "lifecycle.schema.json", "")
	g := &sectionGen{r: rand.New(rand.NewPCG(16, 2026))}
	const n = 4000
	seen := map[string]int{}
	refused := 0
	for range n {
		b, err := json.Marshal(g.section())
		require.NoError(t, err)
		diffs := agreement(t, schema, b, false)
		for _, d := range diffs {
			seen[d]++
		}
		if len(diffs) > 0 {
			refused++
		}
	}
	for _, d := range []string{diffOrder, diffUint64, diffRange, diffParameter} {
		require.NotZero(t, seen[d], "difference %q never seen in %d sections", d, n)
	}
	t.Logf("%d sections; differences seen: %v", n, seen)
}

// FuzzLifecycleSchemaAgreesWithParser is the property test with fuzzed
// sections (any JSON value); the seeds come from the grammar.
func FuzzLifecycleSchemaAgreesWithParser(f *testing.F) {
	g := &sectionGen{r: rand.New(rand.NewPCG(1, 2))}
	for range 50 {
		b, _ := json.Marshal(g.section())
		f.Add(b)
	}
	schema := compileSchema(f, "lifecycle.schema.json", "")
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		if json.Unmarshal(b, &v) != nil || !json.Valid(b) || bytes.ContainsRune(b, 0) || hasDuplicateKeys(b) {
			return // not one JSON value the parser would take as a section
		}
		agreement(t, schema, b, true)
	})
}

// unreadable reports whether err says the description could not be read as
// a document at all, before any rule was checked.
func unreadable(err error) bool {
	var le *lifecycle.Error
	return errors.As(err, &le) && (le.Type == "malformed-description" || le.Type == "description-too-large")
}

// hasDuplicateKeys reports whether some object of the JSON value b names a
// member twice (the parser refuses such a document as malformed).
func hasDuplicateKeys(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	var walk func() bool
	walk = func() bool {
		tok, err := dec.Token()
		if err != nil {
			return true
		}
		switch tok {
		case json.Delim('{'):
			keys := map[string]bool{}
			for dec.More() {
				k, _ := dec.Token()
				ks, _ := k.(string)
				if keys[ks] || walk() {
					return true
				}
				keys[ks] = true
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if walk() {
					return true
				}
			}
			_, _ = dec.Token()
		}
		return false
	}
	return walk()
}

// sectionGen generates lifecycle sections: mostly well-formed members with
// valid values, each level sometimes null, of the wrong type, or with an
// unknown member, and values drawn from valid and invalid spellings.
type sectionGen struct{ r *rand.Rand }

func (g *sectionGen) pick(vs ...any) any { return vs[g.r.IntN(len(vs))] }

func (g *sectionGen) chance(p float64) bool { return g.r.Float64() < p }

// wrong returns a value of a wrong type for a mapping or a scalar.
func (g *sectionGen) wrong() any {
	return g.pick(nil, 1, 1.5, true, "text", []any{}, []any{"a"}, map[string]any{})
}

// members fills m with each member of gens with probability 0.6, adds an
// unknown member now and then, and returns m; sometimes it returns null or
// a value of the wrong type instead.
func (g *sectionGen) members(gens map[string]func() any, unknown ...string) any {
	switch {
	case g.chance(0.06):
		return nil
	case g.chance(0.04):
		return g.wrong()
	}
	m := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(gens)) {
		if g.chance(0.6) {
			m[k] = gens[k]()
		}
	}
	if len(unknown) > 0 && g.chance(0.05) {
		m[unknown[g.r.IntN(len(unknown))]] = g.pick(nil, 1, "x", true)
	}
	return m
}

func (g *sectionGen) section() any {
	return g.members(map[string]func() any{
		"upgrade":    g.upgrade,
		"rollback":   g.rollback,
		"parameters": g.parameters,
	}, "Upgrade", "rollbacks", "x-acme-extensions", "")
}

func (g *sectionGen) upgrade() any {
	return g.members(map[string]func() any{
		"minUpgradeFrom": g.version,
		"drain":          g.drain,
		"strategies":     g.strategies,
	}, "minUpgradeFom", "strategy")
}

func (g *sectionGen) drain() any {
	return g.members(map[string]func() any{
		"required":  func() any { return g.pick(true, false, nil, "true", "yes", 1) },
		"timeout":   g.duration,
		"onTimeout": func() any { return g.pick("abort", "proceed", "abort", nil, "", "Abort", "kill", 3) },
	}, "timeOut")
}

func (g *sectionGen) strategies() any {
	if g.chance(0.15) {
		return g.pick(nil, "recreate", [](any){}, 2, map[string]any{})
	}
	n := 1 + g.r.IntN(3)
	if g.chance(0.05) {
		n = 9 + g.r.IntN(3) // beyond the 8 allowed
	}
	l := make([]any, 0, n)
	for range n {
		if g.chance(0.9) {
			l = append(l, g.pick("recreate", "blueGreen"))
		} else {
			l = append(l, g.pick("BlueGreen", "rolling", "", 5, nil))
		}
	}
	if g.chance(0.5) { // most lists without repetition
		l = slices.CompactFunc(l, func(a, b any) bool { return a == b })
		if len(l) == 2 && l[0] == l[1] {
			l = l[:1]
		}
	}
	return l
}

func (g *sectionGen) rollback() any {
	return g.members(map[string]func() any{
		"allowed":    func() any { return g.pick(true, false, nil, "true", 0) },
		"minVersion": g.version,
		"window":     g.duration,
		"reason": func() any {
			return g.pick("2.0 migrates the schema", "", nil, 12, strings.Repeat("é", 1024), strings.Repeat("x", 1025), strings.Repeat("€", 1025))
		},
	}, "allow", "windowEnd")
}

func (g *sectionGen) parameters() any {
	if g.chance(0.1) {
		return g.pick(nil, "greeting", []any{"greeting"}, 1)
	}
	m := map[string]any{}
	for _, name := range []string{"greeting", "logLevel", "nope", ""} {
		if (name == "nope" || name == "") && !g.chance(0.08) {
			continue
		}
		if g.chance(0.6) {
			m[name] = g.members(map[string]func() any{
				"onUpgrade": func() any { return g.pick("keep", "reset", "reset", nil, "", "Reset", 1) },
			}, "onupgrade", "immutable")
		}
	}
	return m
}

// version draws from valid versions (below, at and above 2.0.0) and
// invalid spellings, numbers included.
func (g *sectionGen) version() any {
	return g.pick(
		"1.5.0", "1.5", "1", "0.9.0-rc.1", "1.5.0-0", "1.8.0", "2.0.0-rc.1", "1.0.0-alpha.beta-1.2",
		"2.0.0", "2.0", "2.1", "3.0.0-beta.2", "18446744073709551615.0.0",
		"99999999999999999999.0.0", "1.0.0-99999999999999999999", "1.18446744073709551616",
		"v1.5.0", "1.5.0+b1", "01.5", "1.0.0.0", "", "latest", " 1.0", "1.2.3-", "1.2.3-rc..1", "1.2.3-rc.01",
		"1.0.0-"+strings.Repeat("a", 123), "1.0.0-"+strings.Repeat("a", 122), "1.2.3-ü",
		1.5, 2, true, nil, []any{"1.0"},
	)
}

// duration draws from durations in and out of range, Go's syntax in its
// corners, and invalid spellings.
func (g *sectionGen) duration() any {
	return g.pick(
		"90s", "10m", "1h30m", "72h", "+5m", "1.5h", ".5h", "1.h", "168h", "8760h", "1s", "10m0s", "2h45m30.5s",
		"1000000us", "1000µs", "1000000μs", "1000000000ns",
		"300ms", "0s", "0.5s", "169h", "9000h", "10000000000000000000h", "0h0m",
		"-5m", "0", "10", "1d", "10 m", "", "m", "5M", ".h", "1e3s", "+-5m",
		90, 1.5, true, nil,
	)
}

// TestRenderedExtensionsMatchSchema renders ApplicationDeployment documents
// for every operation, strategy and drain wfm publishes, and validates
// each spec.x-wfm-extensions against extension.schema.json#/$defs/deployment
// (the rendered golden files of the test data too). Objects that break the
// rules are refused, so the schema is not vacuous.
func TestRenderedExtensionsMatchSchema(t *testing.T) {
	schema := compileSchema(t, "extension.schema.json", "/$defs/deployment")
	root := compileSchema(t, "extension.schema.json", "")
	raw, err := os.ReadFile("internal/margo/testdata/lifecycle-2.0.yaml")
	require.NoError(t, err)
	parsed, err := margo.ParseDescription(raw, margo.MediaTypeYAML)
	require.NoError(t, err)
	d := parsed.Description
	extensionOf := func(doc []byte) any {
		var v struct {
			Spec map[string]any `yaml:"spec"`
		}
		require.NoError(t, yaml.Unmarshal(doc, &v))
		x, ok := v.Spec[margo.DeploymentExtensionMember]
		require.True(t, ok, "no spec.%s in\n%s", margo.DeploymentExtensionMember, doc)
		return instance(t, x)
	}
	drains := []*lifecycle.DrainPolicy{nil, {Required: true},
		{Required: false, Timeout: 90 * time.Second, OnTimeout: lifecycle.OnTimeoutProceed},
		{Required: true, Timeout: 168 * time.Hour, OnTimeout: lifecycle.OnTimeoutAbort}}
	rendered := 0
	for _, op := range []lifecycle.OperationKind{lifecycle.OperationInstall, lifecycle.OperationUpgrade, lifecycle.OperationReconfigure, lifecycle.OperationRollback} {
		for _, strategy := range []lifecycle.Strategy{"", lifecycle.StrategyRecreate, lifecycle.StrategyBlueGreen} {
			for _, drain := range drains {
				x := margo.Extension{Revision: 1 + rendered, Operation: op, Strategy: strategy, Drain: drain}
				if op != lifecycle.OperationInstall {
					x.FromVersion = lifecycle.MustParseVersion("1.5")
				}
				doc, err := margo.RenderDeployment(margo.DeploymentInput{
					DeploymentID: "0b6f3c2e-6a4d-4d8e-9d55-3f1f0c8e2a10", DeviceID: "edge-01",
					Description: d, Profile: d.DeploymentProfiles[0], Extension: x,
				})
				require.NoError(t, err)
				inst := extensionOf(doc)
				if err := schema.Validate(inst); err != nil {
					t.Errorf("rendered %+v breaks the schema: %v\n%s", x, err, doc)
				}
				require.NoError(t, root.Validate(inst), "the root schema accepts either object")
				rendered++
			}
		}
	}
	goldens, err := filepath.Glob("internal/margo/testdata/render-*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, goldens)
	for _, p := range goldens {
		doc, err := os.ReadFile(p)
		require.NoError(t, err)
		if !bytes.Contains(doc, []byte(margo.DeploymentExtensionMember)) {
			continue // Margo's own examples carry no extension
		}
		require.NoError(t, schema.Validate(extensionOf(doc)), p)
		rendered++
	}
	t.Logf("%d rendered extension objects valid", rendered)

	for _, bad := range []string{
		`{"revision":0,"operation":"install","toVersion":"1.0.0","strategy":"recreate"}`,
		`{"revision":1,"operation":"install","fromVersion":"0.9.0","toVersion":"1.0.0","strategy":"recreate"}`,
		`{"revision":2,"operation":"install","toVersion":"1.0.0","strategy":"recreate","drain":{"required":true,"timeout":"10m0s","onTimeout":"abort"}}`,
		`{"revision":2,"operation":"upgrade","toVersion":"2.0.0","strategy":"recreate"}`,
		`{"revision":2,"operation":"remove","fromVersion":"1.0.0","toVersion":"2.0.0","strategy":"recreate"}`,
		`{"revision":2,"operation":"upgrade","fromVersion":"1.0","toVersion":"2.0.0","strategy":"recreate"}`,
		`{"revision":2,"operation":"upgrade","fromVersion":"1.0.0","toVersion":"2.0.0","strategy":"rolling"}`,
		`{"revision":2,"operation":"upgrade","fromVersion":"1.0.0","toVersion":"2.0.0","strategy":"recreate","drain":{"required":true,"onTimeout":"abort"}}`,
		`{"revision":2,"operation":"upgrade","fromVersion":"1.0.0","toVersion":"2.0.0","strategy":"recreate","extra":1}`,
	} {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(bad))
		require.NoError(t, err)
		require.Error(t, schema.Validate(inst), "the schema accepts %s", bad)
	}
}

// TestStatusExtensionSchemaAgreesWithParser generates x-wfm-extensions
// objects of status reports (valid members, wrong types, numbers at and
// beyond their bounds, unknown members) and checks that wfm's status report
// parser and extension.schema.json#/$defs/status accept and refuse the same
// ones. There is no listed difference here.
func TestStatusExtensionSchemaAgreesWithParser(t *testing.T) {
	schema := compileSchema(t, "extension.schema.json", "/$defs/status")
	r := rand.New(rand.NewPCG(6, 2026))
	pick := func(vs ...string) string { return vs[r.IntN(len(vs))] }
	member := map[string]func() string{
		"phase": func() string {
			return pick(`"draining"`, `"drained"`, `"starting-new"`, `"verifying"`, `"switching"`, `"Draining"`, `""`, `1`, `null`)
		},
		"inFlight": func() string {
			return pick(`0`, `5`, `1e3`, `1.0`, `-0`, `9223372036854775807`, `-1`, `1.5`, `9223372036854775808`, `"3"`, `null`, `1e400`)
		},
		"healthy": func() string { return pick(`true`, `false`, `null`, `"true"`, `0`) },
		"message": func() string {
			return pick(`"draining 3 jobs"`, `""`, `"`+strings.Repeat("é", 1024)+`"`, `"`+strings.Repeat("x", 1025)+`"`, `1`, `null`, `["a"]`)
		},
	}
	const n = 3000
	accepted := 0
	for range n {
		var ext string
		switch {
		case r.Float64() < 0.03:
			ext = pick(`null`, `[]`, `"draining"`, `1`)
		default:
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(member)) {
				if r.Float64() < 0.5 {
					parts = append(parts, `"`+k+`":`+member[k]())
				}
			}
			if r.Float64() < 0.05 {
				parts = append(parts, pick(`"stage":"draining"`, `"x-acme":{}`))
			}
			ext = "{" + strings.Join(parts, ",") + "}"
		}
		report := `{"deploymentId":"d1","adoptedManifestVersion":1,"status":{"state":"installed"},` +
			`"components":[{"name":"c","state":"installed"}],"x-wfm-extensions":` + ext + `}`
		_, perr := margo.ParseStatusReport([]byte(report), "d1")
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(ext))
		require.NoError(t, err)
		serr := schema.Validate(inst)
		if (perr == nil) != (serr == nil) {
			t.Fatalf("x-wfm-extensions %s: wfm says %v, the schema says %v", ext, perr, serr)
		}
		if perr == nil {
			accepted++
		}
	}
	require.NotZero(t, accepted)
	require.NotEqual(t, n, accepted)
	t.Logf("%d of %d status extensions accepted by both", accepted, n)
}

// TestSchemasShareTheirSyntax keeps the two self-contained schemas in step:
// a duration is spelt the same in both, and a canonical version (the
// extension's) is a version of the lifecycle schema with all three numbers.
func TestSchemasShareTheirSyntax(t *testing.T) {
	defs := func(file string) map[string]map[string]any {
		raw, err := fs.ReadFile(wfm.Schemas, "schemas/"+file)
		require.NoError(t, err)
		var doc struct {
			Defs map[string]map[string]any `json:"$defs"`
		}
		require.NoError(t, json.Unmarshal(raw, &doc))
		return doc.Defs
	}
	lc, ext := defs("lifecycle.schema.json"), defs("extension.schema.json")
	require.Equal(t, lc["duration"]["pattern"], ext["duration"]["pattern"])
	require.Equal(t, lc["version"]["maxLength"], ext["canonicalVersion"]["maxLength"])
	canonical := regexp.MustCompile(ext["canonicalVersion"]["pattern"].(string))
	for _, v := range []string{"1.0.0", "2.0.0-rc.1", "0.0.0", "1.0.0-alpha.beta-1.2", "1.0", "1", "v1.0.0", "01.0.0", "1.0.0+b"} {
		want := versionSyntax(v) && strings.Count(strings.SplitN(v, "-", 2)[0], ".") == 2
		require.Equal(t, want, canonical.MatchString(v), v)
	}
}

// TestSUPNamesEveryField keeps the proposal and its schemas in step: the
// field table of docs/sup/lifecycle.md (section 3.3) names exactly the
// fields of lifecycle.schema.json, its device-facing tables (section 3.5)
// exactly the members of the two extension objects, and the contract's
// StatusExtension has the members of the status object.
func TestSUPNamesEveryField(t *testing.T) {
	raw, err := os.ReadFile("docs/sup/lifecycle.md")
	require.NoError(t, err)
	sup := string(raw)
	// tableNames returns the backticked first-column names of the table
	// rows between the heading start and the next heading of its level.
	tableNames := func(start string) []string {
		i := strings.Index(sup, "\n"+start+"\n")
		require.GreaterOrEqual(t, i, 0, "no heading %q", start)
		level := strings.SplitN(start, " ", 2)[0]
		rest := sup[i+len(start)+2:]
		if j := regexp.MustCompile(`\n#{2,` + strconv.Itoa(len(level)) + `} `).FindStringIndex(rest); j != nil {
			rest = rest[:j[0]]
		}
		var names []string
		for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(rest, -1) {
			names = append(names, m[1])
		}
		slices.Sort(names)
		return slices.Compact(names) // a name may have a row in more than one table
	}
	// fields returns the dotted property paths of a schema value, an
	// additionalProperties schema standing for <name>.
	var fields func(prefix string, s map[string]any, defs map[string]any) []string
	fields = func(prefix string, s map[string]any, defs map[string]any) []string {
		if ref, ok := s["$ref"].(string); ok {
			s = defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
		}
		for _, k := range []string{"anyOf", "oneOf"} {
			if alts, ok := s[k].([]any); ok {
				var out []string
				for _, a := range alts {
					out = append(out, fields(prefix, a.(map[string]any), defs)...)
				}
				return out
			}
		}
		var out []string
		if props, ok := s["properties"].(map[string]any); ok {
			for k, v := range props {
				out = append(out, prefix+k)
				out = append(out, fields(prefix+k+".", v.(map[string]any), defs)...)
			}
		}
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			out = append(out, fields(prefix+"<name>.", ap, defs)...)
		}
		return out
	}
	load := func(file string) map[string]any {
		b, err := fs.ReadFile(wfm.Schemas, "schemas/"+file)
		require.NoError(t, err)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(b, &doc))
		return doc
	}
	lc := load("lifecycle.schema.json")
	var want []string
	for _, f := range fields("", lc, lc["$defs"].(map[string]any)) {
		if strings.Contains(f, ".") { // the table lists the members of upgrade, rollback and parameters
			want = append(want, f)
		}
	}
	slices.Sort(want)
	require.Equal(t, want, tableNames("### 3.3 The `lifecycle` section, field by field"))

	ext := load("extension.schema.json")
	defs := ext["$defs"].(map[string]any)
	members := func(def string) []string {
		names := slices.Sorted(maps.Keys(defs[def].(map[string]any)["properties"].(map[string]any)))
		return names
	}
	require.Equal(t, members("deployment"), tableNames("#### In the ApplicationDeployment"))
	require.Equal(t, members("status"), tableNames("#### In the status report"))

	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	se := doc.Components.Schemas["StatusExtension"].Value
	require.Equal(t, members("status"), slices.Sorted(maps.Keys(se.Properties)))
	status := defs["status"].(map[string]any)["properties"].(map[string]any)
	require.ElementsMatch(t, status["phase"].(map[string]any)["enum"], se.Properties["phase"].Value.Enum)
	require.EqualValues(t, status["message"].(map[string]any)["maxLength"], *se.Properties["message"].Value.MaxLength)
}
