// Package postgres is wfm's PostgreSQL adapter: the connection pool, the
// schema migrations and the stores that translate between the domain and
// SQL (database errors become domain errors at this boundary).
package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// defaultMaxConns is the pool size unless the URL sets pool_max_conns.
	// pgxpool's default, max(4, GOMAXPROCS), starves an HTTP server on a
	// small machine: each request holds a connection for its whole
	// transaction while the next ones queue.
	defaultMaxConns = 10
	// defaultStatementTimeout bounds every statement, so that a runaway
	// query or a lock wait fails the request instead of holding a connection
	// forever. A migration that needs longer raises it for itself with
	// SET LOCAL statement_timeout.
	defaultStatementTimeout = "30s"
)

// Open returns a connection pool for the database at url after checking that
// the database answers. The URL may override the defaults: pool_max_conns
// (10), statement_timeout (30s) and application_name (wfm, which makes wfm's
// sessions easy to find in pg_stat_activity).
//
// Returns an error if url cannot be parsed or the database cannot be reached
// within ctx.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	params := cfg.ConnConfig.RuntimeParams
	if _, ok := params["statement_timeout"]; !ok {
		params["statement_timeout"] = defaultStatementTimeout
	}
	if _, ok := params["application_name"]; !ok {
		params["application_name"] = "wfm"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}
