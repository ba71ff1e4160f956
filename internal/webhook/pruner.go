package webhook

import (
	"context"
	"log/slog"
	"time"

	"github.com/wfm-dev/wfm/internal/loop"
)

// DeliveryPruner deletes delivery attempts older than the retention setting
// in the background, as the event log's pruner does: once at Start, then
// every interval. Replicas may each run one.
type DeliveryPruner struct {
	prune     func(ctx context.Context, now time.Time, maxAge time.Duration) (int64, error)
	retention time.Duration
	interval  time.Duration
	now       func() time.Time
	logger    *slog.Logger
	outage    *loop.Outage

	loop loop.Loop
}

// NewDeliveryPruner returns a pruner that calls prune (the store's
// PruneDeliveries) every interval (zero: an hour) to keep attempts for
// retention (zero: DefaultDeliveryRetention), and logs to logger and its
// failures to outage, once per outage (nil: its own).
func NewDeliveryPruner(prune func(ctx context.Context, now time.Time, maxAge time.Duration) (int64, error),
	retention, interval time.Duration, now func() time.Time, logger *slog.Logger, outage *loop.Outage) *DeliveryPruner {
	if retention <= 0 {
		retention = DefaultDeliveryRetention
	}
	if interval <= 0 {
		interval = time.Hour
	}
	if outage == nil {
		outage = loop.NewOutage(logger, "webhooks")
	}
	return &DeliveryPruner{prune: prune, retention: retention, interval: interval, now: now, logger: logger, outage: outage}
}

// RunOnce prunes once, within 5 minutes, and returns how many attempts it
// deleted. Returns an error if the store fails or the run times out.
func (p *DeliveryPruner) RunOnce(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	return p.prune(ctx, p.now(), p.retention)
}

// Start runs the pruner until Stop or ctx ends.
func (p *DeliveryPruner) Start(ctx context.Context) {
	p.loop.Start(ctx, p.interval, func(ctx context.Context) {
		n, err := p.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			p.outage.Failed(ctx, "webhooks: pruning delivery records failed", err)
		default:
			p.outage.Succeeded(ctx)
			if n > 0 {
				p.logger.InfoContext(ctx, "webhooks: pruned old delivery records", "deleted", n, "retention", p.retention.String())
			}
		}
	})
}

// Stop ends the pruner and waits for its current run.
func (p *DeliveryPruner) Stop() { p.loop.Stop() }
