package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm"
	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/buildinfo"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/sdk"
)

// newTestServer serves the real handler (router, middleware, validator) with
// the given readiness function.
func newTestServer(t *testing.T, ready func(context.Context) error) *httptest.Server {
	t.Helper()
	return newTestServerOn(t, pgtest.New(t), ready)
}

// newTestServerOn is newTestServer on a given database; each configure
// sees the fleet service before it serves.
func newTestServerOn(t *testing.T, pool *pgxpool.Pool, ready func(context.Context) error, configure ...func(*fleet.Service)) *httptest.Server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	acc := access.NewService(postgres.NewAccessStore(pool), time.Now)
	_, err := acc.Bootstrap(t.Context(), adminToken)
	require.NoError(t, err)
	fl := fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log)
	for _, c := range configure {
		c(fl)
	}
	h, err := httpapi.NewHandler(httpapi.Config{
		Logger:         log,
		Ready:          ready,
		Registry:       prometheus.NewRegistry(),
		Catalog:        cat,
		Fleet:          fl,
		Access:         acc,
		DeviceIdentity: identity.HeaderIdentity{}.ClientIDFromRequest,
	})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// adminToken is the bootstrap admin token of every test server.
const adminToken = "test-admin-token-0123456789"

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// adminHTTP is an HTTP client that calls as the bootstrap admin.
var adminHTTP = &http.Client{Transport: bearer{token: adminToken, next: http.DefaultTransport}}

// clientAs returns a generated client calling base with token.
func clientAs(t *testing.T, base, token string) *sdk.ClientWithResponses {
	t.Helper()
	c, err := sdk.NewClientWithResponses(base, sdk.WithHTTPClient(&http.Client{Transport: bearer{token: token, next: http.DefaultTransport}}))
	require.NoError(t, err)
	return c
}

// problemBody is what every error answer must look like.
type problemBody struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Instance  string `json:"instance"`
	RequestID string `json:"requestId"`
	Errors    []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

func readProblem(t *testing.T, res *http.Response, wantStatus int) problemBody {
	t.Helper()
	defer res.Body.Close()
	require.Equal(t, wantStatus, res.StatusCode)
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	var p problemBody
	require.NoError(t, json.NewDecoder(res.Body).Decode(&p))
	assert.Equal(t, wantStatus, p.Status, "status member")
	assert.NotEmpty(t, p.Title)
	assert.True(t, strings.HasPrefix(p.Type, httpapi.ProblemBase), "type %q in our namespace", p.Type)
	assert.NotEmpty(t, p.RequestID)
	assert.Equal(t, res.Header.Get("X-Request-Id"), p.RequestID)
	return p
}

func TestHealthAndReadyWithGeneratedClient(t *testing.T) {
	srv := newTestServer(t, func(context.Context) error { return nil })
	c := clientAs(t, srv.URL, adminToken)

	h, err := c.GetHealthWithResponse(t.Context())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, h.StatusCode())
	assert.Equal(t, "ok", h.JSON200.Status)
	assert.Equal(t, buildinfo.Read().Version, h.JSON200.Version, "the build's version")

	r, err := c.GetReadyWithResponse(t.Context())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.StatusCode())
	assert.Equal(t, "ready", string(r.JSON200.Status))
	assert.Nil(t, r.JSON200.Detail)
}

// TestNotReadyIsProblem: a server that cannot reach its database and
// serves nothing from memory (-manifest-stale-bound 0) is not ready, with
// a problem that shows no internals.
func TestNotReadyIsProblem(t *testing.T) {
	srv := newTestServerOn(t, pgtest.New(t), func(context.Context) error { return errors.New("dial tcp 127.0.0.1:5: connection refused") },
		func(s *fleet.Service) { s.SetManifestStaleBound(0) })
	res, err := http.Get(srv.URL + "/readyz")
	require.NoError(t, err)
	p := readProblem(t, res, http.StatusServiceUnavailable)
	assert.Equal(t, httpapi.ProblemBase+"not-ready", p.Type)
	assert.NotContains(t, p.Detail, "127.0.0.1", "no internals in the answer")
}

func TestRouterErrorsAreProblems(t *testing.T) {
	srv := newTestServer(t, func(context.Context) error { return nil })
	for _, tc := range []struct {
		method, path string
		status       int
		typ          string
		allow        string
	}{
		{"GET", "/no-such-path", http.StatusNotFound, "not-found", ""},
		{"GET", "/mgmt/v1/no-such-thing", http.StatusNotFound, "not-found", ""},
		{"DELETE", "/healthz", http.StatusMethodNotAllowed, "method-not-allowed", "GET"},
		{"POST", "/openapi.yaml", http.StatusMethodNotAllowed, "method-not-allowed", "GET"},
		{"DELETE", "/readyz", http.StatusMethodNotAllowed, "method-not-allowed", "HEAD"},
		{"HEAD", "/mgmt/v1/operations/x/cancel", http.StatusMethodNotAllowed, "", "POST"},
		// The router also takes "plan" for a rollout id (GET); the contract
		// does not, and Allow says what the contract takes.
		{"GET", "/mgmt/v1/rollouts/plan", http.StatusMethodNotAllowed, "method-not-allowed", "POST"},
		{"DELETE", "/mgmt/v1/rollouts/plan", http.StatusMethodNotAllowed, "method-not-allowed", "POST"},
	} {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			require.NoError(t, err)
			res, err := adminHTTP.Do(req)
			require.NoError(t, err)
			if tc.allow != "" {
				assert.Contains(t, res.Header.Values("Allow"), tc.allow)
				for _, m := range res.Header.Values("Allow") { // each listed method is taken
					if m != tc.allow && m != http.MethodHead && m != http.MethodOptions {
						req, err := http.NewRequest(m, srv.URL+tc.path, nil)
						require.NoError(t, err)
						r2, err := adminHTTP.Do(req)
						require.NoError(t, err)
						_ = r2.Body.Close()
						assert.NotEqual(t, http.StatusMethodNotAllowed, r2.StatusCode, "Allow lists %s", m)
					}
				}
			}
			if tc.method == http.MethodHead { // no body to read
				assert.Equal(t, tc.status, res.StatusCode)
				assert.NotContains(t, res.Header.Values("Allow"), "HEAD", "no GET here, so no HEAD")
				return
			}
			p := readProblem(t, res, tc.status)
			assert.Equal(t, httpapi.ProblemBase+tc.typ, p.Type)
			assert.Equal(t, tc.path, p.Instance)
		})
	}
}

// TestHeadIsGetWithoutBody: every path that takes GET takes HEAD (RFC 9110
// 9.3.2), answered with the status and headers GET gets and no body.
func TestHeadIsGetWithoutBody(t *testing.T) {
	srv := newTestServer(t, func(context.Context) error { return nil })
	for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml", "/mgmt/v1/applications", "/no-such-path", "/mgmt/v1/applications/a%2Fb", "/mgmt/v1/clients/c/devices/a%2Fb"} {
		t.Run(path, func(t *testing.T) {
			get := func(method string) (*http.Response, []byte) {
				req, err := http.NewRequest(method, srv.URL+path, nil)
				require.NoError(t, err)
				res, err := adminHTTP.Do(req)
				require.NoError(t, err)
				defer res.Body.Close()
				b, err := io.ReadAll(res.Body)
				require.NoError(t, err)
				return res, b
			}
			g, body := get(http.MethodGet)
			h, none := get(http.MethodHead)
			require.NotEmpty(t, body)
			assert.Empty(t, none)
			assert.Equal(t, g.StatusCode, h.StatusCode)
			for _, k := range []string{"Content-Type", "Cache-Control", "ETag"} {
				assert.Equal(t, g.Header.Get(k), h.Header.Get(k), k)
			}
		})
	}
}

func TestPanicIsInternalProblemWithoutInternals(t *testing.T) {
	srv := newTestServer(t, func(context.Context) error { panic("secret internal detail") })
	res, err := http.Get(srv.URL + "/readyz")
	require.NoError(t, err)
	p := readProblem(t, res, http.StatusInternalServerError)
	assert.Equal(t, httpapi.ProblemBase+"internal", p.Type)
	assert.NotContains(t, p.Detail, "secret")
}

func TestRequestIDIsEchoedOrReplaced(t *testing.T) {
	srv := newTestServer(t, func(context.Context) error { return nil })
	for _, tc := range []struct{ in, want string }{
		{"abc-123", "abc-123"},
		{"bad id with spaces", ""},
		{strings.Repeat("x", 200), ""},
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/healthz", nil)
		req.Header.Set("X-Request-Id", tc.in)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		got := res.Header.Get("X-Request-Id")
		if tc.want != "" {
			assert.Equal(t, tc.want, got)
		} else {
			assert.NotEqual(t, tc.in, got)
			assert.Len(t, got, 32)
		}
	}
}

func TestServesContractDocsAndMetrics(t *testing.T) {
	srv := newTestServer(t, func(context.Context) error { return nil })

	res, err := http.Get(srv.URL + "/openapi.yaml")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, wfm.OpenAPIYAML, body, "the contract byte for byte")

	res, err = http.Get(srv.URL + "/docs/")
	require.NoError(t, err)
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, string(body), "swagger-ui")
	assert.Contains(t, string(body), "/openapi.yaml")
	assert.NotContains(t, string(body), "cdn", "Swagger UI must be served from the binary")

	res, err = http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, string(body), `wfm_http_requests_total{method="GET",route="/docs/*",status="200"} 1`)
	assert.Contains(t, string(body), `route="/openapi.yaml"`)
}
