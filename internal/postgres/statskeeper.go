package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wfm-dev/wfm/internal/loop"
)

// Bounds of the statistics keeper: how often it looks, how long one pass
// may take, the least number of rows that makes a table worth a look, and
// the size of the statistics past which a table's growth is left to
// autovacuum (see StatsKeeper).
const (
	DefaultStatsInterval = 2 * time.Second
	statsTimeout         = time.Minute
	statsMinRows         = 1000
	statsMaxRows         = 10_000
)

// sqlStatsLockTimeout bounds each wait of an ANALYZE for a lock that
// SKIP_LOCKED does not skip (an index's, behind a REINDEX).
const sqlStatsLockTimeout = `SET lock_timeout = '1s'`

// statsLockID names the session advisory lock that lets one replica at a
// time analyze (arbitrary, fixed: "wfmstats" in ASCII).
const statsLockID int64 = 0x77666d7374617473

// sqlGrownTables lists, schema-qualified, the tables of the current schema
// that the connected role may analyze (it owns them, or is a superuser)
// and whose live rows, as the statistics system counts them, are at least
// $1 and at least twice what their last analysis (or vacuum) found, when
// that found fewer than $2; a table never analyzed has found -1.
const sqlGrownTables = `
SELECT s.schemaname, s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.schemaname = current_schema() AND s.n_live_tup >= greatest($1::bigint, 2 * c.reltuples::bigint) AND c.reltuples < $2
  AND (pg_has_role(c.relowner, 'USAGE') OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user))
ORDER BY s.relname`

// StatsKeeper analyzes the tables whose live rows at least doubled since
// their statistics were taken (and number at least 1,000), while those
// statistics describe fewer than 10,000 rows, every interval.
// Sessions keep the plans of their prepared statements (every statement of
// wfm's pool is prepared) until a table's statistics change: a plan made
// while a table was small (a fresh installation's first deployments) may
// scan it whole and stays in use while it grows to tens of thousands of
// rows. Autovacuum analyzes after 10% more changed rows, but looks once a
// minute (autovacuum_naptime) and may be configured otherwise or off.
// BenchmarkCreateBatches8FreshDatabase (serial batches of 8 creations,
// tables analyzed at the first 96 deployments, autovacuum off): see
// docs/architecture.md. Tables that only churn (updates, inserts and
// deletes in balance) are left to autovacuum: growth is what outdates a
// plan's choice between an index and a scan. So is the growth of a table
// whose statistics count 10,000 rows: the keeper is for plans made while
// a table was nearly empty, and from there on autovacuum's 10% suffices.
// ANALYZE reads up to 30,000 rows (300 times the statistics target);
// without the bound the keeper analyzed the events table (five rows a
// creation) at 16,000, 32,000 and 64,000 rows in a burst of 10,000
// creations on a fresh server: pg_stat_statements over the two creation
// phases of wfm-bench -only fleet counted 1,036 and 872 ms of ANALYZE in
// 6.7 s of statement time each, and 478 and 363 ms with the bound. Each
// table is analyzed by a statement of its own that
// skips a table another session holds (SKIP_LOCKED; it is retried at the
// next pass), so a failure loses no other table's statistics and no lock
// is held longer than one ANALYZE. Several replicas may run one each: a
// session advisory lock lets one analyze at a time, the others skip the
// pass.
type StatsKeeper struct {
	pool     *pgxpool.Pool
	interval time.Duration
	logger   *slog.Logger
	// failing is set while passes fail (owned by the loop's goroutine).
	failing bool

	loop loop.Loop
}

// NewStatsKeeper returns a keeper of pool's tables that looks every interval
// (zero: DefaultStatsInterval).
func NewStatsKeeper(pool *pgxpool.Pool, interval time.Duration, logger *slog.Logger) *StatsKeeper {
	if interval <= 0 {
		interval = DefaultStatsInterval
	}
	return &StatsKeeper{pool: pool, interval: interval, logger: logger}
}

// runOnce analyzes the grown tables, within statsTimeout, on one
// connection holding the advisory lock, each ANALYZE waiting at most
// 1 s for a lock (sqlStatsLockTimeout), and returns the names of the tables it asked
// to analyze (none when another replica holds the lock; ANALYZE skips, with
// a warning, a table another session holds, which the next pass looks at
// again). Returns an error if the database fails or the pass times out; the
// tables not analyzed yet are looked at again at the next pass. The
// connection goes back to the pool as it came, or is closed.
func (k *StatsKeeper) runOnce(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	conn, err := k.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, statsLockID).Scan(&locked); err != nil || !locked {
		return nil, err
	}
	defer func() {
		// Bounded, also when ctx ended: Stop waits for this.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, err := conn.Exec(rctx, `RESET lock_timeout`)
		if err == nil {
			_, err = conn.Exec(rctx, `SELECT pg_advisory_unlock($1)`, statsLockID)
		}
		if err != nil {
			// The session may keep the lock or the setting: end it rather
			// than pool it.
			_ = conn.Hijack().Close(rctx)
		}
	}()
	if _, err := conn.Exec(ctx, sqlStatsLockTimeout); err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, sqlGrownTables, statsMinRows, statsMaxRows)
	if err != nil {
		return nil, err
	}
	tables, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (pgx.Identifier, error) {
		var schema, table string
		err := row.Scan(&schema, &table)
		return pgx.Identifier{schema, table}, err
	})
	if err != nil {
		return nil, err
	}
	var analyzed []string
	for _, t := range tables {
		if _, err := conn.Exec(ctx, `ANALYZE (SKIP_LOCKED) `+t.Sanitize()); err != nil {
			return analyzed, err
		}
		analyzed = append(analyzed, t[1])
	}
	return analyzed, nil
}

// Start runs the keeper until Stop or ctx ends: a pass now, then one every
// interval.
func (k *StatsKeeper) Start(ctx context.Context) {
	k.loop.Start(ctx, k.interval, func(ctx context.Context) {
		tables, err := k.runOnce(ctx)
		if ctx.Err() == nil {
			k.logPass(ctx, tables, err)
		}
	})
}

// logPass logs a pass's outcome: one WARN when passes start failing (a
// database outage fails one every interval; plans stay what they are
// meanwhile) and one INFO when one succeeds again, not a line per pass;
// the tables analyzed at DEBUG.
func (k *StatsKeeper) logPass(ctx context.Context, tables []string, err error) {
	switch {
	case err != nil:
		if !k.failing {
			k.logger.WarnContext(ctx, "statistics: analyzing grown tables failed; retrying every pass", "error", err)
		}
		k.failing = true
	case k.failing:
		k.logger.InfoContext(ctx, "statistics: analyzing grown tables again")
		k.failing = false
	}
	if len(tables) > 0 {
		k.logger.DebugContext(ctx, "statistics: analyzed grown tables (a table another session held is skipped)", "tables", tables)
	}
}

// Stop ends the keeper and waits for its current pass.
func (k *StatsKeeper) Stop() { k.loop.Stop() }
