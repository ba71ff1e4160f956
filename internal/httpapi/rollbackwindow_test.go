package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/sdk"
)

// TestRollbackWindowOfAFailedUpgrade: a version whose upgrade failed never
// became installed; its rollback window runs from when it was first
// published to the device (lifecycle.RollbackWindowStart), for an automatic
// (onFailure: rollback) and a manual rollback alike.
func TestRollbackWindowOfAFailedUpgrade(t *testing.T) {
	const window = "  rollback:\n    allowed: true\n    window: 1h\n"
	windowCheck := func(t *testing.T, checks []sdk.PlanCheck) bool {
		t.Helper()
		for _, c := range checks {
			if c.Name == "rollback-window" {
				return c.Passed
			}
		}
		t.Fatalf("no rollback-window check in %v", checks)
		return false
	}
	tests := []struct {
		name       string
		onFailure  string        // "rollback" or "" (halt)
		failAfter  time.Duration // from the publication of 2.0.0 to its failure
		rollbackAt time.Duration // manual rollback (dry run): from the publication
		wantWithin bool
	}{
		{name: "automatic, failed within the window", onFailure: "rollback", failAfter: 10 * time.Minute, wantWithin: true},
		{name: "automatic, failed after the window", onFailure: "rollback", failAfter: 61 * time.Minute, wantWithin: false},
		{name: "manual, within the window", failAfter: 10 * time.Minute, rollbackAt: 59 * time.Minute, wantWithin: true},
		{name: "manual, after the window", failAfter: 10 * time.Minute, rollbackAt: 61 * time.Minute, wantWithin: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newOpsEnv(t)
			dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": window}, "1.0.0")
			req := sdk.UpgradeRequest{TargetVersion: "2.0.0", Timeout: ptrTo("3h")}
			if tt.onFailure != "" {
				of := sdk.OnFailure(tt.onFailure)
				req.OnFailure = &of
			}
			res := e.upgrade(t, id, req)
			require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
			e.tick(t) // publishes 2.0.0
			require.Equal(t, "2.0.0", dev.desiredVersion(id))
			e.clock.Advance(tt.failAfter)
			m, _ := dev.manifest()
			dev.report(id, m.ManifestVersion, "failed", "app")
			e.tick(t) // fails the upgrade (and decides on the automatic rollback)
			op := e.operation(t, res.JSON202.Id.String())
			require.Equal(t, sdk.OperationState("failed"), op.State)

			if tt.onFailure != "" {
				if tt.wantWithin {
					assert.NotNil(t, op.FollowUp, "within the window of 2.0.0's publication: a rollback follows")
				} else {
					assert.Nil(t, op.FollowUp, "past the window of 2.0.0's publication: no rollback")
					require.NotNil(t, op.Reason)
					assert.Contains(t, *op.Reason, "no automatic rollback")
					assert.Contains(t, *op.Reason, "window ended at")
				}
				return
			}
			e.clock.Advance(tt.rollbackAt - tt.failAfter)
			dry, err := e.mgmt.RollbackDeploymentWithResponse(t.Context(), id, nil, sdk.RollbackRequest{DryRun: ptrTo(true)})
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, dry.StatusCode(), string(dry.Body))
			assert.Equal(t, tt.wantWithin, dry.JSON200.Allowed)
			assert.Equal(t, tt.wantWithin, windowCheck(t, dry.JSON200.Checks), "%+v", dry.JSON200.Checks)
		})
	}
}
