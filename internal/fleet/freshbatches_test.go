package fleet_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// BenchmarkCreateBatches8FreshDatabase times serial batches of 8 creations
// (Service.CreateDeployments, each install for its own client of one
// device: the lane's usual batch under 16 concurrent calls) into a fresh
// database whose tables hold the first 96 deployments and were analyzed
// then (as autovacuum analyzes a table after its first 50 changes), as on
// a new installation's first large rollout. With the statistics keeper the
// server runs, and without it (autovacuum, which looks once a minute, is
// off in both): plans made while the tables were small stay in use until
// the tables are analyzed again. It reports milliseconds
// per batch; run with -benchtime 1400x (the seeded clients allow up to
// 1,488 timed batches).
func BenchmarkCreateBatches8FreshDatabase(b *testing.B) {
	for _, keeper := range []bool{true, false} {
		b.Run(fmt.Sprintf("keeper=%v", keeper), func(b *testing.B) {
			const n, clients = 8, 12_000
			s, pool := newServiceAndPool(b)
			seedClientsOfOneDevice(b, pool, "c", clients)
			next := 0
			batch := func() {
				if next+n > clients {
					b.Fatalf("more batches than the %d seeded clients allow", clients/n)
				}
				reqs := make([]fleet.CreateRequest, n)
				for j := range reqs {
					reqs[j] = fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: fmt.Sprint("c", next), DeviceID: "d"}
					next++
				}
				rs, err := s.CreateDeployments(b.Context(), reqs)
				require.NoError(b, err)
				for _, r := range rs {
					require.NoError(b, r.Err)
				}
			}
			// Autovacuum off, so that only the keeper analyzes in the run.
			_, err := pool.Exec(b.Context(), `DO $$ DECLARE t text; BEGIN
  FOR t IN SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = current_schema() LOOP
    EXECUTE 'ALTER TABLE ' || t || ' SET (autovacuum_enabled = off)';
  END LOOP; END $$`)
			require.NoError(b, err)
			// The first dozen batches, analyzed as autovacuum analyzes a
			// table after its first 50 changes.
			for range 12 {
				batch()
			}
			_, err = pool.Exec(b.Context(), `ANALYZE`)
			require.NoError(b, err)
			if keeper {
				k := postgres.NewStatsKeeper(pool, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
				k.Start(b.Context())
				defer k.Stop()
			}
			var total time.Duration
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				batch()
				total += time.Since(start)
			}
			b.ReportMetric(total.Seconds()*1000/float64(b.N), "ms/batch")
		})
	}
}
