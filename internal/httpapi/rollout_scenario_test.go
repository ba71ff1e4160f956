package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/devicesim"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/sdk"
)

// Rollout scenarios (issue 12, "Tests"): everything a person does goes
// through the management API; the devices are simulated agents
// (internal/devicesim) speaking the device API over mutual TLS; the
// scheduler runs one pass at a time (tick), so nothing waits on a timer.

// svcVersions are the versions of "svc" every scenario publishes: 2.0.0
// needs 1.5.0 first (a 1.0.0 member hops through 1.5.0), and may be rolled
// back only down to 1.5.0, with the supplier's reason.
var svcVersions = []struct{ version, lifecycle string }{
	{"1.0.0", ""},
	{"1.5.0", ""},
	{"2.0.0", "  upgrade:\n    minUpgradeFrom: \"1.5.0\"\n  rollback:\n    allowed: true\n    minVersion: \"1.5.0\"\n    window: 72h\n    reason: \"2.0 migrates the schema; 1.0 cannot read it\"\n"},
}

const svcRollbackReason = "2.0 migrates the schema; 1.0 cannot read it"

// rolloutEnv is an opsEnv with simulated devices, one devicesim.Config per
// WFM client (so that a client's devices can be made to fail).
type rolloutEnv struct {
	*opsEnv
	clients map[string]*devicesim.Config
	devices []*devicesim.Device
}

func newRolloutEnv(t *testing.T) *rolloutEnv {
	t.Helper()
	e := &rolloutEnv{opsEnv: newOpsEnv(t), clients: map[string]*devicesim.Config{}}
	for _, v := range svcVersions {
		e.publish(t, v.version, v.lifecycle)
	}
	return e
}

// addDevices registers n simulated devices d-000... of client clientID and,
// unless version is "", deploys svc at that version on each (versions
// cycles through the list given). It returns the deployment ids in device
// order.
func (e *rolloutEnv) addDevices(t *testing.T, clientID string, n int, versions ...string) []string {
	t.Helper()
	cfg := e.clients[clientID]
	if cfg == nil {
		cfg = &devicesim.Config{BaseURL: e.deviceURL, HTTP: e.client(t, clientID).http, Poll: time.Hour,
			Budget: devicesim.NewBudget(1e6, 1e6), Now: e.clock.Now,
			Sleep: func(context.Context, time.Duration) error { return nil }}
		e.clients[clientID] = cfg
	}
	var devs []*devicesim.Device
	for i := range n {
		devs = append(devs, devicesim.NewDevice(cfg, fmt.Sprintf("d-%03d", i)))
	}
	for _, d := range devs {
		require.NoError(t, d.Register(t.Context()))
	}
	e.devices = append(e.devices, devs...)
	if len(versions) == 0 {
		return nil
	}
	reqs := make([]fleet.CreateRequest, n)
	for i, d := range devs {
		reqs[i] = fleet.CreateRequest{ApplicationID: "svc", Version: versions[i%len(versions)], ClientID: clientID, DeviceID: d.ID}
	}
	res, err := e.fleet.CreateDeployments(t.Context(), reqs)
	require.NoError(t, err)
	ids := make([]string, n)
	for i, r := range res {
		require.NoError(t, r.Err)
		ids[i] = r.Deployment.ID
	}
	e.step(t) // installed, and their install operations succeeded
	return ids
}

// syncAll lets every device poll its manifest once and apply what changed.
func (e *rolloutEnv) syncAll(t *testing.T) {
	t.Helper()
	for _, d := range e.devices {
		_, err := d.Sync(t.Context())
		require.NoError(t, err)
	}
}

// step is one round: a second passes (what is due "at the next pass" is
// due by the clock), a scheduler pass, the devices sync, another pass to
// take their reports in.
func (e *rolloutEnv) step(t *testing.T) {
	t.Helper()
	e.clock.Advance(time.Second)
	e.tick(t)
	e.syncAll(t)
	e.tick(t)
}

// drive steps until done says so (at most 100 rounds) and returns the
// rollout.
func (e *rolloutEnv) drive(t *testing.T, id string, what string, done func(sdk.Rollout) bool) sdk.Rollout {
	t.Helper()
	for range 100 {
		e.step(t)
		if r, _ := e.rollout(t, id); done(r) {
			return r
		}
	}
	r, _ := e.rollout(t, id)
	b, _ := json.MarshalIndent(r, "", "  ")
	t.Fatalf("rollout %s: still not %s after 100 rounds:\n%s", id, what, b)
	return r
}

func inState(s string) func(sdk.Rollout) bool {
	return func(r sdk.Rollout) bool { return string(r.State) == s }
}

// create posts a rollout (JSON as written, so that bad requests can be
// sent too).
func (e *rolloutEnv) create(t *testing.T, body string) *sdk.CreateRolloutResponse {
	t.Helper()
	res, err := e.mgmt.CreateRolloutWithBodyWithResponse(t.Context(), nil, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	return res
}

// start creates a rollout that must be accepted and returns it.
func (e *rolloutEnv) start(t *testing.T, body string) sdk.Rollout {
	t.Helper()
	res := e.create(t, body)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	r := *res.JSON201
	assert.Equal(t, "/mgmt/v1/rollouts/"+r.Id.String(), res.HTTPResponse.Header.Get("Location"))
	assert.NotEmpty(t, res.HTTPResponse.Header.Get("ETag"))
	if manualFirst(t, body) { // a first wave waiting for approval: paused at once
		assert.Equal(t, sdk.RolloutState("paused"), r.State)
		assert.Equal(t, sdk.RolloutCause("approval-required"), r.StateCause)
	} else {
		assert.Equal(t, sdk.RolloutState("running"), r.State)
		assert.Equal(t, sdk.RolloutCause("started"), r.StateCause)
	}
	return r
}

// manualFirst reports whether the rollout of body waits for the approval of
// its first wave.
func manualFirst(t *testing.T, body string) bool {
	var req struct {
		Waves []struct {
			Approval string `json:"approval"`
		} `json:"waves"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &req))
	return len(req.Waves) > 0 && req.Waves[0].Approval == "manual"
}

func (e *rolloutEnv) rollout(t *testing.T, id string) (sdk.Rollout, string) {
	t.Helper()
	res, err := e.mgmt.GetRolloutWithResponse(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return *res.JSON200, res.HTTPResponse.Header.Get("ETag")
}

// members reads every member of a rollout, page by page.
func (e *rolloutEnv) members(t *testing.T, id string, p sdk.ListRolloutMembersParams) []sdk.RolloutMember {
	t.Helper()
	var out []sdk.RolloutMember
	p.Limit = ptrTo(7) // small pages: the cursor is exercised
	for {
		res, err := e.mgmt.ListRolloutMembersWithResponse(t.Context(), id, &p)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		out = append(out, res.JSON200.Items...)
		if res.JSON200.NextCursor == nil {
			return out
		}
		p.Cursor = res.JSON200.NextCursor
	}
}

// act posts one of the body-less actions and returns the response.
func (e *rolloutEnv) act(t *testing.T, action, id, ifMatch string) (int, []byte, *http.Response) {
	t.Helper()
	var p *string
	if ifMatch != "" {
		p = &ifMatch
	}
	ctx := t.Context()
	var (
		res *http.Response
		b   []byte
	)
	switch action {
	case "pause":
		r, err := e.mgmt.PauseRolloutWithResponse(ctx, id, &sdk.PauseRolloutParams{IfMatch: p})
		require.NoError(t, err)
		res, b = r.HTTPResponse, r.Body
	case "resume":
		r, err := e.mgmt.ResumeRolloutWithResponse(ctx, id, &sdk.ResumeRolloutParams{IfMatch: p})
		require.NoError(t, err)
		res, b = r.HTTPResponse, r.Body
	case "approve":
		r, err := e.mgmt.ApproveRolloutWithResponse(ctx, id, &sdk.ApproveRolloutParams{IfMatch: p})
		require.NoError(t, err)
		res, b = r.HTTPResponse, r.Body
	case "cancel":
		r, err := e.mgmt.CancelRolloutWithResponse(ctx, id, &sdk.CancelRolloutParams{IfMatch: p})
		require.NoError(t, err)
		res, b = r.HTTPResponse, r.Body
	default:
		t.Fatalf("unknown action %s", action)
	}
	return res.StatusCode, b, res
}

func (e *rolloutEnv) abort(t *testing.T, id string, body sdk.AbortRolloutRequest) *sdk.AbortRolloutResponse {
	t.Helper()
	res, err := e.mgmt.AbortRolloutWithResponse(t.Context(), id, nil, body)
	require.NoError(t, err)
	return res
}

func decodeRollout(t *testing.T, b []byte) sdk.Rollout {
	t.Helper()
	var r sdk.Rollout
	require.NoError(t, json.Unmarshal(b, &r), string(b))
	return r
}

// operationsOf lists the operations of one type on a deployment.
func (e *rolloutEnv) operationsOf(t *testing.T, deploymentID string, typ sdk.OperationType) []sdk.Operation {
	t.Helper()
	res, err := e.mgmt.ListOperationsWithResponse(t.Context(), &sdk.ListOperationsParams{DeploymentId: ptrTo(deploymentID)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	var out []sdk.Operation
	for _, o := range res.JSON200.Items {
		if o.Type == typ {
			out = append(out, o)
		}
	}
	return out
}

// replica starts a second server process on the same database: its own
// services, scheduler, listeners and CA.
func (e *rolloutEnv) replica(t *testing.T) *opsEnv {
	t.Helper()
	fe := newEnv(t, envOptions{policy: fleet.Policy{AcceptAll: true, AllowOverrides: true}, now: e.clock.Now, pool: e.pool})
	return &opsEnv{fleetEnv: fe, clock: e.clock, pool: e.pool, sched: fleet.NewScheduler(fe.fleet, time.Hour), url: fe.mgmtURL}
}

// moveTo makes o the server everything talks to, as after a restart: the
// management client, the scheduler, and the simulated devices (with
// certificates of o's CA).
func (e *rolloutEnv) moveTo(t *testing.T, o *opsEnv) {
	t.Helper()
	e.opsEnv = o
	for id, cfg := range e.clients {
		cfg.BaseURL, cfg.HTTP = o.deviceURL, o.client(t, id).http
	}
}

// versionsOf returns the version of each deployment by id.
func (e *rolloutEnv) versionsOf(t *testing.T, ids []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, id := range ids {
		out[id] = e.deployment(t, id).Version
	}
	return out
}

// TestRolloutMixedFleetInWaves: a mixed fleet (1.0.0 and 1.5.0) goes to
// 2.0.0 with path auto in three waves; the 1.0.0 members hop through 1.5.0,
// everything ends on 2.0.0 and each wave's counts are right.
func TestRolloutMixedFleetInWaves(t *testing.T) {
	e := newRolloutEnv(t)
	var ids []string
	for _, c := range []string{"plant-a", "plant-b", "plant-c", "plant-d"} {
		ids = append(ids, e.addDevices(t, c, 50, "1.0.0", "1.5.0")...)
	}
	require.Len(t, ids, 200)

	r := e.start(t, `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0","path":"auto"},
		"waves":[{"size":{"count":10}},{"size":{"percent":30}},{"size":{"percent":100}}],"maxInFlight":100}`)
	id := r.Id.String()
	assert.Equal(t, 200, r.Counts.Total)
	assert.Equal(t, 200, r.Counts.Eligible)
	require.Len(t, r.Waves, 3)
	for i, want := range []int{10, 60, 130} {
		assert.Equal(t, want, r.Waves[i].ResolvedSize, "wave %d", i+1)
	}

	hops := e.members(t, id, sdk.ListRolloutMembersParams{})
	require.Len(t, hops, 200)
	plans := map[string]int{}
	for _, m := range hops {
		require.NotNil(t, m.Plan)
		key := string(m.Plan.Kind)
		if m.Plan.Through != nil {
			key += ":" + strings.Join(*m.Plan.Through, ",")
		}
		plans[key]++
		if m.FromVersion != nil && *m.FromVersion == "1.0.0" {
			assert.Equal(t, "hops:1.5.0", key, "a 1.0.0 member hops through 1.5.0")
		}
	}
	assert.Equal(t, map[string]int{"direct": 100, "hops:1.5.0": 100}, plans)
	wave1 := e.members(t, id, sdk.ListRolloutMembersParams{Wave: ptrTo(1)})
	assert.Len(t, wave1, 10)
	assert.Equal(t, "plant-a", string(wave1[0].ClientId), "waves take members in a stable order")

	r = e.drive(t, id, "succeeded", inState("succeeded"))
	assert.Equal(t, sdk.RolloutCause("completed"), r.StateCause)
	for i, want := range []int{10, 60, 130} {
		w := r.Waves[i]
		assert.Equal(t, sdk.WaveState("passed"), w.State, "wave %d", i+1)
		assert.Equal(t, want, w.Counts.Succeeded, "wave %d", i+1)
		assert.Zero(t, w.Counts.Failed+w.Counts.Pending+w.Counts.InProgress, "wave %d", i+1)
	}
	assert.Equal(t, 200, r.Counts.ByStatus.Succeeded)
	for id, v := range e.versionsOf(t, ids) {
		assert.Equal(t, "2.0.0", v, "deployment %s", id)
	}
}

// TestRolloutCanaryFailureStops: the canary fails, so the rollout stops
// (paused by its threshold) before wave 2 publishes anything.
func TestRolloutCanaryFailureStops(t *testing.T) {
	e := newRolloutEnv(t)
	canary := e.addDevices(t, "a-canary", 1, "1.5.0")
	rest := e.addDevices(t, "b-rest", 9, "1.5.0")
	e.clients["a-canary"].FailRate = 1

	r := e.start(t, `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0"}}`)
	id := r.Id.String()
	require.Len(t, r.Waves, 3, "the default waves: one canary, then 10%, then the rest")
	assert.Equal(t, 1, r.Waves[0].ResolvedSize)

	r = e.drive(t, id, "paused", inState("paused"))
	assert.Equal(t, sdk.RolloutCause("threshold-exceeded"), r.StateCause)
	assert.Equal(t, sdk.WaveState("failed"), r.Waves[0].State)
	assert.Equal(t, 1, r.Waves[0].Counts.Failed)
	assert.Equal(t, sdk.WaveState("pending"), r.Waves[1].State)
	require.NotNil(t, r.Waiting)
	assert.Equal(t, sdk.RolloutWaitingReason("threshold-exceeded"), r.Waiting.Reason)

	// More passes publish nothing of wave 2.
	e.step(t)
	e.step(t)
	for _, id := range rest {
		assert.Equal(t, "1.5.0", e.deployment(t, id).Version)
		assert.Empty(t, e.operationsOf(t, id, "upgrade"), "wave 2 started nothing")
	}
	assert.Equal(t, sdk.DeploymentState("failed"), e.deployment(t, canary[0]).State)
}

// TestRolloutThresholdAbortReverts: wave 2 exceeds maxFailures with
// onThreshold abort and revertOnAbort; the changed cohort goes back where
// the installed version's policy allows it, the others are listed with the
// supplier's reason, and wave 3 is never touched.
func TestRolloutThresholdAbortReverts(t *testing.T) {
	e := newRolloutEnv(t)
	w1 := e.addDevices(t, "a", 6, "1.0.0", "1.5.0")
	e.addDevices(t, "b", 4, "1.5.0")
	w3 := e.addDevices(t, "c", 5, "1.5.0")

	r := e.start(t, `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0","path":"auto"},
		"waves":[{"size":{"count":6}},{"size":{"count":4},"maxFailures":{"count":1}},{"size":{"percent":100}}],
		"onThreshold":"abort","revertOnAbort":true}`)
	id := r.Id.String()
	assert.True(t, r.RevertOnAbort)
	e.drive(t, id, "past wave 1", func(r sdk.Rollout) bool { return r.Waves[0].State == "passed" })
	e.clients["b"].FailRate = 1 // wave 2 fails

	r = e.drive(t, id, "aborted", inState("aborted"))
	assert.Equal(t, sdk.RolloutCause("revert-finished"), r.StateCause)
	require.NotNil(t, r.Abort)
	assert.True(t, r.Abort.Revert)
	causes := []string{}
	for _, h := range r.History {
		causes = append(causes, string(h.Cause))
	}
	assert.Contains(t, causes, "threshold-exceeded")
	assert.Equal(t, sdk.WaveState("failed"), r.Waves[1].State)
	assert.GreaterOrEqual(t, r.Waves[1].Counts.Failed+r.Waves[1].Counts.Reverted+r.Waves[1].Counts.NotReverted, 2, "wave 2 went over its budget of 1 failure")
	assert.Equal(t, sdk.WaveState("stopped"), r.Waves[2].State)

	before := map[string]string{}
	for i, d := range w1 {
		before[d] = []string{"1.0.0", "1.5.0"}[i%2]
	}
	for _, m := range e.members(t, id, sdk.ListRolloutMembersParams{Wave: ptrTo(1)}) {
		d := m.DeploymentId.String()
		require.NotNil(t, m.Revert, "member %s was changed: it has a revert", d)
		if before[d] == "1.5.0" {
			assert.Equal(t, sdk.MemberStatus("reverted"), m.Status)
			assert.Equal(t, "1.5.0", e.deployment(t, d).Version)
		} else {
			assert.Equal(t, sdk.MemberStatus("not-reverted"), m.Status, "2.0.0 may not go back to 1.0.0")
			require.NotNil(t, m.Revert.Reason)
			assert.Contains(t, *m.Revert.Reason, svcRollbackReason)
			assert.Equal(t, "2.0.0", e.deployment(t, d).Version, "left as it is")
		}
	}
	for _, d := range w3 {
		assert.Equal(t, "1.5.0", e.deployment(t, d).Version, "wave 3 never started")
	}
	for _, m := range e.members(t, id, sdk.ListRolloutMembersParams{Wave: ptrTo(3)}) {
		assert.Equal(t, sdk.MemberStatus("cancelled"), m.Status)
	}
}

// TestRolloutApprovalPauseResumeCancelExclude: a manual wave waits for
// approve; pause and resume work; exclude drops one member; cancel lets the
// work in flight finish and starts nothing more.
func TestRolloutApprovalPauseResumeCancelExclude(t *testing.T) {
	e := newRolloutEnv(t)
	ids := e.addDevices(t, "plant", 10, "1.5.0")
	r := e.start(t, `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"maxInFlight":2,
		"waves":[{"size":{"count":2}},{"size":{"count":2},"approval":"manual"},{"size":{"percent":100}}]}`)
	id := r.Id.String()

	r = e.drive(t, id, "waiting for approval", func(r sdk.Rollout) bool { return r.StateCause == "approval-required" })
	assert.Equal(t, sdk.RolloutState("paused"), r.State)
	require.NotNil(t, r.Waiting)
	assert.Equal(t, sdk.RolloutWaitingReason("approval-required"), r.Waiting.Reason)
	e.step(t)
	for _, d := range ids[2:] {
		assert.Equal(t, "1.5.0", e.deployment(t, d).Version, "wave 2 waits for approve")
	}

	// resume does not approve.
	status, body, _ := e.act(t, "resume", id, "")
	p := problemOf(t, &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/problem+json"}}}, body, http.StatusConflict)
	assert.Equal(t, httpapi.ProblemBase+"rollout-state-conflict", p.Type)

	_, tag := e.rollout(t, id)
	status, body, res := e.act(t, "approve", id, tag)
	require.Equal(t, http.StatusOK, status, string(body))
	r = decodeRollout(t, body)
	assert.Equal(t, sdk.RolloutState("running"), r.State)
	assert.Equal(t, sdk.RolloutCause("approved"), r.StateCause)
	assert.NotEqual(t, tag, res.Header.Get("ETag"))
	status, _, _ = e.act(t, "approve", id, tag) // a double click
	assert.Equal(t, http.StatusPreconditionFailed, status, "the old ETag approves nothing more")

	r = e.drive(t, id, "in wave 3", func(r sdk.Rollout) bool { return r.CurrentWave != nil && *r.CurrentWave == 3 })

	// pause: nothing new starts.
	status, body, _ = e.act(t, "pause", id, "")
	require.Equal(t, http.StatusOK, status, string(body))
	assert.Equal(t, sdk.RolloutCause("operator-paused"), decodeRollout(t, body).StateCause)
	status, _, _ = e.act(t, "pause", id, "")
	assert.Equal(t, http.StatusOK, status, "pausing a paused rollout changes nothing")

	// exclude one member of wave 3 that has not started.
	pending := e.members(t, id, sdk.ListRolloutMembersParams{Wave: ptrTo(3), Status: ptrTo(sdk.MemberStatus("pending"))})
	require.NotEmpty(t, pending)
	dropped := pending[len(pending)-1].DeploymentId.String()
	ex, err := e.mgmt.ExcludeRolloutMemberWithResponse(t.Context(), id, nil, sdk.ExcludeMemberRequest{DeploymentId: pending[len(pending)-1].DeploymentId})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, ex.StatusCode(), string(ex.Body))
	gone := e.members(t, id, sdk.ListRolloutMembersParams{Reason: ptrTo(sdk.ExclusionReason("operator"))})
	require.Len(t, gone, 1)
	assert.Equal(t, dropped, gone[0].DeploymentId.String())
	assert.Equal(t, sdk.MemberStatus("excluded"), gone[0].Status)

	status, body, _ = e.act(t, "resume", id, "")
	require.Equal(t, http.StatusOK, status, string(body))
	assert.Equal(t, sdk.RolloutCause("operator-resumed"), decodeRollout(t, body).StateCause)

	// One pass publishes up to maxInFlight members; cancel before the
	// devices report: they finish, the rest is cancelled.
	e.tick(t)
	inFlight := e.members(t, id, sdk.ListRolloutMembersParams{Status: ptrTo(sdk.MemberStatus("in-progress"))})
	require.NotEmpty(t, inFlight)
	status, body, _ = e.act(t, "cancel", id, "")
	require.Equal(t, http.StatusOK, status, string(body))
	r = decodeRollout(t, body)
	assert.Equal(t, sdk.RolloutState("cancelled"), r.State)
	e.step(t)
	e.step(t)
	for _, m := range inFlight {
		assert.Equal(t, "2.0.0", e.deployment(t, m.DeploymentId.String()).Version, "work in flight finishes")
	}
	left := e.members(t, id, sdk.ListRolloutMembersParams{Status: ptrTo(sdk.MemberStatus("cancelled"))})
	require.NotEmpty(t, left)
	for _, m := range left {
		assert.Equal(t, "1.5.0", e.deployment(t, m.DeploymentId.String()).Version, "nothing new started")
	}
	assert.Equal(t, "1.5.0", e.deployment(t, dropped).Version)
}

// TestRolloutInstallAbortRevertRemoves: an install rollout creates
// deployments; an abort with revert removes what it created.
func TestRolloutInstallAbortRevertRemoves(t *testing.T) {
	e := newRolloutEnv(t)
	e.addDevices(t, "plant", 6)
	r := e.start(t, `{"applicationId":"svc","target":{},"action":"install","install":{"version":"1.5.0"},
		"waves":[{"size":{"count":2}},{"size":{"percent":100},"approval":"manual"}]}`)
	id := r.Id.String()
	assert.Equal(t, 6, r.Counts.Eligible)
	e.drive(t, id, "waiting for approval", func(r sdk.Rollout) bool { return r.StateCause == "approval-required" })

	created := e.members(t, id, sdk.ListRolloutMembersParams{Wave: ptrTo(1)})
	require.Len(t, created, 2)
	for _, m := range created {
		require.NotNil(t, m.DeploymentId)
		assert.Equal(t, sdk.DeploymentState("installed"), e.deployment(t, m.DeploymentId.String()).State)
	}

	res := e.abort(t, id, sdk.AbortRolloutRequest{Revert: ptrTo(true)})
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	assert.Equal(t, sdk.RolloutState("aborting"), res.JSON200.State)
	r = e.drive(t, id, "aborted", inState("aborted"))
	for _, m := range e.members(t, id, sdk.ListRolloutMembersParams{Wave: ptrTo(1)}) {
		assert.Equal(t, sdk.MemberStatus("reverted"), m.Status)
		assert.Equal(t, sdk.DeploymentState("removed"), e.deployment(t, m.DeploymentId.String()).State)
	}
	deps, err := e.mgmt.ListDeploymentsWithResponse(t.Context(), &sdk.ListDeploymentsParams{ApplicationId: ptrTo("svc"), State: ptrTo(sdk.DeploymentState("installed"))})
	require.NoError(t, err)
	assert.Empty(t, deps.JSON200.Items, "nothing the rollout created is left")
}

// TestRolloutMembership: a member refuses a single-deployment upgrade with
// 409 naming the rollout; a second rollout excludes the first one's
// members as busy; deleting a member's deployment still works and the
// member shows removed.
func TestRolloutMembership(t *testing.T) {
	e := newRolloutEnv(t)
	first := e.addDevices(t, "a", 3, "1.5.0")
	e.addDevices(t, "b", 2, "1.5.0")
	r := e.start(t, `{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"target":{"clients":["a"]},
		"waves":[{"size":{"percent":100},"approval":"manual"}]}`)
	id := r.Id.String()

	up := e.upgrade(t, first[0], sdk.UpgradeRequest{TargetVersion: "2.0.0"})
	p := problemOf(t, up.HTTPResponse, up.Body, http.StatusConflict)
	assert.Equal(t, httpapi.ProblemBase+"rollout-member", p.Type)
	assert.Contains(t, p.Detail, id)
	var ext struct {
		RolloutID string `json:"rolloutId"`
	}
	require.NoError(t, json.Unmarshal(up.Body, &ext))
	assert.Equal(t, id, ext.RolloutID)

	second := e.start(t, `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0"}}`)
	assert.Equal(t, 3, second.Counts.ExcludedByReason.Busy)
	assert.Equal(t, 2, second.Counts.Eligible)
	for _, m := range e.members(t, second.Id.String(), sdk.ListRolloutMembersParams{Reason: ptrTo(sdk.ExclusionReason("busy"))}) {
		assert.True(t, slices.Contains(first, m.DeploymentId.String()))
	}

	del, err := e.mgmt.DeleteDeploymentWithResponse(t.Context(), first[1], nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, del.StatusCode(), string(del.Body))
	e.step(t)
	for _, m := range e.members(t, id, sdk.ListRolloutMembersParams{}) {
		if m.DeploymentId.String() == first[1] {
			assert.Equal(t, sdk.MemberStatus("removed"), m.Status)
		}
	}
}

// TestRolloutSchedulersRaceAndRestart: two schedulers racing publish each
// member once; a new server process on the same database resumes mid-wave.
func TestRolloutSchedulersRaceAndRestart(t *testing.T) {
	e := newRolloutEnv(t)
	ids := e.addDevices(t, "plant", 12, "1.5.0")
	r := e.start(t, `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"maxInFlight":4,
		"waves":[{"size":{"count":4}},{"size":{"percent":100}}]}`)
	id := r.Id.String()

	// Two replicas' schedulers race over the same rollout.
	other := e.replica(t)
	race := func() {
		var wg sync.WaitGroup
		for _, s := range []*fleet.Scheduler{e.sched, other.sched} {
			wg.Go(func() {
				_, err := s.RunOnce(t.Context())
				assert.NoError(t, err)
			})
		}
		wg.Wait()
	}
	for range 3 {
		e.clock.Advance(time.Second)
		race()
		e.syncAll(t)
		race()
	}
	r, _ = e.rollout(t, id)
	require.Equal(t, 2, *r.CurrentWave, "mid-wave: the restart happens in wave 2")

	// "Restart": the first process is gone; the replica carries on.
	e.moveTo(t, other)
	e.drive(t, id, "succeeded", inState("succeeded"))

	for _, d := range ids {
		assert.Len(t, e.operationsOf(t, d, "upgrade"), 1, "deployment %s: one upgrade operation, published once", d)
		assert.Equal(t, "2.0.0", e.deployment(t, d).Version)
	}
}

// rowCounts counts the rows of every table of the database.
func (e *rolloutEnv) rowCounts(t *testing.T) map[string]int64 {
	t.Helper()
	rows, err := e.pool.Query(t.Context(), `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		tables = append(tables, n)
	}
	require.NoError(t, rows.Err())
	out := map[string]int64{}
	for _, tb := range tables {
		var n int64
		require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT count(*) FROM "`+tb+`"`).Scan(&n))
		out[tb] = n
	}
	return out
}

// manifestETags reads each client's state manifest ETag.
func (e *rolloutEnv) manifestETags(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for c := range e.clients {
		res, body := e.client(t, c).do("GET", "/api/v1/deployments", nil)
		require.Equal(t, http.StatusOK, res.StatusCode, string(body))
		out[c] = res.Header.Get("ETag")
	}
	return out
}

// TestRolloutPlanChangesNothing: the plan answers what a create would do
// and changes no row (not even the audit log) and no manifest.
func TestRolloutPlanChangesNothing(t *testing.T) {
	e := newRolloutEnv(t)
	e.addDevices(t, "plant", 8, "1.0.0", "1.5.0")
	e.addDevices(t, "lab", 2, "2.0.0")
	rows, tags := e.rowCounts(t), e.manifestETags(t)

	body := `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0","path":"auto"},
		"waves":[{"size":{"count":1}},{"size":{"percent":100}}]}`
	res, err := e.mgmt.PlanRolloutWithBodyWithResponse(t.Context(), "application/json", strings.NewReader(body))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	p := *res.JSON200
	assert.Equal(t, 10, p.Total)
	assert.Equal(t, 8, p.Eligible)
	assert.Equal(t, 2, p.ExcludedByReason.AtTarget)
	groups := map[string]int{}
	for _, g := range p.Plans {
		key := string(g.Plan.Kind)
		if g.Plan.Through != nil {
			key += ":" + strings.Join(*g.Plan.Through, ",")
		}
		groups[key] = g.Count
		assert.LessOrEqual(t, len(g.Examples), 5)
		assert.NotEmpty(t, g.Examples)
	}
	assert.Equal(t, map[string]int{"direct": 4, "hops:1.5.0": 4}, groups)
	require.Len(t, p.Waves, 2)
	assert.Equal(t, 1, p.Waves[0].ResolvedSize)
	assert.Equal(t, 7, p.Waves[1].ResolvedSize)

	assert.Equal(t, rows, e.rowCounts(t), "a plan writes no row, no audit row either")
	assert.Equal(t, tags, e.manifestETags(t), "a plan changes no manifest")
}

// TestRolloutBadRequests: every bad request is a problem naming the field,
// and creates nothing.
func TestRolloutBadRequests(t *testing.T) {
	e := newRolloutEnv(t)
	e.addDevices(t, "plant", 4, "1.5.0")
	yank, err := e.mgmt.YankApplicationVersionWithResponse(t.Context(), "svc", "1.0.0", nil, sdk.YankRequest{Reason: ptrTo("bad build")})
	require.NoError(t, err)
	require.Less(t, yank.StatusCode(), 300, string(yank.Body))
	rows := e.rowCounts(t)
	up := func(extra string) string {
		return `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0"}` + extra + `}`
	}
	for _, c := range []struct {
		name   string
		body   string
		status int
		typ    string
		field  string
	}{
		{"unknown member", up(`,"colour":"blue"`), http.StatusUnprocessableEntity, "invalid-request", "/colour"},
		{"unknown option", `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0","speed":9}}`, http.StatusUnprocessableEntity, "invalid-request", "/upgrade/speed"},
		{"NUL byte", `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0\u0000"}}`, http.StatusBadRequest, "invalid-text", "/upgrade/targetVersion"},
		{"options of another action", up(`,"install":{"version":"1.0.0"}`), http.StatusUnprocessableEntity, "invalid-request", "/install"},
		{"options missing", `{"applicationId":"svc","target":{},"action":"rollback"}`, http.StatusUnprocessableEntity, "invalid-request", "/rollback"},
		{"wave size zero", up(`,"waves":[{"size":{"count":0}}]`), http.StatusUnprocessableEntity, "invalid-request", "/waves/0/size/count"},
		{"unknown time zone", up(`,"window":{"start":"22:00","end":"04:00","timeZone":"Mars/Olympus"}`), http.StatusUnprocessableEntity, "invalid-rollout", "/window/timeZone"},
		{"deadline out of range", up(`,"deadline":"30s"`), http.StatusUnprocessableEntity, "invalid-rollout", "/deadline"},
		{"unparsable target version", `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"two"}}`, http.StatusUnprocessableEntity, "invalid-rollout", "/upgrade/targetVersion"},
		{"waves do not add up", up(`,"waves":[{"size":{"count":1}},{"size":{"percent":10}}]`), http.StatusUnprocessableEntity, "waves-do-not-cover", "/waves"},
		{"empty wave", up(`,"waves":[{"size":{"percent":100}},{"size":{"count":1}}]`), http.StatusUnprocessableEntity, "wave-empty", "/waves/1"},
		{"empty client list", `{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"target":{"clients":[]}}`, http.StatusUnprocessableEntity, "invalid-request", "/target/clients"},
		{"empty state list", `{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"target":{"states":[]}}`, http.StatusUnprocessableEntity, "invalid-request", "/target/states"},
		{"value invalid for the target", `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0","parameters":{"greeting":""}}}`, http.StatusUnprocessableEntity, "invalid-parameter-values", "/upgrade/parameters/greeting"},
		{"value invalid for every member's version", `{"applicationId":"svc","target":{},"action":"reconfigure","reconfigure":{"parameters":{"greeting":"far too long a greeting"}}}`, http.StatusUnprocessableEntity, "no-eligible-members", ""},
		{"unknown selector syntax", `{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"target":{"labels":"site in (a,b)"}}`, http.StatusUnprocessableEntity, "invalid-rollout", "/target/labels"},
		{"unknown target version", `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"9.0.0"}}`, http.StatusUnprocessableEntity, "invalid-rollout", "/upgrade/targetVersion"},
		{"yanked target version", `{"applicationId":"svc","target":{},"action":"install","install":{"version":"1.0.0"}}`, http.StatusUnprocessableEntity, "invalid-rollout", "/install/version"},
		{"unknown application", `{"applicationId":"nope","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0"}}`, http.StatusNotFound, "not-found", "/applicationId"},
		{"versions for install", `{"applicationId":"svc","action":"install","install":{"version":"2.0.0"},"target":{"versions":["1.0.0"]}}`, http.StatusUnprocessableEntity, "invalid-rollout", "/target/versions"},
		{"nothing eligible", `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"1.5.0"}}`, http.StatusUnprocessableEntity, "no-eligible-members", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, plan := range []bool{false, true} {
				var res *http.Response
				var b []byte
				if plan {
					pr, err := e.mgmt.PlanRolloutWithBodyWithResponse(t.Context(), "application/json", strings.NewReader(c.body))
					require.NoError(t, err)
					res, b = pr.HTTPResponse, pr.Body
					if c.typ == "no-eligible-members" {
						require.Equal(t, http.StatusOK, res.StatusCode, "a plan answers an empty eligible set: %s", b)
						assert.Zero(t, pr.JSON200.Eligible)
						continue
					}
				} else {
					cr := e.create(t, c.body)
					res, b = cr.HTTPResponse, cr.Body
				}
				p := problemOf(t, res, b, c.status)
				assert.Equal(t, httpapi.ProblemBase+c.typ, p.Type, "plan=%v: %s", plan, b)
				if c.field != "" {
					var fields []string
					for _, f := range p.Errors {
						fields = append(fields, f.Field)
					}
					assert.Contains(t, fields, c.field, "plan=%v: %s", plan, b)
				}
			}
		})
	}
	after := e.rowCounts(t)
	delete(after, "audit_log")
	delete(rows, "audit_log")
	assert.Equal(t, rows, after, "no bad request changed a row (other than its audit entry)")
	t.Run("nothing created", func(t *testing.T) {
		list, err := e.mgmt.ListRolloutsWithResponse(t.Context(), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, list.StatusCode(), string(list.Body))
		assert.Empty(t, list.JSON200.Items, "no bad request created a rollout")
	})
}

// auditCount counts the audit log's rows.
func (e *rolloutEnv) auditCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_log`).Scan(&n))
	return n
}

// TestRolloutPlanIsARead: the plan is a POST that changes nothing, so it is
// audited like a GET (not at all, unless refused), whatever it answers;
// a create with the same body is audited.
func TestRolloutPlanIsARead(t *testing.T) {
	e := newRolloutEnv(t)
	body := `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0"}}`
	before := e.auditCount(t)
	res, err := e.mgmt.PlanRolloutWithBodyWithResponse(t.Context(), "application/json", strings.NewReader(body))
	require.NoError(t, err)
	assert.Equal(t, before, e.auditCount(t), "plan answered %d and wrote an audit row: %s", res.StatusCode(), res.Body)

	e.create(t, body)
	assert.Equal(t, before+1, e.auditCount(t), "a create is audited, whatever it answers")
}

// TestRolloutRoles: viewers read; operators create and act.
func TestRolloutRoles(t *testing.T) {
	e := newRolloutEnv(t)
	tok, err := e.mgmt.CreateTokenWithResponse(t.Context(), sdk.CreateTokenRequest{Name: "v", Role: "viewer"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, tok.StatusCode(), string(tok.Body))
	viewer := clientAs(t, e.url, tok.JSON201.Secret)
	body := `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0"}}`
	cr, err := viewer.CreateRolloutWithBodyWithResponse(t.Context(), nil, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	assert.Equal(t, http.StatusForbidden, cr.StatusCode(), string(cr.Body))
	pl, err := viewer.PlanRolloutWithBodyWithResponse(t.Context(), "application/json", strings.NewReader(body))
	require.NoError(t, err)
	assert.Equal(t, http.StatusForbidden, pl.StatusCode(), string(pl.Body))
	pa, err := viewer.PauseRolloutWithResponse(t.Context(), "7f1d2a8e-0000-4000-8000-000000000001", nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusForbidden, pa.StatusCode(), string(pa.Body))

	t.Run("reads", func(t *testing.T) {
		e.addDevices(t, "plant", 1)
		r := e.start(t, `{"applicationId":"svc","target":{},"action":"install","install":{"version":"1.5.0"}}`)
		list, err := viewer.ListRolloutsWithResponse(t.Context(), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, list.StatusCode(), string(list.Body))
		get, err := viewer.GetRolloutWithResponse(t.Context(), r.Id.String())
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, get.StatusCode(), string(get.Body))
	})
}

// eventTypes lists the types of a rollout's events, oldest first.
func (e *rolloutEnv) eventTypes(t *testing.T, rolloutID string) []string {
	t.Helper()
	rows, err := e.pool.Query(t.Context(), `SELECT type FROM events WHERE subject_kind = 'rollout' AND subject_id = $1 ORDER BY id`, rolloutID)
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

// TestRolloutContract: the conventions of the rollout resource through
// HTTP: Idempotency-Key, list filters and cursors, 404s, the refusals of
// exclude and abort, the 409s of a member, and the events of every change.
func TestRolloutContract(t *testing.T) {
	e := newRolloutEnv(t)
	ids := e.addDevices(t, "plant", 4, "1.5.0")
	e.addDevices(t, "spare", 2)
	body := `{"applicationId":"svc","target":{"clients":["plant"]},"action":"upgrade","upgrade":{"targetVersion":"2.0.0"},
		"waves":[{"size":{"count":1},"approval":"manual"},{"size":{"percent":100}}]}`

	// Idempotency-Key: the same answer, one rollout.
	create := func() *sdk.CreateRolloutResponse {
		res, err := e.mgmt.CreateRolloutWithBodyWithResponse(t.Context(), &sdk.CreateRolloutParams{IdempotencyKey: ptrTo("rollout-1")},
			"application/json", strings.NewReader(body))
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
		return res
	}
	first, again := create(), create()
	assert.Equal(t, first.JSON201.Id, again.JSON201.Id, "a replayed create answers the same rollout")
	assert.Equal(t, "true", again.HTTPResponse.Header.Get("Idempotent-Replayed"))
	assert.NotEmpty(t, first.HTTPResponse.Header.Get("ETag"))
	assert.Equal(t, first.HTTPResponse.Header.Get("ETag"), again.HTTPResponse.Header.Get("ETag"), "a replay carries the first answer's ETag")
	assert.Equal(t, sdk.RolloutState("paused"), first.JSON201.State, "a first wave that waits for approval: the create answers paused")
	assert.Equal(t, "approval-required", string(first.JSON201.StateCause))
	if assert.Len(t, first.JSON201.History, 2, "created running, paused for the approval, in one transaction") {
		assert.Equal(t, "started", string(first.JSON201.History[0].Cause))
		assert.Equal(t, "approval-required", string(first.JSON201.History[1].Cause))
	}
	id := first.JSON201.Id.String()
	if got, tag := e.rollout(t, id); true {
		assert.Equal(t, first.HTTPResponse.Header.Get("ETag"), tag, "the create's ETag is current")
		assert.Equal(t, sdk.RolloutState("paused"), got.State)
	}

	e.clock.Advance(time.Second) // a later creation time: listed first
	install := e.start(t, `{"applicationId":"svc","target":{"clients":["spare"]},"action":"install","install":{"version":"1.5.0"},
		"waves":[{"size":{"percent":100},"approval":"manual"}]}`)

	e.step(t) // both wait for the approval of their first wave

	// Lists: newest first, filters, small pages.
	var listed []string
	p := sdk.ListRolloutsParams{Limit: ptrTo(1)}
	for {
		res, err := e.mgmt.ListRolloutsWithResponse(t.Context(), &p)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		for _, r := range res.JSON200.Items {
			listed = append(listed, r.Id.String())
		}
		if res.JSON200.NextCursor == nil {
			break
		}
		p.Cursor = res.JSON200.NextCursor
	}
	assert.Equal(t, []string{install.Id.String(), id}, listed, "newest first, each once")
	paused, err := e.mgmt.ListRolloutsWithResponse(t.Context(), &sdk.ListRolloutsParams{State: ptrTo(sdk.RolloutState("succeeded"))})
	require.NoError(t, err)
	assert.Empty(t, paused.JSON200.Items)
	excl := e.members(t, id, sdk.ListRolloutMembersParams{Classification: ptrTo(sdk.MemberClassification("eligible"))})
	assert.Len(t, excl, 4)

	// 404s.
	get, err := e.mgmt.GetRolloutWithResponse(t.Context(), "7f1d2a8e-0000-4000-8000-000000000001")
	require.NoError(t, err)
	assert.Equal(t, httpapi.ProblemBase+"not-found", problemOf(t, get.HTTPResponse, get.Body, http.StatusNotFound).Type)

	t.Run("exclude with a malformed id names it", func(t *testing.T) {
		for field, b := range map[string]string{"/deploymentId": `{"deploymentId":"nope"}`, "/clientId": `{"clientId":7,"deviceId":"d"}`} {
			ex, err := e.mgmt.ExcludeRolloutMemberWithBodyWithResponse(t.Context(), id, nil, "application/json", strings.NewReader(b))
			require.NoError(t, err)
			p := problemOf(t, ex.HTTPResponse, ex.Body, http.StatusUnprocessableEntity)
			require.NotEmpty(t, p.Errors, string(ex.Body))
			assert.Equal(t, field, p.Errors[0].Field, string(ex.Body))
		}
	})
	t.Run("exclude names no member", func(t *testing.T) {
		ex, err := e.mgmt.ExcludeRolloutMemberWithResponse(t.Context(), id, nil, sdk.ExcludeMemberRequest{DeploymentId: ptrTo(uuid.New())})
		require.NoError(t, err)
		p := problemOf(t, ex.HTTPResponse, ex.Body, http.StatusUnprocessableEntity)
		assert.Equal(t, httpapi.ProblemBase+"not-a-member", p.Type)
		require.NotEmpty(t, p.Errors)
		assert.Equal(t, "/deploymentId", p.Errors[0].Field)
	})

	// abort: force is admin's, needs a reason and a revert.
	opTok, err := e.mgmt.CreateTokenWithResponse(t.Context(), sdk.CreateTokenRequest{Name: "op", Role: "operator"})
	require.NoError(t, err)
	operator := clientAs(t, e.url, opTok.JSON201.Secret)
	ab, err := operator.AbortRolloutWithResponse(t.Context(), id, nil, sdk.AbortRolloutRequest{Revert: ptrTo(true), Force: ptrTo(true), Reason: ptrTo("incident 7")})
	require.NoError(t, err)
	assert.Equal(t, httpapi.ProblemBase+"break-glass-forbidden", problemOf(t, ab.HTTPResponse, ab.Body, http.StatusForbidden).Type)
	abr := e.abort(t, id, sdk.AbortRolloutRequest{Revert: ptrTo(true), Force: ptrTo(true)})
	assert.Equal(t, httpapi.ProblemBase+"force-reason-required", problemOf(t, abr.HTTPResponse, abr.Body, http.StatusUnprocessableEntity).Type)
	abf := e.abort(t, id, sdk.AbortRolloutRequest{Force: ptrTo(true), Reason: ptrTo("incident 7")})
	pf := problemOf(t, abf.HTTPResponse, abf.Body, http.StatusUnprocessableEntity)
	assert.Equal(t, httpapi.ProblemBase+"invalid-request", pf.Type, "force without revert")
	r, _ := e.rollout(t, id)
	assert.Equal(t, sdk.RolloutState("paused"), r.State, "no refused abort changed the rollout")

	// A member refuses single-deployment changes, naming the rollout.
	rec, err := e.mgmt.ReconfigureDeploymentWithResponse(t.Context(), ids[0], nil, sdk.ReconfigureRequest{Parameters: map[string]any{"greeting": "hi"}})
	require.NoError(t, err)
	pm := problemOf(t, rec.HTTPResponse, rec.Body, http.StatusConflict)
	assert.Equal(t, httpapi.ProblemBase+"rollout-member", pm.Type)
	assert.Contains(t, pm.Detail, id)
	dep, err := e.mgmt.CreateDeploymentWithResponse(t.Context(), nil, sdk.CreateDeploymentRequest{ApplicationId: "svc", Version: "1.5.0", ClientId: "spare", DeviceId: "d-000"})
	require.NoError(t, err)
	pd := problemOf(t, dep.HTTPResponse, dep.Body, http.StatusConflict)
	assert.Equal(t, httpapi.ProblemBase+"rollout-member", pd.Type, "a pending member device of an install rollout")
	assert.Contains(t, pd.Detail, install.Id.String())

	// The cancel of an operation the rollout started.
	_, tag := e.rollout(t, id)
	status, b, _ := e.act(t, "approve", id, tag)
	require.Equal(t, http.StatusOK, status, string(b))
	e.clock.Advance(time.Second)
	e.tick(t) // publishes the canary; the device has not answered yet
	started := e.members(t, id, sdk.ListRolloutMembersParams{Wave: ptrTo(1)})
	require.Len(t, started, 1)
	require.Equal(t, sdk.MemberStatus("in-progress"), started[0].Status)
	require.NotNil(t, started[0].OperationId)
	c, err := e.mgmt.CancelOperationWithResponse(t.Context(), started[0].OperationId.String(), nil)
	require.NoError(t, err)
	assert.Equal(t, httpapi.ProblemBase+"rollout-member", problemOf(t, c.HTTPResponse, c.Body, http.StatusConflict).Type)

	// Events: every change, in its transaction.
	e.drive(t, id, "paused again or done", func(r sdk.Rollout) bool { return r.State != "running" })
	status, b, _ = e.act(t, "cancel", id, "")
	require.Contains(t, []int{http.StatusOK, http.StatusConflict}, status, string(b))
	types := e.eventTypes(t, id)
	require.NotEmpty(t, types)
	assert.Equal(t, "rollout.created", types[0])
	for _, want := range []string{"rollout.state_changed", "rollout.wave_started", "rollout.wave_settled"} {
		assert.Contains(t, types, want)
	}
}

// TestCatalogAccessAndDeviceEvents: publishing, yanking and deleting
// versions, creating and revoking tokens, accepting and retiring clients
// and registering devices append their events (they were listed in the
// event types but never appended), with the token's actor; a viewer sees
// the application and device ones, not the token and client ones.
func TestCatalogAccessAndDeviceEvents(t *testing.T) {
	e := newRolloutEnv(t) // publishes svc's versions
	e.addDevices(t, "plant", 1)
	tok, err := e.mgmt.CreateTokenWithResponse(t.Context(), sdk.CreateTokenRequest{Name: "watcher", Role: "viewer"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, tok.StatusCode(), string(tok.Body))
	yank, err := e.mgmt.YankApplicationVersionWithResponse(t.Context(), "svc", "2.0.0", nil, sdk.YankRequest{Reason: ptrTo("cve")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, yank.StatusCode(), string(yank.Body))
	rev, err := e.mgmt.RevokeTokenWithResponse(t.Context(), tok.JSON201.Token.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, rev.StatusCode(), string(rev.Body))

	types := func(c *sdk.ClientWithResponses) map[string]int {
		res, err := c.ListEventsWithResponse(t.Context(), &sdk.ListEventsParams{Limit: ptrTo(500)})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		out := map[string]int{}
		for _, ev := range res.JSON200.Items {
			out[ev.Type]++
		}
		return out
	}
	all := types(e.mgmt)
	for _, want := range []string{"application.version_added", "application.version_yanked", "token.created", "token.revoked",
		"client.accepted", "device.registered"} {
		assert.Positive(t, all[want], want)
	}
	viewerTok, err := e.mgmt.CreateTokenWithResponse(t.Context(), sdk.CreateTokenRequest{Name: "viewer", Role: "viewer"})
	require.NoError(t, err)
	seen := types(clientAs(t, e.url, viewerTok.JSON201.Secret))
	assert.Positive(t, seen["application.version_added"])
	assert.Positive(t, seen["device.registered"])
	assert.Zero(t, seen["token.created"]+seen["token.revoked"]+seen["client.accepted"], "admin-only events hidden from a viewer")
}
