package fleet_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestCutOffReplicaKeepsItsCacheAndChecksIt: replica a's notification
// connection is cut while replica b, on the same database, changes one
// client's manifest and retires another. Meanwhile a answers every client
// from memory (it cannot know). Once a listens again it checks its cache
// in one statement: the client that did not change stays cached (its next
// lookup is a hit), the changed one is read again, the retired one is
// refused.
func TestCutOffReplicaKeepsItsCacheAndChecksIt(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	url := pgtest.URL(t)
	admin := pgtest.New(t) // another database of the same server
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	queries := &queryCounter{} // every statement
	cfg.ConnConfig.Tracer = queries
	poolA, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer poolA.Close()
	poolB, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer poolB.Close()
	db := poolA.Config().ConnConfig.Database

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(poolB), time.Now)
	_, _, err = cat.Add(ctx, []byte(description), catalog.MediaYAML)
	require.NoError(t, err)
	a := fleet.NewService(postgres.NewFleetStore(poolA, 0), catalog.NewService(postgres.NewCatalogStore(poolA), time.Now), fleet.Policy{AcceptAll: true}, time.Now, log)
	b := fleet.NewService(postgres.NewFleetStore(poolB, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log)

	lost := make(chan time.Time, 1)
	ready, marked := make(chan struct{}, 1), make(chan struct{}, 1)
	retry := make(chan time.Time) // the test says when a may reconnect
	var resyncQueries atomic.Int64
	l := &postgres.Listener{Pool: poolA, Channel: postgres.NotifyChannel, Log: log, Ready: ready,
		Notify: func(payload string) {
			a.Invalidate(payload)
			if payload == "test-marker" {
				marked <- struct{}{}
			}
		},
		Lost: func(since time.Time) { a.ManifestCacheLost(since); lost <- since },
		Listening: func(ctx context.Context) error {
			before := queries.n.Load()
			_, _, err := a.ResyncManifestCache(ctx)
			resyncQueries.Store(queries.n.Load() - before)
			return err
		},
		After: func(time.Duration) <-chan time.Time { return retry }}
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(20 * time.Second):
			t.Fatal(what)
		}
	}
	wait(ready, "the listener did not start")

	for _, c := range []string{"still", "moved", "gone"} {
		_, err := b.PutCapabilities(ctx, c, "d", caps("d"))
		require.NoError(t, err)
	}
	// Notifications arrive in order: once the marker sent after the
	// registrations is handled, so are theirs, which would otherwise drop
	// the entries cached below if they came late.
	_, err = poolB.Exec(ctx, "SELECT pg_notify($1, 'test-marker')", postgres.NotifyChannel)
	require.NoError(t, err)
	wait(marked, "the marker notification did not arrive")
	lookups := func() (hits, misses uint64) { return a.ManifestCacheStats() }
	cached := map[string]fleet.Manifest{}
	for _, c := range []string{"still", "moved", "gone"} {
		m, err := a.Manifest(ctx, c) // now cached in a
		require.NoError(t, err)
		cached[c] = m
	}

	// The cut: a's LISTEN session ends; a does not reconnect until told.
	_, err = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN%'", db)
	require.NoError(t, err)
	select {
	case <-lost:
	case <-time.After(20 * time.Second):
		t.Fatal("the listener did not notice the cut")
	}
	require.False(t, a.ManifestCacheState().StaleSince.IsZero(), "a knows its cache is stale")

	// b changes "moved" and retires "gone"; a misses both notifications.
	_, err = b.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "moved", DeviceID: "d"})
	require.NoError(t, err)
	_, err = b.RetireClient(ctx, "gone")
	require.NoError(t, err)
	h0, m0 := lookups()
	for _, c := range []string{"still", "moved", "gone"} {
		m, err := a.Manifest(ctx, c)
		require.NoError(t, err, "a answers %s from memory within the bound", c)
		require.Equal(t, cached[c].ETag, m.ETag)
	}
	h1, m1 := lookups()
	require.Equal(t, [2]uint64{h0 + 3, m0}, [2]uint64{h1, m1}, "three hits, no miss")

	// a listens again and checks its cache.
	retry <- time.Now()
	wait(ready, "the listener did not listen again")
	require.Equal(t, int64(1), resyncQueries.Load(), "the cache is checked in one statement")
	require.True(t, a.ManifestCacheState().StaleSince.IsZero(), "a's cache is current again")

	m, err := a.Manifest(ctx, "still")
	require.NoError(t, err)
	require.Equal(t, cached["still"].ETag, m.ETag)
	h2, m2 := lookups()
	require.Equal(t, [2]uint64{h1 + 1, m1}, [2]uint64{h2, m2}, "the unchanged client stays cached")

	m, err = a.Manifest(ctx, "moved")
	require.NoError(t, err)
	require.Greater(t, m.Version, cached["moved"].Version, "the changed client is read again")
	h3, m3 := lookups()
	require.Equal(t, [2]uint64{h2, m2 + 1}, [2]uint64{h3, m3})

	_, err = a.Manifest(ctx, "gone")
	require.Equal(t, lifecycle.EFORBIDDEN, lifecycle.ErrorCode(err), "a refuses the client b retired")
}

// TestStaleCachePastItsBound: a stale cache answers from memory until its
// bound after the moment it was last known current, then reads the store
// (which answers 503's error while the database is away), and reports so
// to the readiness check; a bound of 0 serves nothing stale.
func TestStaleCachePastItsBound(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	clock := &testClock{t: time.Date(2026, 12, 8, 1, 0, 0, 0, time.UTC)}
	var logs strings.Builder
	s := fleet.NewService(postgres.NewFleetStore(pool, 0), catalog.NewService(postgres.NewCatalogStore(pool), clock.now),
		fleet.Policy{AcceptAll: true}, clock.now, slog.New(slog.NewTextHandler(&logs, nil)))
	_, err := s.PutCapabilities(ctx, "c", "d", caps("d"))
	require.NoError(t, err)
	_, err = s.Manifest(ctx, "c")
	require.NoError(t, err)
	dbDown := lifecycle.Retryable("unavailable", 5, "database away")

	degraded, err := s.Readiness(nil)
	require.NoError(t, err)
	require.Empty(t, degraded, "current and reachable: ready")
	degraded, err = s.Readiness(dbDown)
	require.NoError(t, err, "current: devices are answered from memory")
	require.Contains(t, degraded, "unreachable")

	since := clock.now().Add(-30 * time.Second) // the listener's last ping
	s.ManifestCacheLost(since)
	s.ManifestCacheLost(clock.now()) // an outage starts once
	require.Equal(t, fleet.ManifestCacheState{StaleSince: since, ServedUntil: since.Add(fleet.DefaultManifestStaleBound)}, s.ManifestCacheState())

	clock.set(since.Add(fleet.DefaultManifestStaleBound - time.Nanosecond))
	h0, m0 := s.ManifestCacheStats()
	_, err = s.Manifest(ctx, "c")
	require.NoError(t, err)
	h1, m1 := s.ManifestCacheStats()
	require.Equal(t, [2]uint64{h0 + 1, m0}, [2]uint64{h1, m1}, "within the bound: a hit")
	degraded, err = s.Readiness(dbDown)
	require.NoError(t, err)
	require.Contains(t, degraded, "until "+since.Add(fleet.DefaultManifestStaleBound).Format(time.RFC3339))
	degraded, err = s.Readiness(nil)
	require.NoError(t, err)
	require.Contains(t, degraded, "change notifications", "reachable but not notified: degraded")

	clock.set(since.Add(fleet.DefaultManifestStaleBound))
	_, err = s.Manifest(ctx, "c")
	require.NoError(t, err, "the database answers")
	h2, m2 := s.ManifestCacheStats()
	require.Equal(t, [2]uint64{h1, m1 + 1}, [2]uint64{h2, m2}, "past the bound: a miss, read from the store")
	_, err = s.Readiness(dbDown)
	require.ErrorIs(t, err, dbDown, "past the bound and unreachable: not ready")
	require.Equal(t, 1, strings.Count(logs.String(), "past its staleness bound"), "logged once: %s", logs.String())
	_, err = s.Manifest(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(logs.String(), "past its staleness bound"), "logged once per outage")

	s.SetManifestStaleBound(0)
	_, err = s.Readiness(dbDown)
	require.ErrorIs(t, err, dbDown)
	checked, dropped, err := s.ResyncManifestCache(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int{1, 0}, [2]int{checked, dropped})
	_, err = s.Readiness(dbDown)
	require.ErrorIs(t, err, dbDown, "a bound of 0: never ready without the database")
}

// TestSchedulerKeepsManifestsItDoesNotChange: the scheduler's visit after
// a status report (the install going on, or succeeding) leaves the
// client's cached manifest alone, so a device that reports between its
// polls keeps being answered from memory, through a database outage too.
// (A visit that publishes drops it: the multi-hop tests read each hop's
// manifest through the same cache.)
func TestSchedulerKeepsManifestsItDoesNotChange(t *testing.T) {
	ctx := t.Context()
	s, d := setup(t)
	sc := fleet.NewScheduler(s, time.Hour)
	for _, state := range []string{"installing", "installing", "installed"} {
		_, err := s.Manifest(ctx, "c") // cached before the report
		require.NoError(t, err)
		_, err = s.ReportStatus(ctx, "c", d.ID, report(d.ID, d.DesiredSince, state))
		require.NoError(t, err)
		_, err = sc.RunOnce(ctx)
		require.NoError(t, err)
		h0, m0 := s.ManifestCacheStats()
		_, err = s.Manifest(ctx, "c")
		require.NoError(t, err)
		h1, m1 := s.ManifestCacheStats()
		require.Equal(t, [2]uint64{h0 + 1, m0}, [2]uint64{h1, m1}, "after a report %q and the visit it caused: still cached", state)
	}
	ops, _, err := s.Operations(ctx, fleet.OperationFilter{DeploymentID: d.ID}, 10, "")
	require.NoError(t, err)
	require.Len(t, ops, 1)
	require.Equal(t, lifecycle.OperationSucceeded, ops[0].State, "the visits ran: the install succeeded")
}
