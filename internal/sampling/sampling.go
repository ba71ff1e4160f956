// Package sampling lets the first few events of each key through per
// interval and counts the rest, so that a flood of similar events (log
// lines, audit entries of refused calls) costs a bounded amount while its
// size is still reported: when an interval ends, the count of what was held
// back for each key is handed to a flush function, and what that function
// fails to take is kept and offered again.
//
// It is hand-written: log samplers exist (zap's, for example) but drop what
// they hold back, or only count it in a metric; here every held-back event
// must be reported, per key and interval, to a writer that can fail (the
// audit log).
package sampling

import (
	"context"
	"sync"
	"time"
)

// Config is what a Sampler needs.
type Config[K comparable] struct {
	// First is how many events of a key pass per interval (at least 1).
	First int
	// Interval is the length of an interval (windows are contiguous).
	Interval time.Duration
	// MaxKeys bounds the keys counted per interval; events of further keys
	// are held back (none passes) and counted under Overflow(key).
	MaxKeys int
	// MaxPass, if > 0, bounds the events that pass per interval over all
	// keys: beyond it every event is held back and counted under its key,
	// even one of a key's First. It bounds what a flood of many keys costs
	// at once (First × MaxKeys otherwise).
	MaxPass int
	// Overflow maps a key beyond MaxKeys to the coarser key it is counted
	// under; nil: the zero K.
	Overflow func(K) K
	// Now is the clock.
	Now func() time.Time
	// Flush reports that count events of key were held back in
	// [start, end). An error keeps the count to be offered again (with its
	// interval) at the next flush.
	Flush func(ctx context.Context, key K, count int, start, end time.Time) error
	// OnFlushError, if not nil, hears about a failed Flush from the
	// background loop (Start).
	OnFlushError func(err error)
}

// maxPending bounds the ended intervals kept while Flush fails; beyond it
// the oldest two are merged into one (the counts stay, the interval widens).
const maxPending = 64

// batch is the held-back counts of one interval (or of merged ones).
type batch[K comparable] struct {
	start, end time.Time
	counts     map[K]int
}

// Sampler decides which events pass and counts the others. It is safe for
// concurrent use.
type Sampler[K comparable] struct {
	cfg Config[K]

	mu      sync.Mutex
	start   time.Time // of the current interval; zero before the first event
	seen    map[K]int // events per key in the current interval
	held    map[K]int // events held back per key in the current interval
	passed  int       // events that passed in the current interval
	pending []batch[K]

	flushMu sync.Mutex // one flush at a time

	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a sampler.
func New[K comparable](cfg Config[K]) *Sampler[K] {
	cfg.First = max(cfg.First, 1)
	cfg.MaxKeys = max(cfg.MaxKeys, 1)
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	return &Sampler[K]{cfg: cfg, seen: map[K]int{}, held: map[K]int{}}
}

// Allow reports whether an event of key passes: true for the first
// Config.First of the key in the current interval; otherwise the event is
// counted, to be flushed when the interval ends.
func (s *Sampler[K]) Allow(key K) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rotate(s.cfg.Now())
	if _, known := s.seen[key]; !known && len(s.seen) >= s.cfg.MaxKeys {
		s.held[s.overflow(key)]++
		return false
	}
	s.seen[key]++
	if s.seen[key] <= s.cfg.First && (s.cfg.MaxPass <= 0 || s.passed < s.cfg.MaxPass) {
		s.passed++
		return true
	}
	s.held[key]++
	return false
}

func (s *Sampler[K]) overflow(key K) K {
	if s.cfg.Overflow == nil {
		var zero K
		return zero
	}
	return s.cfg.Overflow(key)
}

// rotate ends the current interval when now is past it. Called with mu held.
func (s *Sampler[K]) rotate(now time.Time) {
	if s.start.IsZero() {
		s.start = now
		return
	}
	if now.Sub(s.start) < s.cfg.Interval {
		return
	}
	end := s.start.Add(s.cfg.Interval)
	s.endInterval(end)
	s.start = end.Add(now.Sub(end) / s.cfg.Interval * s.cfg.Interval) // contiguous windows
}

// endInterval moves the current interval's held-back counts to pending.
// Called with mu held.
func (s *Sampler[K]) endInterval(end time.Time) {
	if len(s.held) > 0 {
		s.pending = append(s.pending, batch[K]{start: s.start, end: end, counts: s.held})
	}
	s.held, s.seen, s.passed = map[K]int{}, map[K]int{}, 0
	for len(s.pending) > maxPending {
		a, b := s.pending[0], s.pending[1]
		for k, n := range b.counts {
			if _, known := a.counts[k]; !known && len(a.counts) >= s.cfg.MaxKeys {
				k = s.overflow(k)
			}
			a.counts[k] += n
		}
		a.end = b.end
		s.pending = append([]batch[K]{a}, s.pending[2:]...)
	}
}

// Flush hands the counts of every ended interval to Config.Flush; with
// final, also those of the current one (which then ends: use it on
// shutdown). It returns the first error of Config.Flush, keeping that count
// and every one not yet handed over for the next flush.
func (s *Sampler[K]) Flush(ctx context.Context, final bool) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	now := s.cfg.Now()
	if !s.start.IsZero() {
		s.rotate(now)
		if final {
			s.endInterval(now)
			s.start = time.Time{}
		}
	}
	todo := s.pending
	s.pending = nil
	s.mu.Unlock()

	for i, b := range todo {
		for k, n := range b.counts {
			if err := s.cfg.Flush(ctx, k, n, b.start, b.end); err != nil {
				s.mu.Lock()
				s.pending = append(append([]batch[K]{}, todo[i:]...), s.pending...)
				s.mu.Unlock()
				return err
			}
			delete(b.counts, k)
		}
	}
	return nil
}

// Start flushes every interval in the background until Stop.
func (s *Sampler[K]) Start(ctx context.Context) {
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fctx, cancel := context.WithTimeout(ctx, s.cfg.Interval)
				if err := s.Flush(fctx, false); err != nil && s.cfg.OnFlushError != nil {
					s.cfg.OnFlushError(err)
				}
				cancel()
			}
		}
	}()
}

// Stop stops the background loop, waits for it, and flushes everything
// counted so far (within ctx). Returns the flush's error.
func (s *Sampler[K]) Stop(ctx context.Context) error {
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
	return s.Flush(ctx, true)
}
