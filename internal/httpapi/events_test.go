package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/sdk"
)

// eventCursor reads the event log table as a test reader would: every
// change here committed before the read, so nothing is in flight.
type eventCursor struct {
	e    *opsEnv
	last int64
}

// next returns the types of the events appended since the last call.
func (c *eventCursor) next(t *testing.T) []string {
	t.Helper()
	rows, _ := c.e.pool.Query(t.Context(), `SELECT id, type FROM events WHERE id > $1 ORDER BY id`, c.last)
	type ev struct {
		ID   int64
		Type string
	}
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ev])
	require.NoError(t, err)
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
		c.last = e.ID
	}
	return types
}

// TestEveryChangeAppendsItsEvents drives every kind of change of a
// deployment through the API and the scheduler and checks that exactly the
// documented events were appended with it (docs/architecture.md, "The write
// path").
func TestEveryChangeAppendsItsEvents(t *testing.T) {
	const (
		stateChanged  = "deployment.state_changed"
		published     = "revision.published"
		created       = "operation.created"
		started       = "operation.started"
		stepPublished = "operation.step_published"
		succeeded     = "operation.succeeded"
		failed        = "operation.failed"
		cancelled     = "operation.cancelled"
		unregistered  = "device.unregistered"
	)
	e := newOpsEnv(t)
	for _, v := range []string{"1.0.0", "2.0.0", "3.0.0"} {
		e.publish(t, v, "")
	}
	dev := e.client(t, "plant")
	res, body := dev.do("PUT", "/api/v1/capabilities/edge", capabilities("edge", "compose"))
	require.Equal(t, http.StatusCreated, res.StatusCode, string(body))
	c := &eventCursor{e: e}
	c.next(t)

	id := e.deploy(t, "plant", "edge", "svc", "1.0.0").Id.String()
	assert.Equal(t, []string{created, stateChanged, started, stepPublished, published}, c.next(t), "create: an install operation publishes revision 1")
	dev.installAll()
	assert.Equal(t, []string{stateChanged}, c.next(t), "a report that changes the state")
	dev.installAll()
	assert.Empty(t, c.next(t), "a report that changes nothing")
	e.tick(t)
	assert.Equal(t, []string{succeeded}, c.next(t), "revision 1 installed: the install operation succeeds")

	up := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
	require.Equal(t, http.StatusAccepted, up.StatusCode(), string(up.Body))
	assert.Equal(t, []string{created}, c.next(t), "an operation")
	e.tick(t)
	assert.Equal(t, []string{stateChanged, started, stepPublished, published}, c.next(t), "the upgrade published")
	dev.installAll()
	assert.Equal(t, []string{stateChanged}, c.next(t), "installed")
	e.tick(t)
	assert.Equal(t, []string{succeeded}, c.next(t), "the step installed: the operation succeeds")

	up = e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "3.0.0", Timeout: ptrTo("10m")})
	require.Equal(t, http.StatusAccepted, up.StatusCode(), string(up.Body))
	e.tick(t)
	assert.Equal(t, []string{created, stateChanged, started, stepPublished, published}, c.next(t))
	e.clock.Advance(11 * time.Minute)
	e.tick(t)
	assert.Equal(t, []string{failed, stateChanged}, c.next(t), "failed by its deadline")

	up = e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "3.0.0"})
	require.Equal(t, http.StatusAccepted, up.StatusCode(), string(up.Body))
	e.tick(t)
	c.next(t)
	_, err := e.mgmt.CancelOperationWithResponse(t.Context(), up.JSON202.Id.String(), nil)
	require.NoError(t, err)
	assert.Equal(t, []string{cancelled, stateChanged}, c.next(t), "cancelled with a published step: the deployment fails")

	del, err := e.mgmt.DeleteDeploymentWithResponse(t.Context(), id, nil)
	require.NoError(t, err)
	require.Less(t, del.StatusCode(), 300, string(del.Body))
	assert.Equal(t, []string{created, stateChanged, started}, c.next(t), "removal: a remove operation")

	other := e.deploy(t, "plant", "edge", "svc", "1.0.0").Id.String()
	require.NotEmpty(t, other)
	c.next(t)
	res, body = dev.do("DELETE", "/api/v1/capabilities/edge", nil)
	require.Less(t, res.StatusCode, 300, string(body))
	// Both deployments (the removing one and the new one) become removed.
	assert.Equal(t, []string{stateChanged, stateChanged, unregistered}, c.next(t), "unregistration")
	e.tick(t)
	assert.ElementsMatch(t, []string{succeeded, cancelled}, c.next(t), "the removal is done; the other install cancelled")

	t.Run("drain timeout revert", func(t *testing.T) {
		e := newOpsEnv(t)
		dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": drainAbort}, "1.0.0")
		up := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
		require.Equal(t, http.StatusAccepted, up.StatusCode(), string(up.Body))
		e.tick(t)
		dev.reportPhase(id, "installing", "draining", 1)
		c := &eventCursor{e: e}
		c.next(t)
		e.clock.Advance(6 * time.Minute)
		e.tick(t)
		assert.Equal(t, []string{stateChanged, published, failed}, c.next(t), "the revert appends a revision")
	})
}
