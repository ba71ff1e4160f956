package postgres_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestStatsKeeperAnalyzesGrownTables: a pass analyzes the tables that
// changed by at least 1,000 rows and by as many as they had when last
// analyzed, and only those; a table analyzed is not analyzed again until
// it doubles; a pass skips while another replica holds the lock.
func TestStatsKeeperAnalyzesGrownTables(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	k := postgres.NewStatsKeeper(pool, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// insert adds clients and applications, and has the statistics count
	// them (the backend reports its counts when it goes idle).
	round := 0
	insert := func(clients, apps int) {
		t.Helper()
		round++
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		_, err = conn.Exec(ctx, `INSERT INTO clients (id, status, manifest_version, created_at, updated_at)
SELECT 'c' || i || '-' || $2, 'accepted', 1, now(), now() FROM generate_series(1, $1) i`, clients, fmt.Sprint(round))
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `INSERT INTO applications (id) SELECT 'a' || i || '-' || $2 FROM generate_series(1, $1) i`, apps, fmt.Sprint(round))
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `SELECT 1`) // the backend flushed its counts when it went idle
		require.NoError(t, err)
	}
	changed := func(table string) (n int64) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relname = $1`, table).Scan(&n))
		return n
	}
	insert(1500, 900)
	require.Equal(t, int64(1500), changed("clients"))
	require.Equal(t, int64(900), changed("applications"))

	held, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = held.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, postgres.StatsLockID)
	require.NoError(t, err)
	tables, err := k.RunOnce(ctx)
	require.NoError(t, err)
	assert.Empty(t, tables, "another replica analyzes")
	require.NoError(t, held.Rollback(ctx))

	tables, err = k.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"clients"}, tables, "changed by 1,000 rows or more")
	assert.Zero(t, changed("clients"))
	var reltuples float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE relname = 'clients'`).Scan(&reltuples))
	assert.Equal(t, 1500.0, reltuples)

	insert(1200, 200)
	tables, err = k.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"applications"}, tables, "clients grew by less than it had (1,200 of 1,500); applications by 1,100")
	insert(300, 0)
	tables, err = k.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"clients"}, tables, "clients doubled")
}
