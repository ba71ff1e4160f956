package wfm_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// durationPattern is the one documented duration string format of requests.
const durationPattern = `^([0-9]+(\.[0-9]+)?(h|m|s|ms|us|ns))+$`

// TestContractStatesEveryDurationRange keeps openapi.yaml and the range
// table of internal/lifecycle from drifting apart: every schema member that
// is a duration names its field in x-wfm-duration, states that field's range
// in its description exactly as lifecycle.DurationRangeOf says it, and, in a
// request (a request body or an operation's parameter), carries the
// documented format (allOf the Duration schema, whose pattern is
// durationPattern); every field of the table appears.
func TestContractStatesEveryDurationRange(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	var problems []string
	seen := map[lifecycle.DurationField]bool{}
	check := func(s *openapi3.Schema, where string, request bool) {
		field, ok := s.Extensions["x-wfm-duration"].(string)
		if !ok {
			if strings.Contains(strings.ToLower(s.Description), "duration") && s.Type.Is("string") {
				problems = append(problems, where+": a duration without x-wfm-duration")
			}
			return
		}
		f := lifecycle.DurationField(field)
		if !slices.Contains(lifecycle.DurationFields(), f) {
			problems = append(problems, where+": x-wfm-duration names an unknown field "+field)
			return
		}
		seen[f] = true
		if r := lifecycle.DurationRangeOf(f).String(); !strings.Contains(s.Description, r) {
			problems = append(problems, where+": the description does not say "+r)
		}
		if request && (len(s.AllOf) != 1 || s.AllOf[0].Ref != "#/components/schemas/Duration") {
			problems = append(problems, where+": a request's duration must be allOf [$ref Duration], the one documented format")
		}
	}
	d := doc.Components.Schemas["Duration"]
	require.NotNil(t, d, "the Duration schema")
	require.Equal(t, durationPattern, d.Value.Pattern, "the Duration schema's pattern")
	for name, ref := range doc.Components.Schemas {
		for prop, p := range ref.Value.Properties {
			check(p.Value, name+"."+prop, strings.HasSuffix(name, "Request") || strings.HasSuffix(name, "Override"))
		}
	}
	// Parameters (a DELETE's timeout) are requests too.
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for _, p := range op.Parameters {
				if p.Value != nil && p.Value.Schema != nil && p.Value.Schema.Value != nil {
					check(p.Value.Schema.Value, method+" "+path+" ?"+p.Value.Name, true)
				}
			}
		}
	}
	for _, f := range lifecycle.DurationFields() {
		if !seen[f] {
			problems = append(problems, "no schema member states the range of "+string(f))
		}
	}
	slices.Sort(problems)
	require.Empty(t, problems)
}
