package fleet_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// testClock is a clock the test sets.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// TestSchedulerVisitsOnlyDueOperations: an install waiting on a silent
// device is not visited after its creation (which started it and recorded
// it as visited), and then only when it is due: when a report changes
// its deployment, when the safety net's bound passes, and at its deadline,
// which fails it. RunOnce counts the operations it visited.
func TestSchedulerVisitsOnlyDueOperations(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	clk := &testClock{t: t0}
	cat := catalog.NewService(postgres.NewCatalogStore(pool), clk.now)
	_, _, err := cat.Add(ctx, []byte(description), catalog.MediaYAML)
	require.NoError(t, err)
	s := fleet.NewService(postgres.NewFleetStore(pool, 5), cat, fleet.Policy{AcceptAll: true}, clk.now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	_, err = s.PutCapabilities(ctx, "c", "d1", caps("d1"))
	require.NoError(t, err)
	timeout := "10m"
	d, err := s.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: "d1", Timeout: &timeout})
	require.NoError(t, err)
	ops, _, err := s.Operations(ctx, fleet.OperationFilter{DeploymentID: d.ID}, 10, "")
	require.NoError(t, err)
	require.Len(t, ops, 1, "the creation is an install operation")
	opID := ops[0].ID
	sc := fleet.NewScheduler(s, time.Hour)

	visits := func(at time.Duration, want int, why string) {
		t.Helper()
		clk.set(t0.Add(at))
		n, err := sc.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, want, n, "operations visited at +%s: %s", at, why)
		op, err := s.Operation(ctx, opID)
		require.NoError(t, err)
		if at <= 10*time.Minute {
			require.Equal(t, lifecycle.OperationRunning, op.State, "at +%s", at)
		}
	}
	visits(0, 0, "its creation recorded the install as visited: it waits for the device")
	visits(4*time.Minute, 0, "nothing changed")

	_, err = s.ReportStatus(ctx, "c", d.ID, report(d.ID, d.DesiredSince, "installing"))
	require.NoError(t, err)
	visits(4*time.Minute, 1, "a report changed the deployment")
	visits(4*time.Minute, 0, "the report was seen")
	visits(9*time.Minute, 0, "at the safety net's bound, not after it")
	visits(9*time.Minute+time.Second, 1, "the safety net: visited at least every "+fleet.RevisitBound.String())
	visits(9*time.Minute+2*time.Second, 0, "the safety net's visit was recorded")
	visits(10*time.Minute, 0, "at the deadline, not after it")

	visits(10*time.Minute+time.Second, 1, "the deadline passed")
	op, err := s.Operation(ctx, opID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.OperationFailed, op.State)
	require.Equal(t, "timeout", op.Reason)
	visits(time.Hour, 0, "an ended operation is never due")
}

// BenchmarkSchedulerPassWithSilentDevices is one scheduler pass over 1,000
// running installs whose devices never report (the fleet-scale case of
// issue 11): with due operations only, a pass visits none of them.
func BenchmarkSchedulerPassWithSilentDevices(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.New(b)
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	_, _, err := cat.Add(ctx, []byte(description), catalog.MediaYAML)
	require.NoError(b, err)
	s := fleet.NewService(postgres.NewFleetStore(pool, 5), cat, fleet.Policy{AcceptAll: true}, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var reqs []fleet.CreateRequest
	for i := range 1000 {
		dev := fmt.Sprint("d", i)
		_, err := s.PutCapabilities(ctx, "c", dev, caps(dev))
		require.NoError(b, err)
		reqs = append(reqs, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: dev})
	}
	for chunk := range slices.Chunk(reqs, 100) {
		_, err := s.CreateDeployments(ctx, chunk)
		require.NoError(b, err)
	}
	sc := fleet.NewScheduler(s, time.Hour)
	n, err := sc.RunOnce(ctx) // the first visit of each
	require.NoError(b, err)
	require.Equal(b, 1000, n)
	visited := 0
	for b.Loop() {
		n, err := sc.RunOnce(ctx)
		require.NoError(b, err)
		visited += n
	}
	b.ReportMetric(float64(visited)/float64(b.N), "visits/pass")
}
