package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/sdk"
)

// snapshot digests every table but the audit log (which refusals append
// to) and the tokens' last use (which authenticating touches), so that a
// test can show that a refused call changed nothing.
func snapshot(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	ctx := t.Context()
	rows, err := pool.Query(ctx, `SELECT table_name FROM information_schema.tables
WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name NOT IN ('audit_log', 'goose_db_version')`)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		tables = append(tables, n)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, tables)
	out := map[string]string{}
	for _, n := range tables {
		var sum string
		require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(
			`SELECT md5(coalesce(string_agg(r, '|' ORDER BY r), '')) FROM (SELECT (to_jsonb(t) - 'last_used_at')::text AS r FROM %q t) x`, n)).Scan(&sum))
		out[n] = sum
	}
	return out
}

// auditRow finds the audit entry of a request by its id.
func auditRow(t *testing.T, pool *pgxpool.Pool, requestID string) (access.AuditEntry, bool) {
	t.Helper()
	es, err := postgres.NewAccessStore(pool).Audit(t.Context(), access.AuditFilter{}, 0, 500)
	require.NoError(t, err)
	for _, e := range es {
		if e.RequestID == requestID {
			return e, true
		}
	}
	return access.AuditEntry{}, false
}

// rawCall sends a request as the admin and returns the answer.
func rawCall(t *testing.T, method, url, contentType, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := adminHTTP.Do(req)
	require.NoError(t, err)
	return res
}

// inputEnv is a server with one application (versions 1.0.0 and 2.0.0), a
// client "plant" with device "edge" and a deployment upgraded from 1.0.0 to
// 2.0.0, so that every management operation has something to act on.
func inputEnv(t *testing.T) (*opsEnv, string) {
	t.Helper()
	e := newOpsEnv(t)
	dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")
	res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
	require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
	e.tick(t)
	dev.installAll()
	e.tick(t)
	require.Equal(t, "2.0.0", e.deployment(t, id).Version)
	return e, id
}

// TestUnstorableInputIsRefused sends a NUL (and other text PostgreSQL
// cannot store: invalid UTF-8, lone surrogates) in every kind of string a
// management operation takes: body members and keys, query parameters,
// path segments and headers. Each call gets a 400 problem, changes nothing,
// and a refused mutating call leaves its audit row.
func TestUnstorableInputIsRefused(t *testing.T) {
	e, id := inputEnv(t)
	ops, err := e.mgmt.ListOperationsWithResponse(t.Context(), &sdk.ListOperationsParams{})
	require.NoError(t, err)
	require.NotEmpty(t, ops.JSON200.Items)
	opID := ops.JSON200.Items[0].Id.String()
	const js = "application/json"
	cases := []struct {
		name, method, path, ct, body string
		header                       []string
		field                        string // the problem's errors[0].field
	}{
		{"token name", "POST", "/mgmt/v1/tokens", js, `{"name":"a\u0000b","role":"viewer"}`, nil, "/name"},
		{"token name, invalid UTF-8", "POST", "/mgmt/v1/tokens", js, "{\"name\":\"a\xffb\",\"role\":\"viewer\"}", nil, ""},
		{"token name, lone surrogate", "POST", "/mgmt/v1/tokens", js, `{"name":"a\ud800b","role":"viewer"}`, nil, "/name"},
		{"create parameter value", "POST", "/mgmt/v1/deployments", js,
			`{"applicationId":"svc","version":"1.0.0","clientId":"plant","deviceId":"edge","parameters":{"greeting":"a\u0000"}}`, nil, "/parameters/greeting"},
		{"upgrade parameter value", "POST", "/mgmt/v1/deployments/" + id + "/upgrade", js,
			`{"targetVersion":"2.0.0","parameters":{"greeting":"x\u0000"}}`, nil, "/parameters/greeting"},
		{"reconfigure parameter value", "POST", "/mgmt/v1/deployments/" + id + "/reconfigure", js,
			`{"parameters":{"greeting":"x\u0000"}}`, nil, "/parameters/greeting"},
		{"reconfigure parameter name", "POST", "/mgmt/v1/deployments/" + id + "/reconfigure", js,
			`{"parameters":{"gree\u0000ting":"x"}}`, nil, "/parameters/gree\u0000ting"},
		{"forced rollback reason", "POST", "/mgmt/v1/deployments/" + id + "/rollback", js,
			`{"force":true,"reason":"because\u0000"}`, nil, "/reason"},
		{"label value", "PUT", "/mgmt/v1/clients/plant/devices/edge/labels", js, `{"labels":{"site":"a\u0000"}}`, nil, "/labels/site"},
		{"label key", "PUT", "/mgmt/v1/clients/plant/devices/edge/labels", js, `{"labels":{"si\u0000te":"a"}}`, nil, "/labels/si\u0000te"},
		{"yank reason", "POST", "/mgmt/v1/applications/svc/versions/1.0.0/yank", js, `{"reason":"cve\u0000"}`, nil, "/reason"},
		{"client id", "POST", "/mgmt/v1/clients", js, `{"id":"a\u0000"}`, nil, "/id"},
		{"audit actor", "GET", "/mgmt/v1/audit?actor=%00", "", "", nil, "query/actor"},
		{"audit action", "GET", "/mgmt/v1/audit?action=x%00", "", "", nil, "query/action"},
		{"audit actor, invalid UTF-8", "GET", "/mgmt/v1/audit?actor=%ff", "", "", nil, "query/actor"},
		{"deployment label selector", "GET", "/mgmt/v1/deployments?labelSelector=site%3D%00", "", "", nil, "query/labelSelector"},
		{"deployment client filter", "GET", "/mgmt/v1/deployments?clientId=a%00", "", "", nil, "query/clientId"},
		{"device label selector", "GET", "/mgmt/v1/devices?labelSelector=%00", "", "", nil, "query/labelSelector"},
		{"upgrade path from", "GET", "/mgmt/v1/applications/svc/upgrade-path?from=1.0%00&to=2.0.0", "", "", nil, "query/from"},
		{"operation filter", "GET", "/mgmt/v1/operations?deploymentId=%00", "", "", nil, "query/deploymentId"},
		{"query parameter name", "GET", "/mgmt/v1/tokens?a%00=1", "", "", nil, "query/a\u0000"},
		{"token id in path", "DELETE", "/mgmt/v1/tokens/a%00b", "", "", nil, "path/tokenId"},
		{"token id in path, invalid UTF-8", "DELETE", "/mgmt/v1/tokens/a%ffb", "", "", nil, "path/tokenId"},
		{"client id in path", "POST", "/mgmt/v1/clients/pl%00ant/retire", "", "", nil, "path/clientId"},
		{"device id in path", "GET", "/mgmt/v1/clients/plant/devices/ed%00ge", "", "", nil, "path/deviceId"},
		{"version in path", "DELETE", "/mgmt/v1/applications/svc/versions/1.0%00", "", "", nil, "path/version"},
		{"operation id in path", "POST", "/mgmt/v1/operations/" + opID + "%00/cancel", "", "", nil, "path/operationId"},
		{"idempotency key", "POST", "/mgmt/v1/tokens", js, `{"name":"fine","role":"viewer"}`, []string{"Idempotency-Key", "k\xff"}, "header/Idempotency-Key"},
		{"if-match", "DELETE", "/mgmt/v1/deployments/" + id, "", "", []string{"If-Match", "\"\xff\""}, "header/If-Match"},
		{"description", "POST", "/mgmt/v1/applications", "application/yaml",
			strings.Replace(string(describe("3.0.0", "")), "name: Service", `name: "Serv\0ice"`, 1), nil, ""},
		{"description, escaped as \\x00", "POST", "/mgmt/v1/applications", "application/yaml",
			strings.Replace(string(describe("3.0.0", "")), "name: Service", `name: "Serv\x00ice"`, 1), nil, ""},
		{"description, escaped as \\0", "POST", "/mgmt/v1/applications", "application/yaml",
			strings.Replace(string(describe("3.0.0", "")), "name: Service", `name: "Serv\0ice"`, 1), nil, ""},
		{"description, escaped as \\u0000", "POST", "/mgmt/v1/applications", "application/yaml",
			strings.Replace(string(describe("3.0.0", "")), "name: Service", `name: "Serv\u0000ice"`, 1), nil, ""},
		{"description, escaped as \\U00000000", "POST", "/mgmt/v1/applications", "application/yaml",
			strings.Replace(string(describe("3.0.0", "")), "name: Service", `name: "Serv\U00000000ice"`, 1), nil, ""},
		{"description, invalid UTF-8", "POST", "/mgmt/v1/applications", "application/yaml",
			strings.Replace(string(describe("3.0.0", "")), "name: Service", "name: Serv\xffice", 1), nil, ""},
		{"description as JSON", "POST", "/mgmt/v1/applications", js,
			`{"apiVersion":"v1","id":"svc","metadata":{"name":"S\u0000","version":"3.0.0"}}`, nil, "/metadata/name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot(t, e.pool)
			res := rawCall(t, c.method, e.url+c.path, c.ct, c.body, c.header...)
			p := readProblem(t, res, http.StatusBadRequest)
			assert.Equal(t, httpapi.ProblemBase+"invalid-text", p.Type, "%+v", p)
			if c.field != "" && assert.NotEmpty(t, p.Errors, "%+v", p) {
				assert.Equal(t, c.field, p.Errors[0].Field, "%+v", p)
			}
			assert.Equal(t, before, snapshot(t, e.pool), "nothing changed")
			if c.method != http.MethodGet {
				row, ok := auditRow(t, e.pool, p.RequestID)
				if assert.True(t, ok, "the refusal has its audit row") {
					assert.Equal(t, http.StatusBadRequest, row.Status)
					assert.Equal(t, "failure", row.Outcome)
				}
			}
		})
	}
}

// TestUnknownQueryParameterIsRefused: a query parameter an operation does
// not declare is a 400 naming it (a misspelt filter would otherwise list
// everything, or a misspelt flag of a change be ignored), and changes
// nothing; declared ones (and the event stream's ticket) pass.
func TestUnknownQueryParameterIsRefused(t *testing.T) {
	e, id := inputEnv(t)
	for _, c := range []struct{ method, path, field string }{
		{"GET", "/mgmt/v1/deployments?stat=failed", "query/stat"},
		{"GET", "/mgmt/v1/deployments?state=failed&limit=5&x=1&a=2", "query/a"},
		{"DELETE", "/mgmt/v1/deployments/" + id + "?force=true", "query/force"},
		{"GET", "/mgmt/v1/rollouts?cursor=&foo=", "query/foo"},
	} {
		before := snapshot(t, e.pool)
		res := rawCall(t, c.method, e.url+c.path, "", "")
		p := readProblem(t, res, http.StatusBadRequest)
		assert.Equal(t, httpapi.ProblemBase+"invalid-request", p.Type, "%s %s: %+v", c.method, c.path, p)
		if assert.NotEmpty(t, p.Errors, "%+v", p) {
			assert.Equal(t, c.field, p.Errors[0].Field, "%s %s", c.method, c.path)
		}
		assert.Equal(t, before, snapshot(t, e.pool), "nothing changed")
	}
	for _, path := range []string{"/mgmt/v1/deployments?state=failed&limit=5", "/mgmt/v1/events?limit=1&type=deployment."} {
		res := rawCall(t, "GET", e.url+path, "", "")
		_ = res.Body.Close()
		assert.Equal(t, http.StatusOK, res.StatusCode, path)
	}
}

// TestProbeReproductions are the issue's own reproductions.
func TestProbeReproductions(t *testing.T) {
	e, _ := inputEnv(t)
	before := snapshot(t, e.pool)
	res := rawCall(t, "POST", e.url+"/mgmt/v1/tokens", "application/json", `{"name":"a\u0000b","role":"viewer"}`)
	p := readProblem(t, res, http.StatusBadRequest)
	_, audited := auditRow(t, e.pool, p.RequestID)
	assert.True(t, audited)
	res = rawCall(t, "GET", e.url+"/mgmt/v1/audit?actor=%00", "", "")
	readProblem(t, res, http.StatusBadRequest)
	// An unauthenticated mutating call with a NUL in its path is audited too.
	req, err := http.NewRequestWithContext(t.Context(), "DELETE", e.url+"/mgmt/v1/tokens/%00", nil)
	require.NoError(t, err)
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	p = readProblem(t, res, http.StatusUnauthorized)
	row, audited := auditRow(t, e.pool, p.RequestID)
	if assert.True(t, audited, "the refusal has its audit row") {
		assert.Equal(t, "/mgmt/v1/tokens/\uFFFD", row.Target, "the NUL is replaced in the audit log")
	}
	// A token id that is not text is an unknown token, not a database error.
	for _, auth := range []string{"Bearer wfm_\xff_secret", "Bearer wfm_a\xffb_secret"} {
		req, err = http.NewRequestWithContext(t.Context(), "POST", e.url+"/mgmt/v1/tokens", strings.NewReader(`{"name":"x","role":"viewer"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", auth)
		res, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		readProblem(t, res, http.StatusUnauthorized)
	}
	assert.Equal(t, before, snapshot(t, e.pool))
}

// TestTrailingBytesAreRefused: a management JSON body is exactly one JSON
// value, as descriptions and device bodies already are.
func TestTrailingBytesAreRefused(t *testing.T) {
	e, _ := inputEnv(t)
	ctx := t.Context()
	for _, c := range []struct{ name, path, body string }{
		{"token", "/mgmt/v1/tokens", `{"name":"junk","role":"admin"}{"junk":`},
		{"token, second value", "/mgmt/v1/tokens", `{"name":"junk","role":"admin"} {}`},
		{"token, stray bracket", "/mgmt/v1/tokens", `{"name":"junk","role":"admin"}]`},
		{"deployment", "/mgmt/v1/deployments", `{"applicationId":"svc","version":"1.0.0","clientId":"plant","deviceId":"edge"}{"junk":`},
		{"client", "/mgmt/v1/clients", `{"id":"other"}x`},
		{"rollout", "/mgmt/v1/rollouts", `{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"target":{}}{"junk":`},
		{"rollout plan", "/mgmt/v1/rollouts/plan", `{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"target":{}} {}`}, // a read: not audited
		{"rollout abort", "/mgmt/v1/rollouts/00000000-0000-4000-8000-000000000001/abort", `{"revert":true}]`},
		{"upgrade plan", "/mgmt/v1/deployments/00000000-0000-4000-8000-000000000001/upgrade/plan", `{"targetVersion":"2.0.0"} {}`},
		{"reconfiguration plan", "/mgmt/v1/deployments/00000000-0000-4000-8000-000000000001/reconfigure/plan", `{"parameters":{}}x`},
		{"rollback plan", "/mgmt/v1/deployments/00000000-0000-4000-8000-000000000001/rollback/plan", `{"toRevision":1}]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot(t, e.pool)
			res := rawCall(t, "POST", e.url+c.path, "application/json", c.body)
			p := readProblem(t, res, http.StatusBadRequest)
			assert.Equal(t, httpapi.ProblemBase+"malformed", p.Type, "%+v", p)
			assert.Equal(t, before, snapshot(t, e.pool), "nothing created")
			_, audited := auditRow(t, e.pool, p.RequestID)
			assert.Equal(t, !strings.HasSuffix(c.path, "/plan"), audited, "audited unless a read")
		})
	}
	// Trailing white space is still one JSON value.
	res := rawCall(t, "POST", e.url+"/mgmt/v1/tokens", "application/json", "{\"name\":\"fine\",\"role\":\"viewer\"}\r\n\t ")
	res.Body.Close()
	assert.Equal(t, http.StatusCreated, res.StatusCode)
	ts, err := e.mgmt.ListTokensWithResponse(ctx, &sdk.ListTokensParams{})
	require.NoError(t, err)
	for _, tok := range ts.JSON200.Items {
		assert.NotEqual(t, "junk", tok.Name)
	}
}

// TestDuplicateMembersAreRefused: a management JSON body that names a
// member twice in one object is ambiguous (parsers disagree on which one
// counts): 400 malformed naming it, nothing created.
func TestDuplicateMembersAreRefused(t *testing.T) {
	e, _ := inputEnv(t)
	for _, c := range []struct{ name, path, body, field string }{
		{"token", "/mgmt/v1/tokens", `{"name":"dup","role":"viewer","role":"admin"}`, "/role"},
		{"deployment", "/mgmt/v1/deployments", `{"applicationId":"svc","version":"1.0.0","clientId":"plant","deviceId":"edge","deviceId":"other"}`, "/deviceId"},
		{"nested", "/mgmt/v1/rollouts", `{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0","targetVersion":"1.0.0"},"target":{}}`, "/upgrade/targetVersion"},
		{"in a list", "/mgmt/v1/rollouts", `{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"target":{},"waves":[{"size":{"percent":100}},{"size":{"count":1,"count":2}}]}`, "/waves/1/size/count"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot(t, e.pool)
			res := rawCall(t, "POST", e.url+c.path, "application/json", c.body)
			p := readProblem(t, res, http.StatusBadRequest)
			assert.Equal(t, httpapi.ProblemBase+"malformed", p.Type, "%+v", p)
			require.NotEmpty(t, p.Errors, "%+v", p)
			assert.Equal(t, c.field, p.Errors[0].Field)
			assert.Equal(t, before, snapshot(t, e.pool), "nothing created")
		})
	}
	// The same name in two objects is no duplicate.
	res := rawCall(t, "POST", e.url+"/mgmt/v1/rollouts/plan", "application/json",
		`{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"target":{},"waves":[{"size":{"count":1}},{"size":{"percent":100}}]}`)
	defer res.Body.Close()
	assert.NotEqual(t, http.StatusBadRequest, res.StatusCode)
}

// TestOversizedRolloutBodiesAreRefused: a rollout body over the
// management limit is refused (413 problem) and creates nothing.
func TestOversizedRolloutBodiesAreRefused(t *testing.T) {
	e, _ := inputEnv(t)
	big := `{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"target":{"labels":"` + strings.Repeat("a", 1<<20) + `"}}`
	for _, path := range []string{"/mgmt/v1/rollouts", "/mgmt/v1/rollouts/plan", "/mgmt/v1/rollouts/00000000-0000-4000-8000-000000000001/abort",
		"/mgmt/v1/deployments/00000000-0000-4000-8000-000000000001/upgrade/plan"} {
		t.Run(path, func(t *testing.T) {
			before := snapshot(t, e.pool)
			res := rawCall(t, "POST", e.url+path, "application/json", big)
			p := readProblem(t, res, http.StatusRequestEntityTooLarge)
			assert.NotEmpty(t, p.Type)
			assert.Equal(t, before, snapshot(t, e.pool), "nothing created")
		})
	}
}

// TestUnstorableDeviceInputIsRefused: the device API gets the same check
// (its bodies are kept whole by wholeBody; their parsers refuse trailing
// bytes themselves).
func TestUnstorableDeviceInputIsRefused(t *testing.T) {
	e := newFleetEnv(t, fleet.Policy{AcceptAll: true})
	dev := e.client(t, "plant")
	caps := strings.Replace(string(capabilities("edge", "compose")), `"Acme"`, `"Ac\u0000me"`, 1)
	require.Contains(t, caps, `\u0000`)
	res, body := dev.do("PUT", "/api/v1/capabilities/edge", []byte(caps))
	require.Equal(t, http.StatusBadRequest, res.StatusCode, string(body))
	assert.Contains(t, string(body), `"field":"/properties/vendor"`)
	// A deliberately bad request: sent past the Margo checker.
	req, err := http.NewRequestWithContext(t.Context(), "PUT", e.deviceURL+"/api/v1/capabilities/ed%00ge", strings.NewReader(string(capabilities("edge", "compose"))))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	raw, err := dev.http.Do(req)
	require.NoError(t, err)
	assert.Equal(t, httpapi.ProblemBase+"invalid-text", readProblem(t, raw, http.StatusBadRequest).Type)
	res, body = dev.do("PUT", "/api/v1/capabilities/edge", capabilities("edge", "compose"))
	require.Equal(t, http.StatusCreated, res.StatusCode, string(body))
}

// TestIntegersWithExponentOrFraction: JSON Schema's integer is the
// mathematical one, so 1e2 and 100.0 are integers the contract accepts, and
// the server takes them as 100; a number no Go type of the field can hold
// is a 422 naming the field, without the decoder's words; nothing is
// created by a refused call.
func TestIntegersWithExponentOrFraction(t *testing.T) {
	e, _ := inputEnv(t)
	plan := func(maxInFlight string) (int, string) {
		res := rawCall(t, "POST", e.url+"/mgmt/v1/rollouts/plan", "application/json",
			`{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"target":{},"maxInFlight":`+maxInFlight+`}`)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}
	want, _ := plan("100")
	require.Equal(t, http.StatusOK, want)
	for _, n := range []string{"1e2", "100.0", "1.0e2", "10000e-2"} {
		status, body := plan(n)
		assert.Equal(t, want, status, "maxInFlight %s: %s", n, body)
	}
	status, body := plan("1.5")
	assert.Equal(t, http.StatusUnprocessableEntity, status, body)

	for _, c := range []struct{ name, body, field string }{
		{"float beyond float64", `{"applicationId":"svc","version":"1.0.0","clientId":"plant","deviceId":"edge","parameters":{"interval":-1e999}}`, "/parameters/interval"},
		{"integer beyond int64", `{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"target":{},"maxInFlight":1e300}`, "/maxInFlight"},
		{"integer beyond float64", `{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"target":{},"maxInFlight":1e400}`, "/maxInFlight"},
		{"string field given a number beyond float64", `{"applicationId":1e400,"version":"1.0.0","clientId":"plant","deviceId":"edge"}`, "/applicationId"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot(t, e.pool)
			path := "/mgmt/v1/deployments"
			if strings.Contains(c.body, "maxInFlight") {
				path = "/mgmt/v1/rollouts"
			}
			res := rawCall(t, "POST", e.url+path, "application/json", c.body)
			p := readProblem(t, res, http.StatusUnprocessableEntity)
			assert.Equal(t, httpapi.ProblemBase+"invalid-request", p.Type, "%+v", p)
			require.NotEmpty(t, p.Errors, "%+v", p)
			assert.Equal(t, c.field, p.Errors[0].Field)
			for _, internal := range []string{"Go ", "float64", "int64", "struct", "unmarshal", "json.Number"} {
				assert.NotContains(t, p.Detail+p.Errors[0].Message, internal)
			}
			assert.Equal(t, before, snapshot(t, e.pool), "nothing created")
		})
	}
}

// TestTwoCredentialsAreRefused: a request carrying two Authorization
// headers is refused (400 naming the header) whatever their order, before
// either is used, and changes nothing.
func TestTwoCredentialsAreRefused(t *testing.T) {
	e, _ := inputEnv(t)
	for _, order := range [][]string{{"Bearer " + adminToken, "Bearer nope"}, {"Bearer nope", "Bearer " + adminToken}} {
		before := snapshot(t, e.pool)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+"/mgmt/v1/tokens", strings.NewReader(`{"name":"two","role":"admin"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		for _, a := range order {
			req.Header.Add("Authorization", a)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		p := readProblem(t, res, http.StatusBadRequest)
		require.NotEmpty(t, p.Errors)
		assert.Equal(t, "header/Authorization", p.Errors[0].Field)
		assert.Equal(t, before, snapshot(t, e.pool), "nothing created")
	}
}

// TestBodylessOperationsRefuseABody: an operation that declares no body
// (DELETE of a token, a rollout's pause) refuses a body with anything in it
// (400 naming the body), whatever its Content-Type, and changes nothing; an
// empty body or {} is taken as none.
func TestBodylessOperationsRefuseABody(t *testing.T) {
	e, _ := inputEnv(t)
	c := clientAs(t, e.url, adminToken)
	tok, err := c.CreateTokenWithResponse(t.Context(), sdk.CreateTokenJSONRequestBody{Name: "victim", Role: "viewer"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, tok.StatusCode(), string(tok.Body))
	path := "/mgmt/v1/tokens/" + tok.JSON201.Token.Id
	for _, b := range []struct{ contentType, body string }{
		{"application/json", `{"x":"\u0000"}{"junk":`},
		{"application/json", `{"a":1}`},
		{"text/plain", "garbage{{{"},
		{"", "x"},
	} {
		before := snapshot(t, e.pool)
		res := rawCall(t, http.MethodDelete, e.url+path, b.contentType, b.body)
		p := readProblem(t, res, http.StatusBadRequest)
		require.NotEmpty(t, p.Errors, "%+v", p)
		assert.Equal(t, "body", p.Errors[0].Field)
		assert.Equal(t, before, snapshot(t, e.pool), "%q: nothing changed", b.body)
	}
	res := rawCall(t, http.MethodDelete, e.url+path, "application/json", " {} ")
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode, "{} is no body")
}

// TestRefusalsSayNumbersAndPlacesPlainly: a bound is written as the
// integer it is (not 2.147483647e+09), and bytes that are not UTF-8 in a
// JSON body are placed by the JSON pointer of the member holding them.
func TestRefusalsSayNumbersAndPlacesPlainly(t *testing.T) {
	e, _ := inputEnv(t)
	res := rawCall(t, "POST", e.url+"/mgmt/v1/deployments/00000000-0000-4000-8000-000000000001/rollback/plan", "application/json", `{"toRevision":3000000000}`)
	p := readProblem(t, res, http.StatusUnprocessableEntity)
	require.NotEmpty(t, p.Errors, "%+v", p)
	assert.Equal(t, "/toRevision", p.Errors[0].Field)
	assert.Contains(t, p.Errors[0].Message, "2147483647")
	assert.NotContains(t, p.Errors[0].Message, "e+09")

	res = rawCall(t, "POST", e.url+"/mgmt/v1/tokens", "application/json", "{\"name\":\"a\xffb\",\"role\":\"viewer\"}")
	p = readProblem(t, res, http.StatusBadRequest)
	require.NotEmpty(t, p.Errors, "%+v", p)
	assert.Equal(t, "/name", p.Errors[0].Field)
}
