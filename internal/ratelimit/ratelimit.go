// Package ratelimit bounds how fast each caller may call: one token bucket
// per key (a WFM client id, an API token, a client address), in memory, per
// server process.
//
// The buckets are golang.org/x/time/rate limiters, driven with explicit
// times from an injected clock (AllowN/ReserveN take the time), so tests
// need no sleeping. What this package adds is the set of buckets: a map of
// them whose size is bounded, so a flood of new keys cannot grow memory.
package ratelimit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter is a set of token buckets, one per key. It is safe for concurrent use.
type Limiter struct {
	limit   rate.Limit
	burst   int
	maxKeys int
	now     func() time.Time

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// New returns a limiter that lets each key make r requests a second on
// average and burst at once, remembering at most maxKeys keys (idle ones,
// whose buckets are full again, are forgotten first). now is the clock.
// r must be greater than 0: an unlimited caller needs no Limiter.
func New(r float64, burst int, maxKeys int, now func() time.Time) *Limiter {
	return &Limiter{limit: rate.Limit(r), burst: max(burst, 1), maxKeys: max(maxKeys, 1), now: now, buckets: map[string]*rate.Limiter{}}
}

// Allow takes one token from key's bucket. When there is none it returns
// false and how long until there is one.
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= l.maxKeys {
			l.evict(now)
		}
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets[key] = b
	}
	if b.AllowN(now, 1) {
		return true, 0
	}
	r := b.ReserveN(now, 1)
	wait := r.DelayFrom(now)
	r.CancelAt(now) // only asked how long: the token stays in the bucket
	return false, wait
}

// Exhausted reports, without taking a token, whether key's bucket is empty
// now, and if so how long until it holds one. A key the limiter does not
// remember has a full bucket. It lets a caller refuse a request before
// doing costly work for it (such as looking up a token).
func (l *Limiter) Exhausted(key string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		return false, 0
	}
	tokens := b.TokensAt(now)
	if tokens >= 1 {
		return false, 0
	}
	return true, time.Duration((1 - tokens) / float64(l.limit) * float64(time.Second))
}

// evict forgets the buckets that are full again (their keys were idle long
// enough that forgetting them changes nothing); if none is, it forgets half
// of them, so memory stays bounded under a flood of new keys.
func (l *Limiter) evict(now time.Time) {
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, k)
		}
	}
	for k := range l.buckets {
		if len(l.buckets) < l.maxKeys/2+1 {
			break
		}
		delete(l.buckets, k)
	}
}

// Len returns how many keys the limiter remembers.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
