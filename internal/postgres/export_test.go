package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

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
