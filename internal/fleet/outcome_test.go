package fleet_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// TestBatchOfUnknownOutcomeIsNotStoredAgain: a batch of reports whose
// commit may have happened (the store answers lifecycle.ErrOutcomeUnknown;
// here it did happen) is not stored again item by item, which would store
// each report twice: every report of the batch gets that error.
func TestBatchOfUnknownOutcomeIsNotStoredAgain(t *testing.T) {
	ctx := t.Context()
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

	assert.Equal(t, []int{1, 3}, sizes, "the batch of three is stored once")
	assert.NoError(t, errs[0])
	for i := 1; i < len(ds); i++ {
		assert.ErrorIs(t, errs[i], lifecycle.ErrOutcomeUnknown, "d%d", i)
		assert.Equal(t, []string{"installed"}, reportStates(t, pool, ds[i].ID), "d%d: stored once", i)
	}
}
