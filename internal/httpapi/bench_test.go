package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/margo"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// BenchmarkDevicePoll304 measures the device poll answered 304 from the
// manifest cache through the whole handler (router, middleware, identity,
// validation), with the development header identity so that TLS is not
// what is measured. Compare with BenchmarkBareHandler304 (design section 11:
// at least 50% of its rate).
func BenchmarkDevicePoll304(b *testing.B) { benchPoll304(b, false) }

// benchPoll304 measures the cached 304 poll through the device handler;
// lastSeen switches on the recording of device contacts (fleet.LastSeen).
func benchPoll304(b *testing.B, lastSeen bool) {
	pool := pgtest.New(b)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	store := postgres.NewFleetStore(pool, 0)
	fl := fleet.NewService(store, cat, fleet.Policy{AcceptAll: true}, time.Now, log)
	if lastSeen {
		fl.RecordLastSeen(fleet.NewLastSeen(store, time.Minute, time.Now, log))
	}
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

// BenchmarkCreateDeployment measures POST /mgmt/v1/deployments through the
// whole management handler (router, token, audit, idempotency, validation,
// service, store) with 16 concurrent requests, one new deployment per
// device, in the two shapes: b.N clients of one device each, and
// one client of b.N devices. It reports creations per second. Seeding (by
// SQL) is not timed. Run with a fixed count, e.g.
//
//	go test ./internal/httpapi/ -run '^$' -bench BenchmarkCreateDeployment -benchtime 2000x
func BenchmarkCreateDeployment(b *testing.B) {
	for _, shape := range []struct {
		name      string
		oneClient bool
	}{{"clients", false}, {"oneClient", true}} {
		b.Run(shape.name, func(b *testing.B) {
			pool := pgtest.New(b)
			ctx := context.Background()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
			fl := fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log)
			acc := access.NewService(postgres.NewAccessStore(pool), time.Now)
			_, err := acc.Bootstrap(ctx, adminToken)
			require.NoError(b, err)
			h, err := httpapi.NewHandler(httpapi.Config{Logger: log, Ready: func(context.Context) error { return nil },
				Registry: prometheus.NewRegistry(), Catalog: cat, Fleet: fl, Access: acc, Idempotency: postgres.NewAccessStore(pool),
				DeviceIdentity: identity.HeaderIdentity{}.ClientIDFromRequest})
			require.NoError(b, err)
			mgmt, _ := httpapi.Split(h)
			_, _, err = cat.Add(ctx, describe("1.0.0", ""), "application/yaml")
			require.NoError(b, err)
			seedDevices(b, pool, b.N, shape.oneClient)
			var next atomic.Int64
			b.SetParallelism(16 / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1) - 1
					client := fmt.Sprintf("c%d", i)
					if shape.oneClient {
						client = "c0"
					}
					body := fmt.Sprintf(`{"applicationId":"svc","version":"1.0.0","clientId":%q,"deviceId":"d%d"}`, client, i)
					req := httptest.NewRequest("POST", "/mgmt/v1/deployments", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Authorization", "Bearer "+adminToken)
					w := httptest.NewRecorder()
					mgmt.ServeHTTP(w, req)
					if w.Code != http.StatusCreated {
						b.Errorf("status %d: %s", w.Code, w.Body)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "creations/s")
		})
	}
}

// seedDevices inserts n registered devices d0 … d(n-1), of one client c0
// (oneClient) or of clients c0 … c(n-1), with one statement each.
func seedDevices(b *testing.B, pool *pgxpool.Pool, n int, oneClient bool) {
	b.Helper()
	ctx := context.Background()
	caps, err := margo.ParseCapabilities(capabilities("DEVICE", "compose"), "DEVICE")
	require.NoError(b, err)
	js, _, err := margo.RenderManifest(margo.StateManifest{Version: 1})
	require.NoError(b, err)
	clients := n
	if oneClient {
		clients = 1
	}
	_, err = pool.Exec(ctx, `INSERT INTO clients (id, status, manifest_version, manifest_json, manifest_etag, created_at, updated_at)
SELECT 'c' || i, 'accepted', 1, $2, $3, now(), now() FROM generate_series(0, $1 - 1) i`, clients, js, margo.ETag(js))
	require.NoError(b, err)
	_, err = pool.Exec(ctx, `INSERT INTO devices (client_id, id, registered, capabilities, created_at, updated_at)
SELECT CASE WHEN $2 THEN 'c0' ELSE 'c' || i END, 'd' || i, true, replace($3, 'DEVICE', 'd' || i)::jsonb, now(), now()
FROM generate_series(0, $1 - 1) i`, n, oneClient, string(caps.JSON))
	require.NoError(b, err)
}
