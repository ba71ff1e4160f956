package wfm_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm"
)

// What Swagger UI shows of the contract: under each status, the example of
// its response (without one, it builds a sample from the schema, the same
// for every status); for the device API, which this page cannot call, how
// to call it.

// problemExamples returns the examples of a response's problem media type,
// by name ("" for a single example).
func problemExamples(r *openapi3.Response) map[string]any {
	mt := r.Content.Get("application/problem+json")
	if mt == nil {
		return nil
	}
	out := map[string]any{}
	if mt.Example != nil {
		out[""] = mt.Example
	}
	for name, ex := range mt.Examples {
		out[name] = ex.Value.Value
	}
	return out
}

// TestContractShowsEachStatusItsOwnProblem: every error response of every
// operation has a problem example, the example under status S says status
// S (and the one under default a status the operation does not list), its
// instance is a path of the operation's API, and its type is documented: a wfm type has its anchor in docs/problems.md, a
// device API type is Margo's (invalid-request, not-authorized) or wfm's.
func TestContractShowsEachStatusItsOwnProblem(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	problemsDoc, err := os.ReadFile("docs/problems.md")
	require.NoError(t, err)
	const wfmTypes, margoTypes = "https://github.com/wfm-dev/wfm/blob/main/docs/problems.md#", "https://docs.margo.org/specification/problem-types#"
	var problems []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			listed := map[int]bool{}
			for code := range op.Responses.Map() {
				if s, err := strconv.Atoi(code); err == nil {
					listed[s] = true
				}
			}
			for code, ref := range op.Responses.Map() {
				s, _ := strconv.Atoi(code)
				if code != "default" && s < 400 {
					continue
				}
				where := fmt.Sprintf("%s %s %s", method, path, code)
				examples := problemExamples(ref.Value)
				if len(examples) == 0 {
					problems = append(problems, where+": no problem example (Swagger UI would make one up)")
				}
				for name, ex := range examples {
					m, ok := ex.(map[string]any)
					if !ok {
						problems = append(problems, fmt.Sprintf("%s example %q: not an object", where, name))
						continue
					}
					status, _ := m["status"].(float64)
					switch {
					case code == "default" && (status < 400 || listed[int(status)]):
						problems = append(problems, fmt.Sprintf("%s example %q: status %v is listed by the operation (or no error)", where, name, m["status"]))
					case code != "default" && int(status) != s:
						problems = append(problems, fmt.Sprintf("%s example %q: shows status %v", where, name, m["status"]))
					}
					// The example is of the operation's API (the device API's own
					// problems under /api/, the management API's under /mgmt/).
					instance, _ := m["instance"].(string)
					for _, api := range []string{"/api/v1/", "/mgmt/v1/"} {
						if code != "default" && strings.HasPrefix(path, api) && !strings.HasPrefix(instance, api) {
							problems = append(problems, fmt.Sprintf("%s example %q: instance %q is not of the %s API", where, name, instance, api))
						}
					}
					typ, _ := m["type"].(string)
					switch {
					case strings.HasPrefix(typ, wfmTypes):
						if !strings.Contains(string(problemsDoc), `id="`+strings.TrimPrefix(typ, wfmTypes)+`"`) {
							problems = append(problems, fmt.Sprintf("%s example %q: type %s is not in docs/problems.md", where, name, typ))
						}
					case strings.HasPrefix(typ, margoTypes) && strings.HasPrefix(path, "/api/"):
					default:
						problems = append(problems, fmt.Sprintf("%s example %q: type %q is neither wfm's nor (on the device API) Margo's", where, name, typ))
					}
				}
			}
		}
	}
	require.Empty(t, problems)
}

// TestContractSaysHowToCallTheDeviceAPI: each device API operation (served
// on the mTLS listener, not the one serving Swagger UI) says how to call it:
// a curl with the client certificate, at the device listener, for its own
// method and path.
func TestContractSaysHowToCallTheDeviceAPI(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	curl := regexp.MustCompile(`curl --cacert \S+ --cert \S+ --key \S+ ((?:-X (?:PUT|DELETE) |-H '[^']+' |--data-binary @\S+ |--json @\S+ |-o \S+ )*)\\\n\s*https://127\.0\.0\.1:8443(/api/v1/\S+)`)
	placeholder := regexp.MustCompile(`\\\{[^}]+\\\}`) // a path parameter, quoted by regexp.QuoteMeta
	n := 0
	for path, item := range doc.Paths.Map() {
		if !strings.HasPrefix(path, "/api/") {
			continue
		}
		for method, op := range item.Operations() {
			n++
			require.Contains(t, op.Description, `"Try it out" is off`, "%s %s", method, path)
			m := curl.FindStringSubmatch(op.Description)
			require.NotNil(t, m, "%s %s has no curl with a client certificate at the device listener:\n%s", method, path, op.Description)
			flags, called := m[1], m[2]
			shape := "^" + placeholder.ReplaceAllString(regexp.QuoteMeta(path), "[^/]+") + "$"
			require.Regexp(t, shape, called, "%s %s: the curl calls %s", method, path, called)
			switch method {
			case "GET":
				require.NotContains(t, flags, "-X", "%s %s", method, path)
			case "POST":
				require.Contains(t, flags, "--json @", "%s %s", method, path)
			default:
				require.Contains(t, flags, "-X "+method, "%s %s", method, path)
			}
		}
	}
	require.Equal(t, 6, n, "device API operations")
}
