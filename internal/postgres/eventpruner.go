package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/wfm-dev/wfm/internal/loop"
)

// Bounds of the event pruner: how often it runs and how long one run may
// take (a hanging database fails the run instead of stalling the pruner).
const (
	DefaultPruneInterval = time.Hour
	pruneTimeout         = 5 * time.Minute
)

// EventPruner deletes the events older than the retention setting in the
// background: once at Start, then every interval. Several replicas may run
// one each (PruneEvents is safe to run concurrently).
type EventPruner struct {
	log       *EventLog
	retention EventRetention
	interval  time.Duration
	now       func() time.Time
	logger    *slog.Logger

	loop loop.Loop
}

// NewEventPruner returns a pruner of log that keeps events for
// retention.MaxAge (zero: DefaultEventRetention) and runs every interval
// (zero: DefaultPruneInterval), reading the time from now.
func NewEventPruner(log *EventLog, retention EventRetention, interval time.Duration, now func() time.Time, logger *slog.Logger) *EventPruner {
	if interval <= 0 {
		interval = DefaultPruneInterval
	}
	return &EventPruner{log: log, retention: retention, interval: interval, now: now, logger: logger}
}

// runOnce prunes once, within pruneTimeout, and returns how many events it
// deleted. Returns an error if the database fails or the run times out.
func (p *EventPruner) runOnce(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, pruneTimeout)
	defer cancel()
	return p.log.PruneEvents(ctx, p.now(), p.retention)
}

// Start runs the pruner until Stop or ctx ends: a run now, then one every
// interval.
func (p *EventPruner) Start(ctx context.Context) {
	p.loop.Start(ctx, p.interval, func(ctx context.Context) {
		n, err := p.runOnce(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			// The next run tries again; what was deleted stays deleted.
			p.logger.WarnContext(ctx, "event log: pruning failed; retrying at the next run", "deleted", n, "error", err)
		case n > 0:
			p.logger.InfoContext(ctx, "event log: pruned old events", "deleted", n, "retention", p.retention.MaxAge.String())
		}
	})
}

// Stop ends the pruner and waits for its current run.
func (p *EventPruner) Stop() { p.loop.Stop() }
