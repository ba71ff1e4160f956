package fleet_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// rolloutEnv is a fleet service on a real database with a catalog of
// versions of "app", devices, and a scheduler run pass by pass.
type rolloutEnv struct {
	// skew moves the services' clock forward (deadlines).
	skew atomic.Int64
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	cat  *catalog.Service
	s    *fleet.Service
	sc   *fleet.Scheduler
}

// describeApp is the description of app at version v with a lifecycle
// section (YAML indented under "lifecycle:", "" for none).
func describeApp(v, lc string) []byte {
	d := strings.ReplaceAll(description, `"1.0.0"`, `"`+v+`"`)
	if lc != "" {
		d += "lifecycle:\n" + lc
	}
	return []byte(d)
}

const rollbackAllowed = "  rollback:\n    allowed: true\n"

func newRolloutEnv(t *testing.T, versions map[string]string) *rolloutEnv {
	t.Helper()
	pool := pgtest.New(t)
	e := &rolloutEnv{t: t, ctx: t.Context(), pool: pool}
	e.cat = catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	for _, v := range []string{"1.0.0", "1.5.0", "2.0.0"} {
		lc, ok := versions[v]
		if !ok {
			continue
		}
		_, _, err := e.cat.Add(e.ctx, describeApp(v, lc), catalog.MediaYAML)
		require.NoError(t, err, v)
	}
	e.s = e.service()
	e.sc = fleet.NewScheduler(e.s, time.Hour)
	return e
}

// service returns another service on the same database (another replica,
// or the server after a restart).
func (e *rolloutEnv) service() *fleet.Service {
	now := func() time.Time { return time.Now().Add(time.Duration(e.skew.Load())) }
	return fleet.NewService(postgres.NewFleetStore(e.pool, 5), e.cat, fleet.Policy{AcceptAll: true, AllowOverrides: true}, now,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// deploy registers device dev of client c and installs app at version v on it.
func (e *rolloutEnv) deploy(c, dev, v string) fleet.Deployment {
	e.t.Helper()
	_, err := e.s.PutCapabilities(e.ctx, c, dev, caps(dev))
	require.NoError(e.t, err)
	d, err := e.s.CreateDeployment(e.ctx, fleet.CreateRequest{ApplicationID: "app", Version: v, ClientID: c, DeviceID: dev})
	require.NoError(e.t, err)
	_, err = e.s.ReportStatus(e.ctx, c, d.ID, report(d.ID, d.DesiredSince, "installed"))
	require.NoError(e.t, err)
	d, err = e.s.Deployment(e.ctx, d.ID)
	require.NoError(e.t, err)
	require.Equal(e.t, lifecycle.StateInstalled, d.State)
	return d
}

// pending lists the deployments of app that wait for their device: a
// revision published (pending) or a removal under way.
func (e *rolloutEnv) pending() []fleet.Deployment {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT id::text FROM deployments WHERE application_id = 'app' AND state IN ('pending', 'removing') ORDER BY client_id, device_id`)
	require.NoError(e.t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(e.t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(e.t, rows.Err())
	out := make([]fleet.Deployment, 0, len(ids))
	for _, id := range ids {
		d, err := e.s.Deployment(e.ctx, id)
		require.NoError(e.t, err)
		out = append(out, d)
	}
	return out
}

// pump runs scheduler passes and answers for the devices — answer returns
// the state a device reports for its deployment ("" for no answer; a
// removal is answered "removed") — until nothing more happens.
func (e *rolloutEnv) pump(answer func(d fleet.Deployment) string) {
	e.t.Helper()
	quiet := 0
	for range 200 {
		_, err := e.sc.RunOnce(e.ctx)
		require.NoError(e.t, err)
		sent := 0
		for _, d := range e.pending() {
			state := "removed"
			if !d.Removing {
				state = answer(d)
			}
			if state == "" {
				continue
			}
			_, err := e.s.ReportStatus(e.ctx, d.ClientID, d.ID, report(d.ID, d.DesiredSince, state))
			require.NoError(e.t, err)
			sent++
		}
		if sent == 0 {
			if quiet++; quiet == 3 {
				return
			}
		} else {
			quiet = 0
		}
	}
	e.t.Fatal("the fleet did not settle in 200 passes")
}

func installed(fleet.Deployment) string { return "installed" }

func (e *rolloutEnv) rollout(id string) fleet.Rollout {
	e.t.Helper()
	r, err := e.s.Rollout(e.ctx, id)
	require.NoError(e.t, err)
	e.checkCounts(r)
	return r
}

// checkCounts compares r's counts, which the store keeps from its
// members' changes, with its members counted now (each eligible member's
// wave from its place, lifecycle.WaveAt).
func (e *rolloutEnv) checkCounts(r fleet.Rollout) {
	e.t.Helper()
	sizes := make([]int, len(r.Waves))
	for i, w := range r.Waves {
		sizes[i] = w.ResolvedSize
	}
	starts := lifecycle.WaveStarts(sizes)
	want := fleet.RolloutCounts{ExcludedByReason: map[lifecycle.ExclusionReason]int{}}
	waves := make([]lifecycle.WaveCounts, len(r.Waves))
	rows, err := e.pool.Query(e.ctx, `SELECT place, status, classification, coalesce(reason, '') FROM rollout_members WHERE rollout_id = $1`, r.ID)
	require.NoError(e.t, err)
	defer rows.Close()
	for rows.Next() {
		var place *int
		var status, class, reason string
		require.NoError(e.t, rows.Scan(&place, &status, &class, &reason))
		st := lifecycle.MemberStatus(status)
		want.Total++
		if class == fleet.ClassEligible {
			want.Eligible++
		}
		if st == lifecycle.MemberExcluded {
			want.Excluded++
			want.ExcludedByReason[lifecycle.ExclusionReason(reason)]++
		}
		want.ByStatus.AddN(st, 1)
		if place != nil {
			waves[lifecycle.WaveAt(starts, *place)].AddN(st, 1)
		}
	}
	require.NoError(e.t, rows.Err())
	got := r.Counts
	if len(got.ExcludedByReason) == 0 && len(want.ExcludedByReason) == 0 {
		got.ExcludedByReason, want.ExcludedByReason = nil, nil
	}
	assert.Equal(e.t, want, got, "rollout %s: the counts kept are the members counted", r.ID)
	for i, w := range r.Waves {
		assert.Equal(e.t, waves[i], w.Counts, "rollout %s: wave %d: the counts kept are the members counted", r.ID, i+1)
	}
}

func (e *rolloutEnv) members(id string, f fleet.MemberFilter) []fleet.RolloutMember {
	e.t.Helper()
	var all []fleet.RolloutMember
	cursor := ""
	for {
		ms, next, err := e.s.RolloutMembers(e.ctx, id, f, 7, cursor) // small pages: the cursor is exercised
		require.NoError(e.t, err)
		all = append(all, ms...)
		if next == "" {
			return all
		}
		cursor = next
	}
}

// versionsOf counts the installed versions of app's live deployments.
func (e *rolloutEnv) versionsOf() map[string]int {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT r.version, count(*) FROM deployments d JOIN revisions r ON r.deployment_id = d.id AND r.n = d.installed_revision
WHERE d.application_id = 'app' AND NOT d.removing GROUP BY 1`)
	require.NoError(e.t, err)
	out := map[string]int{}
	for rows.Next() {
		var v string
		var n int
		require.NoError(e.t, rows.Scan(&v, &n))
		out[v] = n
	}
	require.NoError(e.t, rows.Err())
	return out
}

// mixedFleet deploys n devices, every third on 1.5.0 and the others on
// 1.0.0, and returns the deployments by device id.
func (e *rolloutEnv) mixedFleet(n int) map[string]fleet.Deployment {
	out := map[string]fleet.Deployment{}
	for i := range n {
		dev := fmt.Sprintf("d%03d", i)
		v := "1.0.0"
		if i%3 == 2 {
			v = "1.5.0"
		}
		out[dev] = e.deploy("c", dev, v)
	}
	// The installs' operations reached their goal but no scheduler pass
	// settled them yet: that does not make the members busy.
	return out
}

func count(n int) lifecycle.WaveAmount   { return lifecycle.CountOf(n) }
func percent(p int) lifecycle.WaveAmount { return lifecycle.PercentOf(p) }

func upgradeTo2(waves ...lifecycle.WaveSpec) fleet.RolloutRequest {
	return fleet.RolloutRequest{ApplicationID: "app", Spec: lifecycle.RolloutSpec{Action: lifecycle.RolloutUpgrade, TargetVersion: "2.0.0",
		Path: lifecycle.PathAuto, Waves: waves}}
}

var hopVersions = map[string]string{
	"1.0.0": rollbackAllowed,
	"1.5.0": rollbackAllowed,
	"2.0.0": "  upgrade:\n    minUpgradeFrom: \"1.5.0\"\n" + rollbackAllowed,
}

func tableCounts(t *testing.T, ctx context.Context, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, tbl := range []string{"rollouts", "rollout_members", "rollout_history", "events", "operations", "deployments", "revisions", "manifest_versions"} {
		var n int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+tbl).Scan(&n))
		out[tbl] = n
	}
	return out
}

// TestRolloutMixedFleetThreeWaves: a fleet on 1.0.0 and 1.5.0 is upgraded
// to 2.0.0 (minUpgradeFrom 1.5.0) with path auto in three waves: the plan
// groups the 1.0.0 members as hops through 1.5.0 and changes nothing; the
// rollout ends succeeded with every member on 2.0.0 and the right counts
// per wave.
func TestRolloutMixedFleetThreeWaves(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(30) // 20 on 1.0.0, 10 on 1.5.0
	req := upgradeTo2(lifecycle.WaveSpec{Size: count(1)}, lifecycle.WaveSpec{Size: percent(10)}, lifecycle.WaveSpec{Size: percent(100)})

	before := tableCounts(t, e.ctx, e.pool)
	plan, err := e.s.PlanRollout(e.ctx, req)
	require.NoError(t, err)
	assert.Equal(t, before, tableCounts(t, e.ctx, e.pool), "a plan writes nothing")
	assert.Equal(t, 30, plan.Eligible)
	require.Len(t, plan.Plans, 2)
	assert.Equal(t, lifecycle.PlanHops, plan.Plans[0].Plan.Kind)
	assert.Equal(t, "1.5.0", plan.Plans[0].Plan.Through[0].String())
	assert.Equal(t, 20, plan.Plans[0].Count)
	assert.Len(t, plan.Plans[0].Examples, fleet.MaxPlanExamples)
	assert.Equal(t, lifecycle.PlanDirect, plan.Plans[1].Plan.Kind)
	assert.Equal(t, 10, plan.Plans[1].Count)
	var sizes []int
	for _, w := range plan.Waves {
		sizes = append(sizes, w.ResolvedSize)
	}
	assert.Equal(t, []int{1, 3, 26}, sizes)

	r, err := e.s.CreateRollout(e.ctx, req, fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	assert.Equal(t, lifecycle.RolloutRunning, r.State)
	assert.Equal(t, 1, r.CurrentWave)
	assert.Equal(t, 30, r.Counts.Eligible)

	e.pump(installed)
	r = e.rollout(r.ID)
	require.Equal(t, lifecycle.RolloutSucceeded, r.State, "%+v", r.Waiting)
	assert.Equal(t, lifecycle.RolloutCauseCompleted, r.Cause)
	assert.Equal(t, map[string]int{"2.0.0": 30}, e.versionsOf())
	for i, want := range []int{1, 3, 26} {
		assert.Equal(t, want, r.Waves[i].Counts.Succeeded, "wave %d", i+1)
		assert.Equal(t, fleet.WavePassed, r.Waves[i].State, "wave %d", i+1)
	}
	assert.Equal(t, 30, r.Counts.ByStatus.Succeeded)
	ms := e.members(r.ID, fleet.MemberFilter{})
	require.Len(t, ms, 30)
	for i, m := range ms {
		assert.Equal(t, i, m.Ord)
		assert.Equal(t, lifecycle.MemberSucceeded, m.Status)
		assert.NotEmpty(t, m.OperationID)
	}
	list, next, err := e.s.Rollouts(e.ctx, fleet.RolloutFilter{ApplicationID: "app", State: lifecycle.RolloutSucceeded}, 10, "")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, r.ID, list[0].ID)
	assert.Empty(t, next)
	list, _, err = e.s.Rollouts(e.ctx, fleet.RolloutFilter{State: lifecycle.RolloutRunning}, 10, "")
	require.NoError(t, err)
	assert.Empty(t, list)
	hops := e.members(r.ID, fleet.MemberFilter{Wave: 3})
	assert.Len(t, hops, 26)
	var types []string
	rows, err := e.pool.Query(e.ctx, `SELECT type FROM events WHERE 'rollout:'||$1 = ANY(refs) AND subject_kind = 'rollout' ORDER BY id`, r.ID)
	require.NoError(t, err)
	for rows.Next() {
		var typ string
		require.NoError(t, rows.Scan(&typ))
		types = append(types, typ)
	}
	assert.Equal(t, []string{"rollout.created", "rollout.state_changed", "rollout.wave_started",
		"rollout.wave_settled", "rollout.wave_started", "rollout.wave_settled", "rollout.wave_started",
		"rollout.wave_settled", "rollout.state_changed"}, types)
	// The members' operations relate to the rollout too (one
	// operation.created each): filtering the log by the rollout finds them.
	var memberOps int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM events WHERE 'rollout:'||$1 = ANY(refs) AND type = 'operation.created'`, r.ID).Scan(&memberOps))
	assert.Equal(t, r.Counts.Eligible, memberOps)
}

// TestRolloutCanaryFailureStopsBeforeWave2: the canary fails; the rollout
// pauses (threshold-exceeded) and wave 2 publishes nothing. Resume accepts
// the wave and goes on.
func TestRolloutCanaryFailureStopsBeforeWave2(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(6)
	r, err := e.s.CreateRollout(e.ctx, upgradeTo2(), fleet.Actor{ID: "alice"}) // default waves: canary, 10%, rest
	require.NoError(t, err)
	require.Len(t, r.Waves, 3)
	e.pump(func(fleet.Deployment) string { return "failed" })
	r = e.rollout(r.ID)
	require.Equal(t, lifecycle.RolloutPaused, r.State)
	assert.Equal(t, lifecycle.RolloutCauseThresholdExceeded, r.Cause)
	require.NotNil(t, r.Waiting)
	assert.Equal(t, lifecycle.WaitingThresholdExceeded, r.Waiting.Reason)
	assert.Equal(t, fleet.WaveFailed, r.Waves[0].State)
	assert.Equal(t, 1, r.Waves[0].Counts.Failed)
	assert.Equal(t, r.Waves[1].ResolvedSize, r.Waves[1].Counts.Pending, "wave 2 published nothing")
	assert.Equal(t, r.Waves[2].ResolvedSize, r.Waves[2].Counts.Pending)

	r, err = e.s.ResumeRollout(e.ctx, r.ID, fleet.Actor{ID: "bob"}, fleet.ExpectGeneration(r.Generation))
	require.NoError(t, err)
	assert.Equal(t, lifecycle.RolloutRunning, r.State)
	assert.True(t, r.WaveAccepted)
	e.pump(installed)
	r = e.rollout(r.ID)
	assert.Equal(t, lifecycle.RolloutSucceeded, r.State)
	assert.Equal(t, 5, r.Counts.ByStatus.Succeeded)
	assert.Equal(t, 1, r.Counts.ByStatus.Failed)
}

// TestRolloutThresholdAbortReverts: wave 2 exceeds maxFailures with
// onThreshold abort and revertOnAbort: the rollout aborts, cancels nothing
// more, and reverts the members it changed where the installed version's
// policy allows it; the members that went from 1.0.0 to 2.0.0 may not go
// back below 1.5.0 and are listed not-reverted with the supplier's reason.
func TestRolloutThresholdAbortReverts(t *testing.T) {
	versions := map[string]string{
		"1.0.0": rollbackAllowed,
		"1.5.0": rollbackAllowed,
		"2.0.0": "  upgrade:\n    minUpgradeFrom: \"1.5.0\"\n  rollback:\n    allowed: true\n    minVersion: \"1.5.0\"\n    reason: \"2.0 migrates the schema\"\n",
	}
	e := newRolloutEnv(t, versions)
	fleetDeps := e.mixedFleet(9) // d002, d005, d008 on 1.5.0
	two := 2
	req := upgradeTo2(lifecycle.WaveSpec{Size: count(3)}, lifecycle.WaveSpec{Size: percent(100), MaxFailures: &lifecycle.WaveAmount{Count: &two}})
	req.Spec.OnThreshold = lifecycle.OnThresholdAbort
	req.RevertOnAbort = true
	r, err := e.s.CreateRollout(e.ctx, req, fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	// Wave 1 (d000..d002) succeeds; in wave 2, d003, d004 and d006 fail
	// their first step: 3 failures > 2 allowed.
	failing := map[string]bool{fleetDeps["d003"].ID: true, fleetDeps["d004"].ID: true, fleetDeps["d006"].ID: true}
	e.pump(func(d fleet.Deployment) string {
		if failing[d.ID] && d.Operation != lifecycle.OperationRollback {
			return "failed"
		}
		return "installed"
	})
	r = e.rollout(r.ID)
	require.Equal(t, lifecycle.RolloutAborted, r.State, "%+v", r.History)
	require.Len(t, r.History, 3)
	assert.Equal(t, lifecycle.RolloutCauseThresholdExceeded, r.History[1].Cause)
	assert.Equal(t, lifecycle.RolloutAborting, r.History[1].To)
	assert.Equal(t, lifecycle.RolloutCauseRevertFinished, r.History[2].Cause)
	require.NotNil(t, r.Abort)
	assert.True(t, r.Abort.Revert)
	assert.Equal(t, fleet.WaveFailed, r.Waves[1].State)

	byDevice := map[string]fleet.RolloutMember{}
	for _, m := range e.members(r.ID, fleet.MemberFilter{}) {
		byDevice[m.DeviceID] = m
	}
	// d000, d001 (1.0.0 -> 2.0.0): 2.0.0 may not go back below 1.5.0; d007
	// (see below) neither.
	for _, dev := range []string{"d000", "d001", "d007"} {
		m := byDevice[dev]
		assert.Equal(t, lifecycle.MemberNotReverted, m.Status, dev)
		require.NotNil(t, m.Revert, dev)
		assert.Contains(t, m.Revert.Reason, "2.0 migrates the schema", dev)
	}
	// d002, d005, d008 (1.5.0 -> 2.0.0): back to 1.5.0; the failed
	// members (still running their old revision) are restored.
	for _, dev := range []string{"d002", "d005", "d008", "d003", "d004", "d006"} {
		m := byDevice[dev]
		assert.Equal(t, lifecycle.MemberReverted, m.Status, dev)
		require.NotNil(t, m.Revert, dev)
		assert.Equal(t, fleet.RevertReverted, m.Revert.Outcome, dev)
		assert.Equal(t, m.FromRevision, m.Revert.ToRevision, dev)
	}
	// d007 (1.0.0) had hopped to 1.5.0 and had 2.0.0 published when the
	// abort cancelled its operation: its desired revision is 2.0.0's, which
	// may not go back below 1.5.0 (the single rollback's rule), so it
	// stays on 1.5.0, not reverted.
	assert.Equal(t, map[string]int{"2.0.0": 2, "1.5.0": 4, "1.0.0": 3}, e.versionsOf())
	for _, dev := range []string{"d002", "d005", "d008"} {
		d, err := e.s.Deployment(e.ctx, fleetDeps[dev].ID)
		require.NoError(t, err)
		assert.Equal(t, "1.5.0", d.Version.String(), dev)
	}
}

// TestRolloutApprovalPauseCancelExclude: a manual wave waits (paused,
// approval-required) until approve, which resume does not replace; pause
// and resume work; exclude drops one member; cancel starts nothing new and
// lets the operations in flight finish.
func TestRolloutApprovalPauseCancelExclude(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	deps := e.mixedFleet(8)
	req := upgradeTo2(lifecycle.WaveSpec{Size: count(1)}, lifecycle.WaveSpec{Size: count(2), Approval: lifecycle.ApprovalManual},
		lifecycle.WaveSpec{Size: percent(100)})
	r, err := e.s.CreateRollout(e.ctx, req, fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	e.pump(installed)
	r = e.rollout(r.ID)
	require.Equal(t, lifecycle.RolloutPaused, r.State)
	assert.Equal(t, lifecycle.RolloutCauseApprovalRequired, r.Cause)
	require.NotNil(t, r.Waiting)
	assert.Equal(t, lifecycle.WaitingApprovalRequired, r.Waiting.Reason)
	assert.Equal(t, 2, r.CurrentWave)
	assert.Equal(t, 2, r.Waves[1].Counts.Pending, "the manual wave published nothing")

	_, err = e.s.ResumeRollout(e.ctx, r.ID, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	assert.Equal(t, lifecycle.ECONFLICT, lifecycle.ErrorCode(err), "resume does not approve")
	_, err = e.s.ApproveRollout(e.ctx, r.ID, fleet.Actor{ID: "bob"}, fleet.ExpectGeneration(r.Generation-1))
	assert.Equal(t, lifecycle.EPRECONDITION, lifecycle.ErrorCode(err))
	r, err = e.s.ApproveRollout(e.ctx, r.ID, fleet.Actor{ID: "bob"}, fleet.ExpectGeneration(r.Generation))
	require.NoError(t, err)
	assert.Equal(t, lifecycle.RolloutRunning, r.State)
	assert.Equal(t, "bob", r.Waves[1].ApprovedBy)

	// Wave 2 runs, its devices do not answer yet.
	e.pump(func(fleet.Deployment) string { return "" })
	r, err = e.s.PauseRollout(e.ctx, r.ID, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	require.NoError(t, err)
	assert.Equal(t, lifecycle.RolloutPaused, r.State)
	assert.Equal(t, lifecycle.RolloutCauseOperatorPaused, r.Cause)
	again, err := e.s.PauseRollout(e.ctx, r.ID, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	require.NoError(t, err, "pausing a paused rollout changes nothing")
	assert.Equal(t, lifecycle.RolloutPaused, again.State)
	e.pump(installed) // wave 2 finishes; paused: wave 3 does not start
	r = e.rollout(r.ID)
	assert.Equal(t, lifecycle.RolloutPaused, r.State)
	assert.Equal(t, 2, r.Waves[1].Counts.Succeeded)
	assert.Equal(t, 5, r.Waves[2].Counts.Pending)

	// Exclude one pending member of wave 3 (d007), then resume.
	r, err = e.s.ExcludeRolloutMember(e.ctx, r.ID, fleet.MemberRef{DeploymentID: deps["d007"].ID}, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	require.NoError(t, err)
	assert.Equal(t, 1, r.Counts.ExcludedByReason[lifecycle.ExcludedOperator])
	again, err = e.s.ExcludeRolloutMember(e.ctx, r.ID, fleet.MemberRef{DeploymentID: deps["d007"].ID}, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	require.NoError(t, err, "excluding an excluded member changes nothing")
	assert.Equal(t, r.Generation, again.Generation)
	assert.Equal(t, 1, again.Counts.ExcludedByReason[lifecycle.ExcludedOperator])
	for _, bad := range []struct {
		ref     fleet.MemberRef
		pointer string
	}{
		{fleet.MemberRef{}, "/deploymentId"},
		{fleet.MemberRef{ClientID: "c", DeviceID: "d007"}, "/deploymentId"},
		{fleet.MemberRef{DeploymentID: deps["d006"].ID, ClientID: "c"}, "/clientId"},
		{fleet.MemberRef{DeploymentID: deps["d006"].ID, DeviceID: "d006"}, "/deviceId"},
	} {
		_, err = e.s.ExcludeRolloutMember(e.ctx, r.ID, bad.ref, fleet.Actor{ID: "bob"}, fleet.Precondition{})
		require.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "%+v", bad.ref)
		var le *lifecycle.Error
		require.ErrorAs(t, err, &le)
		require.Len(t, le.Fields, 1)
		assert.Equal(t, bad.pointer, le.Fields[0].Pointer, "%+v", bad.ref)
	}
	r, err = e.s.ResumeRollout(e.ctx, r.ID, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	require.NoError(t, err)
	assert.Equal(t, lifecycle.RolloutCauseOperatorResumed, r.Cause)

	// Wave 3 starts; cancel while it is in flight.
	e.pump(func(fleet.Deployment) string { return "" })
	r = e.rollout(r.ID)
	require.Equal(t, 4, r.Waves[2].Counts.InProgress)
	r, err = e.s.CancelRollout(e.ctx, r.ID, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	require.NoError(t, err)
	assert.Equal(t, lifecycle.RolloutCancelled, r.State)
	_, err = e.s.CancelRollout(e.ctx, r.ID, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	assert.Equal(t, lifecycle.ECONFLICT, lifecycle.ErrorCode(err))
	e.pump(installed) // in-flight operations finish on their own
	r = e.rollout(r.ID)
	assert.Equal(t, lifecycle.RolloutCancelled, r.State)
	assert.Equal(t, 0, r.Counts.ByStatus.InProgress, "the members of the ended rollout follow their operations")
	assert.Equal(t, 4, r.Waves[2].Counts.Succeeded)
	assert.Equal(t, map[string]int{"2.0.0": 7, "1.0.0": 1}, e.versionsOf(), "d007 was excluded")
	d7, err := e.s.Deployment(e.ctx, deps["d007"].ID)
	require.NoError(t, err)
	assert.Equal(t, "1.0.0", d7.Version.String())
	_, _, err = e.s.Upgrade(e.ctx, d7.ID, fleet.UpgradeRequest{TargetVersion: "1.5.0"}, fleet.Actor{ID: "bob"}, false, fleet.Precondition{})
	assert.NoError(t, err, "the rollout ended: its members are free")
}

// TestRolloutInstallAbortRevertRemoves: an install rollout creates the
// deployments; an abort with revert removes the ones it created.
func TestRolloutInstallAbortRevertRemoves(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	for i := range 4 {
		dev := fmt.Sprintf("d%d", i)
		_, err := e.s.PutCapabilities(e.ctx, "c", dev, caps(dev))
		require.NoError(t, err)
	}
	e.deploy("c", "d3", "1.0.0") // already has the application
	req := fleet.RolloutRequest{ApplicationID: "app", Spec: lifecycle.RolloutSpec{Action: lifecycle.RolloutInstall, TargetVersion: "2.0.0",
		Waves: []lifecycle.WaveSpec{{Size: count(2)}, {Size: percent(100), Approval: lifecycle.ApprovalManual}}}}
	r, err := e.s.CreateRollout(e.ctx, req, fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	assert.Equal(t, 3, r.Counts.Eligible)
	assert.Equal(t, 1, r.Counts.ExcludedByReason[lifecycle.ExcludedAtTarget])

	// The device of a pending member refuses a deployment of the application.
	_, err = e.s.CreateDeployment(e.ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: "d2"})
	assert.Equal(t, fleet.ProblemRolloutMember, lifecycle.ErrorType(err))

	e.pump(installed)
	r = e.rollout(r.ID)
	require.Equal(t, lifecycle.RolloutPaused, r.State)
	assert.Equal(t, 2, r.Waves[0].Counts.Succeeded)
	assert.Equal(t, map[string]int{"2.0.0": 2, "1.0.0": 1}, e.versionsOf())
	// An install rollout's member is named by clientId and deviceId.
	d0 := e.members(r.ID, fleet.MemberFilter{DeviceID: "d0"})
	require.Len(t, d0, 1)
	for _, bad := range []struct {
		ref     fleet.MemberRef
		pointer string
	}{
		{fleet.MemberRef{DeploymentID: d0[0].DeploymentID}, "/deploymentId"},
		{fleet.MemberRef{DeviceID: "d2"}, "/clientId"},
		{fleet.MemberRef{ClientID: "c"}, "/deviceId"},
	} {
		_, err = e.s.ExcludeRolloutMember(e.ctx, r.ID, bad.ref, fleet.Actor{ID: "bob"}, fleet.Precondition{})
		var le *lifecycle.Error
		require.ErrorAs(t, err, &le, "%+v", bad.ref)
		assert.Equal(t, lifecycle.EINVALID, le.Code)
		require.Len(t, le.Fields, 1)
		assert.Equal(t, bad.pointer, le.Fields[0].Pointer, "%+v", bad.ref)
	}

	_, err = e.s.AbortRollout(e.ctx, r.ID, fleet.AbortRequest{Revert: true, Force: true, Reason: "x"}, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	assert.Equal(t, lifecycle.EFORBIDDEN, lifecycle.ErrorCode(err), "force needs an admin")
	r, err = e.s.AbortRollout(e.ctx, r.ID, fleet.AbortRequest{Revert: true}, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	require.NoError(t, err)
	assert.Equal(t, lifecycle.RolloutAborting, r.State)
	// While aborting with its revert, another abort adds nothing: 409, as
	// the contract says (only a revert the abort lacked is added).
	for _, again := range []fleet.AbortRequest{{Revert: true}, {}} {
		_, err = e.s.AbortRollout(e.ctx, r.ID, again, fleet.Actor{ID: "bob"}, fleet.Precondition{})
		assert.Equal(t, lifecycle.ProblemRolloutStateConflict, lifecycle.ErrorType(err), "%+v: %v", again, err)
		assert.Contains(t, err.Error(), "already aborting")
	}
	e.pump(installed)
	r = e.rollout(r.ID)
	require.Equal(t, lifecycle.RolloutAborted, r.State)
	assert.Equal(t, 2, r.Counts.ByStatus.Reverted)
	assert.Equal(t, 1, r.Counts.ByStatus.Cancelled, "the member of the manual wave never started")
	assert.Equal(t, map[string]int{"1.0.0": 1}, e.versionsOf(), "the deployments the rollout created are removed")
}

// TestRolloutMembersAreBusy: a member of an active rollout refuses a single
// upgrade and the cancel of the operation the rollout started (409
// rollout-member naming the rollout); a second rollout excludes the first's
// members as busy; deleting a member's deployment still works and the
// member then shows removed.
func TestRolloutMembersAreBusy(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	deps := e.mixedFleet(4)
	first, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: count(1)}, lifecycle.WaveSpec{Size: percent(100)}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	e.pump(func(fleet.Deployment) string { return "" }) // the canary runs, unanswered

	_, _, err = e.s.Upgrade(e.ctx, deps["d001"].ID, fleet.UpgradeRequest{TargetVersion: "1.5.0"}, fleet.Actor{ID: "bob"}, false, fleet.Precondition{})
	require.Equal(t, fleet.ProblemRolloutMember, lifecycle.ErrorType(err))
	assert.Equal(t, lifecycle.ECONFLICT, lifecycle.ErrorCode(err))
	var de *lifecycle.Error
	require.ErrorAs(t, err, &de)
	assert.Equal(t, first.ID, de.Extra["rolloutId"])
	assert.Contains(t, de.Message, first.ID)

	// Membership is answered before the plan's own refusals (revision 99
	// does not exist).
	_, _, err = e.s.Rollback(e.ctx, deps["d001"].ID, fleet.RollbackRequest{ToRevision: 99}, fleet.Actor{ID: "bob"}, false, fleet.Precondition{})
	assert.Equal(t, fleet.ProblemRolloutMember, lifecycle.ErrorType(err))

	canary := e.members(first.ID, fleet.MemberFilter{Wave: 1})
	require.Len(t, canary, 1)
	require.NotEmpty(t, canary[0].OperationID)
	_, err = e.s.CancelOperation(e.ctx, canary[0].OperationID, fleet.Actor{ID: "bob"})
	assert.Equal(t, fleet.ProblemRolloutMember, lifecycle.ErrorType(err))

	// A second rollout over the same fleet: every member is busy.
	_, err = e.s.CreateRollout(e.ctx, upgradeTo2(), fleet.Actor{ID: "bob"})
	require.Equal(t, lifecycle.ProblemNoEligible, lifecycle.ErrorType(err))
	assert.Contains(t, err.Error(), "4 busy")
	plan, err := e.s.PlanRollout(e.ctx, upgradeTo2())
	require.NoError(t, err)
	assert.Equal(t, 4, plan.ExcludedByReason[lifecycle.ExcludedBusy])

	const unknown = "00000000-0000-4000-8000-000000000000"
	_, _, err = e.s.RolloutMembers(e.ctx, unknown, fleet.MemberFilter{}, 10, "")
	assert.Equal(t, lifecycle.ENOTFOUND, lifecycle.ErrorCode(err))
	_, err = e.s.Rollout(e.ctx, unknown)
	assert.Equal(t, lifecycle.ENOTFOUND, lifecycle.ErrorCode(err))
	_, err = e.s.PauseRollout(e.ctx, unknown, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	assert.Equal(t, lifecycle.ENOTFOUND, lifecycle.ErrorCode(err))

	// Deleting a member's deployment works; the member shows removed.
	_, err = e.s.RemoveDeployment(e.ctx, deps["d003"].ID, fleet.Precondition{})
	require.NoError(t, err)
	e.pump(installed)
	ms := e.members(first.ID, fleet.MemberFilter{DeploymentID: deps["d003"].ID})
	require.Len(t, ms, 1)
	assert.Equal(t, lifecycle.MemberRemoved, ms[0].Status)
	r := e.rollout(first.ID)
	assert.Equal(t, lifecycle.RolloutSucceeded, r.State)
	assert.Equal(t, 3, r.Counts.ByStatus.Succeeded)
}

// TestRolloutDriversRaceAndResume: two schedulers (two server replicas)
// drive one rollout at the same time: each member's operation is created
// once. A new service on the same database (a restart mid-wave) resumes
// where the rollout was.
func TestRolloutDriversRaceAndResume(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(24)
	r, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: count(4)}, lifecycle.WaveSpec{Size: percent(100)}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	other := e.service()
	for range 5 {
		errs := make(chan error, 2)
		for _, s := range []*fleet.Service{e.s, other} {
			go func() {
				_, err := s.DriveRollouts(e.ctx)
				errs <- err
			}()
		}
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
	}
	var ops, members int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM operations WHERE type = 'upgrade'`).Scan(&ops))
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM rollout_members WHERE status = 'in-progress'`).Scan(&members))
	assert.Equal(t, 4, ops, "the canary wave's operations, each created once")
	assert.Equal(t, 4, members)

	// A restart mid-wave: a new service and scheduler carry on.
	e.s = e.service()
	e.sc = fleet.NewScheduler(e.s, time.Hour)
	e.pump(installed)
	r = e.rollout(r.ID)
	assert.Equal(t, lifecycle.RolloutSucceeded, r.State)
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM operations WHERE type = 'upgrade'`).Scan(&ops))
	assert.Equal(t, 24, ops, "one operation per member")
}

// TestRolloutFailsOnDeadlineAndYank: a paused rollout fails when its
// deadline passes; a running one fails when its target version is yanked,
// and its pending members are cancelled.
func TestRolloutFailsOnDeadlineAndYank(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(6)
	deadline := "1h"
	req := upgradeTo2(lifecycle.WaveSpec{Size: count(1)}, lifecycle.WaveSpec{Size: percent(100), Approval: lifecycle.ApprovalManual})
	req.Spec.Deadline = &deadline
	req.Target.Devices = [][2]string{{"c", "d000"}, {"c", "d001"}, {"c", "d002"}}
	slow, err := e.s.CreateRollout(e.ctx, req, fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	assert.Equal(t, 3, slow.Counts.Total, "the target's devices only")
	e.pump(installed)
	require.Equal(t, lifecycle.RolloutPaused, e.rollout(slow.ID).State)
	e.skew.Store(int64(2 * time.Hour))
	e.pump(installed)
	slow = e.rollout(slow.ID)
	assert.Equal(t, lifecycle.RolloutFailed, slow.State)
	assert.Equal(t, lifecycle.RolloutCauseDeadlinePassed, slow.Cause)
	assert.Equal(t, 2, slow.Counts.ByStatus.Cancelled)

	yanked, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: count(1)}, lifecycle.WaveSpec{Size: percent(100)}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	assert.Equal(t, 5, yanked.Counts.Eligible, "the first rollout's members are free again once it ended; its canary is at target")
	e.pump(func(fleet.Deployment) string { return "" })
	_, err = e.cat.Yank(e.ctx, "app", "2.0.0", "broken")
	require.NoError(t, err)
	e.pump(installed)
	yanked = e.rollout(yanked.ID)
	assert.Equal(t, lifecycle.RolloutFailed, yanked.State)
	assert.Equal(t, lifecycle.RolloutCauseTargetVersionYanked, yanked.Cause)
	assert.Equal(t, 4, yanked.Counts.ByStatus.Cancelled)
	assert.Equal(t, 1, yanked.Counts.ByStatus.Succeeded, "the canary in flight finished")
}

// TestRolloutBadRequests: a bad request is refused with EINVALID naming
// the field, and nothing is written.
func TestRolloutBadRequests(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(2)
	zero := 0
	for name, tc := range map[string]struct {
		req     fleet.RolloutRequest
		pointer string
	}{
		"unknown selector syntax": {func() fleet.RolloutRequest { r := upgradeTo2(); r.Target.Selector = "a=b=c"; return r }(), "/target/labels"},
		"versions for install": {fleet.RolloutRequest{ApplicationID: "app", Spec: lifecycle.RolloutSpec{Action: lifecycle.RolloutInstall, TargetVersion: "2.0.0"},
			Target: fleet.RolloutTarget{Versions: []string{"1.0.0"}}}, "/target/versions"},
		"unknown target version":  {fleet.RolloutRequest{ApplicationID: "app", Spec: lifecycle.RolloutSpec{Action: lifecycle.RolloutUpgrade, TargetVersion: "9.0.0"}}, "/targetVersion"},
		"waves that do not cover": {upgradeTo2(lifecycle.WaveSpec{Size: count(1)}), "/waves"},
		"a zero maxInFlight":      {func() fleet.RolloutRequest { r := upgradeTo2(); r.Spec.MaxInFlight = &zero; return r }(), "/maxInFlight"},
		"a bad version in target": {func() fleet.RolloutRequest { r := upgradeTo2(); r.Target.Versions = []string{"x"}; return r }(), "/target/versions/0"},
	} {
		t.Run(name, func(t *testing.T) {
			before := tableCounts(t, e.ctx, e.pool)
			_, err := e.s.CreateRollout(e.ctx, tc.req, fleet.Actor{ID: "alice"})
			require.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "%v", err)
			var de *lifecycle.Error
			require.ErrorAs(t, err, &de)
			require.NotEmpty(t, de.Fields, "%v", err)
			assert.Equal(t, tc.pointer, de.Fields[0].Pointer)
			_, err = e.s.PlanRollout(e.ctx, tc.req)
			assert.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "the plan refuses it the same way")
			assert.Equal(t, before, tableCounts(t, e.ctx, e.pool), "nothing written")
		})
	}
}

// TestRolloutResumesAnInterruptedPublication: a driver crashed after it
// reserved members (in progress, operation ids chosen) and before it
// created their operations, its lease still set: once the lease runs out,
// the next driver creates the operations with the reserved ids, once.
func TestRolloutResumesAnInterruptedPublication(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(5)
	r, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: count(2)}, lifecycle.WaveSpec{Size: percent(100)}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	reserved := []string{"00000000-0000-4000-8000-0000000000a1", "00000000-0000-4000-8000-0000000000a2"}
	_, err = e.pool.Exec(e.ctx, `UPDATE rollout_members SET status = 'in-progress',
  operation_id = ($2::uuid[])[ord + 1] WHERE rollout_id = $1 AND ord < 2`, r.ID, reserved)
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `UPDATE rollouts SET lease_until = now() + interval '1 hour' WHERE id = $1`, r.ID)
	require.NoError(t, err)

	n, err := e.s.DriveRollouts(e.ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "another driver's lease holds the rollout")
	e.skew.Store(int64(2 * time.Hour)) // the crashed driver's lease ran out
	e.pump(installed)
	r = e.rollout(r.ID)
	assert.Equal(t, lifecycle.RolloutSucceeded, r.State)
	for i, id := range reserved {
		op, err := e.s.Operation(e.ctx, id)
		require.NoError(t, err, "member %d's operation was created with its reserved id", i)
		assert.Equal(t, lifecycle.OperationSucceeded, op.State)
	}
	var ops int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM operations WHERE type = 'upgrade'`).Scan(&ops))
	assert.Equal(t, 5, ops)
}

// TestRolloutExcludesDevicesNotSeen: with notSeenFor, a device whose last
// contact is older, or that was never seen, is excluded (not-seen); the
// others are eligible.
func TestRolloutExcludesDevicesNotSeen(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	deps := map[string]fleet.Deployment{}
	for i := range 4 { // one client each: a contact marks its client's devices
		dev := fmt.Sprintf("d%03d", i)
		deps[dev] = e.deploy(fmt.Sprintf("c%d", i), dev, "1.5.0")
	}
	store := postgres.NewFleetStore(e.pool, 5)
	now := time.Now()
	require.NoError(t, store.MarkClientsSeen(e.ctx, []fleet.ClientSeen{
		{ClientID: deps["d000"].ClientID, At: now.Add(-time.Minute)},
		{ClientID: deps["d001"].ClientID, At: now.Add(-2 * time.Hour)},
	}))
	// d002 and d003 were never seen (nothing recorded their contacts).
	_, err := e.pool.Exec(e.ctx, `UPDATE devices SET last_seen_at = NULL WHERE client_id = ANY($1)`,
		[]string{deps["d002"].ClientID, deps["d003"].ClientID})
	require.NoError(t, err)
	req := upgradeTo2(lifecycle.WaveSpec{Size: percent(100)})
	hour := "1h"
	req.Spec.NotSeenFor = &hour
	plan, err := e.s.PlanRollout(e.ctx, req)
	require.NoError(t, err)
	assert.Equal(t, 1, plan.Eligible)
	assert.Equal(t, 3, plan.ExcludedByReason[lifecycle.ExcludedNotSeen])

	r, err := e.s.CreateRollout(e.ctx, req, fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	ms := e.members(r.ID, fleet.MemberFilter{Classification: "eligible"})
	require.Len(t, ms, 1)
	assert.Equal(t, deps["d000"].ID, ms[0].DeploymentID)
	for _, m := range e.members(r.ID, fleet.MemberFilter{Classification: "excluded"}) {
		assert.Equal(t, lifecycle.ExcludedNotSeen, m.Reason, m.DeviceID)
	}
}

// TestRolloutExcludeDuringRevert: excluding a member whose revert runs
// leaves it excluded; its revert's outcome is still recorded and the abort
// finishes.
func TestRolloutExcludeDuringRevert(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(6)
	r, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: count(2)},
		lifecycle.WaveSpec{Size: percent(100), Approval: lifecycle.ApprovalManual}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	e.pump(installed)
	require.Equal(t, lifecycle.RolloutPaused, e.rollout(r.ID).State)
	_, err = e.s.AbortRollout(e.ctx, r.ID, fleet.AbortRequest{Revert: true}, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	require.NoError(t, err)
	e.pump(func(fleet.Deployment) string { return "" }) // the reverts start; the devices are silent
	var reverting *fleet.RolloutMember
	for _, m := range e.members(r.ID, fleet.MemberFilter{}) {
		if m.Revert != nil && m.Revert.Outcome == fleet.RevertInProgress {
			reverting = &m
			break
		}
	}
	require.NotNil(t, reverting)
	_, err = e.s.ExcludeRolloutMember(e.ctx, r.ID, fleet.MemberRef{DeploymentID: reverting.DeploymentID}, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	require.NoError(t, err)
	e.pump(installed)
	r = e.rollout(r.ID)
	assert.Equal(t, lifecycle.RolloutAborted, r.State, "%+v", r.Counts.ByStatus)
	ms := e.members(r.ID, fleet.MemberFilter{DeploymentID: reverting.DeploymentID})
	require.Len(t, ms, 1)
	assert.Equal(t, lifecycle.MemberExcluded, ms[0].Status)
	require.NotNil(t, ms[0].Revert)
	assert.Equal(t, fleet.RevertReverted, ms[0].Revert.Outcome)
}

// TestRolloutForcedAbortWithoutOverrides: a server that disables rollback
// overrides refuses a forced abort (403 break-glass-forbidden, nothing
// changes); a forced abort stored before (by a server that allowed them)
// ends each member's revert it cannot force as not-reverted, and the
// rollout as aborted.
func TestRolloutForcedAbortWithoutOverrides(t *testing.T) {
	versions := map[string]string{
		"1.0.0": rollbackAllowed,
		"1.5.0": rollbackAllowed,
		"2.0.0": "  rollback:\n    allowed: true\n    minVersion: \"1.5.0\"\n    reason: \"2.0 migrates the schema\"\n",
	}
	e := newRolloutEnv(t, versions)
	e.mixedFleet(6)
	strict := fleet.NewService(postgres.NewFleetStore(e.pool, 5), e.cat, fleet.Policy{AcceptAll: true, AllowOverrides: false}, time.Now,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	r, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: count(2)},
		lifecycle.WaveSpec{Size: percent(100), Approval: lifecycle.ApprovalManual}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	e.pump(installed)
	r = e.rollout(r.ID)
	require.Equal(t, lifecycle.RolloutPaused, r.State)

	force := fleet.AbortRequest{Revert: true, Force: true, Reason: "INC-1"}
	_, err = strict.AbortRollout(e.ctx, r.ID, force, fleet.Actor{ID: "root", Admin: true}, fleet.Precondition{})
	assert.Equal(t, lifecycle.EFORBIDDEN, lifecycle.ErrorCode(err))
	assert.Equal(t, "break-glass-forbidden", lifecycle.ErrorType(err))
	assert.Equal(t, r.Generation, e.rollout(r.ID).Generation, "a refused abort changes nothing")

	// Aborted with force where overrides were allowed, driven where they
	// are not (the server restarted with them disabled).
	_, err = e.s.AbortRollout(e.ctx, r.ID, force, fleet.Actor{ID: "root", Admin: true}, fleet.Precondition{})
	require.NoError(t, err)
	e.sc = fleet.NewScheduler(strict, time.Hour)
	e.pump(installed)
	r = e.rollout(r.ID)
	assert.Equal(t, lifecycle.RolloutAborted, r.State, "%+v", r.Counts.ByStatus)
	assert.Equal(t, 2, r.Counts.ByStatus.NotReverted, "d000, d001 (1.0.0) need the override the server refuses")
	for _, m := range e.members(r.ID, fleet.MemberFilter{Status: lifecycle.MemberNotReverted}) {
		require.NotNil(t, m.Revert)
		assert.Contains(t, m.Revert.Reason, "disables rollback overrides", m.DeviceID)
	}
}

// reserveUnpublished puts the first two members of rollout id in the state
// a crash between their reservation and the creation of their operations
// leaves them: in-progress with operation ids no operation has.
func (e *rolloutEnv) reserveUnpublished(id string) {
	e.t.Helper()
	reserved := []string{"00000000-0000-4000-8000-0000000000a1", "00000000-0000-4000-8000-0000000000a2"}
	tag, err := e.pool.Exec(e.ctx, `UPDATE rollout_members SET status = 'in-progress', operation_id = ($2::uuid[])[ord + 1]
WHERE rollout_id = $1 AND ord < 2`, id, reserved)
	require.NoError(e.t, err)
	require.EqualValues(e.t, 2, tag.RowsAffected())
}

// TestRolloutEndedBeforeInterruptedPublication: members reserved by a
// visit that did not create their operations are published again only
// while the rollout runs or is paused; a cancel or an abort cancels them
// ("the rollout ended before starting it") and starts nothing new.
func TestRolloutEndedBeforeInterruptedPublication(t *testing.T) {
	for _, end := range []string{"cancel", "abort", "ended-unseen"} {
		t.Run(end, func(t *testing.T) {
			e := newRolloutEnv(t, hopVersions)
			e.mixedFleet(5)
			r, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: count(2)}, lifecycle.WaveSpec{Size: percent(100)}), fleet.Actor{ID: "alice"})
			require.NoError(t, err)
			e.reserveUnpublished(r.ID)
			switch end {
			case "cancel":
				_, err = e.s.CancelRollout(e.ctx, r.ID, fleet.Actor{ID: "bob"}, fleet.Precondition{})
			case "abort":
				_, err = e.s.AbortRollout(e.ctx, r.ID, fleet.AbortRequest{}, fleet.Actor{ID: "bob"}, fleet.Precondition{})
			default:
				// Ended with the reserved members left in progress (as a
				// store before this fix left them): the visit cancels them.
				_, err = e.pool.Exec(e.ctx, `UPDATE rollouts SET state = 'cancelled', cause = 'operator-cancelled', settling = true WHERE id = $1`, r.ID)
				require.NoError(t, err)
				_, err = e.pool.Exec(e.ctx, `UPDATE rollout_members SET status = 'cancelled', result = 'The rollout ended before starting it.'
WHERE rollout_id = $1 AND status = 'pending'`, r.ID)
			}
			require.NoError(t, err)
			e.pump(installed)
			var ops int
			require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM operations WHERE type = 'upgrade'`).Scan(&ops))
			assert.Zero(t, ops, "the ended rollout started nothing")
			r = e.rollout(r.ID)
			assert.Zero(t, r.Counts.ByStatus.InProgress)
			assert.Equal(t, 5, r.Counts.ByStatus.Cancelled)
			for _, m := range e.members(r.ID, fleet.MemberFilter{Wave: 1}) {
				assert.Equal(t, "The rollout ended before starting it.", m.Result, m.DeviceID)
			}
			var settling bool
			require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT settling FROM rollouts WHERE id = $1`, r.ID).Scan(&settling))
			assert.False(t, settling, "the rollout settled")
		})
	}
}

// TestRolloutFromRevisionOfFailedMember: a member whose last operation
// failed still runs its installed revision: its fromRevision and
// fromVersion both describe that revision, and an abort with revert
// returns it there.
func TestRolloutFromRevisionOfFailedMember(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	d := e.deploy("c", "d0", "1.0.0")
	e.deploy("c", "d1", "1.5.0")
	_, _, err := e.s.Upgrade(e.ctx, d.ID, fleet.UpgradeRequest{TargetVersion: "1.5.0"}, fleet.Actor{ID: "bob"}, false, fleet.Precondition{})
	require.NoError(t, err)
	e.pump(func(fleet.Deployment) string { return "failed" })
	d, err = e.s.Deployment(e.ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StateFailed, d.State)
	require.Greater(t, d.Revision, d.InstalledRevision)

	r, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: count(1)},
		lifecycle.WaveSpec{Size: percent(100), Approval: lifecycle.ApprovalManual}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	ms := e.members(r.ID, fleet.MemberFilter{DeploymentID: d.ID})
	require.Len(t, ms, 1)
	assert.Equal(t, "1.0.0", ms[0].FromVersion)
	assert.Equal(t, d.InstalledRevision, ms[0].FromRevision, "the installed revision, not the failed one")

	e.pump(installed)
	_, err = e.s.AbortRollout(e.ctx, r.ID, fleet.AbortRequest{Revert: true}, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	require.NoError(t, err)
	e.pump(installed)
	require.Equal(t, lifecycle.RolloutAborted, e.rollout(r.ID).State)
	d, err = e.s.Deployment(e.ctx, d.ID)
	require.NoError(t, err)
	assert.Equal(t, "1.0.0", d.Version.String(), "reverted to what it ran before the rollout")
}

// TestRolloutAuditRowsInTheirTransaction: the audit row of a rollout's
// creation (201) and of an action that changes it (200) is written in the
// change's transaction; an action that finds the rollout as asked leaves
// it to the HTTP adapter.
func TestRolloutAuditRowsInTheirTransaction(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(3)
	call := func(action string) (context.Context, *access.Pending) {
		p := access.NewPending(access.AuditEntry{Actor: "alice", Action: action, RequestID: "req-" + action}, 201, 200)
		return access.WithPending(e.ctx, p), p
	}
	ctx, p := call("createRollout")
	r, err := e.s.CreateRollout(ctx, upgradeTo2(lifecycle.WaveSpec{Size: percent(100)}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	status, written := p.Written()
	assert.True(t, written, "created with its audit row")
	assert.Equal(t, 201, status)

	ctx, p = call("pauseRollout")
	_, err = e.s.PauseRollout(ctx, r.ID, fleet.Actor{ID: "alice"}, fleet.Precondition{})
	require.NoError(t, err)
	status, written = p.Written()
	assert.True(t, written, "paused with its audit row")
	assert.Equal(t, 200, status)

	ctx, p = call("pauseRollout")
	_, err = e.s.PauseRollout(ctx, r.ID, fleet.Actor{ID: "alice"}, fleet.Precondition{})
	require.NoError(t, err)
	_, written = p.Written()
	assert.False(t, written, "pausing a paused rollout changed nothing")

	var rows int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM audit_log WHERE action IN ('createRollout', 'pauseRollout')`).Scan(&rows))
	assert.Equal(t, 2, rows)
}

// TestRolloutManualWaveStaysPending: a manual wave (the first or a later
// one) starts nothing, not even its startedAt or its wave_started event,
// until approve starts it.
func TestRolloutManualWaveStaysPending(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(4)
	waveStarted := func(id string) int {
		var n int
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM events WHERE type = 'rollout.wave_started' AND subject_id = $1`, id).Scan(&n))
		return n
	}
	first, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: percent(100), Approval: lifecycle.ApprovalManual}),
		fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	assert.Equal(t, fleet.WavePending, first.Waves[0].State)
	assert.True(t, first.Waves[0].StartedAt.IsZero())
	assert.Zero(t, waveStarted(first.ID))
	_, err = e.s.CancelRollout(e.ctx, first.ID, fleet.Actor{ID: "alice"}, fleet.Precondition{})
	require.NoError(t, err)

	r, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: count(1)},
		lifecycle.WaveSpec{Size: percent(100), Approval: lifecycle.ApprovalManual}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	e.pump(installed)
	r = e.rollout(r.ID)
	require.Equal(t, lifecycle.RolloutPaused, r.State)
	require.Equal(t, lifecycle.RolloutCauseApprovalRequired, r.Cause)
	assert.Equal(t, 2, r.CurrentWave)
	assert.Equal(t, fleet.WavePending, r.Waves[1].State)
	assert.True(t, r.Waves[1].StartedAt.IsZero())
	assert.Equal(t, 1, waveStarted(r.ID), "wave 1's only")

	r, err = e.s.ApproveRollout(e.ctx, r.ID, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	require.NoError(t, err)
	assert.Equal(t, fleet.WavePublishing, r.Waves[1].State)
	assert.False(t, r.Waves[1].StartedAt.IsZero())
	assert.Equal(t, 2, waveStarted(r.ID))
	e.pump(installed)
	assert.Equal(t, lifecycle.RolloutSucceeded, e.rollout(r.ID).State)
}

// TestRolloutLastWaveSoaks: the rollout succeeds only once its last wave's
// soak ended.
func TestRolloutLastWaveSoaks(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(3)
	soak := "1h"
	r, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: count(1)}, lifecycle.WaveSpec{Size: percent(100), Soak: &soak}),
		fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	e.pump(installed)
	r = e.rollout(r.ID)
	assert.Equal(t, lifecycle.RolloutRunning, r.State)
	assert.Equal(t, fleet.WaveSoaking, r.Waves[1].State)
	e.skew.Store(int64(time.Hour + time.Minute))
	e.pump(installed)
	r = e.rollout(r.ID)
	assert.Equal(t, lifecycle.RolloutSucceeded, r.State)
	assert.Equal(t, fleet.WavePassed, r.Waves[1].State)
}

// TestRolloutLeaseOwnership: a driver acts on a rollout only while it holds
// its lease: once the lease ran out and another driver claimed the
// rollout, the first one's visit stops without acting, and its store
// calls (reserve, update, release) change nothing.
func TestRolloutLeaseOwnership(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(4)
	store := postgres.NewFleetStore(e.pool, 5)
	a, b := e.s, e.service()
	r, err := a.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: percent(100)}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	now := time.Now().UTC()
	ids, err := store.ClaimRollouts(e.ctx, fleet.LeaseOwner(a), 10, now, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{r.ID}, ids)
	n, err := b.DriveRollouts(e.ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "a's lease holds")

	// a's lease runs out (it stalled); b claims the rollout.
	ids, err = store.ClaimRollouts(e.ctx, fleet.LeaseOwner(b), 10, now.Add(2*time.Minute), time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{r.ID}, ids)
	err = fleet.VisitRollout(e.ctx, a, r.ID)
	assert.ErrorIs(t, err, fleet.ErrLeaseLost)
	ms, err := store.ReserveRolloutMembers(e.ctx, r.ID, fleet.LeaseOwner(a), e.rollout(r.ID).Generation, 0, 2, now)
	require.NoError(t, err)
	assert.Empty(t, ms, "a reserves nothing")
	_, err = store.UpdateRollout(e.ctx, r.ID, func(fleet.Rollout) (fleet.RolloutChange, error) {
		return fleet.RolloutChange{Release: true, Owner: fleet.LeaseOwner(a)}, nil
	}, now)
	assert.ErrorIs(t, err, fleet.ErrLeaseLost, "a releases nothing")
	var ops int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM operations WHERE type = 'upgrade'`).Scan(&ops))
	assert.Zero(t, ops)
	var owner string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT lease_owner FROM rollouts WHERE id = $1`, r.ID).Scan(&owner))
	assert.Equal(t, fleet.LeaseOwner(b), owner)

	// b drives it (its own visit), and the rollout finishes.
	require.NoError(t, fleet.VisitRollout(e.ctx, b, r.ID))
	e.sc = fleet.NewScheduler(b, time.Hour)
	e.pump(installed)
	assert.Equal(t, lifecycle.RolloutSucceeded, e.rollout(r.ID).State)
}

// TestRolloutOverlappingPublication: a visit that publishes members whose
// operations an overlapping visit created already finds them in progress
// (operation-in-progress naming the member's own operation), not failed;
// a member's revert is reserved once.
func TestRolloutOverlappingPublication(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(4)
	r, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: count(2)}, lifecycle.WaveSpec{Size: percent(100)}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	_, err = e.s.DriveRollouts(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 2, e.rollout(r.ID).Counts.ByStatus.InProgress)
	require.NoError(t, fleet.PublishAgain(e.ctx, e.s, r.ID))
	r = e.rollout(r.ID)
	assert.Equal(t, 2, r.Counts.ByStatus.InProgress)
	assert.Zero(t, r.Counts.ByStatus.Failed)

	// A revert reserved by one visit is not reserved again by another.
	store := postgres.NewFleetStore(e.pool, 5)
	rv := &fleet.MemberRevert{Outcome: fleet.RevertPending, ToRevision: 1, OperationID: "00000000-0000-4000-8000-0000000000b1"}
	require.NoError(t, store.SetMemberResults(e.ctx, r.ID, []fleet.MemberResult{{Ord: 0, IfNoRevert: true, Revert: rv}}, time.Now()))
	again := *rv
	again.OperationID = "00000000-0000-4000-8000-0000000000b2"
	err = store.SetMemberResults(e.ctx, r.ID, []fleet.MemberResult{{Ord: 0, IfNoRevert: true, Revert: &again}}, time.Now())
	assert.ErrorIs(t, err, fleet.ErrMemberChanged)
	ms := e.members(r.ID, fleet.MemberFilter{Wave: 1})
	require.NotNil(t, ms[0].Revert)
	assert.Equal(t, rv.OperationID, ms[0].Revert.OperationID)
}

// lateRollouts is the real store whose ActiveRolloutOf answers "no
// rollout": what the check before CreateOperation sees when a rollout
// takes the deployment just after it.
type lateRollouts struct{ *postgres.FleetStore }

func (lateRollouts) ActiveRolloutOf(context.Context, string) (string, error) { return "", nil }

// TestRolloutMembershipCheckedUnderTheLock: the membership of a deployment
// is checked again on the locked deployment when its operation is
// created: a single upgrade loses to a rollout that took the deployment
// after the first check; a member's reserved operation is not created
// once the member was excluded.
func TestRolloutMembershipCheckedUnderTheLock(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	deps := e.mixedFleet(4)
	r, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: count(2)}, lifecycle.WaveSpec{Size: percent(100)}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	late := fleet.NewService(lateRollouts{postgres.NewFleetStore(e.pool, 5)}, e.cat, fleet.Policy{AcceptAll: true, AllowOverrides: true}, time.Now,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	_, _, err = late.Upgrade(e.ctx, deps["d003"].ID, fleet.UpgradeRequest{TargetVersion: "1.5.0"}, fleet.Actor{ID: "bob"}, false, fleet.Precondition{})
	assert.Equal(t, fleet.ProblemRolloutMember, lifecycle.ErrorType(err))

	// Wave 1 reserved, then d000 excluded before its operation is created.
	store := postgres.NewFleetStore(e.pool, 5)
	ids, err := store.ClaimRollouts(e.ctx, "test", 10, time.Now(), time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{r.ID}, ids)
	ms, err := store.ReserveRolloutMembers(e.ctx, r.ID, "test", e.rollout(r.ID).Generation, 0, 2, time.Now())
	require.NoError(t, err)
	require.Len(t, ms, 2)
	_, err = e.s.ExcludeRolloutMember(e.ctx, r.ID, fleet.MemberRef{DeploymentID: deps["d000"].ID}, fleet.Actor{ID: "bob"}, fleet.Precondition{})
	require.NoError(t, err)
	require.NoError(t, fleet.PublishAgain(e.ctx, e.s, r.ID))
	var ops []string
	rows, err := e.pool.Query(e.ctx, `SELECT deployment_id::text FROM operations WHERE type = 'upgrade'`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ops = append(ops, id)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, []string{deps["d001"].ID}, ops, "the excluded member's operation is not created")
	m := e.members(r.ID, fleet.MemberFilter{DeploymentID: deps["d000"].ID})
	require.Len(t, m, 1)
	assert.Equal(t, lifecycle.MemberExcluded, m[0].Status)
}

// queryCounter counts the statements a pool sends that contain a text.
type queryCounter struct {
	text string
	n    atomic.Int64
}

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, q.text) {
		q.n.Add(1)
	}
	return ctx
}

func (*queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestRolloutPlanReadsActiveOperationsAtOnce: resolving a rollout reads
// the candidates' active operations in one query, however many there are.
func TestRolloutPlanReadsActiveOperationsAtOnce(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	deps := e.mixedFleet(6)
	for _, dev := range []string{"d000", "d001", "d003", "d004"} { // on 1.0.0: an upgrade to 1.5.0 the devices do not answer
		_, _, err := e.s.Upgrade(e.ctx, deps[dev].ID, fleet.UpgradeRequest{TargetVersion: "1.5.0"}, fleet.Actor{ID: "bob"}, false, fleet.Precondition{})
		require.NoError(t, err)
	}
	counter := &queryCounter{text: "FROM operations WHERE id"}
	cfg := e.pool.Config()
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := fleet.NewService(postgres.NewFleetStore(pool, 5), e.cat, fleet.Policy{AcceptAll: true, AllowOverrides: true}, time.Now,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	p, err := s.PlanRollout(e.ctx, upgradeTo2())
	require.NoError(t, err)
	assert.Equal(t, 4, p.ExcludedByReason[lifecycle.ExcludedBusy])
	assert.EqualValues(t, 1, counter.n.Load(), "one query for the 4 active operations")
}

// TestRolloutPausedFailsAtOnceWhenTargetYanked: a rollout paused for an
// approval (not visited again before RevisitBound) fails at the next
// driver run once its target version is yanked: the yank makes it due.
func TestRolloutPausedFailsAtOnceWhenTargetYanked(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(3)
	r, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: percent(100), Approval: lifecycle.ApprovalManual}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	_, err = e.s.DriveRollouts(e.ctx)
	require.NoError(t, err)
	require.Equal(t, lifecycle.RolloutPaused, e.rollout(r.ID).State)
	_, err = e.s.DriveRollouts(e.ctx)
	require.NoError(t, err)
	require.Equal(t, lifecycle.RolloutPaused, e.rollout(r.ID).State, "not due again before its recheck")

	_, err = e.cat.Yank(e.ctx, "app", "2.0.0", "broken")
	require.NoError(t, err)
	_, err = e.s.DriveRollouts(e.ctx)
	require.NoError(t, err)
	r = e.rollout(r.ID)
	assert.Equal(t, lifecycle.RolloutFailed, r.State)
	assert.Equal(t, lifecycle.RolloutCauseTargetVersionYanked, r.Cause)
}

// TestRolloutStateConflictNamesTheState: an action the state refuses names
// where the rollout stands and why (state, stateCause), and, when it asked
// for a state move, that move (to, cause).
func TestRolloutStateConflictNamesTheState(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	deps := e.mixedFleet(2)
	r, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: percent(100), Approval: lifecycle.ApprovalManual}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	_, err = e.s.CancelRollout(e.ctx, r.ID, fleet.Actor{ID: "alice"}, fleet.Precondition{})
	require.NoError(t, err)
	extra := func(err error) map[string]any {
		t.Helper()
		var de *lifecycle.Error
		require.ErrorAs(t, err, &de)
		assert.Equal(t, lifecycle.ProblemRolloutStateConflict, de.Type)
		return de.Extra
	}
	_, err = e.s.ExcludeRolloutMember(e.ctx, r.ID, fleet.MemberRef{DeploymentID: deps["d000"].ID}, fleet.Actor{ID: "alice"}, fleet.Precondition{})
	assert.Equal(t, map[string]any{"state": "cancelled", "stateCause": "operator-cancelled"}, extra(err))
	_, err = e.s.ApproveRollout(e.ctx, r.ID, fleet.Actor{ID: "alice"}, fleet.Precondition{})
	assert.Equal(t, map[string]any{"state": "cancelled", "stateCause": "operator-cancelled"}, extra(err))
	_, err = e.s.PauseRollout(e.ctx, r.ID, fleet.Actor{ID: "alice"}, fleet.Precondition{})
	assert.Equal(t, map[string]any{"state": "cancelled", "stateCause": "operator-cancelled", "to": "paused", "cause": "operator-paused"}, extra(err))
}

// TestRolloutResolvesInPages: a rollout resolved a few candidates at a time
// plans and creates what it does in one page: the same plan (counts,
// examples, waves), and members in key order whose waves follow their
// places among the eligible ones, excluded members (on the target
// already) interleaved.
func TestRolloutResolvesInPages(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	e.mixedFleet(30) // d000..d029: 20 on 1.0.0, 10 on 1.5.0
	for _, dev := range []string{"d000a", "d007a", "d013a", "d029a"} {
		e.deploy("c", dev, "2.0.0") // at-target, between the others in key order
	}
	req := upgradeTo2(lifecycle.WaveSpec{Size: count(1)}, lifecycle.WaveSpec{Size: percent(10)}, lifecycle.WaveSpec{Size: percent(100)})
	whole, err := e.s.PlanRollout(e.ctx, req)
	require.NoError(t, err)
	paged := e.service()
	fleet.SetCandidatePage(paged, 4)
	p, err := paged.PlanRollout(e.ctx, req)
	require.NoError(t, err)
	assert.Equal(t, whole, p)
	assert.Equal(t, 34, p.Total)
	assert.Equal(t, 4, p.ExcludedByReason[lifecycle.ExcludedAtTarget])

	r, err := paged.CreateRollout(e.ctx, req, fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	assert.Equal(t, 30, r.Counts.Eligible)
	assert.Equal(t, 4, r.Counts.Excluded)
	ms := e.members(r.ID, fleet.MemberFilter{})
	require.Len(t, ms, 34)
	place := 0
	for i, m := range ms {
		assert.Equal(t, i, m.Ord)
		if i > 0 {
			assert.Negative(t, lifecycle.CompareMemberKeys(lifecycle.MemberKey{ClientID: ms[i-1].ClientID, DeviceID: ms[i-1].DeviceID, DeploymentID: ms[i-1].DeploymentID},
				lifecycle.MemberKey{ClientID: m.ClientID, DeviceID: m.DeviceID, DeploymentID: m.DeploymentID}), "member %d in key order", i)
		}
		if m.Classification != fleet.ClassEligible {
			assert.Zero(t, m.Wave, "excluded member %s has no wave", m.DeviceID)
			continue
		}
		want := 3
		switch {
		case place < 1:
			want = 1
		case place < 4:
			want = 2
		}
		assert.Equal(t, want, m.Wave, "eligible member %d (%s)", place, m.DeviceID)
		place++
	}
	for i, want := range []int{1, 3, 26} {
		assert.Equal(t, want, r.Waves[i].ResolvedSize, "wave %d", i+1)
		assert.Equal(t, want, r.Waves[i].Counts.Counted(), "wave %d", i+1)
	}
}

// TestRolloutPlacementReadsIdentity: devices alike but for their ids share
// one placement check only when no profile reads the identity: with a
// target whose profile admits one device id, the other device is
// unplaceable, whichever is checked first; with capacity constraints only,
// both fit.
func TestRolloutPlacementReadsIdentity(t *testing.T) {
	for _, tt := range []struct {
		constraints string
		unplaceable int
	}{
		{"    deviceConstraints:\n      eligibilityRules:\n        - propertySelector: {matchExpressions: [{key: /id, operator: In, values: [d000]}]}\n", 1},
		{"    deviceConstraints:\n      capacityRequirements: {cpu: {cores: 1}}\n", 0},
	} {
		e := newRolloutEnv(t, map[string]string{"1.0.0": ""})
		target := strings.ReplaceAll(description, `"1.0.0"`, `"2.0.0"`)
		target = strings.Replace(target, "    id: app-compose\n", "    id: app-compose\n"+tt.constraints, 1)
		_, _, err := e.cat.Add(e.ctx, []byte(target), catalog.MediaYAML)
		require.NoError(t, err)
		e.deploy("c", "d000", "1.0.0")
		e.deploy("c", "d001", "1.0.0")
		p, err := e.s.PlanRollout(e.ctx, upgradeTo2())
		require.NoError(t, err)
		assert.Equal(t, tt.unplaceable, p.ExcludedByReason[lifecycle.ExcludedUnplaceable], "constraints %q", tt.constraints)
		assert.Equal(t, 2-tt.unplaceable, p.Eligible, "constraints %q", tt.constraints)
	}
}

// TestConcurrentCreationsOnASmallPool: rollout creations running at once
// complete on a pool smaller than their number. Each creation's resolve
// needs connections of its own (the next page, versions, operations); a
// creation's transaction, which receives its members as they are
// classified, holds a connection of its own outside the pool (it used to
// pin a pooled one for the whole creation, so that a few concurrent
// creations held every connection and waited forever for another).
func TestConcurrentCreationsOnASmallPool(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	clients := []string{"c0", "c1", "c2", "c3"}
	for _, c := range clients {
		for i := range 3 {
			e.deploy(c, fmt.Sprintf("d%d", i), "1.5.0")
		}
	}
	cfg := e.pool.Config().Copy()
	cfg.MaxConns = 2
	small, err := pgxpool.NewWithConfig(e.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(small.Close)
	svc := fleet.NewService(postgres.NewFleetStore(small, 5), e.cat, fleet.Policy{AcceptAll: true}, time.Now,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	errs := make(chan error, len(clients))
	for _, c := range clients {
		go func() {
			req := upgradeTo2(lifecycle.WaveSpec{Size: percent(100)})
			req.Target.ClientIDs = []string{c}
			_, err := svc.CreateRollout(ctx, req, fleet.Actor{ID: "alice"})
			errs <- err
		}()
	}
	for range clients {
		require.NoError(t, <-errs)
	}
	var members int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM rollout_members WHERE active`).Scan(&members))
	assert.Equal(t, 12, members, "each creation stored its members")
}

// TestRolloutPagesAnyCollation: a rollout's candidates are paged in byte
// order whatever the columns' collation (here an ICU one, where "edge_1"
// sorts before "edge-2" and "plant-a" before "plant-B", unlike bytes): the
// paged plan is the whole one, and the create succeeds.
func TestRolloutPagesAnyCollation(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	var icu bool
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu')`).Scan(&icu))
	if !icu {
		t.Skip("this PostgreSQL has no ICU collations")
	}
	for _, c := range []string{`deployments ALTER COLUMN client_id TYPE text COLLATE "und-x-icu", ALTER COLUMN device_id TYPE text COLLATE "und-x-icu"`,
		`devices ALTER COLUMN client_id TYPE text COLLATE "und-x-icu", ALTER COLUMN id TYPE text COLLATE "und-x-icu"`} {
		_, err := e.pool.Exec(e.ctx, `ALTER TABLE `+c)
		require.NoError(t, err)
	}
	for _, c := range []string{"plant-B", "plant-a"} {
		for _, dev := range []string{"edge-2", "edge_1", "edge-10", "Edge-3"} {
			e.deploy(c, dev, "1.5.0")
		}
	}
	req := upgradeTo2(lifecycle.WaveSpec{Size: count(1)}, lifecycle.WaveSpec{Size: percent(100)})
	whole, err := e.s.PlanRollout(e.ctx, req)
	require.NoError(t, err)
	paged := e.service()
	fleet.SetCandidatePage(paged, 3)
	p, err := paged.PlanRollout(e.ctx, req)
	require.NoError(t, err)
	assert.Equal(t, whole, p)
	assert.Equal(t, 8, p.Eligible)
	r, err := paged.CreateRollout(e.ctx, req, fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	assert.Equal(t, 8, r.Counts.Eligible)
}
