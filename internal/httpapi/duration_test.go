package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/sdk"
)

// count returns how many rows table holds.
func (e *opsEnv) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+table).Scan(&n))
	return n
}

// TestDurationsOutOfRangeAreRefused: every duration a management request
// carries is refused with 422 naming the member when it is zero, negative,
// above its field's range or not a duration, and nothing changes. `0s` used
// to mean "the default" (30m, or 10m for a drain).
func TestDurationsOutOfRangeAreRefused(t *testing.T) {
	e := newOpsEnv(t)
	_, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")
	before := e.deployment(t, id)
	ops, tokens := e.count(t, "operations"), e.count(t, "api_tokens")

	bad := []string{"0s", "0", "-5m", "169h", "5", "ten minutes", "500ms", ""} // 169h: above every operation timeout's range
	refused := func(t *testing.T, res *http.Response, body []byte, field, value string) {
		t.Helper()
		p := problemOf(t, res, body, http.StatusUnprocessableEntity)
		assert.Equal(t, httpapi.ProblemBase+"invalid-request", p.Type, "%s %q", field, value)
		require.NotEmpty(t, p.Errors, "%s %q", field, value)
		assert.Equal(t, field, p.Errors[0].Field, "%s %q", field, value)
	}
	for _, v := range bad {
		res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", Timeout: ptrTo(v)})
		refused(t, res.HTTPResponse, res.Body, "/timeout", v)

		res = e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", Drain: &sdk.DrainOverride{Required: true, Timeout: ptrTo(v)}})
		refused(t, res.HTTPResponse, res.Body, "/drain/timeout", v)

		rc, err := e.mgmt.ReconfigureDeploymentWithResponse(t.Context(), id, nil, sdk.ReconfigureRequest{Parameters: sdk.ParameterValues{"greeting": "hi"}, Timeout: ptrTo(v)})
		require.NoError(t, err)
		refused(t, rc.HTTPResponse, rc.Body, "/timeout", v)

		rb, err := e.mgmt.RollbackDeploymentWithResponse(t.Context(), id, nil, sdk.RollbackRequest{Timeout: ptrTo(v)})
		require.NoError(t, err)
		refused(t, rb.HTTPResponse, rb.Body, "/timeout", v)

		if v == "169h" {
			v = "87601h" // above a token expiry's range
		}
		tok, err := e.mgmt.CreateTokenWithResponse(t.Context(), sdk.CreateTokenRequest{Name: "ci", Role: "viewer", ExpiresIn: ptrTo(v)})
		require.NoError(t, err)
		refused(t, tok.HTTPResponse, tok.Body, "/expiresIn", v)
	}

	after := e.deployment(t, id)
	assert.Equal(t, before.Revision, after.Revision, "nothing changed")
	assert.Equal(t, before.State, after.State)
	assert.Equal(t, ops, e.count(t, "operations"), "no operation was created")
	assert.Equal(t, tokens, e.count(t, "api_tokens"), "no token was created")

	// The bounds themselves are accepted.
	res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", Timeout: ptrTo("168h"),
		Drain: &sdk.DrainOverride{Required: true, Timeout: ptrTo("1s")}, DryRun: ptrTo(true)})
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.NotNil(t, res.JSON200.Drain)
	assert.Equal(t, "1s", res.JSON200.Drain.Timeout)
}

// TestPublishingRefusesDurationsOutOfRange: a description's lifecycle
// durations are checked against the same ranges when it is published.
func TestPublishingRefusesDurationsOutOfRange(t *testing.T) {
	e := newOpsEnv(t)
	for _, tt := range []struct{ lc, field string }{
		{"  upgrade:\n    drain:\n      timeout: 0s\n", "/lifecycle/upgrade/drain/timeout"},
		{"  upgrade:\n    drain:\n      timeout: 169h\n", "/lifecycle/upgrade/drain/timeout"},
		{"  rollback:\n    allowed: true\n    window: 0s\n", "/lifecycle/rollback/window"},
		{"  rollback:\n    allowed: true\n    window: 8761h\n", "/lifecycle/rollback/window"},
	} {
		res := postYAML(t, e.mgmt, describe("1.0.0", tt.lc))
		p := problemOf(t, res.HTTPResponse, res.Body, http.StatusUnprocessableEntity)
		assert.Equal(t, httpapi.ProblemBase+"invalid-description", p.Type)
		require.Len(t, p.Errors, 1, string(res.Body))
		assert.Equal(t, tt.field, p.Errors[0].Field)
		assert.Contains(t, p.Errors[0].Message, "from 1s to")
	}
	assert.Zero(t, e.count(t, "application_versions"), "nothing was stored")
	// Months are a legitimate rollback window.
	e.publish(t, "1.0.0", "  rollback:\n    allowed: true\n    window: 2160h\n")
}

// TestVersionStoredBeforeTheRangesKeepsWorking: a version stored before the
// ranges were rules (inserted here directly, bypassing publishing) with a
// drain timeout of 0s and a rollback window above its range still deploys
// and upgrades; its lifecycle view shows the values used and says why.
func TestVersionStoredBeforeTheRangesKeepsWorking(t *testing.T) {
	e := newOpsEnv(t)
	dev, id := e.setup(t, map[string]string{"1.0.0": ""}, "1.0.0")

	raw := describe("2.0.0", "  upgrade:\n    drain:\n      required: true\n      timeout: 0s\n  rollback:\n    allowed: true\n    window: 9000h\n")
	_, err := margo.ParseDescription(raw, margo.MediaTypeYAML)
	require.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "publishing would refuse it")
	parsed, err := margo.ParseStoredDescription(raw, margo.MediaTypeYAML)
	require.NoError(t, err)
	_, inserted, err := postgres.NewCatalogStore(e.pool).InsertVersion(t.Context(), catalog.Version{ApplicationID: "svc",
		Version: lifecycle.MustParseVersion("2.0.0"), Name: "Service", Digest: margo.Digest(raw), MediaType: margo.MediaTypeYAML,
		Raw: raw, Document: parsed.JSON, CreatedAt: time.Now().UTC()})
	require.NoError(t, err)
	require.True(t, inserted)

	v, err := e.mgmt.GetApplicationVersionWithResponse(t.Context(), "svc", "2.0.0", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, v.StatusCode(), string(v.Body))
	lc := v.JSON200.Lifecycle
	require.NotNil(t, lc.Drain)
	assert.Equal(t, "10m0s", lc.Drain.Timeout, "the default drain timeout is used")
	require.NotNil(t, lc.Rollback.Window)
	assert.Equal(t, "8760h0m0s", *lc.Rollback.Window, "the longest window is used")
	require.NotNil(t, lc.Notices, "the view says what is used instead")
	require.Len(t, *lc.Notices, 2)
	n := (*lc.Notices)[0]
	assert.Equal(t, "/lifecycle/upgrade/drain/timeout", n.Field)
	assert.Equal(t, "0s", n.Declared)
	assert.Equal(t, "10m0s", *n.Used)
	assert.Equal(t, "drain.timeout 0s is out of range (from 1s to 168h); 10m is used", n.Message)
	assert.Equal(t, "/lifecycle/rollback/window", (*lc.Notices)[1].Field)

	// It upgrades, with the drain timeout used.
	res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
	require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
	require.NotNil(t, res.JSON202.Drain)
	assert.Equal(t, "10m0s", res.JSON202.Drain.Timeout)
	e.tick(t)
	m, _ := dev.manifest()
	_, yml := dev.do("GET", m.Deployments[0].URL, nil)
	assert.Contains(t, string(yml), "timeout: 10m0s", "the agent is told the drain timeout used")
	dev.reportPhase(id, "installing", "drained", 0)
	dev.installAll()
	e.tick(t)
	assert.Equal(t, sdk.OperationState("succeeded"), e.operation(t, res.JSON202.Id.String()).State)
	assert.Equal(t, "2.0.0", e.deployment(t, id).Version)

	// And it deploys.
	other := e.client(t, "plant")
	r, body := other.do("PUT", "/api/v1/capabilities/edge-2", capabilities("edge-2", "compose"))
	require.Equal(t, http.StatusCreated, r.StatusCode, string(body))
	d := e.deploy(t, "plant", "edge-2", "svc", "2.0.0")
	assert.True(t, strings.HasPrefix(string(d.State), "p"), "a new deployment of the stored version is pending, got %s", d.State)
}

// TestRolloutDurationsOutOfRangeAreRefused: every duration a rollout
// request carries is refused, by the plan and by the creation alike, with a
// 422 naming the member when it is just outside its field's range (as the
// contract states it) or not a duration; nothing is created. Just inside
// the range, the plan answers.
func TestRolloutDurationsOutOfRangeAreRefused(t *testing.T) {
	e := newRolloutEnv(t)
	e.addDevices(t, "plant", 2, "1.0.0")
	rows, refused := e.rowCounts(t), 0
	body := func(action, options, extra string) string {
		return `{"applicationId":"svc","target":{` + extra + `},"action":"` + action + `","` + action + `":` + options + `}`
	}
	up := func(options string) string { return body("upgrade", options, "") }
	for _, c := range []struct {
		field     string
		bad, good string // just outside and just inside the field's range
		bodyOf    func(v string) string
	}{
		{"/upgrade/timeout", "169h", "168h", func(v string) string { return up(`{"targetVersion":"2.0.0","timeout":"` + v + `"}`) }},
		{"/upgrade/timeout", "0s", "1s", func(v string) string { return up(`{"targetVersion":"2.0.0","timeout":"` + v + `"}`) }},
		{"/upgrade/drain/timeout", "169h", "168h", func(v string) string {
			return up(`{"targetVersion":"2.0.0","drain":{"required":true,"timeout":"` + v + `"}}`)
		}},
		{"/reconfigure/timeout", "169h", "168h", func(v string) string {
			return body("reconfigure", `{"parameters":{"greeting":"hey"},"timeout":"`+v+`"}`, "")
		}},
		{"/rollback/timeout", "0s", "1s", func(v string) string { return body("rollback", `{"toVersion":"1.0.0","timeout":"`+v+`"}`, "") }},
		{"/target/notSeenFor", "4m59s", "5m", func(v string) string {
			return body("upgrade", `{"targetVersion":"2.0.0"}`, `"notSeenFor":"`+v+`"`)
		}},
		{"/waves/0/soak", "168h1s", "168h", func(v string) string {
			return up(`{"targetVersion":"2.0.0"},"waves":[{"size":{"percent":100},"soak":"` + v + `"}]`)
		}},
		{"/deadline", "8760h1s", "8760h", func(v string) string { return up(`{"targetVersion":"2.0.0"},"deadline":"` + v + `"`) }},
		{"/deadline", "59s", "1m", func(v string) string { return up(`{"targetVersion":"2.0.0"},"deadline":"` + v + `"`) }},
		{"/deadline", "ten minutes", "72h", func(v string) string { return up(`{"targetVersion":"2.0.0"},"deadline":"` + v + `"`) }},
	} {
		refused++
		t.Run(c.field+"="+c.bad, func(t *testing.T) {
			pr, err := e.mgmt.PlanRolloutWithBodyWithResponse(t.Context(), "application/json", strings.NewReader(c.bodyOf(c.bad)))
			require.NoError(t, err)
			p := problemOf(t, pr.HTTPResponse, pr.Body, http.StatusUnprocessableEntity)
			var fields []string
			for _, f := range p.Errors {
				fields = append(fields, f.Field)
			}
			assert.Equal(t, []string{c.field}, fields, "%s", pr.Body)

			cr := e.create(t, c.bodyOf(c.bad))
			p = problemOf(t, cr.HTTPResponse, cr.Body, http.StatusUnprocessableEntity)
			require.NotEmpty(t, p.Errors, "%s", cr.Body)
			assert.Equal(t, c.field, p.Errors[0].Field)

			pr, err = e.mgmt.PlanRolloutWithBodyWithResponse(t.Context(), "application/json", strings.NewReader(c.bodyOf(c.good)))
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, pr.StatusCode(), "%s: %s", c.good, pr.Body)
		})
	}
	after := e.rowCounts(t)
	assert.Equal(t, rows["audit_log"]+int64(refused), after["audit_log"], "each refused creation is audited, no plan is")
	delete(rows, "audit_log")
	delete(after, "audit_log")
	assert.Equal(t, rows, after, "nothing else was written")
}
