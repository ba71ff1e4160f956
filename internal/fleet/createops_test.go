package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestCreateOperationsDecidesEachAlone: one transaction creates the
// operations of many deployments (a rollout wave's), and each is decided as
// CreateOperation would decide it alone: one refused by its check, one
// whose deployment has an operation in progress and one whose deployment is
// gone are not created, with their own errors; the others are, an install
// the device finished being settled on the way.
func TestCreateOperationsDecidesEachAlone(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	ok := e.deploy("c", "d-ok", "1.5.0")           // its install reached, not yet settled
	refused := e.deploy("c", "d-refused", "1.5.0") // refused by the check
	busy := e.deploy("c", "d-busy", "1.5.0")
	gone := e.deploy("c", "d-gone", "1.5.0")

	var ops []fleet.Operation
	for _, d := range []fleet.Deployment{ok, refused, busy, gone} {
		op, err := fleet.PlannedUpgrade(e.ctx, e.s, d.ID, "2.0.0")
		require.NoError(t, err, d.DeviceID)
		op.ID = uuid.NewString()
		ops = append(ops, op)
	}
	// d-busy gets an operation of its own, still waiting for its device.
	_, _, err := e.s.Upgrade(e.ctx, busy.ID, fleet.UpgradeRequest{TargetVersion: "2.0.0"}, fleet.Actor{ID: "bob"}, false, fleet.Precondition{})
	require.NoError(t, err)
	var active string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT id::text FROM operations WHERE deployment_id = $1 AND state IN ('queued', 'running')`, busy.ID).Scan(&active))
	_, err = e.pool.Exec(e.ctx, `DELETE FROM deployments WHERE id = $1`, gone.ID)
	require.NoError(t, err)

	refusal := &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "conflict", Message: "not this one"}
	store := postgres.NewFleetStore(e.pool, 5)
	errs, err := store.CreateOperations(e.ctx, ops, func(d fleet.Deployment, _ fleet.RolloutHold) error {
		if d.ID == refused.ID {
			return refusal
		}
		return nil
	}, time.Now().UTC())
	require.NoError(t, err)
	require.Len(t, errs, 4)
	assert.NoError(t, errs[0])
	assert.Same(t, refusal, errs[1])
	assert.Equal(t, "operation-in-progress", lifecycle.ErrorType(errs[2]), "%v", errs[2])
	assert.ErrorContains(t, errs[2], active)
	assert.Equal(t, lifecycle.ENOTFOUND, lifecycle.ErrorCode(errs[3]), "%v", errs[3])

	created, err := store.OperationsByID(e.ctx, []string{ops[0].ID, ops[1].ID, ops[2].ID, ops[3].ID})
	require.NoError(t, err)
	require.Contains(t, created, ops[0].ID)
	assert.Len(t, created, 1, "only d-ok's operation was created")
	assert.Equal(t, lifecycle.OperationQueued, created[ops[0].ID].State)
	var installs []string
	rows, err := e.pool.Query(e.ctx, `SELECT state FROM operations WHERE deployment_id = $1 AND type = 'install'`, ok.ID)
	require.NoError(t, err)
	for rows.Next() {
		var st string
		require.NoError(t, rows.Scan(&st))
		installs = append(installs, st)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, []string{"succeeded"}, installs, "d-ok's finished install was settled by the creation")
}

// TestFitKeyIgnoresOnlyIdentity: the devices' fit key, which PostgreSQL
// keeps (migration 00016), is equal for capabilities that differ only in
// margo.IdentityProperties and differs for any other difference, so the
// SQL expression and the Go list stay one rule.
func TestFitKeyIgnoresOnlyIdentity(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	put := func(dev string, change func(props map[string]any)) string {
		var c map[string]any
		require.NoError(t, json.Unmarshal(caps(dev), &c))
		change(c["properties"].(map[string]any))
		b, err := json.Marshal(c)
		require.NoError(t, err)
		_, err = e.s.PutCapabilities(e.ctx, "c", dev, b)
		require.NoError(t, err)
		var key string
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT fit_key FROM devices WHERE client_id = 'c' AND id = $1`, dev).Scan(&key))
		return key
	}
	base := put("d0", func(map[string]any) {})
	for _, p := range margo.IdentityProperties {
		// (Every device's id is its own: properties.id differs anyway.)
		assert.Equal(t, base, put("d-"+p, func(props map[string]any) {
			if p != "id" {
				props[p] = "other-" + p
			}
		}), "differs only in %s", p)
	}
	assert.NotEqual(t, base, put("d-vendor", func(props map[string]any) { props["vendor"] = "other" }))
	assert.NotEqual(t, base, put("d-memory", func(props map[string]any) { props["memory"] = "2Gi" }))
}

// failingDeploymentStore fails the reads of one deployment (its member's
// planning) as a broken database row would.
type failingDeploymentStore struct {
	fleet.Store
	id string
}

func (s *failingDeploymentStore) Deployment(ctx context.Context, id string) (fleet.Deployment, error) {
	if id == s.id {
		return fleet.Deployment{}, lifecycle.Errorf(lifecycle.EINTERNAL, "deployment %s: unreadable", id)
	}
	return s.Store.Deployment(ctx, id)
}

// TestRolloutWaveGoesOnPastAMemberThatCannotBePlanned: a member whose
// planning fails (not a refusal) is left for the next visit; the rest of
// its wave is published.
func TestRolloutWaveGoesOnPastAMemberThatCannotBePlanned(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	var ds []fleet.Deployment
	for i := range 4 {
		ds = append(ds, e.deploy("c", fmt.Sprintf("d%d", i), "1.5.0"))
	}
	broken := &failingDeploymentStore{Store: postgres.NewFleetStore(e.pool, 5), id: ds[1].ID}
	e.s = fleet.NewService(broken, e.cat, fleet.Policy{AcceptAll: true, AllowOverrides: true}, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r, err := e.s.CreateRollout(e.ctx, upgradeTo2(lifecycle.WaveSpec{Size: percent(100)}), fleet.Actor{ID: "alice"})
	require.NoError(t, err)
	_, err = e.s.DriveRollouts(e.ctx) // logs the member it could not publish
	require.NoError(t, err)
	ms := e.members(r.ID, fleet.MemberFilter{})
	require.Len(t, ms, 4)
	started := 0
	for _, m := range ms {
		if m.DeploymentID == ds[1].ID {
			continue
		}
		_, err := e.s.Operation(e.ctx, m.OperationID)
		require.NoError(t, err, "%s: its operation was created", m.DeviceID)
		started++
	}
	assert.Equal(t, 3, started)
}

// staleActiveStore answers ActiveOperation with an operation that has
// ended since (the scheduler settled it between the two reads of a plan).
type staleActiveStore struct {
	fleet.Store
	ended string
}

func (s *staleActiveStore) ActiveOperation(context.Context, string) (string, error) {
	return s.ended, nil
}

// TestPlanIgnoresAnOperationThatEndedMeanwhile: an operation found active,
// then read ended (settled meanwhile), is not in progress: the plan goes on
// (here to the supplier's refusal) instead of answering 409.
func TestPlanIgnoresAnOperationThatEndedMeanwhile(t *testing.T) {
	e := newRolloutEnv(t, hopVersions)
	d := e.deploy("c", "d0", "1.0.0")
	e.pump(installed) // the install is settled: succeeded
	var install string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT id::text FROM operations WHERE deployment_id = $1 AND state = 'succeeded'`, d.ID).Scan(&install))
	stale := &staleActiveStore{Store: postgres.NewFleetStore(e.pool, 5), ended: install}
	s := fleet.NewService(stale, e.cat, fleet.Policy{AcceptAll: true}, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	p, _, err := s.Upgrade(e.ctx, d.ID, fleet.UpgradeRequest{TargetVersion: "2.0.0"}, fleet.Actor{ID: "bob"}, true, fleet.Precondition{})
	require.NoError(t, err)
	require.False(t, p.Allowed)
	assert.Equal(t, "upgrade-path-required", lifecycle.ErrorType(p.Refusal), "%v", p.Refusal)
}
