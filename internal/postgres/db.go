// Package postgres is wfm's PostgreSQL adapter: the connection pool, the
// schema migrations and the stores that translate between the domain and
// SQL (database errors become domain errors at this boundary).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wfm-dev/wfm/internal/lifecycle"
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

// UnavailableRetryAfter is the wait, in seconds, that an answer given while
// the database is unreachable advises (Retry-After, retryAfterSeconds).
const UnavailableRetryAfter = 5

// errUnavailable is the domain error for an unreachable database.
func errUnavailable() *lifecycle.Error {
	return lifecycle.Retryable("unavailable", UnavailableRetryAfter, "The server cannot reach its database; nothing was changed. Retry later.")
}

// unreachable reports whether err means the database cannot be reached (as
// opposed to refusing a statement): a failed connect (refused, timed out,
// authentication the server stopped answering), a connection lost or closed
// under a statement, SQLSTATE class 08 (connection exception), 57P01-57P03
// (administrator, crash or cannot-connect-now shutdown) and 53300 (too
// many connections). A pool that cannot acquire a connection reports one of
// these too.
func unreachable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code == "53300"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.As(err, &ce), errors.Is(err, pgconn.ErrConnClosed), errors.As(err, &ne),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	}
	return pgconn.Timeout(err) && !errors.Is(err, context.Canceled)
}
