package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/sdk"
)

// planCounts returns the rows a plan must not add or change: revisions,
// operations, history and the deployment's generation.
func (e *opsEnv) planCounts(t *testing.T, id string) string {
	t.Helper()
	var s string
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM revisions)::text || '/' || (SELECT count(*) FROM operations)::text
|| '/' || (SELECT count(*) FROM deployment_history)::text
|| '/' || (SELECT generation FROM deployments WHERE id = $1)::text`, id).Scan(&s))
	return s
}

// TestPlanOperationsChangeNothing: the plans of an upgrade, a
// reconfiguration and a rollback, through the generated client, answer the
// plan the deprecated dryRun answers (byte for byte), change no row (not
// even the audit log: a plan is read like a GET) and no manifest.
func TestPlanOperationsChangeNothing(t *testing.T) {
	e := newOpsEnv(t)
	dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")
	before, audited := e.planCounts(t, id), e.count(t, "audit_log")
	_, etag := dev.manifest()

	up, err := e.mgmt.PlanUpgradeWithResponse(t.Context(), id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, up.StatusCode(), string(up.Body))
	require.NotNil(t, up.JSON200)
	assert.True(t, up.JSON200.Allowed)
	assert.Equal(t, sdk.PlannedOperationType("upgrade"), up.JSON200.Type)
	require.NotNil(t, up.JSON200.Hops)
	assert.Equal(t, []string{"2.0.0"}, *up.JSON200.Hops)

	rc, err := e.mgmt.PlanReconfigurationWithResponse(t.Context(), id, sdk.ReconfigureRequest{Parameters: sdk.ParameterValues{"greeting": "hi"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, rc.StatusCode(), string(rc.Body))
	assert.True(t, rc.JSON200.Allowed)
	assert.Equal(t, sdk.PlannedOperationType("reconfigure"), rc.JSON200.Type)
	require.NotNil(t, rc.JSON200.Parameters)

	refused, err := e.mgmt.PlanReconfigurationWithResponse(t.Context(), id, sdk.ReconfigureRequest{Parameters: sdk.ParameterValues{"region": "us"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, refused.StatusCode(), string(refused.Body))
	assert.False(t, refused.JSON200.Allowed, "a refused plan is still a plan")
	require.NotNil(t, refused.JSON200.Problem)
	assert.Equal(t, httpapi.ProblemBase+"immutable-parameter", refused.JSON200.Problem.Type)

	rb, err := e.mgmt.PlanRollbackWithResponse(t.Context(), id, sdk.RollbackRequest{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, rb.StatusCode(), string(rb.Body))
	assert.Equal(t, sdk.PlannedOperationType("rollback"), rb.JSON200.Type)

	assert.Equal(t, before, e.planCounts(t, id), "no row added or changed")
	assert.Equal(t, audited, e.count(t, "audit_log"), "no audit entry: a plan is read like a GET")
	_, etag2 := dev.manifest()
	assert.Equal(t, etag, etag2, "manifest unchanged")

	// The deprecated flag answers the same plan (and still changes nothing
	// but the audit log, where a call to the action is recorded).
	same := func(plan, dry []byte) {
		t.Helper()
		var a, b map[string]any
		require.NoError(t, json.Unmarshal(plan, &a))
		require.NoError(t, json.Unmarshal(dry, &b))
		assert.Equal(t, a, b)
	}
	dryUp := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", DryRun: ptrTo(true)})
	require.Equal(t, http.StatusOK, dryUp.StatusCode(), string(dryUp.Body))
	same(up.Body, dryUp.Body)
	dryRc, err := e.mgmt.ReconfigureDeploymentWithResponse(t.Context(), id, nil, sdk.ReconfigureRequest{Parameters: sdk.ParameterValues{"region": "us"}, DryRun: ptrTo(true)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, dryRc.StatusCode(), string(dryRc.Body))
	same(refused.Body, dryRc.Body)
	dryRb, err := e.mgmt.RollbackDeploymentWithResponse(t.Context(), id, nil, sdk.RollbackRequest{DryRun: ptrTo(true)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, dryRb.StatusCode(), string(dryRb.Body))
	same(rb.Body, dryRb.Body)
	assert.Equal(t, 1, e.count(t, "operations"), "the install and nothing else")

	// The plan takes the action's body: dryRun true is redundant, false contradicts it.
	again, err := e.mgmt.PlanUpgradeWithResponse(t.Context(), id, sdk.UpgradeRequest{TargetVersion: "2.0.0", DryRun: ptrTo(true)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, again.StatusCode(), string(again.Body))
	same(up.Body, again.Body)
}

// TestPlanOperationsRefuseAsTheActionDoes: a plan is refused where its
// action's request is (a duration out of its range, an unknown deployment,
// a viewer's token), and refuses dryRun: false; nothing changes.
func TestPlanOperationsRefuseAsTheActionDoes(t *testing.T) {
	e := newOpsEnv(t)
	_, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")

	tok, err := e.mgmt.CreateTokenWithResponse(t.Context(), sdk.CreateTokenRequest{Name: "viewer", Role: "viewer"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, tok.StatusCode(), string(tok.Body))
	viewer := clientAs(t, e.url, tok.JSON201.Secret)
	before := e.planCounts(t, id) // after the token's creation, which is audited
	auditedBefore := e.count(t, "audit_log")

	type answer struct {
		res  *http.Response
		body []byte
	}
	plans := map[string]func(c *sdk.ClientWithResponses, id string, dryRun *bool, timeout *string) answer{
		"upgrade": func(c *sdk.ClientWithResponses, id string, dryRun *bool, timeout *string) answer {
			r, err := c.PlanUpgradeWithResponse(t.Context(), id, sdk.UpgradeRequest{TargetVersion: "2.0.0", DryRun: dryRun, Timeout: timeout})
			require.NoError(t, err)
			return answer{r.HTTPResponse, r.Body}
		},
		"reconfigure": func(c *sdk.ClientWithResponses, id string, dryRun *bool, timeout *string) answer {
			r, err := c.PlanReconfigurationWithResponse(t.Context(), id, sdk.ReconfigureRequest{Parameters: sdk.ParameterValues{"greeting": "hi"}, DryRun: dryRun, Timeout: timeout})
			require.NoError(t, err)
			return answer{r.HTTPResponse, r.Body}
		},
		"rollback": func(c *sdk.ClientWithResponses, id string, dryRun *bool, timeout *string) answer {
			r, err := c.PlanRollbackWithResponse(t.Context(), id, sdk.RollbackRequest{DryRun: dryRun, Timeout: timeout})
			require.NoError(t, err)
			return answer{r.HTTPResponse, r.Body}
		},
	}
	for name, plan := range plans {
		t.Run(name, func(t *testing.T) {
			a := plan(viewer, id, nil, nil)
			p := problemOf(t, a.res, a.body, http.StatusForbidden)
			assert.Equal(t, httpapi.ProblemBase+"forbidden", p.Type, "the action's role (operator) is needed")

			a = plan(e.mgmt, id, ptrTo(false), nil)
			p = problemOf(t, a.res, a.body, http.StatusUnprocessableEntity)
			require.NotEmpty(t, p.Errors)
			assert.Equal(t, "/dryRun", p.Errors[0].Field)

			for _, v := range []string{"0s", "169h", "ten minutes"} {
				a = plan(e.mgmt, id, nil, ptrTo(v))
				p = problemOf(t, a.res, a.body, http.StatusUnprocessableEntity)
				require.NotEmpty(t, p.Errors, v)
				assert.Equal(t, "/timeout", p.Errors[0].Field, v)
			}

			a = plan(e.mgmt, "0b5e4d0e-1f4e-4f7b-9d51-000000000000", nil, nil)
			problemOf(t, a.res, a.body, http.StatusNotFound)
		})
	}
	// Only the refused authorizations are audited, as for a GET.
	var audited int
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_log WHERE outcome = 'failure' AND status = 403 AND action LIKE 'plan%'`).Scan(&audited))
	assert.Equal(t, len(plans), audited, "every refused authorization is audited")
	assert.Equal(t, before, e.planCounts(t, id), "no revision, operation, history or generation change")
	assert.Equal(t, auditedBefore+len(plans), e.count(t, "audit_log"), "no audit entry but the refused authorizations")
}
