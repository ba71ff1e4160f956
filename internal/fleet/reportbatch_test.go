package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// reportBatches gives s's report lane a first batch that waits, once
// taken, until release is closed (inFlight is closed when it is taken);
// batches receives the deployment ids of every batch the lane takes, and
// queued the queue's length after each report queued.
func reportBatches(s *fleet.Service) (inFlight, release chan struct{}, batches chan []string, queued chan int) {
	inFlight, release, batches, queued = make(chan struct{}), make(chan struct{}), make(chan []string, 100), make(chan int, 100)
	var once sync.Once
	fleet.SetReportBatcher(s, func(items []fleet.ReportItem) {
		ids := make([]string, len(items))
		for i, it := range items {
			ids[i] = it.Report.DeploymentID
		}
		batches <- ids
		once.Do(func() { close(inFlight); <-release })
	}, func(l int) {
		select {
		case queued <- l:
		default: // a test that queues more does not wait on this
		}
	})
	return inFlight, release, batches, queued
}

// within waits for ch, failing the test after a bound.
func within[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// waitQueued waits until the queue holds want reports.
func waitQueued(t *testing.T, queued <-chan int, want int) {
	t.Helper()
	for l := 0; l < want; {
		l = within(t, fmt.Sprintf("%d queued reports", want), queued)
	}
}

// deployFor registers devices of client c and creates one deployment on each.
func deployFor(t *testing.T, s *fleet.Service, devices ...string) []fleet.Deployment {
	t.Helper()
	ds := make([]fleet.Deployment, len(devices))
	for i, dev := range devices {
		_, err := s.PutCapabilities(t.Context(), "c", dev, caps(dev))
		require.NoError(t, err)
		ds[i], err = s.CreateDeployment(t.Context(), fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: dev})
		require.NoError(t, err)
	}
	return ds
}

// reportStates returns the states of a deployment's stored reports, oldest
// first.
func reportStates(t *testing.T, pool *pgxpool.Pool, id string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT state FROM status_reports WHERE deployment_id = $1 ORDER BY id`, id)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestConcurrentReportsCoalesce holds the report lane's first batch in
// flight while more reports arrive: they queue and are stored together as
// the next batch, one transaction. Each call gets its own outcome: the
// good reports their 201 (first report) or 200, and their state moves with
// history and events; the refused ones (another device, a component the
// deployment lacks, a manifest version never published, an unknown
// deployment) their own 4xx problem, changing nothing and failing no other
// report. Two reports of one deployment in the queue are applied in
// arrival order: the later one waits for the next batch.
func TestConcurrentReportsCoalesce(t *testing.T) {
	ctx := t.Context()
	s, pool := newServiceAndPool(t)
	ds := deployFor(t, s, "d0", "d1", "d2", "d3", "d4", "d5")
	v := ds[len(ds)-1].DesiredSince
	inFlight, release, batches, queued := reportBatches(s)

	type answer struct {
		first bool
		err   error
	}
	bodies := []struct {
		id   string
		body []byte
	}{
		{ds[0].ID, report(ds[0].ID, v, "installing")}, // the batch held in flight
		{ds[1].ID, report(ds[1].ID, v, "installing")},
		{ds[2].ID, mustJSON(map[string]any{"deploymentId": ds[2].ID, "deviceId": "elsewhere", "adoptedManifestVersion": v,
			"status": map[string]any{"state": "installed"}, "components": []any{}})},
		{ds[1].ID, report(ds[1].ID, v, "installed")}, // the same deployment: after the one above
		{ds[3].ID, mustJSON(map[string]any{"deploymentId": ds[3].ID, "adoptedManifestVersion": v,
			"status": map[string]any{"state": "installed"}, "components": []any{map[string]any{"name": "db", "state": "installed"}}})},
		{ds[4].ID, report(ds[4].ID, v+100, "installed")},
		{"00000000-0000-4000-8000-000000000000", report("00000000-0000-4000-8000-000000000000", v, "installed")},
		// An id in upper case is the same deployment (the database
		// compares UUIDs), in a batch as alone.
		{strings.ToUpper(ds[5].ID), report(strings.ToUpper(ds[5].ID), v, "installed")},
	}
	answers := make([]answer, len(bodies))
	var wg sync.WaitGroup
	call := func(i int) {
		defer wg.Done()
		first, err := s.ReportStatus(ctx, "c", bodies[i].id, bodies[i].body)
		answers[i] = answer{first, err}
	}
	wg.Add(1)
	go call(0)
	within(t, "the first batch in flight", inFlight)
	within(t, "the first report queued", queued)
	for i := 1; i < len(bodies); i++ { // one at a time: the queue keeps their order
		wg.Add(1)
		go call(i)
		waitQueued(t, queued, i)
	}
	close(release)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	within(t, "every call answered", done)

	assert.Equal(t, []string{ds[0].ID}, within(t, "batch 1", batches))
	assert.Equal(t, []string{ds[1].ID, ds[2].ID, ds[3].ID, ds[4].ID, "00000000-0000-4000-8000-000000000000", ds[5].ID},
		within(t, "batch 2", batches), "one batch of every queued report but the second of d1")
	assert.Equal(t, []string{ds[1].ID}, within(t, "batch 3", batches), "the second report of d1 waits for the next batch")

	for i, want := range []struct {
		first bool
		typ   string
	}{{true, ""}, {true, ""}, {false, "device-id-mismatch"}, {false, ""}, {false, "component-mismatch"}, {false, "invalid-status"},
		{false, "unknown-deployment"}, {true, ""}} {
		if want.typ == "" {
			if assert.NoError(t, answers[i].err, "call %d", i) {
				assert.Equal(t, want.first, answers[i].first, "call %d: first report", i)
			}
			continue
		}
		assert.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(answers[i].err), "call %d: %v", i, answers[i].err)
		assert.Equal(t, want.typ, lifecycle.ErrorType(answers[i].err), "call %d", i)
	}

	wantStates := map[int]lifecycle.State{0: lifecycle.StateInstalling, 1: lifecycle.StateInstalled, 2: lifecycle.StatePending,
		3: lifecycle.StatePending, 4: lifecycle.StatePending, 5: lifecycle.StateInstalled}
	for i, want := range wantStates {
		d, err := s.Deployment(ctx, ds[i].ID)
		require.NoError(t, err)
		assert.Equal(t, want, d.State, "d%d", i)
	}
	assert.Equal(t, []string{"installing", "installed"}, reportStates(t, pool, ds[1].ID), "d1's reports, in arrival order")
	for _, i := range []int{2, 3, 4} {
		assert.Empty(t, reportStates(t, pool, ds[i].ID), "d%d: a refused report stores nothing", i)
	}
	var moves, events int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
(SELECT count(*) FROM deployment_history WHERE deployment_id = $1 AND cause = 'report'),
(SELECT count(*) FROM events WHERE subject_id = $2 AND type = 'deployment.state_changed' AND body->>'cause' = 'report')`, ds[1].ID, ds[1].ID).Scan(&moves, &events))
	assert.Equal(t, 2, moves, "d1: pending → installing → installed, one history row per move")
	assert.Equal(t, 2, events, "d1: one event per move, in the reports' transactions")
	var active int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM revisions WHERE deployment_id = ANY($1::uuid[]) AND outcome = 'active'`,
		[]string{ds[1].ID, ds[5].ID}).Scan(&active))
	assert.Equal(t, 2, active, "the installed reports made their revisions active")
}

// TestReportBatchFailureFallsBackOneByOne: a batch the store fails as a
// whole is stored again one report at a time, so each call gets its own
// outcome: the reports stored alone succeed, only the one the store fails
// alone fails.
func TestReportBatchFailureFallsBackOneByOne(t *testing.T) {
	s, pool := newServiceAndPool(t)
	ds := deployFor(t, s, "d0", "d1", "d2", "d3")
	v := ds[len(ds)-1].DesiredSince
	errBad := errors.New("the database failed this report")
	var mu sync.Mutex
	var sizes []int
	fleet.WrapReportStore(s, func(next func(context.Context, []fleet.ReportItem, time.Time) ([]fleet.ReportResult, error)) func(context.Context, []fleet.ReportItem, time.Time) ([]fleet.ReportResult, error) {
		return func(ctx context.Context, items []fleet.ReportItem, now time.Time) ([]fleet.ReportResult, error) {
			mu.Lock()
			sizes = append(sizes, len(items))
			mu.Unlock()
			for _, it := range items {
				if it.Report.DeploymentID == ds[2].ID {
					return nil, errBad
				}
			}
			return next(ctx, items, now)
		}
	})
	errs := reportAloneThenTogether(t, s, ds, v)

	assert.Equal(t, []int{1, 3, 1, 1, 1}, sizes, "the batch of three failed, then its reports one by one")
	for i := range ds {
		if i == 2 {
			assert.ErrorIs(t, errs[i], errBad)
			assert.Empty(t, reportStates(t, pool, ds[i].ID))
			continue
		}
		assert.NoError(t, errs[i], "d%d", i)
		assert.Equal(t, []string{"installed"}, reportStates(t, pool, ds[i].ID), "d%d", i)
	}
}

// TestCloseDrainsReports: Close waits until the reports already queued are
// stored and answered, and refuses later ones as unavailable.
func TestCloseDrainsReports(t *testing.T) {
	ctx := t.Context()
	s, pool := newServiceAndPool(t)
	ds := deployFor(t, s, "d0", "d1", "d2")
	v := ds[len(ds)-1].DesiredSince
	inFlight, release, _, queued := reportBatches(s)
	errs := make([]error, len(ds))
	var wg sync.WaitGroup
	for i := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.ReportStatus(ctx, "c", ds[i].ID, report(ds[i].ID, v, "installed"))
		}()
		if i == 0 {
			within(t, "the first batch in flight", inFlight)
		}
	}
	waitQueued(t, queued, len(ds)-1)
	// What is stored when Close returns; Close is called while a batch is
	// in flight and two reports are queued.
	atClose := make([][]string, len(ds))
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		s.Close()
		for i := range ds {
			atClose[i] = reportStates(t, pool, ds[i].ID)
		}
	}()
	// Once Close refuses new reports (a call whose context has ended is
	// answered at once either way), let the held batch go.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := s.ReportStatus(gone, "c", ds[0].ID, report(ds[0].ID, v, "installed"))
		if lifecycle.ErrorCode(err) == lifecycle.EUNAVAILABLE {
			break
		}
		require.ErrorIs(t, err, context.Canceled)
		require.True(t, time.Now().Before(deadline), "Close did not start refusing reports")
	}
	close(release)
	within(t, "Close", closed)
	wg.Wait()
	for i := range ds {
		assert.NoError(t, errs[i], "d%d", i)
		assert.Equal(t, []string{"installed"}, atClose[i], "d%d: stored before Close returned", i)
	}
	_, err := s.ReportStatus(ctx, "c", ds[0].ID, report(ds[0].ID, v, "installed"))
	assert.Equal(t, lifecycle.EUNAVAILABLE, lifecycle.ErrorCode(err), "a report after Close: %v", err)
	assert.Len(t, reportStates(t, pool, ds[0].ID), 1, "a report after Close stores nothing")
}

// TestRecordReportsRemembersAndGuards drives Store.RecordReports with
// batches of three deployments' reports that move no state. The first
// batch reads and locks the rows; later ones use the rows the store wrote
// last, guarded by their generation: a deployment changed elsewhere (its
// generation bumped by another process) is decided again on fresh data,
// and stored. Every report is counted once, and the retention keeps each
// deployment's newest reports.
func TestRecordReportsRemembersAndGuards(t *testing.T) {
	ctx := t.Context()
	s, pool := newServiceAndPool(t)
	ds := deployFor(t, s, "d0", "d1", "d2")
	v := ds[len(ds)-1].DesiredSince
	store := postgres.NewFleetStore(pool, 5)
	var seen []map[string][]int64 // per batch: the generations each decision saw
	batch := func() []fleet.ReportResult {
		t.Helper()
		gens := map[string][]int64{}
		seen = append(seen, gens)
		items := make([]fleet.ReportItem, len(ds))
		for i, d := range ds {
			r, err := margo.ParseStatusReport(report(d.ID, v, "pending"), d.ID)
			require.NoError(t, err)
			items[i] = fleet.ReportItem{ClientID: "c", Report: r, Decide: func(d fleet.Deployment) (lifecycle.Decision, error) {
				gens[d.ID] = append(gens[d.ID], d.Generation)
				return lifecycle.Decision{}, nil // no state move
			}}
		}
		rs, err := store.RecordReports(ctx, items, time.Now())
		require.NoError(t, err)
		require.Len(t, rs, len(ds))
		return rs
	}
	generation := func(id string) int64 {
		var g int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT generation FROM deployments WHERE id = $1`, id).Scan(&g))
		return g
	}
	for i, r := range batch() {
		require.NoError(t, r.Err)
		assert.True(t, r.First, "d%d: the first report", i)
	}
	_, err := pool.Exec(ctx, `UPDATE deployments SET generation = generation + 1 WHERE id = $1`, ds[1].ID) // another process
	require.NoError(t, err)
	bumped := generation(ds[1].ID)
	for i, r := range batch() {
		require.NoError(t, r.Err)
		assert.False(t, r.First, "d%d", i)
	}
	assert.Equal(t, []int64{bumped - 1, bumped}, seen[1][ds[1].ID], "d1: decided on the remembered row, then again on the changed one")
	assert.Len(t, seen[1][ds[0].ID], 1, "d0: decided once, on the remembered row")
	const reports = 20
	for range reports - 2 {
		for _, r := range batch() {
			require.NoError(t, r.Err)
		}
	}
	for i, d := range ds {
		var n, kept int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT reports, (SELECT count(*) FROM status_reports WHERE deployment_id = $1)
FROM deployments WHERE id = $1`, d.ID).Scan(&n, &kept))
		assert.Equal(t, int64(reports), n, "d%d: every report counted once", i)
		assert.Equal(t, int64(5+reports-16), kept, "d%d: pruned to the newest 5 at the 16th report, 4 more since", i)
	}
}

// TestGuardedReportsUseTheGenericPlan: the statement that stores a batch of
// reports moving no state runs its generic plan from its first execution
// on a connection. Left to choose, PostgreSQL plans it anew for the first
// five (here: 5 custom plans, then generic ones) and, when it judges a
// custom plan for the arrays at hand cheaper, for every later one too
// (under load, most of the database's CPU). Seen through
// pg_prepared_statements on the one connection of the store's pool.
func TestGuardedReportsUseTheGenericPlan(t *testing.T) {
	ctx := t.Context()
	s, pool := newServiceAndPool(t)
	ds := deployFor(t, s, "d0", "d1", "d2")
	v := ds[len(ds)-1].DesiredSince
	cfg := pool.Config().Copy()
	cfg.MinConns, cfg.MaxConns = 0, 1
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(one.Close)
	store := postgres.NewFleetStore(one, 5)
	const batches = 12
	for range batches {
		items := make([]fleet.ReportItem, len(ds))
		for i, d := range ds {
			r, err := margo.ParseStatusReport(report(d.ID, v, "pending"), d.ID)
			require.NoError(t, err)
			items[i] = fleet.ReportItem{ClientID: "c", Report: r, Decide: func(fleet.Deployment) (lifecycle.Decision, error) {
				return lifecycle.Decision{}, nil // no state move: the guarded statement, after the first batch
			}}
		}
		rs, err := store.RecordReports(ctx, items, time.Now())
		require.NoError(t, err)
		for _, r := range rs {
			require.NoError(t, r.Err)
		}
	}
	var generic, custom int64
	require.NoError(t, one.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
WHERE statement LIKE '%INSERT INTO status_reports%' AND statement LIKE '%d.generation = v.generation%'`).Scan(&generic, &custom))
	assert.Equal(t, int64(0), custom, "custom plans of the guarded statement")
	assert.Equal(t, int64(batches-1), generic, "generic plans of the guarded statement (every batch but the first)")
}

// reportAloneThenTogether reports "installed" (adopted manifest version v)
// for every deployment of ds at once: the first report goes alone and
// holds its batch in flight while the others queue, so they are stored as
// one batch. It returns each report's error.
func reportAloneThenTogether(t *testing.T, s *fleet.Service, ds []fleet.Deployment, v uint64) []error {
	t.Helper()
	ctx := t.Context()
	inFlight, release, _, queued := reportBatches(s)
	errs := make([]error, len(ds))
	var wg sync.WaitGroup
	call := func(i int) {
		defer wg.Done()
		_, errs[i] = s.ReportStatus(ctx, "c", ds[i].ID, report(ds[i].ID, v, "installed"))
	}
	wg.Add(1)
	go call(0)
	within(t, "the first batch in flight", inFlight)
	for i := 1; i < len(ds); i++ {
		wg.Add(1)
		go call(i)
	}
	waitQueued(t, queued, len(ds)-1)
	close(release)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	within(t, "every call answered", done)
	return errs
}
