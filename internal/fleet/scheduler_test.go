package fleet_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// collidingStore is the PostgreSQL fleet store with collisions injected:
// the first failAdvance visits and the first failList listings answer as a
// serialization failure does (EUNAVAILABLE, type "retry"). listed receives
// a value after each listing.
type collidingStore struct {
	fleet.Store
	failAdvance, failList atomic.Int32
	listed                chan struct{}
}

func collision() error {
	return &lifecycle.Error{Code: lifecycle.EUNAVAILABLE, Type: "retry", Message: "The change collided with a concurrent one and was not made; retry it."}
}

func (s *collidingStore) ActiveOperations(ctx context.Context, limit int, now time.Time) ([]string, error) {
	defer func() {
		if s.listed != nil {
			s.listed <- struct{}{}
		}
	}()
	if s.failList.Add(-1) >= 0 {
		return nil, collision()
	}
	return s.Store.ActiveOperations(ctx, limit, now)
}

func (s *collidingStore) AdvanceOperations(ctx context.Context, ids []string, decide func(fleet.Visit) (fleet.Advance, error), now time.Time, o fleet.AdvanceOptions) []fleet.VisitResult {
	out := make([]fleet.VisitResult, len(ids))
	var rest []string
	var at []int
	for i, id := range ids {
		if s.failAdvance.Add(-1) >= 0 {
			out[i] = fleet.VisitResult{Err: collision()}
			continue
		}
		rest, at = append(rest, id), append(at, i)
	}
	for j, r := range s.Store.AdvanceOperations(ctx, rest, decide, now, o) {
		out[at[j]] = r
	}
	return out
}

// syncBuffer is a log destination the test may read while a scheduler writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// collidingService returns a service on store with two deployments, each
// with an upgrade to 2.0.0 queued, and the upgrades' ids.
func collidingService(t *testing.T, store *collidingStore, log io.Writer) (*fleet.Service, []string) {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.New(t)
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	for _, v := range []string{"1.0.0", "2.0.0"} {
		_, _, err := cat.Add(ctx, []byte(strings.ReplaceAll(description, `"1.0.0"`, `"`+v+`"`)), catalog.MediaYAML)
		require.NoError(t, err)
	}
	store.Store = postgres.NewFleetStore(pool, 5)
	s := fleet.NewService(store, cat, fleet.Policy{AcceptAll: true}, time.Now, slog.New(slog.NewTextHandler(log, nil)))
	var ops []string
	for _, dev := range []string{"d1", "d2"} {
		_, err := s.PutCapabilities(ctx, "c", dev, caps(dev))
		require.NoError(t, err)
		d, err := s.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: dev})
		require.NoError(t, err)
		_, err = s.ReportStatus(ctx, "c", d.ID, report(d.ID, d.DesiredSince, "installed"))
		require.NoError(t, err)
		_, op, err := s.Upgrade(ctx, d.ID, fleet.UpgradeRequest{TargetVersion: "2.0.0"}, fleet.Actor{ID: "t"}, false, fleet.Precondition{})
		require.NoError(t, err)
		ops = append(ops, op.ID)
	}
	return s, ops
}

// TestSchedulerPassSurvivesACollision: a serialization failure or deadlock
// on one operation is not an outage: the pass goes on with the others and
// the collided one advances at the next pass.
func TestSchedulerPassSurvivesACollision(t *testing.T) {
	ctx := t.Context()
	store := &collidingStore{}
	s, ops := collidingService(t, store, io.Discard)
	sc := fleet.NewScheduler(s, time.Hour)

	store.failAdvance.Store(1)
	n, err := sc.RunOnce(ctx)
	require.NoError(t, err, "a collision does not end the pass")
	require.Equal(t, 1, n, "the other operation was visited")
	published := func() int {
		c := 0
		for _, id := range ops {
			op, err := s.Operation(ctx, id)
			require.NoError(t, err)
			if op.Steps[0].State == lifecycle.StepPublished {
				c++
			}
		}
		return c
	}
	require.Equal(t, 1, published())

	_, err = sc.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, published(), "the collided operation advances at the next pass")
}

// TestSchedulerDoesNotCallACollisionAnOutage: a pass that collides logs
// neither "paused" (an outage) nor an ERROR.
func TestSchedulerDoesNotCallACollisionAnOutage(t *testing.T) {
	var log syncBuffer
	store := &collidingStore{listed: make(chan struct{}, 4)}
	s, _ := collidingService(t, store, &log)
	store.failList.Store(1)
	store.failAdvance.Store(1)
	sc := fleet.NewScheduler(s, time.Hour)
	sc.Start(t.Context())
	defer sc.Stop()
	for pass := 1; pass <= 3; pass++ {
		select {
		case <-store.listed:
		case <-time.After(10 * time.Second):
			t.Fatalf("scheduler pass %d did not run", pass)
		}
		s.Wake()
	}
	sc.Stop() // the third pass's lines are written too
	out := log.String()
	require.Contains(t, out, "collided", "the collisions are logged")
	require.NotContains(t, out, "paused")
	require.NotContains(t, out, "resumed")
	require.NotContains(t, out, "level=ERROR")
}
