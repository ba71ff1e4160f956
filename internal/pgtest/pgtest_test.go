package pgtest_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func currentDatabase(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var name string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT current_database()").Scan(&name))
	return name
}

func TestNewGivesIsolatedMigratedDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.New(t), pgtest.New(t)

	require.NotEqual(t, currentDatabase(t, a), currentDatabase(t, b))
	for _, pool := range []*pgxpool.Pool{a, b} {
		require.NoError(t, postgres.Check(ctx, pool), "schema migrated")
	}
	_, err := a.Exec(ctx, "INSERT INTO applications (id) VALUES ('only-in-a')")
	require.NoError(t, err)
	for pool, want := range map[*pgxpool.Pool]int{a: 1, b: 0} {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM applications").Scan(&n))
		assert.Equal(t, want, n, "rows in %s", currentDatabase(t, pool))
	}
}

func TestDatabaseDroppedWhenTestEnds(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("user", func(t *testing.T) {
		// A session still open when the test ends must not keep the
		// database alive: this cleanup runs after the drop.
		var conn *pgx.Conn
		t.Cleanup(func() {
			if conn != nil {
				_ = conn.Close(context.Background())
			}
		})
		var err error
		conn, err = pgx.Connect(context.Background(), pgtest.URL(t))
		require.NoError(t, err)
		require.NoError(t, conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&name))
	})
	var exists bool
	require.NoError(t, pgtest.New(t).QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	assert.False(t, exists, "database %s still exists after its test", name)
}

func TestEmptyURLIsNotMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := postgres.Open(ctx, pgtest.EmptyURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.ErrorIs(t, postgres.Check(ctx, pool), postgres.ErrPendingMigrations)
}

// TestPrivateServerHasNoTCPListener: the private test server is reached
// through its Unix socket only, with pglaunch's protection (issue 9).
func TestPrivateServerHasNoTCPListener(t *testing.T) {
	if os.Getenv("DATABASE_URL") != "" {
		t.Skip("DATABASE_URL names the server; no private one is started")
	}
	t.Parallel()
	cfg, err := pgx.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(cfg.Host, "/"), "host %q is not a socket folder", cfg.Host)
	var listen string
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.NoError(t, conn.QueryRow(context.Background(), "SHOW listen_addresses").Scan(&listen))
	assert.Empty(t, listen, "listen_addresses")
}
