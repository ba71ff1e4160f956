package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wfm-dev/wfm/internal/access"
)

// The audit row of a management call's change is written in the change's
// own transaction: a store method that makes such a change runs its
// transaction with inTx and calls auditChange (or apply does, through
// auditBatch) once the change is written. The row and the change commit
// together, so a crash between the commit and the answer cannot lose the
// audit of a change that happened. Calls whose transaction made no change
// (or rolled back) are audited by the HTTP adapter after the answer (see
// access.Pending). Checked by one grep: every store method of a mutating
// management call lists
//
//	grep -n "inTx(" internal/postgres/*.go

// inTx runs fn in one transaction of db (a pool, or a connection taken
// from it), as beginFunc does, for a
// store method that makes the change of a management call. The call's
// audit entry, if fn appended it (auditChange), counts as written once the
// transaction committed. calls are the entries of further calls whose
// changes the transaction makes (a batch of coalesced creations).
func inTx(ctx context.Context, db beginner, fn func(pgx.Tx) error, calls ...*access.Pending) error {
	ps := append([]*access.Pending{access.PendingOf(ctx)}, calls...)
	for _, p := range ps {
		p.BeginTx()
	}
	err := beginFunc(ctx, db, fn)
	for _, p := range ps {
		p.EndTx(err == nil)
	}
	return err
}

// beginner begins transactions: *pgxpool.Pool, *pgxpool.Conn, batchBegin.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// batchBegin begins a transaction on a connection of pool whose BEGIN
// travels with the statements of first (made with Batch.BeginTx, the
// transaction's first round trip): their results are read, and their
// callbacks run, before Begin returns. A transaction that would begin by
// reading saves a round trip.
type batchBegin struct {
	pool  *pgxpool.Pool
	first *pgx.Batch
}

// Begin sends b.first and returns its transaction. If a statement of it
// fails, the transaction is rolled back and that error returned.
func (b batchBegin) Begin(ctx context.Context) (pgx.Tx, error) {
	br := b.pool.SendBatch(ctx, b.first)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		if tx != nil {
			_ = tx.Rollback(ctx) // already have an error to return; a broken connection is not reused
		}
		return nil, err
	}
	if tx == nil {
		return nil, errors.New("postgres: a batch that begins no transaction (Batch.BeginTx) passed to batchBegin")
	}
	return tx, nil
}

// auditChange appends in tx the audit entry of the management call ctx
// carries, for its change made at at (created: the change created the
// call's resource, which the contract answers 201). It appends nothing
// outside a call, outside a transaction begun by inTx, or when the entry is
// already appended. Call it once the change is written, just before the
// transaction commits.
func auditChange(ctx context.Context, tx pgx.Tx, at time.Time, created bool) error {
	p := access.PendingOf(ctx)
	e, ok := p.TakeForTx(at, created)
	if !ok {
		return nil
	}
	if err := markMade(ctx, tx, p); err != nil {
		return err
	}
	return appendAudit(ctx, tx, e)
}

// sqlMarkMade marks reservations of Idempotency-Keys made
// (access.IdempotentMade), in the transaction of their requests' change.
const sqlMarkMade = `UPDATE idempotency_keys k SET status = 1
FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS v(actor, key, at)
WHERE k.actor = v.actor AND k.key = v.key AND k.created_at = v.at AND k.status = 0`

// markMade marks, in db (the change's transaction), the reservations of
// the calls ps hold (access.Pending.Claim) made: the mark commits exactly
// when their change does, so that a retry with the key after a commit of
// unknown outcome is not run a second time when the change was made, and
// runs when it was not.
func markMade(ctx context.Context, db execer, ps ...*access.Pending) error {
	var actors, keys []string
	var ats []time.Time
	for _, p := range ps {
		if c, ok := p.Claim(); ok {
			actors, keys, ats = append(actors, c.Actor), append(keys, c.Key), append(ats, c.ReservedAt.Truncate(time.Microsecond))
		}
	}
	if len(actors) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, sqlMarkMade, actors, keys, ats)
	return err
}

// auditBatch is auditChange for the changes apply writes, into db (the
// batch's pipeline): at the changes' time, created when one of them
// creates its deployment; or, for a batch of several calls (b.audits),
// each call's entry, created when its change created its deployment.
func auditBatch(ctx context.Context, db execer, b batch) error {
	if len(b.changes) == 0 {
		return nil
	}
	at := b.changes[0].At
	if b.audits == nil {
		created := false
		for _, c := range b.changes {
			created = created || c.Create
		}
		p := access.PendingOf(ctx)
		e, ok := p.TakeForTx(at, created)
		if !ok {
			return nil
		}
		if err := markMade(ctx, db, p); err != nil {
			return err
		}
		return appendAudit(ctx, db, e)
	}
	var es []access.AuditEntry
	var ps []*access.Pending
	for _, a := range b.audits {
		if e, ok := a.pending.TakeForTx(at, a.created); ok {
			es, ps = append(es, e), append(ps, a.pending)
		}
	}
	if err := markMade(ctx, db, ps...); err != nil {
		return err
	}
	return appendAudits(ctx, db, es)
}

// execer runs a statement (a transaction, a pool, or a pipeline being
// built).
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}
