package postgres

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Listener delivers the notifications of one channel to a callback. It
// holds one pooled connection while it runs. Whenever the connection is lost
// notifications may have been missed: it says so (Lost) and, once LISTEN is
// in place again, lets its consumer catch up (Listening) before it delivers
// more, so a cache fed by it can check what it holds rather than serve
// stale data.
type Listener struct {
	Pool    *pgxpool.Pool
	Channel string
	Notify  func(payload string)
	// Lost, when not nil, is called once when the connection is lost (not
	// once per failed attempt), with the moment the connection was last
	// known alive (LISTEN in place, a notification, a ping): notifications
	// may have been missed since then. Also when the first connection
	// fails, with the moment Run started.
	Lost func(since time.Time)
	// Listening, when not nil, is called each time LISTEN is in place,
	// before any notification is delivered: notifications from then on
	// arrive, earlier ones may have been missed. An error counts as a lost
	// connection (the listener tries again).
	Listening func(ctx context.Context) error
	Log       *slog.Logger
	// Ready, when not nil, receives one value each time LISTEN is in place
	// and Listening has returned.
	Ready chan<- struct{}
	// PingEvery is how long to wait for a notification before checking the
	// connection is alive; 0 means 30 s.
	PingEvery time.Duration
	// After, when not nil, replaces time.After for the wait between
	// attempts (tests make it instant, or hold it).
	After func(time.Duration) <-chan time.Time
	// Now, when not nil, replaces time.Now for the moments given to Lost.
	Now func() time.Time

	alive time.Time // when the connection was last known alive
}

func (l *Listener) after(d time.Duration) <-chan time.Time {
	if l.After != nil {
		return l.After(d)
	}
	return time.After(d)
}

func (l *Listener) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

func (l *Listener) pingEvery() time.Duration {
	if l.PingEvery <= 0 {
		return 30 * time.Second
	}
	return l.PingEvery
}

// Run listens until ctx is done; it returns ctx's error. Connection failures
// are retried with a backoff of up to 5 s. An outage is logged once, as a
// WARN when the connection is lost and an INFO when LISTEN is back in
// place, not once per attempt: the scheduler and the readiness check say
// the same meanwhile.
func (l *Listener) Run(ctx context.Context) error {
	const first = 100 * time.Millisecond
	backoff := first
	down := false // the connection was lost and LISTEN is not back yet
	l.alive = l.now()
	listening := func() {
		if down {
			l.Log.InfoContext(ctx, "notification listener is listening again", "channel", l.Channel)
			down = false
		}
		backoff = first
	}
	for {
		err := l.listenOnce(ctx, listening)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !down {
			l.Log.WarnContext(ctx, "notification listener lost its connection; retrying until it is back", "channel", l.Channel, "error", err)
			down = true
			if l.Lost != nil {
				l.Lost(l.alive)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.after(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// listenOnce listens on one connection until it fails or ctx is done;
// listening runs once LISTEN is in place.
func (l *Listener) listenOnce(ctx context.Context, listening func()) error {
	conn, err := l.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection carries LISTEN state: take it out of the pool for good.
	pc := conn.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = pc.Close(cctx)
	}()
	if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{l.Channel}.Sanitize()); err != nil {
		return err
	}
	l.alive = l.now()
	// Anything published before LISTEN took effect may have been missed.
	if l.Listening != nil {
		if err := l.Listening(ctx); err != nil {
			return err
		}
	}
	listening()
	if l.Ready != nil {
		select {
		case l.Ready <- struct{}{}:
		default:
		}
	}
	for {
		// Wait in bounded slices and ping between them: a half-open
		// connection (failover, a NAT dropping state) would otherwise block
		// until TCP keepalive gives up, while the cache served stale data.
		wctx, cancel := context.WithTimeout(ctx, l.pingEvery())
		n, err := pc.WaitForNotification(wctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = pc.Ping(pctx)
			cancel()
			if err == nil {
				l.alive = l.now()
				continue
			}
		}
		if err != nil {
			return err
		}
		l.alive = l.now()
		l.Notify(n.Payload)
	}
}
