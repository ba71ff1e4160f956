// Package loop runs a background pass now and then at every interval until
// stopped: the shape of wfm's pruners and of the webhook dispatcher, written
// once; and logs such passes' failures once per outage (Outage). It is a few lines rather than a library because what a pass does,
// logs and times out is the caller's; the loop only owns the goroutine.
package loop

import (
	"context"
	"sync"
	"time"
)

// Loop owns one background goroutine that calls a pass. The zero value is
// ready to use; a Loop is started once at a time.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start calls pass now and then every interval until Stop or ctx ends. pass
// gets a context that ends at Stop; it bounds its own work.
func (l *Loop) Start(ctx context.Context, interval time.Duration, pass func(context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			pass(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the loop and waits for its current pass; a loop not started is
// left alone.
func (l *Loop) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		l.cancel()
		<-l.done
		l.cancel = nil
	}
}
