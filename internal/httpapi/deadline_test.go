package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/sdk"
)

// Installs and removals are operations with deadlines (design section 1.5:
// nothing waits forever on a silent device). The scheduler runs by tick and
// the clock is the test's.

// deadlineEnv is an opsEnv with version 1.0.0 of svc published and a
// registered device "edge" of client "plant".
func deadlineEnv(t *testing.T) (*opsEnv, *agent) {
	t.Helper()
	e := newOpsEnv(t)
	e.publish(t, "1.0.0", "")
	dev := e.client(t, "plant")
	res, body := dev.do("PUT", "/api/v1/capabilities/edge", capabilities("edge", "compose"))
	require.Equal(t, http.StatusCreated, res.StatusCode, string(body))
	return e, dev
}

// createWithin creates a deployment of svc 1.0.0 on edge with an install
// timeout (nil: the default).
func (e *opsEnv) createWithin(t *testing.T, timeout *string) sdk.Deployment {
	t.Helper()
	res, err := e.mgmt.CreateDeploymentWithResponse(t.Context(), nil, sdk.CreateDeploymentRequest{ApplicationId: "svc", Version: "1.0.0",
		ClientId: "plant", DeviceId: "edge", Timeout: timeout})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return *res.JSON201
}

// removeWithin deletes a deployment with a removal timeout (nil: the
// default).
func (e *opsEnv) removeWithin(t *testing.T, id string, timeout *string) sdk.Deployment {
	t.Helper()
	res, err := e.mgmt.DeleteDeploymentWithResponse(t.Context(), id, &sdk.DeleteDeploymentParams{Timeout: timeout})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
	return *res.JSON202
}

// operationsOf returns a deployment's operations, newest first.
func (e *opsEnv) operationsOf(t *testing.T, id string) []sdk.Operation {
	t.Helper()
	res, err := e.mgmt.ListOperationsWithResponse(t.Context(), &sdk.ListOperationsParams{DeploymentId: &id})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return res.JSON200.Items
}

// lastTransition returns the newest history row of a deployment.
func (e *opsEnv) lastTransition(t *testing.T, id string) sdk.Transition {
	t.Helper()
	res, err := e.mgmt.ListHistoryWithResponse(t.Context(), id, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.NotEmpty(t, res.JSON200.Items)
	return res.JSON200.Items[len(res.JSON200.Items)-1]
}

func TestSilentDeviceFailsTheInstallAtItsDeadline(t *testing.T) {
	e, _ := deadlineEnv(t)
	created := e.clock.Now()
	d := e.createWithin(t, ptrTo("10m"))
	id := d.Id.String()
	assert.Equal(t, sdk.DeploymentState("pending"), d.State)

	ops := e.operationsOf(t, id)
	require.Len(t, ops, 1, "the creation is an install operation")
	install := ops[0]
	assert.Equal(t, sdk.OperationTypeInstall, install.Type)
	assert.Equal(t, sdk.OperationState("running"), install.State, "its one step was published with the creation")
	assert.WithinDuration(t, created.Add(10*time.Minute), install.Deadline, time.Second)
	require.Len(t, install.Steps, 1)
	assert.Equal(t, sdk.OperationStepState("published"), install.Steps[0].State)
	require.NotNil(t, install.Steps[0].Revision)
	assert.Equal(t, 1, *install.Steps[0].Revision)

	c := &eventCursor{e: e}
	c.next(t)
	e.clock.Advance(9 * time.Minute)
	e.tick(t)
	assert.Equal(t, sdk.OperationState("running"), e.operation(t, install.Id.String()).State, "before its deadline")
	assert.Empty(t, c.next(t))

	e.clock.Advance(2 * time.Minute)
	e.tick(t)
	op := e.operation(t, install.Id.String())
	assert.Equal(t, sdk.OperationState("failed"), op.State)
	require.NotNil(t, op.Reason)
	assert.Equal(t, "timeout", *op.Reason)
	assert.Equal(t, sdk.OperationStepState("failed"), op.Steps[0].State)
	after := e.deployment(t, id)
	assert.Equal(t, sdk.DeploymentState("failed"), after.State)
	last := e.lastTransition(t, id)
	assert.Equal(t, sdk.TransitionCause("deadline"), last.Cause)
	assert.Equal(t, sdk.DeploymentState("failed"), last.To)
	assert.Equal(t, []string{"operation.failed", "deployment.state_changed"}, c.next(t))
	var outcome string
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT outcome FROM revisions WHERE deployment_id = $1 AND n = 1`, id).Scan(&outcome))
	assert.Equal(t, "failed", outcome, "the revision that never installed failed")

	e.clock.Advance(time.Hour)
	e.tick(t)
	assert.Empty(t, c.next(t), "an ended operation is not visited again")
}

func TestInstallInTimeSucceeds(t *testing.T) {
	e, dev := deadlineEnv(t)
	d := e.createWithin(t, nil)
	id := d.Id.String()
	install := e.operationsOf(t, id)[0]
	assert.WithinDuration(t, e.clock.Now().Add(30*time.Minute), install.Deadline, time.Second, "the default install timeout")

	e.clock.Advance(5 * time.Minute)
	dev.installAll()
	e.tick(t)
	op := e.operation(t, install.Id.String())
	assert.Equal(t, sdk.OperationState("succeeded"), op.State)
	assert.Equal(t, sdk.OperationStepState("installed"), op.Steps[0].State)
	assert.Equal(t, sdk.DeploymentState("installed"), e.deployment(t, id).State)

	e.clock.Advance(time.Hour)
	e.tick(t)
	assert.Equal(t, sdk.DeploymentState("installed"), e.deployment(t, id).State, "its deadline no longer matters")
}

func TestSilentDeviceFailsTheRemovalAtItsDeadline(t *testing.T) {
	e, dev := deadlineEnv(t)
	id := e.createWithin(t, nil).Id.String()
	dev.installAll()
	e.tick(t)

	e.clock.Advance(time.Minute) // operations list newest first, by creation time
	removedAt := e.clock.Now()
	d := e.removeWithin(t, id, ptrTo("5m"))
	assert.Equal(t, sdk.DeploymentState("removing"), d.State)
	ops := e.operationsOf(t, id)
	require.Len(t, ops, 2)
	remove := ops[0]
	assert.Equal(t, sdk.OperationTypeRemove, remove.Type)
	assert.Equal(t, sdk.OperationState("running"), remove.State)
	assert.WithinDuration(t, removedAt.Add(5*time.Minute), remove.Deadline, time.Second)
	assert.Equal(t, sdk.OperationState("succeeded"), ops[1].State, "the install had succeeded")

	c := &eventCursor{e: e}
	c.next(t)
	e.clock.Advance(4 * time.Minute)
	e.tick(t)
	assert.Equal(t, sdk.DeploymentState("removing"), e.deployment(t, id).State, "before its deadline")

	e.clock.Advance(2 * time.Minute)
	e.tick(t)
	op := e.operation(t, remove.Id.String())
	assert.Equal(t, sdk.OperationState("failed"), op.State)
	require.NotNil(t, op.Reason)
	assert.True(t, strings.HasPrefix(*op.Reason, "timeout"), *op.Reason)
	assert.Equal(t, sdk.DeploymentState("failed"), e.deployment(t, id).State)
	last := e.lastTransition(t, id)
	assert.Equal(t, sdk.TransitionCause("deadline"), last.Cause)
	require.NotNil(t, last.From)
	assert.Equal(t, sdk.DeploymentState("removing"), *last.From)
	assert.Equal(t, []string{"operation.failed", "deployment.state_changed"}, c.next(t))
	m, _ := dev.manifest()
	assert.Empty(t, m.Deployments, "a failed removal stays out of the manifest")

	// Deleting it again retries the removal; the device then confirms it.
	e.removeWithin(t, id, nil)
	assert.Equal(t, sdk.DeploymentState("removing"), e.deployment(t, id).State)
	ops = e.operationsOf(t, id)
	require.Len(t, ops, 3)
	retry := ops[0]
	assert.Equal(t, sdk.OperationState("running"), retry.State)
	assert.Equal(t, []string{"operation.created", "deployment.state_changed", "operation.started"}, c.next(t))
	dev.report(id, uint64(m.ManifestVersion), "removed", "app")
	assert.Equal(t, sdk.DeploymentState("removed"), e.deployment(t, id).State)
	e.tick(t)
	assert.Equal(t, sdk.OperationState("succeeded"), e.operation(t, retry.Id.String()).State)
}

func TestRemoveDuringAnInstall(t *testing.T) {
	e, dev := deadlineEnv(t)
	e.publish(t, "2.0.0", "")
	id := e.createWithin(t, nil).Id.String()
	install := e.operationsOf(t, id)[0]

	// Other operations wait for the install.
	up := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
	p := problemOf(t, up.HTTPResponse, up.Body, http.StatusConflict)
	assert.Equal(t, httpapi.ProblemBase+"operation-in-progress", p.Type)

	// A removal does not: it cancels the install and starts itself.
	e.clock.Advance(time.Minute)
	d := e.removeWithin(t, id, nil)
	assert.Equal(t, sdk.DeploymentState("removing"), d.State)
	op := e.operation(t, install.Id.String())
	assert.Equal(t, sdk.OperationState("cancelled"), op.State)
	require.NotNil(t, op.Reason)
	assert.Equal(t, "deployment-removed", *op.Reason)
	ops := e.operationsOf(t, id)
	require.Len(t, ops, 2)
	assert.Equal(t, sdk.OperationTypeRemove, ops[0].Type)
	assert.Equal(t, sdk.OperationState("running"), ops[0].State)

	m, _ := dev.manifest()
	dev.report(id, uint64(m.ManifestVersion), "removed", "app")
	e.tick(t)
	assert.Equal(t, sdk.OperationState("succeeded"), e.operation(t, ops[0].Id.String()).State)
	assert.Equal(t, sdk.DeploymentState("removed"), e.deployment(t, id).State)
}

func TestInstallAndRemoveTimeoutsAreChecked(t *testing.T) {
	e, _ := deadlineEnv(t)
	for _, v := range []string{"0s", "500ms", "169h"} {
		res, err := e.mgmt.CreateDeploymentWithResponse(t.Context(), nil, sdk.CreateDeploymentRequest{ApplicationId: "svc", Version: "1.0.0",
			ClientId: "plant", DeviceId: "edge", Timeout: ptrTo(v)})
		require.NoError(t, err)
		p := problemOf(t, res.HTTPResponse, res.Body, http.StatusUnprocessableEntity)
		assert.Equal(t, httpapi.ProblemBase+"invalid-request", p.Type, v)
		require.NotEmpty(t, p.Errors, v)
		assert.Equal(t, "/timeout", p.Errors[0].Field, v)
		assert.Contains(t, p.Errors[0].Message, "from 1s to 168h", v)
	}
	assert.Zero(t, e.count(t, "deployments"), "nothing was created")

	created := e.clock.Now()
	d := e.createWithin(t, ptrTo("168h"))
	id := d.Id.String()
	assert.WithinDuration(t, created.Add(168*time.Hour), e.operationsOf(t, id)[0].Deadline, time.Second, "the bound itself is accepted")
	for _, v := range []string{"0s", "169h"} {
		res, err := e.mgmt.DeleteDeploymentWithResponse(t.Context(), id, &sdk.DeleteDeploymentParams{Timeout: ptrTo(v)})
		require.NoError(t, err)
		p := problemOf(t, res.HTTPResponse, res.Body, http.StatusUnprocessableEntity)
		assert.Equal(t, httpapi.ProblemBase+"invalid-request", p.Type, v)
		require.NotEmpty(t, p.Errors, v)
		assert.Equal(t, "query/timeout", p.Errors[0].Field, v)
	}
	assert.Equal(t, sdk.DeploymentState("pending"), e.deployment(t, id).State, "nothing was removed")
	assert.Len(t, e.operationsOf(t, id), 1)
}
