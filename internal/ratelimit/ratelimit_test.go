package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestBurstThenRate(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(10, 5, 100, c.now)
	for i := range 5 {
		ok, _ := l.Allow("a")
		require.True(t, ok, "request %d of the burst", i)
	}
	ok, wait := l.Allow("a")
	require.False(t, ok)
	assert.InDelta(t, 100*time.Millisecond, wait, float64(time.Millisecond))
	ok, _ = l.Allow("b")
	assert.True(t, ok, "another key has its own bucket")

	c.advance(100 * time.Millisecond)
	ok, _ = l.Allow("a")
	assert.True(t, ok, "one token refilled after 1/rate")
	ok, _ = l.Allow("a")
	assert.False(t, ok)

	c.advance(time.Hour)
	for range 5 {
		ok, _ := l.Allow("a")
		assert.True(t, ok)
	}
	ok, _ = l.Allow("a")
	assert.False(t, ok, "refill stops at the burst")
}

func TestMemoryIsBounded(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(1, 1, 100, c.now)
	for i := range 10000 {
		l.Allow(fmt.Sprint("key", i))
	}
	assert.LessOrEqual(t, l.Len(), 100)
}

func TestExhaustedTakesNoToken(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(10, 2, 100, c.now)
	over, _ := l.Exhausted("a")
	assert.False(t, over, "an unknown key has a full bucket")
	for range 2 {
		over, _ := l.Exhausted("a")
		require.False(t, over)
		ok, _ := l.Allow("a")
		require.True(t, ok)
	}
	over, wait := l.Exhausted("a")
	assert.True(t, over)
	assert.InDelta(t, 100*time.Millisecond, wait, float64(time.Millisecond))
	for range 10 {
		l.Exhausted("a")
	}
	c.advance(100 * time.Millisecond)
	over, _ = l.Exhausted("a")
	assert.False(t, over, "asking took nothing: one token refilled after 1/rate")
	ok, _ := l.Allow("a")
	assert.True(t, ok)
	assert.Equal(t, 1, l.Len(), "asking about a key does not remember it")
}
