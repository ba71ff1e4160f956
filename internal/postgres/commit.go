package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A failure reported for a request that commits (a COMMIT, a batch that
// carries one, a statement outside an explicit transaction) does not always
// mean that nothing was committed: the server may have made the commit
// durable and then lost the connection, or been stopped (pg_ctl stop -m
// immediate sends a FATAL to every backend, also to one whose commit record
// is already written), before the answer arrived. Such a failure is marked
// where it happens (atCommit) and translate turns it into the domain's
// "outcome-unknown" error instead of "unavailable; nothing was changed".

// commitUnknown marks a failure whose commit may have happened.
type commitUnknown struct{ err error }

func (e *commitUnknown) Error() string { return "commit outcome unknown: " + e.err.Error() }
func (e *commitUnknown) Unwrap() error { return e.err }

// atCommit returns err, the failure of a request that commits, marked as a
// commit of unknown outcome unless err shows that nothing was committed:
// the request never left (pgconn.SafeToRetry), the server answered that it
// rolled back (pgx.ErrTxCommitRollback), or the server refused it with an
// error that is not the loss of the connection or the server's shutdown (a
// deferred constraint, a serialization failure: the transaction rolled
// back).
func atCommit(err error) error {
	if err == nil || outcomeKnown(err) {
		return err
	}
	return &commitUnknown{err: err}
}

func outcomeKnown(err error) bool {
	var pe *pgconn.PgError
	switch {
	case pgconn.SafeToRetry(err), errors.Is(err, pgx.ErrTxCommitRollback):
		return true
	case errors.As(err, &pe):
		return !unreachable(err)
	}
	return false
}

// maybeCommitted reports whether err carries a commit of unknown outcome
// (atCommit): the change may have been made, so it must not be made again
// on the assumption that it was not.
func maybeCommitted(err error) bool {
	var cu *commitUnknown
	return errors.As(err, &cu)
}

// beginFunc runs fn in a transaction begun on db and commits it, as
// pgx.BeginFunc does, except that a failed COMMIT is marked by atCommit.
// A failure before the COMMIT was sent rolls everything back (PostgreSQL
// aborts an open transaction whose connection is gone).
func beginFunc(ctx context.Context, db beginner, fn func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }() // after a commit, or on a panic: nothing to roll back, or a connection not reused
	if err := fn(tx); err != nil {
		return err
	}
	return atCommit(tx.Commit(ctx))
}
