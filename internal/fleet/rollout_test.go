package fleet_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// rolloutEnv is a fleet service on a real database with a catalog of
// versions of "app", devices, and a scheduler run pass by pass.
type rolloutEnv struct {
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
	return fleet.NewService(postgres.NewFleetStore(e.pool, 5), e.cat, fleet.Policy{AcceptAll: true, AllowOverrides: true}, time.Now,
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
	return r
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
	_, err := e.sc.RunOnce(e.ctx) // the installs' operations end
	require.NoError(e.t, err)
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
	hops := e.members(r.ID, fleet.MemberFilter{Wave: 3})
	assert.Len(t, hops, 26)
	var types []string
	rows, err := e.pool.Query(e.ctx, `SELECT type FROM events WHERE 'rollout:'||$1 = ANY(refs) ORDER BY id`, r.ID)
	require.NoError(t, err)
	for rows.Next() {
		var typ string
		require.NoError(t, rows.Scan(&typ))
		types = append(types, typ)
	}
	assert.Equal(t, []string{"rollout.created", "rollout.state_changed", "rollout.wave_started",
		"rollout.wave_settled", "rollout.wave_started", "rollout.wave_settled", "rollout.wave_started",
		"rollout.wave_settled", "rollout.state_changed"}, types)
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
	assert.Equal(t, fleet.WaitingThreshold, r.Waiting.Reason)
	assert.Equal(t, fleet.WaveFailed, r.Waves[0].State)
	assert.Equal(t, 1, r.Waves[0].Counts.Failed)
	assert.Equal(t, r.Waves[1].ResolvedSize, r.Waves[1].Counts.Pending, "wave 2 published nothing")
	assert.Equal(t, r.Waves[2].ResolvedSize, r.Waves[2].Counts.Pending)

	r, err = e.s.ResumeRollout(e.ctx, r.ID, fleet.Actor{ID: "bob"}, fleet.ExpectGeneration(r.Generation))
	require.NoError(t, err)
	assert.Equal(t, lifecycle.RolloutRunning, r.State)
	assert.True(t, r.ThresholdAccepted)
	e.pump(installed)
	r = e.rollout(r.ID)
	assert.Equal(t, lifecycle.RolloutSucceeded, r.State)
	assert.Equal(t, 5, r.Counts.ByStatus.Succeeded)
	assert.Equal(t, 1, r.Counts.ByStatus.Failed)
}
