package fleet

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestWakeUpsArePaced: a storm of wake-ups (one per status report) makes
// at most one pass per wakePacing, and a wake-up is still served without
// waiting for the interval.
func TestWakeUpsArePaced(t *testing.T) {
	sc := &Scheduler{interval: time.Hour}
	ctx, cancel := context.WithCancel(t.Context())
	wakeups := make(chan struct{}, 1)
	var passes atomic.Int64
	passed := make(chan struct{}, 1000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc.loop(ctx, "test", func(context.Context) error {
			passes.Add(1)
			passed <- struct{}{}
			return nil
		}, wakeups)
	}()
	<-passed // the first pass runs at start
	const storm = 300 * time.Millisecond
	start := time.Now()
	for time.Since(start) < storm {
		select {
		case wakeups <- struct{}{}:
		default:
		}
	}
	elapsed := time.Since(start)
	n := passes.Load() - 1
	if limit := int64(elapsed/wakePacing) + 2; n > limit {
		t.Errorf("%d passes woken in %v, want at most %d (one per %v)", n, elapsed, limit, wakePacing)
	}
	if n < 1 {
		t.Errorf("no pass woken in %v", elapsed)
	}
	// One more wake-up: served within a bound far below the interval.
	for len(passed) > 0 {
		<-passed
	}
	wakeups <- struct{}{}
	select {
	case <-passed:
	case <-time.After(10 * time.Second):
		t.Fatal("a wake-up after a quiet spell was not served")
	}
	cancel()
	<-done
}
