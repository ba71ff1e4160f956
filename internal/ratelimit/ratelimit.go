// Package ratelimit bounds how fast each caller may call: one token bucket
// per key (a WFM client id), in memory, per server process.
package ratelimit

import (
	"math"
	"sync"
	"time"
)

// Limiter is a set of token buckets, one per key. It is safe for concurrent use.
type Limiter struct {
	rate    float64 // tokens per second
	burst   float64
	maxKeys int
	now     func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// New returns a limiter that lets each key make rate requests a second on
// average and burst at once, remembering at most maxKeys keys (idle ones,
// whose buckets are full again, are forgotten first). now is the clock.
func New(rate float64, burst int, maxKeys int, now func() time.Time) *Limiter {
	return &Limiter{rate: rate, burst: float64(max(burst, 1)), maxKeys: max(maxKeys, 1), now: now, buckets: map[string]*bucket{}}
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
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, wait
}

// evict forgets the buckets that are full again (their keys were idle long
// enough that forgetting them changes nothing); if none is, it forgets half
// of them, so memory stays bounded under a flood of new keys.
func (l *Limiter) evict(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
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
