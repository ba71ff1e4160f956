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
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// BenchmarkDevicePoll304 measures the device poll answered 304 from the
// manifest cache through the whole handler (router, middleware, identity,
// validation), with the development header identity so that TLS is not
// what is measured. Compare with BenchmarkBareHandler304 (design section 11:
// at least 50% of its rate).
func BenchmarkDevicePoll304(b *testing.B) {
	pool := pgtest.New(b)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	fl := fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log)
	acc := access.NewService(postgres.NewAccessStore(pool), time.Now)
	h, err := httpapi.NewHandler(httpapi.Config{Logger: log, Ready: func(context.Context) error { return nil },
		Registry: prometheus.NewRegistry(), Catalog: cat, Fleet: fl, Access: acc, DeviceIdentity: identity.HeaderIdentity{}.ClientIDFromRequest})
	require.NoError(b, err)
	_, device := httpapi.Split(h)
	req := httptest.NewRequest("GET", "/api/v1/deployments", nil)
	req.Header.Set(identity.DevHeader, "bench-client")
	w := httptest.NewRecorder()
	device.ServeHTTP(w, req)
	require.Equal(b, http.StatusOK, w.Code)
	req.Header.Set("If-None-Match", w.Header().Get("ETag"))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			device.ServeHTTP(w, req)
			if w.Code != http.StatusNotModified {
				b.Fatalf("status %d", w.Code)
			}
		}
	})
}

// BenchmarkBareHandler304 is the baseline: a net/http handler that answers a
// constant 304.
func BenchmarkBareHandler304(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"x"`)
		w.WriteHeader(http.StatusNotModified)
	})
	req := httptest.NewRequest("GET", "/api/v1/deployments", nil)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
		}
	})
}
