package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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

// TestServedRequestsAreLabelledByTheirRoute: the HTTP metrics label a
// request the server serves by the route pattern that serves it, also a HEAD
// answered as GET (the event stream's among them) and a CORS preflight
// answered before routing; "unmatched" is left to paths no route serves.
func TestServedRequestsAreLabelledByTheirRoute(t *testing.T) {
	pool := pgtest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	acc := access.NewService(postgres.NewAccessStore(pool), time.Now)
	_, err := acc.Bootstrap(t.Context(), adminToken)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	h, err := httpapi.NewHandler(httpapi.Config{Logger: log, Ready: func(context.Context) error { return nil }, Registry: reg,
		Catalog: cat, Fleet: fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log),
		Access: acc, DeviceIdentity: identity.HeaderIdentity{}.ClientIDFromRequest,
		Events:      httpapi.EventsConfig{Log: postgres.NewEventLog(pool)},
		CORSOrigins: []string{"https://console.example.com"}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	send := func(method, path string, header http.Header) int {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		req.Header = header
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	auth := http.Header{"Authorization": {"Bearer " + adminToken}}
	stream := http.Header{"Authorization": {"Bearer " + adminToken}, "Accept": {"text/event-stream"}}
	preflight := http.Header{"Origin": {"https://console.example.com"}, "Access-Control-Request-Method": {"POST"},
		"Access-Control-Request-Headers": {"authorization,content-type"}}
	tests := []struct {
		method, path string
		header       http.Header
		route        string
	}{
		{"HEAD", "/mgmt/v1/events", stream, "/mgmt/v1/events"},
		{"HEAD", "/mgmt/v1/events", auth, "/mgmt/v1/events"},
		{"HEAD", "/mgmt/v1/deployments", auth, "/mgmt/v1/deployments"},
		{"HEAD", "/healthz", nil, "/healthz"},
		{"HEAD", "/mgmt/v1/events?ticket=wfmt_nope", http.Header{"Accept": {"text/event-stream"}}, "/mgmt/v1/events"},
		{"HEAD", "/mgmt/v1/rollouts", nil, "/mgmt/v1/rollouts"},
		{"OPTIONS", "/mgmt/v1/deployments", preflight, "/mgmt/v1/deployments"},
		{"OPTIONS", "/mgmt/v1/rollouts/0b0e7c9a-1d7e-4a5e-9d7c-2f1e0c3b4a59/pause", preflight, "/mgmt/v1/rollouts/{rolloutId}/pause"},
		{"GET", "/no-such-path", nil, "unmatched"},
	}
	for _, tt := range tests {
		before := requestCounts(t, reg)
		status := send(tt.method, tt.path, tt.header)
		after := requestCounts(t, reg)
		var got []string
		for k, n := range after {
			if n > before[k] {
				got = append(got, k)
			}
		}
		assert.Equal(t, []string{tt.method + " " + tt.route}, got, "%s %s (answered %d) is counted under its route", tt.method, tt.path, status)
	}
}

// requestCounts returns wfm_http_requests_total by "method route".
func requestCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	counts := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "wfm_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			counts[labels["method"]+" "+labels["route"]] += m.GetCounter().GetValue()
		}
	}
	return counts
}
