package fleet_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/margo"
)

// BenchmarkCreateBatchClients1000 times one Service.CreateDeployments of
// 1,000 installs, each for its own client of one device (the shape of a
// fleet of single-device clients: one manifest version per client), the
// clients and devices seeded by SQL, untimed. It reports seconds per batch
// and deployments per second.
func BenchmarkCreateBatchClients1000(b *testing.B) {
	const n = 1000
	s, pool := newServiceAndPool(b)
	var total time.Duration
	for i := range b.N {
		b.StopTimer()
		prefix := fmt.Sprintf("b%d-", i)
		seedClientsOfOneDevice(b, pool, prefix, n)
		reqs := make([]fleet.CreateRequest, n)
		for j := range reqs {
			reqs[j] = fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: fmt.Sprint(prefix, j), DeviceID: "d"}
		}
		b.StartTimer()
		start := time.Now()
		rs, err := s.CreateDeployments(b.Context(), reqs)
		total += time.Since(start)
		b.StopTimer()
		require.NoError(b, err)
		for _, r := range rs {
			require.NoError(b, r.Err)
		}
		b.StartTimer()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/batch")
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "deployments/s")
}

// seedClientsOfOneDevice inserts n accepted clients, prefix followed by 0
// to n-1, each at manifest version 1 with one registered device "d" (the
// capabilities of caps), by SQL.
func seedClientsOfOneDevice(tb testing.TB, pool *pgxpool.Pool, prefix string, n int) {
	tb.Helper()
	parsed, err := margo.ParseCapabilities(caps("DEVICE"), "DEVICE")
	require.NoError(tb, err)
	_, err = pool.Exec(tb.Context(), `
WITH c AS (INSERT INTO clients (id, status, manifest_version, created_at, updated_at)
  SELECT $1 || i, 'accepted', 1, now(), now() FROM generate_series(0, $2 - 1) i RETURNING id),
v AS (INSERT INTO manifest_versions (client_id, version, published_at) SELECT id, 1, now() FROM c RETURNING client_id)
INSERT INTO devices (client_id, id, registered, capabilities, created_at, updated_at)
SELECT client_id, 'd', true, replace($3, 'DEVICE', 'd')::jsonb, now(), now() FROM v`, prefix, n, string(parsed.JSON))
	require.NoError(tb, err)
}
