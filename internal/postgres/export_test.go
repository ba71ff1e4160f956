package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Apply exposes the applier to this package's external tests.
func Apply(ctx context.Context, tx pgx.Tx, changes []*lifecycle.Change) error {
	return apply(ctx, tx, batch{changes: changes})
}

// InTx and AuditChange expose the audit of a change's transaction to this
// package's external tests.
var (
	InTx        = inTx
	AuditChange = auditChange
)

// RunOnce exposes one run of the event pruner to this package's external
// tests.
func (p *EventPruner) RunOnce(ctx context.Context) (int64, error) { return p.runOnce(ctx) }

// RunOnce exposes one run of the bundle collector to this package's
// external tests.
func (c *BundleCollector) RunOnce(ctx context.Context) (Collected, error) { return c.runOnce(ctx) }

// RunOnceAt runs the bundle collector as if the database's clock read at
// (at is a time of the database's clock, e.g. read with DBNow).
func (c *BundleCollector) RunOnceAt(ctx context.Context, at time.Time) (Collected, error) {
	now, err := DBNow(ctx, c.pool)
	if err != nil {
		return Collected{}, err
	}
	c.ahead = at.Sub(now)
	defer func() { c.ahead = 0 }()
	return c.runOnce(ctx)
}

// DBNow reads the database's clock.
func DBNow(ctx context.Context, pool *pgxpool.Pool) (time.Time, error) {
	var now time.Time
	err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now)
	return now, err
}

// MigrateTo applies the embedded migrations up to version, as a database
// of an older release has them.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := newProvider(db)
	if err != nil {
		return err
	}
	_, err = p.UpTo(ctx, version)
	return err
}

// MigrateDownTo rolls the embedded migrations back to version.
func MigrateDownTo(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := newProvider(db)
	if err != nil {
		return err
	}
	_, err = p.DownTo(ctx, version)
	return err
}

// ApplyCreating applies changes that create the operations ops (as a batch
// of creations does).
func ApplyCreating(ctx context.Context, tx pgx.Tx, changes []*lifecycle.Change, ops ...fleet.Operation) error {
	b := batch{changes: changes, operations: map[string]fleet.Operation{}}
	for _, op := range ops {
		b.operations[op.ID] = op
	}
	return apply(ctx, tx, b)
}

// AppendEventsBy exposes the two ways of appending events (COPY or one
// statement) to this package's external tests; CopyEvents the COPY with a
// given transaction id and next index (for the bounds).
var (
	AppendEventsBy = appendEvents
	CopyEvents     = copyEvents
)

// CopyAllRows makes s's creations write every table's inserts with COPY,
// whatever their number of rows.
func CopyAllRows(s *FleetStore) *FleetStore {
	s.copyMin = 1
	return s
}

// SmallBundle is smallBundle, for this package's external tests.
const SmallBundle = smallBundle

// SQLSmallBundles is sqlSmallBundles (tests count its runs).
const SQLSmallBundles = sqlSmallBundles

// WavePlaces is wavePlaces.
func WavePlaces(starts []int, k int) (lo, hi int) { return wavePlaces(starts, k) }

// The move statements for up to KeyedMovesMax moves, exposed to the plan
// tests.
var (
	SQLMoveOutcomesKeyed = sqlMoveOutcomesKeyed
	SQLMoveStepsKeyed    = sqlMoveStepsKeyed
)

// KeyedMovesMax is keyedMovesMax.
const KeyedMovesMax = keyedMovesMax

// MoveStatement is moveStatement.
var MoveStatement = moveStatement

// RunOnce exposes one pass of the statistics keeper to this package's
// external tests.
func (k *StatsKeeper) RunOnce(ctx context.Context) ([]string, error) { return k.runOnce(ctx) }

// StatsLockID is the advisory lock the statistics keeper takes.
const StatsLockID = statsLockID

// LogPass exposes the statistics keeper's logging of a pass's outcome.
func (k *StatsKeeper) LogPass(ctx context.Context, tables []string, err error) {
	k.logPass(ctx, tables, err)
}
