package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/sdk"
)

// visits runs one scheduler pass and returns how many operations it
// visited.
func (e *opsEnv) visits(t *testing.T) int {
	t.Helper()
	n, err := e.sched.RunOnce(t.Context())
	require.NoError(t, err)
	return n
}

// TestDrainTimeoutIsHonouredAtItsInstant: the scheduler visits a draining
// operation only when it is due, and the drain timeout (onTimeout: abort)
// makes it due at its instant: not before, at the first pass after (well
// before the scheduler's safety net would visit it).
func TestDrainTimeoutIsHonouredAtItsInstant(t *testing.T) {
	e := newOpsEnv(t)
	dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": drainAbort}, "1.0.0")
	abort, timeout := sdk.DrainTimeoutAction("abort"), "150s"
	res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", Drain: &sdk.DrainOverride{Required: true, Timeout: &timeout, OnTimeout: &abort}})
	require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
	opID := res.JSON202.Id.String()
	require.Equal(t, 1, e.visits(t), "the queued upgrade is visited: it publishes")
	require.Equal(t, 1, e.visits(t), "a visit that changed something is due once more")
	require.Equal(t, 0, e.visits(t), "then waits for the device")

	dev.reportPhase(id, "installing", "draining", 7)
	require.Equal(t, 1, e.visits(t), "the report changed the deployment")
	require.Equal(t, 0, e.visits(t))
	e.clock.Advance(2 * time.Minute)
	require.Equal(t, 0, e.visits(t), "within the drain timeout nothing is due")
	e.clock.Advance(30 * time.Second)
	require.Equal(t, 0, e.visits(t), "at the drain timeout's instant, not after it")
	assert.Equal(t, sdk.OperationState("running"), e.operation(t, opID).State)

	e.clock.Advance(time.Second)
	require.Equal(t, 1, e.visits(t), "the drain timeout passed")
	op := e.operation(t, opID)
	assert.Equal(t, sdk.OperationState("failed"), op.State)
	require.NotNil(t, op.Reason)
	assert.Equal(t, "drain-timeout", *op.Reason)
	require.Equal(t, 0, e.visits(t), "an ended operation is never due")
}
