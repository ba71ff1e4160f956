package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
)

// TestSplitListeners: each listener of Split answers the other's paths with
// a 404 problem (and its request id), and serves its own paths and the
// health endpoints.
func TestSplitListeners(t *testing.T) {
	e := newFleetEnv(t, fleet.Policy{AcceptAll: true})
	dev := e.client(t, "plant-alfa")

	problemOf := func(res *http.Response, body []byte) map[string]any {
		t.Helper()
		assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
		assert.NotEmpty(t, res.Header.Get("X-Request-Id"))
		var p map[string]any
		require.NoError(t, json.Unmarshal(body, &p), string(body))
		return p
	}

	// raw sends a request to the device listener with the agent's
	// certificate, unchecked: these paths are not Margo operations.
	raw := func(p string) (*http.Response, []byte) {
		t.Helper()
		res, err := dev.http.Get(e.deviceURL + p)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, body
	}
	// The device listener: its API and health, no management path.
	res, body := dev.do("GET", "/api/v1/deployments", nil)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	for _, p := range []string{"/healthz", "/readyz"} {
		res, body = raw(p)
		assert.Equal(t, http.StatusOK, res.StatusCode, "%s on the device listener: %s", p, body)
	}
	for _, p := range []string{"/mgmt/v1/deployments", "/openapi.yaml", "/metrics"} {
		res, body = raw(p)
		require.Equal(t, http.StatusNotFound, res.StatusCode, "%s on the device listener: %s", p, body)
		assert.Equal(t, float64(404), problemOf(res, body)["status"])
	}

	// The management listener: no device API path, even with no identity
	// to check; the answer names the device listener (where Swagger UI's
	// "Try it out" or a curl at the wrong port should have gone).
	for _, p := range []string{"/api/v1/deployments", "/api/v1/capabilities/edge-01"} {
		req, err := http.NewRequest(http.MethodGet, e.mgmtURL+p, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var buf [4096]byte
		n, _ := res.Body.Read(buf[:])
		_ = res.Body.Close()
		require.Equal(t, http.StatusNotFound, res.StatusCode, "%s on the management listener: %s", p, buf[:n])
		pr := problemOf(res, buf[:n])
		assert.Equal(t, float64(404), pr["status"])
		assert.Equal(t, httpapi.ProblemBase+"wrong-listener", pr["type"])
		assert.Contains(t, pr["detail"], e.deviceURL+p, "the detail names the device listener")
		assert.Equal(t, e.deviceURL+p, pr["deviceApi"])
	}
	res2, err := http.Get(e.mgmtURL + "/healthz")
	require.NoError(t, err)
	_ = res2.Body.Close()
	assert.Equal(t, http.StatusOK, res2.StatusCode)
}

// TestSwaggerUIOffersNoTryItOutForTheDeviceAPI: the page Swagger UI serves
// wraps its per-operation hook (allowTryItOutFor) so that the device API's
// operations, which the page's listener does not serve, have no "Try it
// out" (checked in headless Chromium when it was written: the button is
// gone there and present on the management operations).
func TestSwaggerUIOffersNoTryItOutForTheDeviceAPI(t *testing.T) {
	mgmt, _ := corsHandlers(t)
	res := serve(mgmt, http.MethodGet, "/docs/", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	page := string(body)
	assert.Contains(t, page, "SwaggerUIBundle.plugins.DownloadUrl", "the default plugin stays")
	assert.Regexp(t, `allowTryItOutFor: function \(original\) \{\s*return function \(state, path, method\) \{\s*return path.indexOf\("/api/v1/"\) !== 0 && original\(state, path, method\);`, page)
}
