package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

const console = "https://console.example.com"

func alwaysReady(context.Context) error { return nil }

// corsHandlers are the management and device faces of a handler configured
// with origins.
func corsHandlers(t *testing.T, origins ...string) (mgmt, device http.Handler) {
	t.Helper()
	pool := pgtest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	acc := access.NewService(postgres.NewAccessStore(pool), time.Now)
	_, err := acc.Bootstrap(t.Context(), adminToken)
	require.NoError(t, err)
	h, err := httpapi.NewHandler(httpapi.Config{Logger: log, Ready: alwaysReady, Registry: prometheus.NewRegistry(), Catalog: cat,
		Fleet:  fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log),
		Access: acc, DeviceIdentity: identity.HeaderIdentity{}.ClientIDFromRequest, CORSOrigins: origins})
	require.NoError(t, err)
	return httpapi.Split(h)
}

// serve sends one request to h and returns the answer.
func serve(h http.Handler, method, path string, header map[string]string) *http.Response {
	r := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

// preflight is a browser's preflight of a POST with a bearer token, an
// idempotency key and a precondition, from origin.
func preflight(origin string) map[string]string {
	return map[string]string{"Origin": origin, "Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "authorization,content-type,idempotency-key,if-match"}
}

// assertNoCORS checks that an answer carries no CORS header at all.
func assertNoCORS(t *testing.T, res *http.Response, what string) {
	t.Helper()
	for k := range res.Header {
		assert.False(t, strings.HasPrefix(k, "Access-Control-"), "%s: header %s = %q", what, k, res.Header.Get(k))
	}
}

func TestCORSIsOffWithoutConfiguration(t *testing.T) {
	mgmt, _ := corsHandlers(t)
	res := serve(mgmt, http.MethodOptions, "/mgmt/v1/deployments", preflight(console))
	assertNoCORS(t, res, "preflight")
	readProblem(t, res, http.StatusUnauthorized) // as before CORS existed: a browser fails the preflight

	res = serve(mgmt, http.MethodGet, "/mgmt/v1/applications", map[string]string{"Origin": console, "Authorization": "Bearer " + adminToken})
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assertNoCORS(t, res, "GET")
}

func TestCORSAllowedOrigin(t *testing.T) {
	mgmt, _ := corsHandlers(t, console, "http://localhost:5173")

	res := serve(mgmt, http.MethodOptions, "/mgmt/v1/deployments", preflight(console))
	assert.Equal(t, http.StatusNoContent, res.StatusCode, "a preflight needs no token")
	assert.Equal(t, console, res.Header.Get("Access-Control-Allow-Origin"), "exact echo")
	assert.Contains(t, res.Header.Values("Vary"), "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
	assert.Contains(t, res.Header.Get("Access-Control-Allow-Methods"), "POST")
	assert.Equal(t, "authorization,content-type,idempotency-key,if-match", res.Header.Get("Access-Control-Allow-Headers"))
	assert.Equal(t, "600", res.Header.Get("Access-Control-Max-Age"))
	assert.Empty(t, res.Header.Get("Access-Control-Allow-Credentials"), "bearer tokens, no cookies")

	// Every header and method the management API reads is allowed.
	for _, c := range []struct{ method, headers string }{
		{"GET", "authorization,last-event-id"},
		{"GET", "authorization,if-none-match,x-request-id"},
		{"PATCH", "authorization,content-type,if-match"},
		{"PUT", "authorization,content-type,if-match"},
		{"DELETE", "authorization,if-match"},
	} {
		res := serve(mgmt, http.MethodOptions, "/mgmt/v1/events", map[string]string{"Origin": "http://localhost:5173",
			"Access-Control-Request-Method": c.method, "Access-Control-Request-Headers": c.headers})
		assert.Equal(t, "http://localhost:5173", res.Header.Get("Access-Control-Allow-Origin"), "preflight of %s with %s", c.method, c.headers)
		assert.Equal(t, c.method, res.Header.Get("Access-Control-Allow-Methods"), "preflight of %s", c.method)
	}

	// The actual request: the origin echoed, the headers the SDK reads exposed.
	res = serve(mgmt, http.MethodGet, "/mgmt/v1/applications", map[string]string{"Origin": console, "Authorization": "Bearer " + adminToken})
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, console, res.Header.Get("Access-Control-Allow-Origin"))
	assert.Contains(t, res.Header.Values("Vary"), "Origin")
	assert.Equal(t, "Etag, Location, Retry-After, X-Request-Id", res.Header.Get("Access-Control-Expose-Headers"))

	// A refusal is readable by the page too.
	res = serve(mgmt, http.MethodGet, "/mgmt/v1/applications", map[string]string{"Origin": console})
	assert.Equal(t, console, res.Header.Get("Access-Control-Allow-Origin"))
	readProblem(t, res, http.StatusUnauthorized)

	// An OPTIONS request that is not a preflight is not CORS's business.
	res = serve(mgmt, http.MethodOptions, "/mgmt/v1/deployments", map[string]string{"Origin": console, "Authorization": "Bearer " + adminToken})
	readProblem(t, res, http.StatusMethodNotAllowed)
}

func TestCORSRefusesOtherOrigins(t *testing.T) {
	mgmt, _ := corsHandlers(t, console)
	for _, origin := range []string{"https://evil.example.com", "http://console.example.com", "https://console.example.com:8443", "null"} {
		res := serve(mgmt, http.MethodOptions, "/mgmt/v1/deployments", preflight(origin))
		assert.Equal(t, http.StatusNoContent, res.StatusCode, "preflight from %s: answered, without CORS headers", origin)
		assert.Empty(t, res.Header.Get("Access-Control-Allow-Origin"), "preflight from %s", origin)
		assert.Empty(t, res.Header.Get("Access-Control-Allow-Methods"), "preflight from %s", origin)
		assert.Empty(t, res.Header.Get("Access-Control-Allow-Headers"), "preflight from %s", origin)

		res = serve(mgmt, http.MethodGet, "/mgmt/v1/applications", map[string]string{"Origin": origin, "Authorization": "Bearer " + adminToken})
		assert.Equal(t, http.StatusOK, res.StatusCode)
		assert.Empty(t, res.Header.Get("Access-Control-Allow-Origin"), "GET from %s", origin)
		assert.Empty(t, res.Header.Get("Access-Control-Expose-Headers"), "GET from %s", origin)
	}
	// A header the API does not read is not allowed.
	res := serve(mgmt, http.MethodOptions, "/mgmt/v1/deployments", map[string]string{"Origin": console,
		"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,x-evil"})
	assert.Equal(t, http.StatusNoContent, res.StatusCode)
	assert.Empty(t, res.Header.Get("Access-Control-Allow-Origin"))
	assert.Empty(t, res.Header.Get("Access-Control-Allow-Headers"))
	// Nor is a method the API does not serve.
	res = serve(mgmt, http.MethodOptions, "/mgmt/v1/deployments", map[string]string{"Origin": console, "Access-Control-Request-Method": "TRACE"})
	assert.Equal(t, http.StatusNoContent, res.StatusCode)
	assert.Empty(t, res.Header.Get("Access-Control-Allow-Origin"))
	assert.Empty(t, res.Header.Get("Access-Control-Allow-Methods"))
}

func TestCORSNeverOnTheDeviceListener(t *testing.T) {
	mgmt, device := corsHandlers(t, console)
	h := map[string]string{"Origin": console, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "x-wfm-client-id"}
	res := serve(device, http.MethodOptions, "/api/v1/deployments", h)
	assertNoCORS(t, res, "device preflight")
	assert.Equal(t, http.StatusForbidden, res.StatusCode, "no client identity")
	res = serve(device, http.MethodGet, "/api/v1/deployments", map[string]string{"Origin": console, "X-WFM-Client-ID": "plant-alfa"})
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assertNoCORS(t, res, "device GET")
	// Nor for the management face's other paths, or the device paths there.
	for _, p := range []string{"/api/v1/deployments", "/healthz", "/metrics"} {
		assertNoCORS(t, serve(mgmt, http.MethodGet, p, map[string]string{"Origin": console}), "GET "+p)
	}
}

func TestCORSOriginsAreChecked(t *testing.T) {
	for _, o := range []string{"https://console.example.com", "http://localhost:5173", "https://[::1]:8443", "http://127.0.0.1"} {
		assert.NoError(t, httpapi.CheckCORSOrigin(o), "CheckCORSOrigin(%q)", o)
	}
	for _, o := range []string{"", "*", "https://*.example.com", "console.example.com", "https://console.example.com/",
		"https://console.example.com/app", "ftp://console.example.com", "https://u:p@console.example.com", "null", "https://",
		"https://console.example.com?", "https://console.example.com#x", "https://:443"} {
		assert.Error(t, httpapi.CheckCORSOrigin(o), "CheckCORSOrigin(%q)", o)
	}
	_, err := httpapi.NewHandler(httpapi.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Ready: alwaysReady,
		Registry: prometheus.NewRegistry(), Catalog: &catalog.Service{}, Fleet: &fleet.Service{}, Access: &access.Service{},
		DeviceIdentity: identity.HeaderIdentity{}.ClientIDFromRequest, CORSOrigins: []string{"*"}})
	assert.Error(t, err, "NewHandler with CORS origin *")
}
