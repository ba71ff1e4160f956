package wfm_test

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm"
)

// TestContractIsValid loads openapi.yaml as the server does and validates it,
// examples included: dangling refs, bad types, bad examples and undeclared
// path parameters all fail here.
func TestContractIsValid(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	require.Equal(t, "3.0.3", doc.OpenAPI)
	require.NoError(t, doc.Validate(t.Context(), openapi3.EnableExamplesValidation()))

	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			require.NotEmpty(t, op.OperationID, "%s %s has no operationId", method, path)
			require.NotEmpty(t, op.Summary, "%s %s has no summary", method, path)
			require.NotNil(t, op.Responses.Default(), "%s %s has no default (problem) response", method, path)
		}
	}
}

// TestContractBoundsEveryInput walks every schema a request can carry
// (parameters and request bodies, through their references) and requires a bound on each string (maxLength, enum or a fixed format), list
// (maxItems) and map (maxProperties), so that no request can carry an
// unbounded value past the validator. Raw documents that wfm parses itself
// (x-go-type json.RawMessage) are bounded by their parsers instead
// (internal/margo), and are skipped below their top level.
func TestContractBoundsEveryInput(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	seen := map[*openapi3.Schema]bool{}
	var problems []string
	var walk func(where string, ref *openapi3.SchemaRef)
	walk = func(where string, ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if goType, _ := s.Extensions["x-go-type"].(string); goType == "json.RawMessage" {
			return
		}
		switch {
		case s.Type.Is("string"):
			if s.MaxLength == nil && len(s.Enum) == 0 && s.Format != "date-time" && s.Format != "uuid" && s.Format != "binary" {
				problems = append(problems, where+": string without maxLength")
			}
		case s.Type.Is("array"):
			if s.MaxItems == nil {
				problems = append(problems, where+": array without maxItems")
			}
			walk(where+"[]", s.Items)
		case s.Type.Is("object"):
			if s.AdditionalProperties.Has != nil && *s.AdditionalProperties.Has || s.AdditionalProperties.Schema != nil {
				if s.MaxProps == nil {
					problems = append(problems, where+": map without maxProperties")
				}
			}
			walk(where+"{}", s.AdditionalProperties.Schema)
			for name, p := range s.Properties {
				walk(where+"."+name, p)
			}
		}
		for _, sub := range append(append(s.AllOf, s.AnyOf...), s.OneOf...) {
			walk(where, sub)
		}
	}
	for name, p := range doc.Components.Parameters {
		walk("parameter "+name, p.Value.Schema)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for _, p := range append(op.Parameters, item.Parameters...) {
				walk(method+" "+path+" "+p.Value.Name, p.Value.Schema)
			}
			if op.RequestBody != nil {
				for ct, mt := range op.RequestBody.Value.Content {
					walk(method+" "+path+" body "+ct, mt.Schema)
				}
			}
		}
	}
	require.Empty(t, problems, "unbounded inputs in openapi.yaml")
}

// TestEveryManagementOperationHasARole keeps authorization complete: an
// operation under /mgmt/ without x-wfm-role would be reachable by any
// token, so it fails here (and the server refuses to start).
func TestEveryManagementOperationHasARole(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			role, _ := op.Extensions["x-wfm-role"].(string)
			if strings.HasPrefix(path, "/mgmt/") {
				require.Contains(t, []string{"viewer", "operator", "admin"}, role, "%s %s", method, path)
				require.NotNil(t, op.Security, "%s %s declares no security", method, path)
			} else {
				require.Empty(t, role, "%s %s is not a management operation", method, path)
			}
		}
	}
}

// TestContractTagsFollowAUsersJourney keeps Swagger UI's sections (it shows
// the tags in the order of the top-level list) in the order a user meets
// them in the README's tour: the tags of the management operations the tour
// calls, in the order of the first call of each, then the others, and the
// device API last (another listener, not callable from the page; the tour's
// first mention of it is a hint printed by issue-client-cert). Every
// operation's tag is one of them, so no operation lands in an unordered
// section.
func TestContractTagsFollowAUsersJourney(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	var names []string
	for _, tag := range doc.Tags {
		names = append(names, tag.Name)
	}
	require.Equal(t, "device", names[len(names)-1], "the device API comes last")
	require.Contains(t, doc.Tags.Get("device").Description, "device listener", "the device tag says where it is served")

	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	tour := section(t, string(readme), "## The first ten minutes")
	first := map[string]int{} // tag -> offset of its first call in the tour
	for path, item := range doc.Paths.Map() {
		// A template's parameters match the tour's placeholders (<deployment-id>) and values.
		pattern := regexp.MustCompile(regexp.QuoteMeta(path))
		pattern = regexp.MustCompile(regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllString(pattern.String(), `[^/?"\s]+`) + `(?:[?"\s]|$)`)
		for method, op := range item.Operations() {
			require.Len(t, op.Tags, 1, "%s %s", method, path)
			require.Contains(t, names, op.Tags[0], "%s %s", method, path)
			if strings.HasPrefix(path, "/api/") {
				require.Equal(t, "device", op.Tags[0], "%s %s", method, path)
				continue
			}
			if loc := pattern.FindStringIndex(tour); loc != nil {
				if at, ok := first[op.Tags[0]]; !ok || loc[0] < at {
					first[op.Tags[0]] = loc[0]
				}
			}
		}
	}
	toured := slices.Collect(maps.Keys(first))
	slices.SortFunc(toured, func(a, b string) int { return first[a] - first[b] })
	require.GreaterOrEqual(t, len(toured), 5, "the tour calls operations of at least five tags: %v", toured)
	require.Equal(t, toured, names[:len(toured)], "the tags the tour calls, in the order of its first call of each, come first")
}

// section returns the part of a Markdown document from heading to the next
// heading of the same level.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	start := strings.Index(doc, heading+"\n")
	require.GreaterOrEqual(t, start, 0, "no section %q", heading)
	level := heading[:strings.IndexByte(heading, ' ')+1]
	rest := doc[start+len(heading):]
	if end := strings.Index(rest, "\n"+level); end >= 0 {
		rest = rest[:end]
	}
	return rest
}
