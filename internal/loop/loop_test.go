package loop

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestLoopRunsAtStartAndStops: a pass runs at once, passes repeat at the
// interval, Stop waits for the current pass and none runs after it.
func TestLoopRunsAtStartAndStops(t *testing.T) {
	var l Loop
	var passes atomic.Int32
	first := make(chan struct{})
	l.Start(context.Background(), time.Millisecond, func(ctx context.Context) {
		if passes.Add(1) == 1 {
			close(first)
		}
	})
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("no pass at start")
	}
	deadline := time.Now().Add(10 * time.Second)
	for passes.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("passes did not repeat")
		}
		time.Sleep(time.Millisecond)
	}
	l.Stop()
	n := passes.Load()
	time.Sleep(5 * time.Millisecond)
	if passes.Load() != n {
		t.Fatal("a pass ran after Stop")
	}
	l.Stop() // stopping twice is harmless
}
