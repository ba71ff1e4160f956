package fleet

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wfm-dev/wfm/internal/loop"
)

// What "seen" means (Margo): the device API is spoken by a WFM client, the
// agent that speaks for its devices (one device, or a gateway's several).
// Any request of a client the device API accepts — the manifest poll, a
// document or bundle fetch, a status report, a capabilities report — is a
// contact that marks every registered device of that client seen: wfm
// cannot tell more than that, since the manifest poll names no device. A
// status report or a capabilities report naming one device is such a
// contact of its client too, so it marks that device (and its siblings).

// Bounds of LastSeen.
const (
	// DefaultLastSeenInterval is how often the contacts noted in memory
	// are written: devices.last_seen_at lags the last contact by up to
	// about this much.
	DefaultLastSeenInterval = time.Minute
	// lastSeenBatch bounds the clients of one UPDATE statement.
	lastSeenBatch = 5_000
	// lastSeenTimeout bounds one write of the flusher.
	lastSeenTimeout = 30 * time.Second
	// lastSeenShards is the number of independently locked maps the hot
	// path spreads its clients over.
	lastSeenShards = 64
)

// ClientSeen is one client's last contact, to be written to its devices.
type ClientSeen struct {
	ClientID string
	At       time.Time
}

// LastSeenStore writes the contacts LastSeen noted.
type LastSeenStore interface {
	// MarkClientsSeen moves the last_seen_at of every registered device
	// of each client forward to its At (never backwards: several
	// processes may write the same device), set-based. Returns an error,
	// and may have written only some clients, when the database fails.
	MarkClientsSeen(ctx context.Context, seen []ClientSeen) error
}

// seenShard is one lock's share of the pending contacts: client id -> the
// newest contact (Unix nanoseconds). Padded so that two shards' locks never
// share a cache line.
type seenShard struct {
	mu      sync.Mutex
	pending map[string]int64
	_       [48]byte
}

// LastSeen notes the device API contacts of clients in memory (a map write
// under one of lastSeenShards locks, no allocation once a client is known)
// and writes them to the store from the background, at most once per
// interval: a device's last_seen_at is written at most once per interval
// by each server process, however often its client polls. Stop writes what
// is still noted.
type LastSeen struct {
	store    LastSeenStore
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger
	seed     maphash.Seed
	shards   [lastSeenShards]seenShard

	// flushMu serializes writes; lastFlush is the instant of the last
	// write (zero: none yet).
	flushMu   sync.Mutex
	lastFlush time.Time

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewLastSeen returns a recorder that writes to store every interval (zero:
// DefaultLastSeenInterval), reading the time from now.
func NewLastSeen(store LastSeenStore, interval time.Duration, now func() time.Time, log *slog.Logger) *LastSeen {
	if interval <= 0 {
		interval = DefaultLastSeenInterval
	}
	l := &LastSeen{store: store, interval: interval, now: now, log: log, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].pending = make(map[string]int64)
	}
	return l
}

// Seen notes a contact of clientID now. It is on the device poll's path:
// one clock read and one map write under a shard's lock. A nil LastSeen
// notes nothing.
func (l *LastSeen) Seen(clientID string) {
	if l == nil {
		return
	}
	at := l.now().UnixNano()
	sh := &l.shards[maphash.String(l.seed, clientID)%lastSeenShards]
	sh.mu.Lock()
	if sh.pending[clientID] < at {
		sh.pending[clientID] = at
	}
	sh.mu.Unlock()
}

// take removes and returns the noted contacts, sorted by client id (two
// processes writing the same devices lock them in the same order). The
// shards' maps keep their room for the next contacts.
func (l *LastSeen) take() []ClientSeen {
	var out []ClientSeen
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for id, at := range sh.pending {
			out = append(out, ClientSeen{ClientID: id, At: time.Unix(0, at).UTC()})
		}
		clear(sh.pending)
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b ClientSeen) int { return strings.Compare(a.ClientID, b.ClientID) })
	return out
}

// putBack notes again contacts a failed write did not store (newer
// contacts noted meanwhile win).
func (l *LastSeen) putBack(seen []ClientSeen) {
	for _, s := range seen {
		at := s.At.UnixNano()
		sh := &l.shards[maphash.String(l.seed, s.ClientID)%lastSeenShards]
		sh.mu.Lock()
		if sh.pending[s.ClientID] < at {
			sh.pending[s.ClientID] = at
		}
		sh.mu.Unlock()
	}
}

// Flush writes the noted contacts if the last write is at least an
// interval old (otherwise it writes nothing and returns 0), and returns how
// many clients it wrote. What a failed write did not store is noted again
// for the next one. Returns an error if the database fails.
func (l *LastSeen) Flush(ctx context.Context) (int, error) {
	return l.flush(ctx, false)
}

func (l *LastSeen) flush(ctx context.Context, final bool) (int, error) {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	now := l.now()
	if !final && !l.lastFlush.IsZero() && now.Sub(l.lastFlush) < l.interval {
		return 0, nil
	}
	seen := l.take()
	if len(seen) == 0 {
		return 0, nil
	}
	l.lastFlush = now
	for i := 0; i < len(seen); i += lastSeenBatch {
		batch := seen[i:min(i+lastSeenBatch, len(seen))]
		if err := l.store.MarkClientsSeen(ctx, batch); err != nil {
			l.putBack(seen[i:])
			return i, fmt.Errorf("last seen: write %d clients: %w", len(seen)-i, err)
		}
	}
	return len(seen), nil
}

// Start writes the noted contacts every interval until Stop or ctx ends.
func (l *LastSeen) Start(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, l.cancel = context.WithCancel(ctx)
	done := make(chan struct{})
	l.done = done
	go func() {
		defer close(done)
		t := time.NewTimer(l.interval)
		defer t.Stop()
		outage := loop.NewOutage(l.log, "devices: last seen instants")
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			wctx, cancel := context.WithTimeout(ctx, lastSeenTimeout)
			if _, err := l.Flush(wctx); err == nil {
				outage.Succeeded(ctx)
			} else if ctx.Err() == nil {
				outage.Failed(ctx, "devices: writing last seen instants failed", err)
			}
			cancel()
			// The next run is a whole interval after this one ended, so
			// that Flush always finds its interval passed.
			t.Reset(l.interval)
		}
	}()
}

// Stop ends the background writes, waits for the current one, then writes
// every contact still noted (whatever the interval), within ctx. Call it
// once the device API has finished its requests. Returns an error if that
// last write fails.
func (l *LastSeen) Stop(ctx context.Context) error {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	_, err := l.flush(ctx, true)
	return err
}
