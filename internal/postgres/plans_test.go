package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestMovesLookUpKeysWithoutStatistics: the outcome and step moves of a
// batch of up to postgres.KeyedMovesMax reports find their rows through the
// tables' keys even when the tables were just filled in bulk and have no
// statistics yet (a fleet's installs, reported moments later, before
// autovacuum analyzed them). Their rows are selected by the first column of
// a two-column key; without the "= ANY" on it the generic plan hashed the
// whole table.
func TestMovesLookUpKeysWithoutStatistics(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t)
	for _, table := range []string{"revisions", "operation_steps"} {
		_, err := pool.Exec(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = false)`)
		require.NoError(t, err)
	}
	seedClient(t, pool, "c", 5000)
	_, err := pool.Exec(ctx, `
INSERT INTO operations (id, deployment_id, type, state, from_version, to_version, parameters, profile_id, strategy, on_failure,
    step_timeout, requested_by, base_revision, deadline, created_at, updated_at)
SELECT id, id, 'install', 'running', '1.0.0', '1.0.0', '{}', 'p', 'recreate', 'halt', '1 hour', 'test', 0, now(), now(), now() FROM deployments;
INSERT INTO operation_steps (operation_id, n, version, state) SELECT id, 1, '1.0.0', 'published' FROM operations`)
	require.NoError(t, err)
	var analyzed bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stats WHERE tablename IN ('revisions', 'operation_steps'))`).Scan(&analyzed))
	require.False(t, analyzed, "the tables must have no statistics for this test")

	// Above KeyedMovesMax moves the plain statement is used: the "= ANY"
	// would be evaluated once per move, a cost in the square of the moves.
	assert.Equal(t, "keyed", postgres.MoveStatement("plain", "keyed", postgres.KeyedMovesMax))
	assert.Equal(t, "plain", postgres.MoveStatement("plain", "keyed", postgres.KeyedMovesMax+1))

	const id = `'{00000001-0000-4000-8000-000000000000}'`
	for _, c := range []struct {
		name, sql, args, table string
	}{
		{"sqlMoveOutcomes", postgres.SQLMoveOutcomesKeyed, id + `, '{1}', '{active}', '{f}', '{2026-01-01T00:00:00Z}', '{pending}', 'active'`, "revisions"},
		{"sqlMoveSteps", postgres.SQLMoveStepsKeyed, id + `, '{1}', '{succeeded}', '{1}', '{2026-01-01T00:00:00Z}', '{t}', 'published', '{published}'`, "operation_steps"},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := genericPlan(t, pool, c.sql, c.args)
			assert.NotContains(t, plan, "Seq Scan on "+c.table, "%s", plan)
			assert.Contains(t, plan, c.table+"_pkey", "%s", plan)
		})
	}
}

// genericPlan returns the EXPLAIN output of query's generic plan (the one a
// prepared statement settles on) with args, a list of SQL literals. It
// prepares query on a connection of its own and deallocates it there.
func genericPlan(t *testing.T, pool *pgxpool.Pool, query, args string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `PREPARE plan_test AS `+query)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, `DEALLOCATE plan_test`) }()
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, `RESET plan_cache_mode`) }()
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE plan_test(`+args+`)`, pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}
