package webhook

import (
	"context"
	"log/slog"
	"time"

	"github.com/wfm-dev/wfm/internal/loop"
)

// DefaultRescueInterval is how often the rescuer looks for deliveries cut
// off by a crash.
const DefaultRescueInterval = 5 * time.Second

// RescueAfter is how long a delivery may have been running, with requests
// bounded by timeout, before it is known to have been cut off by a crash
// and is retried: twice the timeout. A delivery that is still running
// never lasts that long: its job's context ends at Worker.Timeout, one and
// a half times the timeout.
func RescueAfter(timeout time.Duration) time.Duration { return 2 * timeout }

// Rescuer retries deliveries cut off by a crash (kill -9, a lost node):
// the job of a delivery that was running on a server that died stays
// "running" in the job queue. River's own rescuer retries it too, but only
// on the leader and every 30 s, after a leader election that waits out the
// dead leader's term: about a minute and a half after a restart. The
// rescuer runs at Start, then every interval, on every replica, so a
// delivery cut off is retried within RescueAfter plus the interval of its
// start (at most 25 s with the defaults), wherever the server restarts.
// Replicas may each run one.
type Rescuer struct {
	rescue   func(ctx context.Context, stuckAfter time.Duration) (int64, error)
	after    time.Duration
	interval time.Duration
	logger   *slog.Logger
	outage   *loop.Outage

	loop loop.Loop
}

// NewRescuer returns a rescuer that calls rescue (the store's
// RescueDeliveries) with after every interval (zero:
// DefaultRescueInterval), logs to logger and its failures to outage, once
// per outage (nil: its own).
func NewRescuer(rescue func(ctx context.Context, stuckAfter time.Duration) (int64, error),
	after, interval time.Duration, logger *slog.Logger, outage *loop.Outage) *Rescuer {
	if interval <= 0 {
		interval = DefaultRescueInterval
	}
	if outage == nil {
		outage = loop.NewOutage(logger, "webhooks")
	}
	return &Rescuer{rescue: rescue, after: after, interval: interval, logger: logger, outage: outage}
}

// RunOnce rescues once, within a minute, and returns how many deliveries
// it made available again. Returns an error if the store fails.
func (r *Rescuer) RunOnce(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return r.rescue(ctx, r.after)
}

// Start runs the rescuer until Stop or ctx ends.
func (r *Rescuer) Start(ctx context.Context) {
	r.loop.Start(ctx, r.interval, func(ctx context.Context) {
		n, err := r.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			r.outage.Failed(ctx, "webhooks: looking for deliveries cut off by a crash failed", err)
		default:
			r.outage.Succeeded(ctx)
			if n > 0 {
				r.logger.InfoContext(ctx, "webhooks: deliveries cut off by a crash are retried", "deliveries", n)
			}
		}
	})
}

// Stop ends the rescuer and waits for its current run.
func (r *Rescuer) Stop() { r.loop.Stop() }
