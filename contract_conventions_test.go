package wfm_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/wfm-dev/wfm"
)

// The contract conventions of design section 8, which keep generated
// clients (sdk/, sdk/ts) clean: an enumeration used in more than one place
// is a named component; each operation has one success shape (a dry run is
// its own operation); integers a JavaScript number would round say so.

// enumerations returns, for the YAML document b, the inline enumerations
// (any enum that is not a named component's own) by their sorted values,
// with where each appears, and the named components' enumerations by their
// sorted values.
func enumerations(t *testing.T, b []byte) (inline map[string][]string, named map[string]string) {
	t.Helper()
	var root yaml.Node
	require.NoError(t, yaml.Unmarshal(b, &root))
	inline, named = map[string][]string{}, map[string]string{}
	var walk func(n *yaml.Node, path []string)
	walk = func(n *yaml.Node, path []string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, append(path, fmt.Sprint(i)))
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i].Value, n.Content[i+1]
				if k == "enum" && v.Kind == yaml.SequenceNode {
					values := make([]string, len(v.Content))
					for j, c := range v.Content {
						values[j] = c.Value
					}
					slices.Sort(values)
					key := strings.Join(values, "|")
					if len(path) == 3 && path[0] == "components" && path[1] == "schemas" {
						named[key] = path[2]
					} else {
						inline[key] = append(inline[key], strings.Join(path, "."))
					}
					continue
				}
				walk(v, append(slices.Clone(path), k))
			}
		}
	}
	walk(&root, nil)
	return inline, named
}

// TestContractNamesEveryRepeatedEnumeration: no set of values is listed
// inline twice, nor inline when a named component lists it (use the
// component). Two places that take different subsets on purpose name each
// subset (OperationType, PlannedOperationType, RolloutAction).
func TestContractNamesEveryRepeatedEnumeration(t *testing.T) {
	inline, named := enumerations(t, wfm.OpenAPIYAML)
	var problems []string
	for _, key := range slices.Sorted(maps.Keys(inline)) {
		where := inline[key]
		switch {
		case named[key] != "":
			problems = append(problems, fmt.Sprintf("[%s] at %s: use the component %s", key, strings.Join(where, ", "), named[key]))
		case len(where) > 1:
			problems = append(problems, fmt.Sprintf("[%s] is listed %d times (%s): make it a named component", key, len(where), strings.Join(where, ", ")))
		}
	}
	require.Empty(t, problems)
}

// deprecatedDryRuns are the operations whose body member dryRun (deprecated,
// kept through wfm 0.2.x) turns their 202 into a 200 with a plan; each has
// its own plan operation, "<path>/plan".
var deprecatedDryRuns = []string{"upgradeDeployment", "reconfigureDeployment", "rollbackDeployment"}

// successShapes returns the schema references (or types) of op's 2xx answers.
func successShapes(op *openapi3.Operation) map[string]bool {
	shapes := map[string]bool{}
	for code, r := range op.Responses.Map() {
		if !strings.HasPrefix(code, "2") {
			continue
		}
		shape := "no body"
		for mt, c := range r.Value.Content {
			shape = mt + " " + c.Schema.Ref
			if c.Schema.Ref == "" {
				shape = mt + " " + fmt.Sprint(c.Schema.Value.Type)
			}
		}
		shapes[shape] = true
	}
	return shapes
}

// TestContractGivesEachOperationOneSuccessShape: every success answer of an
// operation has the same shape (201 created and 200 already there may both
// answer, with one schema), except the deprecated dry runs, each of which
// has a plan operation with the action's role and body and one success
// shape, and marks its dryRun member and its 200 answer deprecated.
func TestContractGivesEachOperationOneSuccessShape(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	var problems []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			shapes := successShapes(op)
			if !slices.Contains(deprecatedDryRuns, op.OperationID) {
				if len(shapes) > 1 {
					problems = append(problems, fmt.Sprintf("%s %s answers %d success shapes: %v", method, path, len(shapes), slices.Sorted(maps.Keys(shapes))))
				}
				continue
			}
			if r := op.Responses.Value("200"); r == nil || !strings.HasPrefix(*r.Value.Description, "Deprecated") {
				problems = append(problems, fmt.Sprintf("%s %s: its 200 (the dry run) must say it is deprecated", method, path))
			}
			body := op.RequestBody.Value.Content["application/json"].Schema
			if p := body.Value.Properties["dryRun"]; p == nil || !p.Value.Deprecated {
				problems = append(problems, fmt.Sprintf("%s %s: %s.dryRun must be deprecated: true", method, path, body.Ref))
			}
			plan := doc.Paths.Find(path + "/plan")
			if plan == nil || plan.Post == nil {
				problems = append(problems, fmt.Sprintf("%s %s has no plan operation POST %s/plan", method, path, path))
				continue
			}
			if got, want := plan.Post.Extensions["x-wfm-role"], op.Extensions["x-wfm-role"]; got != want {
				problems = append(problems, fmt.Sprintf("POST %s/plan needs role %v, its action %v", path, got, want))
			}
			if read, _ := plan.Post.Extensions["x-wfm-read"].(bool); !read {
				problems = append(problems, fmt.Sprintf("POST %s/plan changes nothing: x-wfm-read: true", path))
			}
			if got := plan.Post.RequestBody.Value.Content["application/json"].Schema.Ref; got != body.Ref {
				problems = append(problems, fmt.Sprintf("POST %s/plan takes %s, its action %s", path, got, body.Ref))
			}
			if got := slices.Sorted(maps.Keys(successShapes(plan.Post))); !slices.Equal(got, []string{"application/json #/components/schemas/Plan"}) {
				problems = append(problems, fmt.Sprintf("POST %s/plan answers %v, want one Plan", path, got))
			}
		}
	}
	slices.Sort(problems)
	require.Empty(t, problems)
}

// TestContractFlagsLargeIntegers: every 64-bit integer the contract carries
// (format int64, or x-go-type uint64) says in its description that a
// JavaScript number holds it exactly only up to 2^53-1.
func TestContractFlagsLargeIntegers(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	var problems []string
	seen := map[*openapi3.Schema]bool{}
	var check func(s *openapi3.SchemaRef, where string)
	check = func(s *openapi3.SchemaRef, where string) {
		if s == nil || s.Value == nil || seen[s.Value] {
			return
		}
		v := s.Value
		seen[v] = true
		if goType, _ := v.Extensions["x-go-type"].(string); v.Type.Is("integer") && (v.Format == "int64" || goType == "uint64") &&
			!strings.Contains(v.Description, "2^53") {
			problems = append(problems, where+": a 64-bit integer whose description does not say what a JavaScript client sees (2^53)")
		}
		for name, p := range v.Properties {
			check(p, where+"."+name)
		}
		check(v.Items, where+"[]")
		for i, a := range v.AllOf {
			check(a, fmt.Sprintf("%s.allOf[%d]", where, i))
		}
		for i, a := range v.OneOf {
			check(a, fmt.Sprintf("%s.oneOf[%d]", where, i))
		}
		if v.AdditionalProperties.Schema != nil {
			check(v.AdditionalProperties.Schema, where+".*")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Components.Schemas)) {
		check(doc.Components.Schemas[name], name)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for _, p := range append(slices.Clone(item.Parameters), op.Parameters...) {
				check(p.Value.Schema, method+" "+path+" "+p.Value.Name)
			}
		}
	}
	slices.Sort(problems)
	require.Empty(t, problems)
}
