package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/sdk"
)

// canaryThenRest is a rollout of svc to 2.0.0 in two waves: one canary,
// then every other member.
const canaryThenRest = `{"applicationId":"svc","target":{},"action":"upgrade","upgrade":{"targetVersion":"2.0.0"},
	"waves":[{"size":{"count":1}},{"size":{"percent":100}}]}`

// exclude excludes the member of deployment id from rollout r.
func (e *rolloutEnv) exclude(t *testing.T, r, deployment string) {
	t.Helper()
	dep := uuid.MustParse(deployment)
	res, err := e.mgmt.ExcludeRolloutMemberWithResponse(t.Context(), r, nil, sdk.ExcludeMemberRequest{DeploymentId: &dep})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
}

// stateChanges returns the data of rollout r's rollout.state_changed
// events, oldest first.
func (e *rolloutEnv) stateChanges(t *testing.T, r string) []map[string]any {
	t.Helper()
	id := uuid.MustParse(r)
	res, err := e.mgmt.ListEventsWithResponse(t.Context(), &sdk.ListEventsParams{Rollout: &id, Type: &[]string{"rollout.state_changed"}, Limit: ptrTo(500)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	var out []map[string]any
	for _, ev := range res.JSON200.Items {
		out = append(out, ev.Data)
	}
	return out
}

// TestRolloutEmptiedCanaryPauses: the canary's device has no agent, so
// its operation never ends and the running rollout says so (waiting
// members-in-progress, naming the member and its device's last contact).
// Excluding that only member of wave 1 empties the wave: the rollout
// pauses (wave-emptied) instead of starting wave 2 unnoticed; resume
// passes the wave and wave 2 runs to the end.
func TestRolloutEmptiedCanaryPauses(t *testing.T) {
	e := newRolloutEnv(t)
	canary := e.addDevices(t, "a-canary", 1, "1.5.0")
	rest := e.addDevices(t, "b-rest", 5, "1.5.0")
	e.devices = e.devices[1:] // the canary's agent is gone: its device never contacts wfm again

	r := e.start(t, canaryThenRest)
	id := r.Id.String()
	r = e.drive(t, id, "waiting for its canary", func(r sdk.Rollout) bool {
		return r.Waiting != nil && r.Waiting.Reason == "members-in-progress"
	})
	assert.Equal(t, sdk.RolloutState("running"), r.State)
	require.NotNil(t, r.Waiting.Count)
	assert.Equal(t, 1, *r.Waiting.Count)
	o := r.Waiting.OldestMember
	require.NotNil(t, o, "the wait names the member that holds the wave up")
	require.NotNil(t, o.DeploymentId)
	assert.Equal(t, canary[0], o.DeploymentId.String())
	assert.Equal(t, "a-canary", o.ClientId)
	assert.Equal(t, "d-000", o.DeviceId)
	assert.NotNil(t, o.OperationId)
	assert.False(t, o.Since.IsZero())
	if o.LastSeenAt != nil {
		assert.True(t, o.LastSeenAt.Before(o.Since), "the device was last seen %s, before its operation started %s", o.LastSeenAt, o.Since)
	}
	assert.Contains(t, r.Waiting.Message, "is its agent running?")
	e.step(t)
	r, _ = e.rollout(t, id)
	require.NotNil(t, r.Waiting, "a running wave that starts nothing says why at every pass")
	assert.Equal(t, sdk.RolloutWaitingReason("members-in-progress"), r.Waiting.Reason)

	// The canary leaves: wave 1 settles with no success and no failure.
	e.exclude(t, id, canary[0])
	r = e.drive(t, id, "paused", inState("paused"))
	assert.Equal(t, sdk.RolloutCause("wave-emptied"), r.StateCause)
	require.NotNil(t, r.Waiting)
	assert.Equal(t, sdk.RolloutWaitingReason("wave-emptied"), r.Waiting.Reason)
	assert.Contains(t, r.Waiting.Message, "Wave 1 emptied")
	require.NotNil(t, r.CurrentWave)
	assert.Equal(t, 1, *r.CurrentWave)
	assert.Equal(t, 1, r.Waves[0].Counts.Excluded)
	assert.NotNil(t, r.Waves[0].SettledAt)
	assert.Equal(t, sdk.WaveState("pending"), r.Waves[1].State)
	changes := e.stateChanges(t, id)
	require.NotEmpty(t, changes)
	last := changes[len(changes)-1]
	assert.Equal(t, "paused", last["to"])
	assert.Equal(t, "wave-emptied", last["cause"])
	e.step(t)
	e.step(t)
	r, _ = e.rollout(t, id)
	assert.Equal(t, sdk.RolloutState("paused"), r.State, "it stays paused")
	for _, d := range rest {
		assert.Empty(t, e.operationsOf(t, d, "upgrade"), "wave 2 started nothing")
	}

	// resume accepts the emptied wave: wave 2 starts and the rollout ends.
	_, tag := e.rollout(t, id)
	status, body, _ := e.act(t, "resume", id, tag)
	require.Equal(t, http.StatusOK, status, string(body))
	r = decodeRollout(t, body)
	assert.Equal(t, sdk.RolloutCause("operator-resumed"), r.StateCause)
	r = e.drive(t, id, "succeeded", inState("succeeded"))
	assert.Equal(t, sdk.WaveState("passed"), r.Waves[0].State)
	assert.Equal(t, sdk.WaveState("passed"), r.Waves[1].State)
	assert.Equal(t, 5, r.Waves[1].Counts.Succeeded)
	for _, d := range rest {
		assert.Equal(t, "2.0.0", e.deployment(t, d).Version)
	}
}

// TestRolloutEmptiedWaveAborts: a canary excluded before it started
// empties wave 1 as well; abort then works as from any pause, and wave 2
// never starts.
func TestRolloutEmptiedWaveAborts(t *testing.T) {
	e := newRolloutEnv(t)
	canary := e.addDevices(t, "a-canary", 1, "1.5.0")
	rest := e.addDevices(t, "b-rest", 5, "1.5.0")

	r := e.start(t, canaryThenRest)
	id := r.Id.String()
	e.exclude(t, id, canary[0])
	r = e.drive(t, id, "paused", inState("paused"))
	assert.Equal(t, sdk.RolloutCause("wave-emptied"), r.StateCause)

	res := e.abort(t, id, sdk.AbortRolloutRequest{})
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	assert.Equal(t, sdk.RolloutCause("operator-aborted"), res.JSON200.StateCause)
	r = e.drive(t, id, "aborted", inState("aborted"))
	assert.Equal(t, sdk.WaveState("stopped"), r.Waves[1].State)
	for _, d := range rest {
		assert.Empty(t, e.operationsOf(t, d, "upgrade"), "wave 2 never started")
	}
	for _, m := range e.members(t, id, sdk.ListRolloutMembersParams{Wave: ptrTo(2)}) {
		assert.Equal(t, sdk.MemberStatus("cancelled"), m.Status)
	}
}
