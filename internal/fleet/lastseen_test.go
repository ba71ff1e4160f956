package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// seenClock is a settable clock.
type seenClock struct{ ns atomic.Int64 }

func (c *seenClock) now() time.Time       { return time.Unix(0, c.ns.Load()).UTC() }
func (c *seenClock) set(t time.Time)      { c.ns.Store(t.UnixNano()) }
func (c *seenClock) add(d time.Duration)  { c.ns.Add(int64(d)) }
func newSeenClock(t time.Time) *seenClock { c := &seenClock{}; c.set(t); return c }
func seenLog() *slog.Logger               { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
func lastSeenOf(t *testing.T, s *fleet.Service, client, device string) time.Time {
	t.Helper()
	d, err := s.Device(t.Context(), client, device)
	require.NoError(t, err)
	return d.LastSeenAt
}

// newSeenFleet returns a service whose device API contacts are noted by a
// LastSeen on clock (interval one minute), with client gw of devices a and
// b and client solo of device s registered at t0 (contacts, not written).
func newSeenFleet(t *testing.T, t0 time.Time) (*fleet.Service, *fleet.LastSeen, *seenClock, *pgxpool.Pool) {
	t.Helper()
	s, pool := newServiceAndPool(t)
	clock := newSeenClock(t0)
	ls := fleet.NewLastSeen(postgres.NewFleetStore(pool, 5), time.Minute, clock.now, seenLog())
	s.RecordLastSeen(ls)
	for _, k := range [][2]string{{"gw", "a"}, {"gw", "b"}, {"solo", "s"}} {
		_, err := s.PutCapabilities(t.Context(), k[0], k[1], caps(k[1]))
		require.NoError(t, err)
	}
	return s, ls, clock, pool
}

// TestLastSeenAtMostOncePerInterval: a client's polls are written to all
// its devices, at most once per interval however often the client polls
// and the flusher runs; the value written is the newest contact; a client
// that did not poll keeps its value.
func TestLastSeenAtMostOncePerInterval(t *testing.T) {
	ctx := t.Context()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s, ls, clock, _ := newSeenFleet(t, t0)
	require.True(t, lastSeenOf(t, s, "gw", "a").IsZero(), "nothing is written before a flush")

	n, err := ls.Flush(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "first flush: both clients")
	for _, k := range [][2]string{{"gw", "a"}, {"gw", "b"}, {"solo", "s"}} {
		require.Equal(t, t0, lastSeenOf(t, s, k[0], k[1]), "%s/%s after the first flush", k[0], k[1])
	}

	// Polls every 10 s; the flusher runs after each: nothing is written
	// before a minute has passed since the last write.
	for i := 1; i < 6; i++ {
		clock.add(10 * time.Second)
		_, err := s.Manifest(ctx, "gw")
		require.NoError(t, err)
		n, err := ls.Flush(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "flush %d s after the last write", 10*i)
		require.Equal(t, t0, lastSeenOf(t, s, "gw", "a"), "gw/a %d s after the last write", 10*i)
	}
	lastPoll := clock.now()
	clock.add(10 * time.Second) // a minute after the last write
	n, err = ls.Flush(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "one client polled")
	require.Equal(t, lastPoll, lastSeenOf(t, s, "gw", "a"))
	require.Equal(t, lastPoll, lastSeenOf(t, s, "gw", "b"), "the poll of a gateway marks all its devices")
	require.Equal(t, t0, lastSeenOf(t, s, "solo", "s"), "a client that did not poll")

	clock.add(time.Hour)
	n, err = ls.Flush(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "no contact since the last write")
}

// TestLastSeenForwardOnly: two server processes note contacts of the same
// client; the one with the older contact writes last, and the value stays.
func TestLastSeenForwardOnly(t *testing.T) {
	ctx := t.Context()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s, ls, clock, pool := newSeenFleet(t, t0)
	other := fleet.NewLastSeen(postgres.NewFleetStore(pool, 5), time.Minute, func() time.Time { return t0.Add(time.Second) }, seenLog())
	other.Seen("gw") // at t0+1s

	clock.add(30 * time.Second)
	_, err := s.Manifest(ctx, "gw")
	require.NoError(t, err)
	_, err = ls.Flush(ctx)
	require.NoError(t, err)
	require.Equal(t, t0.Add(30*time.Second), lastSeenOf(t, s, "gw", "a"))

	n, err := other.Flush(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, t0.Add(30*time.Second), lastSeenOf(t, s, "gw", "a"), "an older contact written later")
}

// TestLastSeenStopWrites: Stop writes the contacts still noted, though the
// interval since the last write has not passed, and ends the background
// flusher.
func TestLastSeenStopWrites(t *testing.T) {
	ctx := t.Context()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s, pool := newServiceAndPool(t)
	clock := newSeenClock(t0)
	// An interval of an hour: the background flusher never runs in this test.
	ls := fleet.NewLastSeen(postgres.NewFleetStore(pool, 5), time.Hour, clock.now, seenLog())
	s.RecordLastSeen(ls)
	ls.Start(context.WithoutCancel(ctx))
	_, err := s.PutCapabilities(ctx, "c", "d", caps("d"))
	require.NoError(t, err)
	_, err = ls.Flush(ctx)
	require.NoError(t, err)
	require.Equal(t, t0, lastSeenOf(t, s, "c", "d"))

	clock.add(5 * time.Second)
	_, err = s.Manifest(ctx, "c")
	require.NoError(t, err)
	n, err := ls.Flush(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "within the interval")
	require.NoError(t, ls.Stop(ctx))
	require.Equal(t, t0.Add(5*time.Second), lastSeenOf(t, s, "c", "d"), "written at Stop")
}

// failingSeen fails its first write, then writes to the real store.
type failingSeen struct {
	mu    sync.Mutex
	fail  bool
	store fleet.LastSeenStore
}

func (f *failingSeen) MarkClientsSeen(ctx context.Context, seen []fleet.ClientSeen) error {
	f.mu.Lock()
	fail := f.fail
	f.fail = false
	f.mu.Unlock()
	if fail {
		return errors.New("database down")
	}
	return f.store.MarkClientsSeen(ctx, seen)
}

// TestLastSeenRetriesFailedWrite: contacts a failed write did not store
// are written by the next flush (and a newer contact noted meanwhile wins).
func TestLastSeenRetriesFailedWrite(t *testing.T) {
	ctx := t.Context()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s, pool := newServiceAndPool(t)
	clock := newSeenClock(t0)
	fs := &failingSeen{fail: true, store: postgres.NewFleetStore(pool, 5)}
	ls := fleet.NewLastSeen(fs, time.Minute, clock.now, seenLog())
	s.RecordLastSeen(ls)
	_, err := s.PutCapabilities(ctx, "c", "d", caps("d"))
	require.NoError(t, err)
	_, err = ls.Flush(ctx)
	require.Error(t, err)
	require.True(t, lastSeenOf(t, s, "c", "d").IsZero())

	clock.add(time.Minute)
	n, err := ls.Flush(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, t0, lastSeenOf(t, s, "c", "d"), "the failed write's contact")
}

// BenchmarkLastSeen measures what the device poll adds: noting a contact
// of one of 10,000 known clients, from parallel goroutines (no allocation
// once the clients are known).
func BenchmarkLastSeen(b *testing.B) {
	ls := fleet.NewLastSeen(nil, time.Minute, time.Now, seenLog())
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = "client-" + time.Duration(i).String()
		ls.Seen(ids[i])
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1) * 7919)
		for pb.Next() {
			ls.Seen(ids[i%len(ids)])
			i++
		}
	})
}

// TestLastSeenConcurrentContacts notes contacts from several goroutines
// while flushes run (under the race detector in make test): no contact is
// lost, every client's device is written by the time Stop returns.
func TestLastSeenConcurrentContacts(t *testing.T) {
	ctx := t.Context()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s, pool := newServiceAndPool(t)
	clock := newSeenClock(t0)
	ls := fleet.NewLastSeen(postgres.NewFleetStore(pool, 5), time.Minute, clock.now, seenLog())
	const clients = 32
	for i := range clients {
		_, err := s.PutCapabilities(ctx, fmt.Sprint("c", i), "d", caps("d"))
		require.NoError(t, err)
	}
	s.RecordLastSeen(ls) // the registrations above are not contacts
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for round := range 20 {
				for i := g; i < clients; i += 4 {
					_, err := s.Manifest(ctx, fmt.Sprint("c", i))
					if err != nil {
						t.Errorf("round %d: %v", round, err)
						return
					}
				}
			}
		})
	}
	for range 10 {
		clock.add(time.Minute)
		_, err := ls.Flush(ctx)
		require.NoError(t, err)
	}
	wg.Wait()
	require.NoError(t, ls.Stop(ctx))
	var unseen int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM devices WHERE last_seen_at IS NULL`).Scan(&unseen))
	require.Zero(t, unseen, "devices whose client's contacts were lost")
}
