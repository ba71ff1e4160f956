package sampling

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

type flushed struct {
	key        string
	count      int
	start, end time.Time
}

func newTest(c *clock, fail *error, out *[]flushed) *Sampler[string] {
	return New(Config[string]{First: 3, Interval: time.Minute, MaxKeys: 4, Now: c.now,
		Overflow: func(string) string { return "other" },
		Flush: func(_ context.Context, k string, n int, start, end time.Time) error {
			if *fail != nil {
				return *fail
			}
			*out = append(*out, flushed{k, n, start, end})
			return nil
		}})
}

func TestFirstPassRestCountedPerKeyAndInterval(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c := &clock{t: t0}
	var fail error
	var out []flushed
	s := newTest(c, &fail, &out)

	passed := 0
	for range 100 {
		if s.Allow("a") {
			passed++
		}
	}
	assert.Equal(t, 3, passed, "the first 3 of a key pass")
	assert.True(t, s.Allow("b"), "another key has its own count")

	require.NoError(t, s.Flush(t.Context(), false))
	assert.Empty(t, out, "nothing is flushed before the interval ends")

	c.advance(61 * time.Second)
	assert.True(t, s.Allow("a"), "a new interval lets the first ones pass again")
	require.NoError(t, s.Flush(t.Context(), false))
	require.Equal(t, []flushed{{"a", 97, t0, t0.Add(time.Minute)}}, out, "one count per key and ended interval")

	for range 10 {
		s.Allow("a")
	}
	c.advance(10 * time.Second)
	out = nil
	require.NoError(t, s.Flush(t.Context(), true), "shutdown flushes the current interval")
	assert.Equal(t, []flushed{{"a", 8, t0.Add(time.Minute), c.t}}, out)
}

func TestFailedFlushIsKeptAndRetried(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c := &clock{t: t0}
	fail := errors.New("database down")
	var out []flushed
	s := newTest(c, &fail, &out)
	for range 5 {
		s.Allow("a")
	}
	c.advance(2 * time.Minute)
	for range 5 {
		s.Allow("a")
	}
	c.advance(time.Minute)
	assert.ErrorIs(t, s.Flush(t.Context(), false), fail)
	fail = nil
	require.NoError(t, s.Flush(t.Context(), false))
	assert.Equal(t, []flushed{{"a", 2, t0, t0.Add(time.Minute)}, {"a", 2, t0.Add(2 * time.Minute), t0.Add(3 * time.Minute)}}, out,
		"nothing is lost while the flush fails; windows stay contiguous")
}

func TestKeysAreBounded(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	var fail error
	var out []flushed
	s := newTest(c, &fail, &out)
	passed := 0
	for i := range 1000 {
		if s.Allow(fmt.Sprint("key", i)) {
			passed++
		}
	}
	assert.Equal(t, 4, passed, "only MaxKeys keys are let through")
	require.NoError(t, s.Flush(t.Context(), true))
	assert.Equal(t, []flushed{{"other", 996, time.Unix(1000, 0), time.Unix(1000, 0)}}, out, "the others are counted under the overflow key")
}

func TestStartStopFlushes(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	var fail error
	var out []flushed
	s := newTest(c, &fail, &out)
	s.Start(t.Context())
	for range 5 {
		s.Allow("a")
	}
	require.NoError(t, s.Stop(t.Context()))
	assert.Equal(t, []flushed{{"a", 2, time.Unix(1000, 0), time.Unix(1000, 0)}}, out)
}

// TestMaxPassBoundsEveryKeyTogether: with MaxPass, a flood of many keys
// lets at most MaxPass events through per interval; the rest are counted
// under their own keys.
func TestMaxPassBoundsEveryKeyTogether(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c := &clock{t: t0}
	var out []flushed
	s := New(Config[string]{First: 3, Interval: time.Minute, MaxKeys: 100, MaxPass: 10, Now: c.now,
		Flush: func(_ context.Context, k string, n int, start, end time.Time) error {
			out = append(out, flushed{k, n, start, end})
			return nil
		}})
	passed := 0
	for i := range 50 {
		if s.Allow(fmt.Sprint("key", i)) {
			passed++
		}
	}
	assert.Equal(t, 10, passed, "MaxPass over all keys")
	c.advance(time.Minute)
	assert.True(t, s.Allow("key49"), "a new interval has a new budget")
	require.NoError(t, s.Flush(t.Context(), false))
	total := 0
	for _, f := range out {
		assert.Equal(t, 1, f.count, f.key)
		total += f.count
	}
	assert.Equal(t, 40, total, "every held-back event counted under its key")
}
