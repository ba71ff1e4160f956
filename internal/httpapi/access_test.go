package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm"
	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/sdk"
)

// pathValues fills path parameters with well-formed values.
var pathValues = map[string]string{
	"applicationId": "app", "version": "1.0.0", "clientId": "c1", "deviceId": "d1",
	"deploymentId": "00000000-0000-4000-8000-000000000000", "revision": "1", "tokenId": "abc",
	"operationId": "00000000-0000-4000-8000-000000000001", "rolloutId": "00000000-0000-4000-8000-000000000002",
	"webhookId": "00000000-0000-4000-8000-000000000003", "deliveryId": "1",
}

// TestEveryManagementOperationEnforcesItsRole walks every management
// operation of openapi.yaml with no token, malformed, unknown, expired and
// revoked tokens, and a token of each role. Anything but a valid token gets
// 401; a role below the operation's x-wfm-role gets 403 naming the role; a
// role at or above it gets through to the operation (neither 401 nor 403).
// A new operation is covered as soon as it is in the contract.
func TestEveryManagementOperationEnforcesItsRole(t *testing.T) {
	pool := pgtest.New(t)
	srv := newTestServerOn(t, pool, func(context.Context) error { return nil })
	ctx := t.Context()
	admin := clientAs(t, srv.URL, adminToken)
	tokens := map[access.Role]string{}
	for _, r := range []access.Role{access.Viewer, access.Operator, access.Admin} {
		res, err := admin.CreateTokenWithResponse(ctx, sdk.CreateTokenRequest{Name: string(r) + " token", Role: sdk.Role(r)})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
		tokens[r] = res.JSON201.Secret
	}
	store := postgres.NewAccessStore(pool)
	id, expired := access.NewSecret()
	require.NoError(t, store.InsertToken(ctx, access.Token{ID: id, Name: "expired", Role: access.Admin, CreatedAt: time.Now().Add(-2 * time.Hour),
		ExpiresAt: time.Now().Add(-time.Hour)}, access.Hash(expired)))
	rev, err := admin.CreateTokenWithResponse(ctx, sdk.CreateTokenRequest{Name: "revoked", Role: "admin"})
	require.NoError(t, err)
	revoked := rev.JSON201.Secret
	_, err = admin.RevokeTokenWithResponse(ctx, rev.JSON201.Token.Id)
	require.NoError(t, err)

	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	var paths []string
	for p := range doc.Paths.Map() {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	checked := 0
	for _, path := range paths {
		if !strings.HasPrefix(path, "/mgmt/") {
			continue
		}
		for method, op := range doc.Paths.Value(path).Operations() {
			need := access.Role(op.Extensions["x-wfm-role"].(string))
			url := srv.URL + path
			for name, v := range pathValues {
				url = strings.ReplaceAll(url, "{"+name+"}", v)
			}
			require.NotContains(t, url, "{", "%s %s: add its path parameter to pathValues", method, path)
			body, ct := "", ""
			if op.RequestBody != nil {
				if op.RequestBody.Value.Content.Get("application/json") != nil {
					body, ct = "{}", "application/json"
				} else {
					body, ct = "a: b\n", "application/yaml"
				}
			}
			call := func(auth string) (int, string) {
				req, err := http.NewRequest(method, url, strings.NewReader(body))
				require.NoError(t, err)
				if ct != "" {
					req.Header.Set("Content-Type", ct)
				}
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				res, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				return res.StatusCode, string(b)
			}
			name := method + " " + path
			for label, auth := range map[string]string{
				"no token": "", "malformed": "Basic YWRtaW46YWRtaW4=", "unknown": "Bearer wfm_nosuchtoken0000_" + strings.Repeat("a", 52),
				"wrong secret": "Bearer " + tokens[access.Admin][:len(tokens[access.Admin])-4] + "aaaa", "expired": "Bearer " + expired,
				"revoked": "Bearer " + revoked,
			} {
				status, b := call(auth)
				assert.Equal(t, http.StatusUnauthorized, status, "%s with %s token: %s", name, label, b)
			}
			for role, secret := range tokens {
				status, b := call("Bearer " + secret)
				if role.Allows(need) {
					assert.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, status, "%s as %s (needs %s): %s", name, role, need, b)
				} else {
					assert.Equal(t, http.StatusForbidden, status, "%s as %s (needs %s): %s", name, role, need, b)
					assert.Contains(t, b, `"requiredRole":"`+string(need)+`"`)
				}
			}
			checked++
		}
	}
	assert.GreaterOrEqual(t, checked, 28, "every management operation was walked")
}

func TestAuditLogRecordsMutationsAndRefusals(t *testing.T) {
	pool := pgtest.New(t)
	srv := newTestServerOn(t, pool, func(context.Context) error { return nil })
	ctx := t.Context()
	admin := clientAs(t, srv.URL, adminToken)
	tok, err := admin.CreateTokenWithResponse(ctx, sdk.CreateTokenRequest{Name: "viewer", Role: "viewer"})
	require.NoError(t, err)
	viewer := clientAs(t, srv.URL, tok.JSON201.Secret)

	require.Equal(t, http.StatusCreated, postYAML(t, admin, minimal("audited", "1.0.0", "")).StatusCode())
	refused := postYAML(t, viewer, minimal("audited", "2.0.0", ""))
	require.Equal(t, http.StatusForbidden, refused.StatusCode())
	anon, err := http.Post(srv.URL+"/mgmt/v1/applications", "application/yaml", strings.NewReader("x"))
	require.NoError(t, err)
	anon.Body.Close()
	require.Equal(t, http.StatusUnauthorized, anon.StatusCode)
	assert.Equal(t, `Bearer realm="wfm"`, anon.Header.Get("WWW-Authenticate"))

	list, err := admin.ListAuditWithResponse(ctx, &sdk.ListAuditParams{Action: ptrTo("createApplicationVersion")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, list.StatusCode(), string(list.Body))
	require.Len(t, list.JSON200.Items, 2)
	newest, oldest := list.JSON200.Items[0], list.JSON200.Items[1]
	assert.Equal(t, "failure", string(newest.Outcome))
	assert.Equal(t, tok.JSON201.Token.Id, newest.Actor)
	assert.Equal(t, http.StatusForbidden, newest.Status)
	assert.Equal(t, "success", string(oldest.Outcome))
	assert.Equal(t, access.BootstrapID, oldest.Actor)
	assert.Equal(t, http.StatusCreated, oldest.Status)
	assert.NotEmpty(t, oldest.RequestId)

	all, err := admin.ListAuditWithResponse(ctx, &sdk.ListAuditParams{Actor: ptrTo("anonymous")})
	require.NoError(t, err)
	require.Len(t, all.JSON200.Items, 1)
	assert.Equal(t, http.StatusUnauthorized, all.JSON200.Items[0].Status)

	// The log is append-only, even for the database owner's application role.
	_, err = pool.Exec(ctx, `UPDATE audit_log SET outcome = 'success'`)
	assert.ErrorContains(t, err, "append-only")
	_, err = pool.Exec(ctx, `DELETE FROM audit_log`)
	assert.ErrorContains(t, err, "append-only")
}

func ptrTo[T any](v T) *T { return &v }

// TestUnknownMethodsAreRefusedFirst: a method the server implements nowhere
// is answered 405 before authentication, so it leaves no audit entry, is
// never echoed, and is labelled "other" in the metrics (a caller choosing
// methods must not grow either without end).
func TestUnknownMethodsAreRefusedFirst(t *testing.T) {
	srv := newTestServer(t, func(context.Context) error { return nil })
	admin := clientAs(t, srv.URL, adminToken)
	method := "M" + strings.Repeat("Q", 2000)
	for _, path := range []string{"/mgmt/v1/applications", "/healthz", "/schemas/lifecycle.schema.json"} {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, path)
		assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"), path)
		assert.NotEmpty(t, res.Header.Get("Allow"), path)
		assert.NotContains(t, string(body), "QQQQ", "%s: the method is not echoed", path)
	}
	all, err := admin.ListAuditWithResponse(t.Context(), &sdk.ListAuditParams{Actor: ptrTo("anonymous")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, all.StatusCode(), string(all.Body))
	assert.Empty(t, all.JSON200.Items, "no audit entry")
	res, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	m, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.NotContains(t, string(m), "QQQQ")
	assert.Contains(t, string(m), `method="other"`)
}
