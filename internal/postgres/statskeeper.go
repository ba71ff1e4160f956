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
// may take, and the least number of changed rows that makes a table's
// statistics stale.
const (
	DefaultStatsInterval = 2 * time.Second
	statsTimeout         = time.Minute
	statsMinChanged      = 1000
)

// statsLockID names the transaction advisory lock that lets one replica at a time
// analyze (arbitrary, fixed: "wfmstats" in ASCII).
const statsLockID int64 = 0x77666d7374617473

// sqlStaleTables lists the tables of the current schema, owned by the
// connected role (or any when it is a superuser: ANALYZE skips the others
// with a warning), that changed since their last analysis by at least as
// many rows as they had then, and by at least $1.
const sqlStaleTables = `
SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.schemaname = current_schema() AND s.n_mod_since_analyze >= greatest($1::bigint, c.reltuples::bigint)
  AND (pg_has_role(c.relowner, 'USAGE') OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user))
ORDER BY s.relname`

// StatsKeeper analyzes the tables whose size has at least doubled since
// their statistics were taken (and changed by at least 1,000 rows), every
// interval. Sessions keep the plans of their prepared statements (every
// statement of wfm's pool is prepared, and the triggers' statements too)
// until a table's statistics change: a plan made while a table was nearly
// empty (a fresh database, the first thousands of creations) scans it whole
// and stays in use while it grows to tens of thousands of rows. Autovacuum
// analyzes after 10% more rows, but looks once a minute (autovacuum_naptime)
// and may be configured otherwise or off. BenchmarkCreateBatches8FreshDatabase
// (serial batches of 8 creations, tables analyzed at the first 96
// deployments): 5.4-6.7 ms a batch with the keeper, 13.1-14.3 ms without;
// with the tables analyzed while empty, 7.1-7.7 against 25.6-29 ms (the
// foreign-key checks and the events' append planned as scans). ANALYZE samples a bounded number
// of rows, and a table is analyzed again only after it doubled (or turned
// over), so this costs little. Several replicas may run one each: an
// advisory lock lets one analyze at a time, the others skip that pass.
type StatsKeeper struct {
	pool     *pgxpool.Pool
	interval time.Duration
	logger   *slog.Logger

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

// runOnce analyzes the stale tables, within statsTimeout, in one
// transaction holding the advisory lock, and returns their names (none when
// another replica holds the lock). Returns an error if the database fails or
// the pass times out.
func (k *StatsKeeper) runOnce(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	var analyzed []string
	err := pgx.BeginFunc(ctx, k.pool, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, statsLockID).Scan(&locked); err != nil || !locked {
			return err
		}
		rows, err := tx.Query(ctx, sqlStaleTables, statsMinChanged)
		if err != nil {
			return err
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, t := range tables {
			if _, err := tx.Exec(ctx, `ANALYZE `+pgx.Identifier{t}.Sanitize()); err != nil {
				return err
			}
		}
		analyzed = tables
		return nil
	})
	return analyzed, err
}

// Start runs the keeper until Stop or ctx ends: a pass now, then one every
// interval.
func (k *StatsKeeper) Start(ctx context.Context) {
	k.loop.Start(ctx, k.interval, func(ctx context.Context) {
		tables, err := k.runOnce(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			// Plans stay what they are until the next pass succeeds.
			k.logger.WarnContext(ctx, "statistics: analyzing grown tables failed; retrying at the next pass", "error", err)
		case len(tables) > 0:
			k.logger.DebugContext(ctx, "statistics: analyzed grown tables", "tables", tables)
		}
	})
}

// Stop ends the keeper and waits for its current pass.
func (k *StatsKeeper) Stop() { k.loop.Stop() }
