package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// batcher coalesces concurrent writes of one kind into batches (group
// commit). Creations: CreateDeployment queues its prepared creation; a lane
// takes everything queued (up to maxBatch) and stores it with one
// Store.CreateDeployments, one transaction and one manifest version per
// client; creations that arrive meanwhile wait for the next batch. Status
// reports: ReportStatus queues its validated report, stored the same way
// with Store.RecordReports, with a key (the deployment): a batch holds at
// most one report of a deployment, and the later reports of a deployment
// stay queued, in arrival order, for the next batches (with several lanes,
// also while another lane stores that deployment). When the lane is idle
// an item is stored at once: there is no fixed delay. One lane, not two:
// a second lane takes the few creations that arrive while the first one's
// batch is under way as a batch of their own, so batches stay small and
// every batch pays the same fixed cost (a dozen statements and a commit);
// with one lane the same load makes fewer, larger batches. Measured with
// 16 concurrent POST /mgmt/v1/deployments (wfm-bench -only fleet -clients
// 5000 -gateway-devices 5000, two runs each, alternated): one lane 555-581
// creations/s for 5,000 clients × 1 device and 616-618/s for 1 client ×
// 5,000 devices; two lanes 476-495/s and 403-405/s. For reports (wfm-bench
// -only status, 8 connections, on a loaded machine) one and two lanes
// measured the same within the noise (415-785 and 506-693 reports/s): one.
//
// A batch the store fails as a whole (a deadlock or serialization failure,
// a lock wait past the batch timeout, one item's constraint) is stored
// again one item at a time, each in its own transaction with its own
// timeout, so that each caller gets its own outcome rather than the error
// of unrelated items; a batch whose commit may have happened
// (lifecycle.ErrOutcomeUnknown) is not, as that could make its changes
// twice. A panic in a store call is recovered, logged with
// its stack and counts as that call's failure (an internal error): the lane
// lives on and no queued item is lost.
//
// Lanes are goroutines started on demand that end when the queue is
// empty; Close stops taking items and waits for them. Hand-written: it
// is a few lines over a mutex and a queue, and a batching library would
// not know the per-call withdrawal a cancelled context needs.
type batcher[I, O any] struct {
	now func() time.Time
	log *slog.Logger
	// what names an item in logs ("creation", "report").
	what string
	// call stores a batch; it is store.CreateDeployments or
	// store.RecordReports (tests wrap it to fail or panic).
	call     func(ctx context.Context, items []I, now time.Time) ([]O, error)
	lanes    int
	maxBatch int
	// key, when not nil, names what an item writes: a batch holds at most
	// one item of a key, taken in arrival order.
	key func(I) string
	// hold, when not nil, is called by a lane with a batch it took, before
	// storing it (tests hold a batch in flight with it).
	hold func([]I)
	// queued, when not nil, is called with the queue's length after an
	// item was queued (tests wait on it).
	queued func(int)

	mu    sync.Mutex
	queue []*pending[I, O]
	// busy holds the keys of the items in the lanes' batches: with a key,
	// no lane takes an item whose key another lane is storing.
	busy    map[string]bool
	running int
	closed  bool
	wg      sync.WaitGroup
}

// pending is one call's item waiting for its batch.
type pending[I, O any] struct {
	in   I
	done chan struct{} // closed once res and err are set
	res  O
	err  error // the batch failed (a store failure)
}

// Defaults of the batcher: lanes and the largest batch.
const (
	batchLanes   = 1
	maxBatch     = 256
	batchTimeout = 30 * time.Second // one batch's transaction
)

// errClosed is returned to creations and reports made after Close (503:
// nothing was stored, another server process may take it).
var errClosed = lifecycle.Retryable("unavailable", 1, "The server is shutting down; nothing was changed. Retry.")

func newBatcher[I, O any](what string, call func(context.Context, []I, time.Time) ([]O, error), now func() time.Time, log *slog.Logger) *batcher[I, O] {
	return &batcher[I, O]{what: what, now: now, log: log, call: call, lanes: batchLanes, maxBatch: maxBatch}
}

// do queues in and waits for its result. If ctx ends while in is still
// queued, it is withdrawn and ctx's error returned; once a batch took it,
// do waits for that batch (bounded by batchTimeout).
func (b *batcher[I, O]) do(ctx context.Context, in I) (O, error) {
	var zero O
	c := &pending[I, O]{in: in, done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return zero, errClosed
	}
	b.queue = append(b.queue, c)
	n := len(b.queue)
	if b.running < b.lanes {
		b.running++
		b.wg.Add(1)
		go b.lane()
	}
	b.mu.Unlock()
	if b.queued != nil {
		b.queued(n)
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if i := slices.Index(b.queue, c); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
		b.mu.Unlock()
		return zero, ctx.Err()
	}
	b.mu.Unlock()
	<-c.done // taken into a batch: it is made (or the batch fails)
	return c.res, c.err
}

// lane stores batches until the queue is empty.
func (b *batcher[I, O]) lane() {
	defer b.wg.Done()
	for {
		b.mu.Lock()
		cs := b.take()
		if len(cs) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.store1(cs)
		if b.key != nil {
			b.mu.Lock()
			for _, c := range cs {
				delete(b.busy, b.key(c.in))
			}
			b.mu.Unlock()
		}
	}
}

// take removes the next batch from the queue (b.mu held): up to maxBatch
// items, in arrival order; with a key, an item whose key is already in the
// batch or in another lane's stays queued, and so do the later items of
// that key, in order.
func (b *batcher[I, O]) take() []*pending[I, O] {
	if b.key == nil {
		n := min(len(b.queue), b.maxBatch)
		cs := slices.Clone(b.queue[:n])
		b.queue = slices.Delete(b.queue, 0, n)
		return cs
	}
	var cs []*pending[I, O]
	if b.busy == nil {
		b.busy = map[string]bool{}
	}
	rest := b.queue[:0]
	for _, c := range b.queue {
		if k := b.key(c.in); len(cs) < b.maxBatch && !b.busy[k] {
			b.busy[k] = true
			cs = append(cs, c)
			continue
		}
		rest = append(rest, c)
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	return cs
}

// store1 stores one batch and answers each of its items. If the batch
// fails as a whole, its items are stored again one by one.
func (b *batcher[I, O]) store1(cs []*pending[I, O]) {
	nds := make([]I, len(cs))
	for i, c := range cs {
		nds[i] = c.in
	}
	if b.hold != nil {
		b.hold(nds)
	}
	rs, err := b.attempt(nds)
	// A batch whose commit may have happened is not stored again: each of
	// its items gets that error, which tells its caller how to find out.
	if err != nil && len(cs) > 1 && !errors.Is(err, lifecycle.ErrOutcomeUnknown) {
		b.log.Warn(b.what+" batch failed; storing its items one by one", b.what+"s", len(cs), "err", err)
		for i, c := range cs {
			r, err := b.attempt(nds[i : i+1])
			c.err = err
			if err == nil {
				c.res = r[0]
			}
			close(c.done)
		}
		return
	}
	for i, c := range cs {
		if err != nil {
			c.err = err
		} else {
			c.res = rs[i]
		}
		close(c.done)
	}
}

// attempt is one store call (one transaction) bounded by batchTimeout. A
// panic in it is recovered and returned as an internal error.
func (b *batcher[I, O]) attempt(nds []I) (rs []O, err error) {
	defer func() {
		if p := recover(); p != nil {
			b.log.Error(b.what+" batch panicked", b.what+"s", len(nds), "panic", p, "stack", string(debug.Stack()))
			rs, err = nil, lifecycle.Errorf(lifecycle.EINTERNAL, "storing %d %ss panicked: %v", len(nds), b.what, p)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	rs, err = b.call(ctx, nds, b.now().UTC())
	if err == nil && len(rs) != len(nds) {
		return nil, fmt.Errorf("the store answered %d of %d %ss", len(rs), len(nds), b.what)
	}
	return rs, err
}

// close refuses further items and waits for the lanes to store what is
// queued.
func (b *batcher[I, O]) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}
