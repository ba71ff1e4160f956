package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// addRows inserts n rows into table (a table of one text column named id,
// or clients or applications) and has the statistics count them (a
// backend reports its counts when it goes idle; autovacuum is off for the
// tables of these tests, so nothing else analyzes them meanwhile).
func addRows(t *testing.T, pool *pgxpool.Pool, table string, n int) {
	t.Helper()
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	cols, vals := "id", "gen_random_uuid()::text"
	if table == "clients" {
		cols, vals = "id, status, manifest_version, created_at, updated_at", "gen_random_uuid()::text, 'accepted', 1, now(), now()"
	}
	_, err = conn.Exec(ctx, `INSERT INTO `+table+` (`+cols+`) SELECT `+vals+` FROM generate_series(1, $1)`, n)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)
}

func newKeeper(pool *pgxpool.Pool) *postgres.StatsKeeper {
	return postgres.NewStatsKeeper(pool, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// TestStatsKeeperAnalyzesGrownTables: a pass analyzes the tables whose live
// rows number at least 1,000 and at least twice what their last analysis
// found, when that found fewer than 10,000, and only those; rows updated
// (churn) do not count; a pass skips while another replica holds the lock.
func TestStatsKeeperAnalyzesGrownTables(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	_, err := pool.Exec(ctx, `ALTER TABLE clients SET (autovacuum_enabled = off); ALTER TABLE applications SET (autovacuum_enabled = off)`)
	require.NoError(t, err)
	k := newKeeper(pool)
	// probe is a session of its own: it can take the keeper's lock only if
	// no session of the pool kept it.
	probe, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	require.NoError(t, err)
	t.Cleanup(func() { _ = probe.Close(context.Background()) })
	pass := func() []string {
		t.Helper()
		tables, err := k.RunOnce(ctx)
		require.NoError(t, err)
		var free bool
		require.NoError(t, probe.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, postgres.StatsLockID).Scan(&free))
		require.True(t, free, "the pass released its lock")
		_, err = probe.Exec(ctx, `SELECT pg_advisory_unlock($1)`, postgres.StatsLockID)
		require.NoError(t, err)
		var timeout string
		require.NoError(t, pool.QueryRow(ctx, `SHOW lock_timeout`).Scan(&timeout))
		require.Equal(t, "0", timeout, "the pool's sessions keep their settings")
		return tables
	}
	addRows(t, pool, "clients", 1500)
	addRows(t, pool, "applications", 900)

	held, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = held.Exec(ctx, `SELECT pg_advisory_lock($1)`, postgres.StatsLockID)
	require.NoError(t, err)
	tables, err := k.RunOnce(ctx)
	require.NoError(t, err)
	assert.Empty(t, tables, "another replica analyzes")
	_, err = held.Exec(ctx, `SELECT pg_advisory_unlock($1)`, postgres.StatsLockID)
	require.NoError(t, err)
	held.Release()

	assert.Equal(t, []string{"clients"}, pass(), "1,000 rows or more")
	var reltuples float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE relname = 'clients'`).Scan(&reltuples))
	assert.Equal(t, 1500.0, reltuples)
	assert.Empty(t, pass(), "analyzed: not again until it doubles")

	addRows(t, pool, "clients", 1200)
	addRows(t, pool, "applications", 200)
	assert.Equal(t, []string{"applications"}, pass(), "clients has 2,700 rows (not twice 1,500); applications 1,100")
	_, err = pool.Exec(ctx, `UPDATE clients SET updated_at = now()`)
	require.NoError(t, err)
	addRows(t, pool, "applications", 0) // flushes the update's counts
	assert.Empty(t, pass(), "2,700 rows changed, but the table did not grow")
	addRows(t, pool, "clients", 300)
	assert.Equal(t, []string{"clients"}, pass(), "clients doubled")

	// Statistics taken at 10,000 rows or more: growth is autovacuum's.
	addRows(t, pool, "clients", 3000)
	assert.Equal(t, []string{"clients"}, pass(), "6,000 rows: doubled")
	addRows(t, pool, "clients", 6000)
	assert.Equal(t, []string{"clients"}, pass(), "12,000 rows: doubled since statistics of 6,000 rows")
	addRows(t, pool, "clients", 30000)
	assert.Empty(t, pass(), "analyzed at 12,000 rows: 42,000 are left to autovacuum")
	addRows(t, pool, "applications", 1100)
	assert.Equal(t, []string{"applications"}, pass(), "a small table that doubled is still analyzed")

	// The bound, exactly: statistics of 9,999 rows still count as small.
	_, err = pool.Exec(ctx, `CREATE TABLE below (id text) WITH (autovacuum_enabled = off); CREATE TABLE at (id text) WITH (autovacuum_enabled = off)`)
	require.NoError(t, err)
	addRows(t, pool, "below", 9999)
	addRows(t, pool, "at", 10000)
	_, err = pool.Exec(ctx, `ANALYZE below, at`)
	require.NoError(t, err)
	addRows(t, pool, "below", 9999)
	addRows(t, pool, "at", 10000)
	assert.Equal(t, []string{"below"}, pass(), "doubled from statistics of 9,999 rows, and of 10,000")
}

// TestStatsKeeperAnalyzesWhatItsRoleOwns: run by a role that is not a
// superuser, the keeper analyzes the grown tables that role owns and leaves
// the others alone.
func TestStatsKeeperAnalyzesWhatItsRoleOwns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.URL(t)
	admin := open(t, url)
	role := fmt.Sprintf("keeper_%d", time.Now().UnixNano())
	_, err := admin.Exec(ctx, `CREATE ROLE `+role+` NOLOGIN; CREATE TABLE owned (id text); ALTER TABLE owned OWNER TO `+role+`;
ALTER TABLE owned SET (autovacuum_enabled = off); ALTER TABLE applications SET (autovacuum_enabled = off)`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role)
	})
	addRows(t, admin, "owned", 1200)
	addRows(t, admin, "applications", 1200)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SET ROLE `+role)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	tables, err := newKeeper(pool).RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"owned"}, tables)
	var reltuples float64
	require.NoError(t, admin.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE relname = 'owned'`).Scan(&reltuples))
	assert.Equal(t, 1200.0, reltuples, "analyzed")
}

// TestStatsKeeperLogsOncePerOutage: failing passes log one WARN, the pass
// that succeeds after them one INFO, the passes in between nothing above
// DEBUG.
func TestStatsKeeperLogsOncePerOutage(t *testing.T) {
	t.Parallel()
	var logged bytes.Buffer
	h := slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "error" {
				return slog.Attr{}
			}
			return a
		}})
	k := postgres.NewStatsKeeper(nil, 0, slog.New(h))
	down := errors.New("database unavailable")
	for range 3 {
		k.LogPass(t.Context(), nil, down)
	}
	k.LogPass(t.Context(), []string{"clients"}, nil)
	k.LogPass(t.Context(), nil, nil)
	k.LogPass(t.Context(), nil, down)
	assert.Equal(t, `level=WARN msg="statistics: analyzing grown tables failed; retrying every pass"
level=INFO msg="statistics: analyzing grown tables again"
level=WARN msg="statistics: analyzing grown tables failed; retrying every pass"
`, logged.String())
}
