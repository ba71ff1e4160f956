package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
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
	// to check.
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
		assert.Equal(t, float64(404), problemOf(res, buf[:n])["status"])
	}
	res2, err := http.Get(e.mgmtURL + "/healthz")
	require.NoError(t, err)
	_ = res2.Body.Close()
	assert.Equal(t, http.StatusOK, res2.StatusCode)
}
