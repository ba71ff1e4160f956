package postgres_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// statementTracer calls after with the SQL of every statement a traced pool
// ran, once it ended (tests act between two statements of a transaction,
// or count what ran).
type statementTracer struct{ after func(sql string) }

type tracedSQL struct{}

func (t statementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, tracedSQL{}, d.SQL)
}

func (t statementTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if s, _ := ctx.Value(tracedSQL{}).(string); s != "" {
		t.after(s)
	}
}

// TraceBatchStart, TraceBatchQuery and TraceBatchEnd report a batch's
// statements as they are read.
func (t statementTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (t statementTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	t.after(d.SQL)
}

func (t statementTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// tracedPool returns a second pool on pool's database whose statements
// are reported to after.
func tracedPool(t *testing.T, pool *pgxpool.Pool, after func(sql string)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	require.NoError(t, err)
	var mu sync.Mutex
	cfg.ConnConfig.Tracer = statementTracer{after: func(sql string) { mu.Lock(); defer mu.Unlock(); after(sql) }}
	traced, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	return traced
}
