package postgres_test

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/migrations"
)

func open(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := postgres.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func queryInt(t *testing.T, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&n))
	return n
}

func embeddedCount(t *testing.T) int {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	return len(names)
}

func TestMigrateEmptyDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := open(t, pgtest.EmptyURL(t))

	require.ErrorIs(t, postgres.Check(ctx, pool), postgres.ErrPendingMigrations, "Check before Migrate")
	require.NoError(t, postgres.Migrate(ctx, pool))
	require.NoError(t, postgres.Check(ctx, pool), "Check after Migrate")
	for _, table := range []string{"applications", "application_versions"} {
		var exists bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists))
		assert.True(t, exists, "table %s after Migrate", table)
	}
	// goose records version 0 when it creates its table, then one row per migration.
	rows := queryInt(t, pool, "SELECT count(*) FROM goose_db_version")
	assert.Equal(t, embeddedCount(t)+1, rows)

	require.NoError(t, postgres.Migrate(ctx, pool), "second Migrate")
	assert.Equal(t, rows, queryInt(t, pool, "SELECT count(*) FROM goose_db_version"), "rows after a second Migrate")
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	// Two pools, as two server processes starting at once would have.
	pools := []*pgxpool.Pool{open(t, url), open(t, url)}
	errs := make([]error, len(pools))
	var wg sync.WaitGroup
	for i, pool := range pools {
		wg.Go(func() { errs[i] = postgres.Migrate(ctx, pool) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "Migrate #%d", i)
	}
	require.NoError(t, postgres.Check(ctx, pools[0]))
	assert.Equal(t, embeddedCount(t)+1, queryInt(t, pools[0], "SELECT count(*) FROM goose_db_version"),
		"each migration recorded once")
}

func TestCheckMissingMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	require.NoError(t, postgres.Check(ctx, pool))

	// A version newer than this binary knows (a newer replica migrated
	// first) keeps it ready.
	_, err := pool.Exec(ctx, "INSERT INTO goose_db_version (version_id, is_applied) VALUES (999999999, true)")
	require.NoError(t, err)
	require.NoError(t, postgres.Check(ctx, pool), "Check with an extra, newer version")

	_, err = pool.Exec(ctx, "DELETE FROM goose_db_version WHERE version_id = (SELECT min(version_id) FROM goose_db_version WHERE version_id > 0)")
	require.NoError(t, err)
	require.ErrorIs(t, postgres.Check(ctx, pool), postgres.ErrPendingMigrations, "Check with a missing version")
}

func TestCheckUnreachable(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), fmt.Sprintf("postgres://postgres@127.0.0.1:%d/wfm?sslmode=disable&connect_timeout=5", closedPort(t)))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	err = postgres.Check(context.Background(), pool)
	require.Error(t, err)
	assert.NotErrorIs(t, err, postgres.ErrPendingMigrations)
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)

	pool := open(t, url)
	assert.EqualValues(t, 10, pool.Config().MaxConns)
	for setting, want := range map[string]string{"statement_timeout": "30s", "application_name": "wfm"} {
		var got string
		require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got))
		assert.Equal(t, want, got, "setting %s", setting)
	}

	pool = open(t, url+"&statement_timeout=5s&pool_max_conns=3")
	assert.EqualValues(t, 3, pool.Config().MaxConns, "pool_max_conns from the URL")
	var got string
	require.NoError(t, pool.QueryRow(ctx, "SHOW statement_timeout").Scan(&got))
	assert.Equal(t, "5s", got, "statement_timeout from the URL")

	_, err := postgres.Open(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/wfm?sslmode=disable", closedPort(t)))
	require.Error(t, err, "Open on a closed port")
}

// closedPort returns a loopback port nothing listens on (it was free a moment ago).
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// TestDocumentsCompressWithLZ4: on a server with lz4 (PostgreSQL 14 or later
// built with it, as this machine's), migration 00024 makes the documents'
// YAML and pieces compress with lz4, and a document above the TOAST
// threshold is stored so and reads back byte for byte; on a server
// without, the columns keep the server's default.
func TestDocumentsCompressWithLZ4(t *testing.T) {
	pool := pgtest.New(t)
	ctx := t.Context()
	var lz4 bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int >= 140000
  AND EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals))`).Scan(&lz4))
	rows, err := pool.Query(ctx, `SELECT attname, attcompression::text FROM pg_attribute
WHERE attrelid = 'documents'::regclass AND attname IN ('yaml', 'piece') ORDER BY attname`)
	require.NoError(t, err)
	got := map[string]string{}
	for rows.Next() {
		var name, c string
		require.NoError(t, rows.Scan(&name, &c))
		got[name] = c
	}
	require.NoError(t, rows.Err())
	if !lz4 {
		assert.Equal(t, map[string]string{"piece": "", "yaml": ""}, got, "no lz4 on this server: the default compression")
		return
	}
	assert.Equal(t, map[string]string{"piece": "l", "yaml": "l"}, got)

	seedClient(t, pool, "c", 1)
	yaml := []byte(strings.Repeat("apiVersion: margo.org/v1-alpha1\nkind: ApplicationDeployment\n", 80)) // 4.7 KB
	_, err = pool.Exec(ctx, `UPDATE documents SET yaml = $1`, yaml)
	require.NoError(t, err)
	var compression string
	var stored []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_column_compression(yaml), yaml FROM documents`).Scan(&compression, &stored))
	assert.Equal(t, "lz4", compression)
	assert.Equal(t, yaml, stored)
}
