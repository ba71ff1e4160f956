package fleet_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// TestBatchOfUnknownOutcomeIsNotStoredAgain: a batch of reports whose
// commit may have happened (the store answers lifecycle.ErrOutcomeUnknown;
// here it did happen) is not stored again item by item, which would store
// each report twice: every report of the batch gets that error.
func TestBatchOfUnknownOutcomeIsNotStoredAgain(t *testing.T) {
	s, pool := newServiceAndPool(t)
	ds := deployFor(t, s, "d0", "d1", "d2", "d3")
	v := ds[len(ds)-1].DesiredSince
	var mu sync.Mutex
	var sizes []int
	fleet.WrapReportStore(s, func(next func(context.Context, []fleet.ReportItem, time.Time) ([]fleet.ReportResult, error)) func(context.Context, []fleet.ReportItem, time.Time) ([]fleet.ReportResult, error) {
		return func(ctx context.Context, items []fleet.ReportItem, now time.Time) ([]fleet.ReportResult, error) {
			mu.Lock()
			sizes = append(sizes, len(items))
			mu.Unlock()
			rs, err := next(ctx, items, now)
			if err == nil && len(items) > 1 { // committed, but the answer was lost
				return nil, lifecycle.OutcomeUnknown(5)
			}
			return rs, err
		}
	})
	errs := reportAloneThenTogether(t, s, ds, v)

	assert.Equal(t, []int{1, 3}, sizes, "the batch of three is stored once")
	assert.NoError(t, errs[0])
	for i := 1; i < len(ds); i++ {
		assert.ErrorIs(t, errs[i], lifecycle.ErrOutcomeUnknown, "d%d", i)
		assert.Equal(t, []string{"installed"}, reportStates(t, pool, ds[i].ID), "d%d: stored once", i)
	}
}

// killAtCommit makes every insert into status_reports wait, in a deferred
// constraint trigger (it runs when the COMMIT is under way), on an
// advisory lock the test holds, and terminates each backend that waits
// there until the returned stop is called.
func killAtCommit(t *testing.T, pool *pgxpool.Pool) (stop func()) {
	t.Helper()
	ctx := t.Context()
	held, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = held.Exec(ctx, `SELECT pg_advisory_lock(4242)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE FUNCTION test_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NULL; END $$`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE CONSTRAINT TRIGGER test_gate AFTER INSERT ON status_reports
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_gate()`)
	require.NoError(t, err)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			_, err := held.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()
AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND wait_event = 'advisory'`)
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		_, err := held.Exec(ctx, `DROP TRIGGER test_gate ON status_reports`)
		assert.NoError(t, err)
		held.Release()
	}
}

// TestReportBatchKilledAtCommit: on a real PostgreSQL, the connection of a
// report alone (a statement that commits by itself) and of a group commit
// of three reports (the batch that carries its COMMIT) breaks while the
// COMMIT is under way: each report answers lifecycle.ErrOutcomeUnknown,
// and the batch is not stored again report by report.
func TestReportBatchKilledAtCommit(t *testing.T) {
	ctx := t.Context()
	s, pool := newServiceAndPool(t)
	ds := deployFor(t, s, "d0", "d1", "d2", "d3")
	v := ds[len(ds)-1].DesiredSince
	for _, d := range ds { // a first report each: the next ones take the guarded group commit
		_, err := s.ReportStatus(ctx, "c", d.ID, report(d.ID, v, "installed"))
		require.NoError(t, err)
	}
	var mu sync.Mutex
	var sizes []int
	fleet.WrapReportStore(s, func(next func(context.Context, []fleet.ReportItem, time.Time) ([]fleet.ReportResult, error)) func(context.Context, []fleet.ReportItem, time.Time) ([]fleet.ReportResult, error) {
		return func(ctx context.Context, items []fleet.ReportItem, now time.Time) ([]fleet.ReportResult, error) {
			mu.Lock()
			sizes = append(sizes, len(items))
			mu.Unlock()
			return next(ctx, items, now)
		}
	})
	stop := killAtCommit(t, pool)
	errs := reportAloneThenTogether(t, s, ds, v)
	stop()

	assert.Equal(t, []int{1, 3}, sizes, "the batch of three is not stored again one by one")
	for i := range ds {
		assert.ErrorIs(t, errs[i], lifecycle.ErrOutcomeUnknown, "d%d", i)
	}
}
