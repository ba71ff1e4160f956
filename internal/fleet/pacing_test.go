package fleet

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestWakeUpsArePaced: a storm of wake-ups (one per status report) makes
// at most one pass per wakePacing, and once the loop is quiet, one more
// wake-up is served by one pass without waiting for the interval.
func TestWakeUpsArePaced(t *testing.T) {
	sc := &Scheduler{interval: time.Hour}
	ctx, cancel := context.WithCancel(t.Context())
	wakeups := make(chan struct{}, 1)
	var passes atomic.Int64
	passed := make(chan struct{}, 10_000)
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
		time.Sleep(20 * time.Microsecond) // a storm, without holding a core
	}
	elapsed := time.Since(start)
	n := passes.Load() - 1
	if limit := int64(elapsed/wakePacing) + 2; n > limit {
		t.Errorf("%d passes woken in %v, want at most %d (one per %v)", n, elapsed, limit, wakePacing)
	}
	if n < 1 {
		t.Errorf("no pass woken in %v", elapsed)
	}
	// Quiet: the wake-up left over from the storm is served, then no pass
	// comes for several pacing periods (bounded).
	quiet := time.NewTimer(10 * time.Second)
	defer quiet.Stop()
	for stillPassing := true; stillPassing; {
		select {
		case <-passed:
		case <-time.After(5 * wakePacing):
			stillPassing = false
		case <-quiet.C:
			t.Fatal("passes went on after the storm")
		}
	}
	before := passes.Load()
	wakeups <- struct{}{}
	select {
	case <-passed:
	case <-time.After(10 * time.Second):
		t.Fatal("a wake-up after a quiet spell was not served")
	}
	if got := passes.Load() - before; got != 1 {
		t.Errorf("%d passes for one wake-up, want 1", got)
	}
	cancel()
	<-done
}
