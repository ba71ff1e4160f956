package webhook

import (
	"context"
	"log/slog"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/loop"
)

// Job is one delivery the dispatcher decided: event EventID to WebhookID.
type Job struct {
	WebhookID string
	EventID   int64
	Subject   lifecycle.Ref
}

// DispatchStore is what the dispatcher needs of the store.
type DispatchStore interface {
	// Dispatch, in one transaction and only if no other dispatcher holds
	// the dispatch lock, reads up to limit events after the dispatch
	// cursor, calls match with them and the histories of the subscriptions
	// (every version that may judge one of them), queues
	// the returned jobs (each with its subject's next sequence number, in
	// log order) and moves the cursor past the events read. It returns how
	// many events it read (0 also when another dispatcher holds the lock).
	Dispatch(ctx context.Context, limit int, match func([]lifecycle.Event, []History) []Job) (int, error)
}

// History is a subscription's versions in ascending log position: what
// decides which events belong to it.
type History struct {
	WebhookID string
	Versions  []lifecycle.WebhookVersion
}

// Match returns the deliveries of events to the subscriptions of hs: each
// event to every subscription it belonged to when it was committed
// (lifecycle.WebhookReceives), whatever the subscription is now.
func Match(events []lifecycle.Event, hs []History) []Job {
	var jobs []Job
	for _, e := range events {
		for _, h := range hs {
			if lifecycle.WebhookReceives(h.Versions, e) {
				jobs = append(jobs, Job{WebhookID: h.WebhookID, EventID: e.ID, Subject: e.Subject})
			}
		}
	}
	return jobs
}

// Dispatcher turns committed events into delivery jobs: it follows the
// event log from a cursor stored in the database, and queues jobs and moves
// the cursor in one transaction, so an event is queued exactly once
// whatever crashes. Replicas may each run one; one at a time dispatches.
// The status-report path pays nothing: it only appends events, as before.
type Dispatcher struct {
	store    DispatchStore
	interval time.Duration
	batch    int
	outage   *loop.Outage

	loop loop.Loop
}

// DefaultDispatchInterval is how often the dispatcher looks for new events
// when it found none.
const DefaultDispatchInterval = 100 * time.Millisecond

// NewDispatcher returns a dispatcher on store that polls every interval
// (zero: DefaultDispatchInterval) and logs its failures to logger once per
// outage (Outage).
func NewDispatcher(store DispatchStore, interval time.Duration, logger *slog.Logger) *Dispatcher {
	if interval <= 0 {
		interval = DefaultDispatchInterval
	}
	return &Dispatcher{store: store, interval: interval, batch: 500, outage: loop.NewOutage(logger, "webhooks")}
}

// Outage is where the dispatcher's failures are logged, once per outage:
// it polls every DefaultDispatchInterval, so its passes are the first to
// learn that the database is away and back. The webhook machinery's other
// background work (the rescuer, the job queue's logger) shares it.
func (d *Dispatcher) Outage() *loop.Outage { return d.outage }

// RunOnce dispatches until the log has no more events to read now, and
// returns how many events it read. Returns an error if the store fails.
func (d *Dispatcher) RunOnce(ctx context.Context) (int, error) {
	total := 0
	for {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		n, err := d.store.Dispatch(ctx, d.batch, Match)
		cancel()
		total += n
		if err != nil || n < d.batch {
			return total, err
		}
	}
}

// Start runs the dispatcher until Stop or ctx ends.
func (d *Dispatcher) Start(ctx context.Context) {
	d.loop.Start(ctx, d.interval, func(ctx context.Context) {
		_, err := d.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			d.outage.Failed(ctx, "webhooks: dispatching events failed", err)
		default:
			d.outage.Succeeded(ctx)
		}
	})
}

// Stop ends the dispatcher and waits for its current run.
func (d *Dispatcher) Stop() { d.loop.Stop() }
