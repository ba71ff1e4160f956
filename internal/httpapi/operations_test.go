package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/sdk"
)

// clock is a settable clock shared by the services of a test server.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// opsEnv is a fleetEnv with a settable clock and a scheduler the test runs.
type opsEnv struct {
	*fleetEnv
	clock *clock
	pool  *pgxpool.Pool
	sched *fleet.Scheduler
	url   string
}

func newOpsEnv(t *testing.T) *opsEnv {
	t.Helper()
	clk := &clock{t: time.Now().UTC()}
	fe := newEnv(t, envOptions{policy: fleet.Policy{AcceptAll: true, AllowOverrides: true}, now: clk.Now})
	return &opsEnv{fleetEnv: fe, clock: clk, pool: fe.pool, sched: fleet.NewScheduler(fe.fleet, time.Hour), url: fe.mgmtURL}
}

// tick runs one scheduler pass, as the background scheduler would.
func (e *opsEnv) tick(t *testing.T) {
	t.Helper()
	_, err := e.sched.RunOnce(t.Context())
	require.NoError(t, err)
}

// describe returns a description of app "svc" at version with a parameter
// "greeting" (string, 1-10 chars), an immutable "region", and the given
// lifecycle section (YAML, indented under "lifecycle:" by the caller).
func describe(version, lifecycleYAML string) []byte {
	d := fmt.Sprintf(`apiVersion: v1
id: svc
metadata:
  name: Service
  version: %q
deploymentProfiles:
  - type: compose
    id: svc-compose
    components:
      - name: app
        properties:
          repository: oci://example.com/svc
          revision: %q
parameters:
  greeting:
    value: hello
    targets:
      - pointer: GREETING
        components: [app]
  region:
    value: eu
    targets:
      - pointer: REGION
        components: [app]
configuration:
  sections:
    - name: General
      settings:
        - parameter: greeting
          name: Greeting
          schema: short
        - parameter: region
          name: Region
          immutable: true
          schema: short
  schema:
    - name: short
      dataType: string
      minLength: 1
      maxLength: 10
`, version, version)
	if lifecycleYAML != "" {
		d += "lifecycle:\n" + lifecycleYAML
	}
	return []byte(d)
}

func (e *opsEnv) publish(t *testing.T, version, lifecycleYAML string) {
	t.Helper()
	res := postYAML(t, e.mgmt, describe(version, lifecycleYAML))
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
}

// installAll makes the device install whatever its manifest says: one
// "installed" report per deployment at the manifest's version.
func (a *agent) installAll() manifest {
	a.t.Helper()
	m, _ := a.manifest()
	for _, d := range m.Deployments {
		a.report(d.DeploymentID, m.ManifestVersion, "installed", "app")
	}
	return m
}

// desiredVersion reads the version the device is told to run.
func (a *agent) desiredVersion(deploymentID string) string {
	a.t.Helper()
	m, _ := a.manifest()
	for _, d := range m.Deployments {
		if d.DeploymentID == deploymentID {
			res, body := a.do("GET", d.URL, nil)
			require.Equal(a.t, http.StatusOK, res.StatusCode)
			for _, line := range strings.Split(string(body), "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "toVersion: "); ok {
					return v
				}
			}
		}
	}
	return ""
}

func (e *opsEnv) setup(t *testing.T, versions map[string]string, installed string) (*agent, string) {
	t.Helper()
	for v, lc := range versions {
		e.publish(t, v, lc)
	}
	dev := e.client(t, "plant")
	res, body := dev.do("PUT", "/api/v1/capabilities/edge", capabilities("edge", "compose"))
	require.Equal(t, http.StatusCreated, res.StatusCode, string(body))
	d := e.deploy(t, "plant", "edge", "svc", installed)
	dev.installAll()
	require.Equal(t, sdk.DeploymentState("installed"), e.deployment(t, d.Id.String()).State)
	return dev, d.Id.String()
}

func (e *opsEnv) upgrade(t *testing.T, id string, body sdk.UpgradeRequest) *sdk.UpgradeDeploymentResponse {
	t.Helper()
	res, err := e.mgmt.UpgradeDeploymentWithResponse(t.Context(), id, nil, body)
	require.NoError(t, err)
	return res
}

func (e *opsEnv) operation(t *testing.T, id string) sdk.Operation {
	t.Helper()
	res, err := e.mgmt.GetOperationWithResponse(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return *res.JSON200
}

// Scenario 1: 1.0 -> 2.0 where 2.0 needs >= 1.5.
func TestUpgradeAlongAPath(t *testing.T) {
	e := newOpsEnv(t)
	dev, id := e.setup(t, map[string]string{"1.0.0": "", "1.5.0": "", "2.0.0": "  upgrade:\n    minUpgradeFrom: \"1.5.0\"\n"}, "1.0.0")

	direct := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
	p := problemOf(t, direct.HTTPResponse, direct.Body, http.StatusUnprocessableEntity)
	assert.Equal(t, httpapi.ProblemBase+"upgrade-path-required", p.Type)
	var body struct {
		Path []string `json:"path"`
	}
	require.NoError(t, json.Unmarshal(direct.Body, &body))
	assert.Equal(t, []string{"1.0.0", "1.5.0", "2.0.0"}, body.Path)

	auto := sdk.UpgradePathMode("auto")
	res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", Path: &auto})
	require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
	opID := res.JSON202.Id.String()
	assert.Equal(t, "/mgmt/v1/operations/"+opID, res.HTTPResponse.Header.Get("Location"))
	require.Len(t, res.JSON202.Steps, 2)

	e.tick(t) // publishes hop 1
	assert.Equal(t, "1.5.0", dev.desiredVersion(id))
	e.tick(t) // the device has not installed 1.5 yet: hop 2 must wait
	assert.Equal(t, "1.5.0", dev.desiredVersion(id), "hop 2 is published only after hop 1 is installed")
	op := e.operation(t, opID)
	assert.Equal(t, sdk.OperationState("running"), op.State)
	assert.Equal(t, sdk.OperationStepState("published"), op.Steps[0].State)
	assert.Equal(t, sdk.OperationStepState("pending"), op.Steps[1].State)

	dev.installAll()
	e.tick(t)
	assert.Equal(t, "2.0.0", dev.desiredVersion(id))
	dev.installAll()
	e.tick(t)
	op = e.operation(t, opID)
	assert.Equal(t, sdk.OperationState("succeeded"), op.State)
	for _, st := range op.Steps {
		assert.Equal(t, sdk.OperationStepState("installed"), st.State)
		require.NotNil(t, st.Revision)
	}
	got := e.deployment(t, id)
	assert.Equal(t, "2.0.0", got.Version)
	assert.Equal(t, sdk.DeploymentState("installed"), got.State)
	assert.Equal(t, "hello", got.Parameters["greeting"], "parameters carried over")

	path, err := e.mgmt.GetUpgradePathWithResponse(t.Context(), "svc", &sdk.GetUpgradePathParams{From: "1.0", To: "2.0"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, path.StatusCode(), string(path.Body))
	assert.Equal(t, []string{"1.0.0", "1.5.0", "2.0.0"}, path.JSON200.Path)
	assert.False(t, path.JSON200.Direct)
}

// Scenario 2: rollback governed by the installed version's policy.
func TestRollbackPolicy(t *testing.T) {
	e := newOpsEnv(t)
	dev, id := e.setup(t, map[string]string{
		"1.0.0": "",
		"2.0.0": "",
		"3.0.0": "  rollback:\n    allowed: true\n    minVersion: \"2.0.0\"\n    window: 1h\n    reason: \"3.0 migrates the schema\"\n",
	}, "1.0.0")
	var lastBody []byte
	rollback := func(body sdk.RollbackRequest, token string) (*sdk.RollbackDeploymentResponse, problemBody) {
		c := clientAs(t, e.url, token)
		res, err := c.RollbackDeploymentWithResponse(t.Context(), id, nil, body)
		require.NoError(t, err)
		lastBody = res.Body
		var p problemBody
		if res.StatusCode() >= 400 {
			p = problemOf(t, res.HTTPResponse, res.Body, res.StatusCode())
		}
		return res, p
	}
	upgradeTo := func(v string, params map[string]any) {
		req := sdk.UpgradeRequest{TargetVersion: v}
		if params != nil {
			pv := sdk.ParameterValues(params)
			req.Parameters = &pv
		}
		res := e.upgrade(t, id, req)
		require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
		e.tick(t)
		dev.installAll()
		e.tick(t)
		require.Equal(t, sdk.OperationState("succeeded"), e.operation(t, res.JSON202.Id.String()).State)
	}

	upgradeTo("2.0.0", map[string]any{"greeting": "two"})
	// 2.0 declares no rollback policy: refused.
	_, p := rollback(sdk.RollbackRequest{}, adminToken)
	assert.Equal(t, http.StatusUnprocessableEntity, p.Status)
	assert.Equal(t, httpapi.ProblemBase+"rollback-forbidden", p.Type)

	upgradeTo("3.0.0", map[string]any{"greeting": "three"})
	revs, err := e.mgmt.ListRevisionsWithResponse(t.Context(), id, nil)
	require.NoError(t, err)
	revOf := map[string]int{}
	for _, r := range revs.JSON200.Items {
		revOf[r.Version] = r.Revision
	}
	// Below minVersion: refused; down to it: allowed (dry run: nothing changes).
	_, p = rollback(sdk.RollbackRequest{ToRevision: ptrTo(revOf["1.0.0"])}, adminToken)
	assert.Equal(t, httpapi.ProblemBase+"rollback-forbidden", p.Type)
	dry, _ := rollback(sdk.RollbackRequest{ToRevision: ptrTo(revOf["2.0.0"]), DryRun: ptrTo(true)}, adminToken)
	require.Equal(t, http.StatusOK, dry.StatusCode(), string(dry.Body))
	assert.True(t, dry.JSON200.Allowed)

	// After the window: refused, with the supplier's reason.
	e.clock.Advance(2 * time.Hour)
	_, p = rollback(sdk.RollbackRequest{ToRevision: ptrTo(revOf["2.0.0"])}, adminToken)
	assert.Equal(t, httpapi.ProblemBase+"rollback-forbidden", p.Type)
	assert.Contains(t, string(lastBody), "3.0 migrates the schema", "the refusal carries the supplier's reason")

	// Break-glass: an operator may not force; an admin may, with a reason, audited.
	opRes, err := e.mgmt.CreateTokenWithResponse(t.Context(), sdk.CreateTokenRequest{Name: "op", Role: "operator"})
	require.NoError(t, err)
	_, p = rollback(sdk.RollbackRequest{ToRevision: ptrTo(revOf["2.0.0"]), Force: ptrTo(true), Reason: ptrTo("incident 42")}, opRes.JSON201.Secret)
	assert.Equal(t, http.StatusForbidden, p.Status)
	_, p = rollback(sdk.RollbackRequest{ToRevision: ptrTo(revOf["2.0.0"]), Force: ptrTo(true)}, adminToken)
	assert.Equal(t, http.StatusUnprocessableEntity, p.Status, "force needs a reason")
	forced, _ := rollback(sdk.RollbackRequest{ToRevision: ptrTo(revOf["2.0.0"]), Force: ptrTo(true), Reason: ptrTo("incident 42")}, adminToken)
	require.Equal(t, http.StatusAccepted, forced.StatusCode(), string(forced.Body))
	assert.True(t, *forced.JSON202.Forced)
	e.tick(t)
	assert.Equal(t, "2.0.0", dev.desiredVersion(id))
	dev.installAll()
	e.tick(t)
	got := e.deployment(t, id)
	assert.Equal(t, "2.0.0", got.Version)
	assert.Equal(t, "two", got.Parameters["greeting"], "the old revision's exact parameters are restored")
	assert.Greater(t, got.Revision, revOf["3.0.0"], "a rollback is a new revision; history is not edited")
	rev, err := e.mgmt.GetRevisionWithResponse(t.Context(), id, got.Revision)
	require.NoError(t, err)
	require.NotNil(t, rev.JSON200.Forced, "the override is on the revision")
	assert.Equal(t, "incident 42", *rev.JSON200.ForceReason)

	audit, err := e.mgmt.ListAuditWithResponse(t.Context(), &sdk.ListAuditParams{Action: ptrTo("rollbackDeployment"), Outcome: ptrTo(sdk.AuditOutcome("success"))})
	require.NoError(t, err)
	require.NotEmpty(t, audit.JSON200.Items)
	detail := string(*audit.JSON200.Items[0].Detail)
	assert.Contains(t, detail, `"force":true`)
	assert.Contains(t, detail, "incident 42")
	assert.Contains(t, detail, `"forced":true`)
}

// Scenario 3: reconfiguration.
func TestReconfigure(t *testing.T) {
	e := newOpsEnv(t)
	dev, id := e.setup(t, map[string]string{"1.0.0": ""}, "1.0.0")
	reconf := func(params map[string]any) *sdk.ReconfigureDeploymentResponse {
		res, err := e.mgmt.ReconfigureDeploymentWithResponse(t.Context(), id, nil, sdk.ReconfigureRequest{Parameters: params})
		require.NoError(t, err)
		return res
	}
	res := reconf(map[string]any{"region": "us"})
	p := problemOf(t, res.HTTPResponse, res.Body, http.StatusUnprocessableEntity)
	assert.Equal(t, httpapi.ProblemBase+"immutable-parameter", p.Type)
	require.NotEmpty(t, p.Errors)
	assert.Equal(t, "/parameters/region", p.Errors[0].Field)

	res = reconf(map[string]any{"greeting": "far too long a greeting"})
	p = problemOf(t, res.HTTPResponse, res.Body, http.StatusUnprocessableEntity)
	require.NotEmpty(t, p.Errors)
	assert.Equal(t, "/parameters/greeting", p.Errors[0].Field)

	res = reconf(map[string]any{"unknown": "x"})
	problemOf(t, res.HTTPResponse, res.Body, http.StatusUnprocessableEntity)

	before := e.deployment(t, id)
	res = reconf(map[string]any{"greeting": "hi"})
	require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
	e.tick(t)
	dev.installAll()
	e.tick(t)
	got := e.deployment(t, id)
	assert.Equal(t, before.Version, got.Version, "same version")
	assert.Equal(t, before.Revision+1, got.Revision, "a new revision")
	assert.Equal(t, "hi", got.Parameters["greeting"])
	assert.Equal(t, sdk.DeploymentState("installed"), got.State)
	assert.Equal(t, sdk.OperationState("succeeded"), e.operation(t, res.JSON202.Id.String()).State)
}

// Scenario 6: one active operation per deployment; schedulers never
// publish a step twice.
func TestConcurrentOperationsAndSchedulers(t *testing.T) {
	e := newOpsEnv(t)
	dev, id := e.setup(t, map[string]string{"1.0.0": "", "1.5.0": "", "2.0.0": "  upgrade:\n    minUpgradeFrom: \"1.5.0\"\n"}, "1.0.0")
	auto := sdk.UpgradePathMode("auto")
	codes := make(chan int, 2)
	for range 2 {
		go func() {
			res, err := e.mgmt.UpgradeDeploymentWithResponse(context.Background(), id, nil, sdk.UpgradeRequest{TargetVersion: "2.0.0", Path: &auto})
			if err != nil {
				t.Error(err)
				codes <- 0
				return
			}
			codes <- res.StatusCode()
		}()
	}
	got := []int{<-codes, <-codes}
	assert.ElementsMatch(t, []int{http.StatusAccepted, http.StatusConflict}, got)

	// Two schedulers (two server processes) race on every pass.
	other := fleet.NewScheduler(e.fleet, time.Hour)
	race := func() {
		var wg sync.WaitGroup
		for _, s := range []*fleet.Scheduler{e.sched, other} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					if _, err := s.RunOnce(context.Background()); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
	}
	race()
	dev.installAll()
	race()
	dev.installAll()
	race()
	var revisions int
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT count(*) FROM revisions WHERE deployment_id = $1`, id).Scan(&revisions))
	assert.Equal(t, 3, revisions, "install + two hops, each published exactly once")
	assert.Equal(t, "2.0.0", e.deployment(t, id).Version)
}

// Scenario 7: dry runs change nothing.
func TestDryRunsChangeNothing(t *testing.T) {
	e := newOpsEnv(t)
	dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")
	counts := func() string {
		var s string
		require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM revisions)::text || '/' || (SELECT count(*) FROM operations)::text
|| '/' || (SELECT count(*) FROM deployment_history)::text || '/' || (SELECT generation FROM deployments WHERE id = $1)::text`, id).Scan(&s))
		return s
	}
	before := counts()
	_, etag := dev.manifest()
	res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", DryRun: ptrTo(true)})
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	assert.True(t, res.JSON200.Allowed)
	require.NotNil(t, res.JSON200.Hops)
	assert.Equal(t, []string{"2.0.0"}, *res.JSON200.Hops)
	assert.NotEmpty(t, res.JSON200.Checks)
	rc, err := e.mgmt.ReconfigureDeploymentWithResponse(t.Context(), id, nil, sdk.ReconfigureRequest{Parameters: map[string]any{"region": "us"}, DryRun: ptrTo(true)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, rc.StatusCode(), string(rc.Body))
	assert.False(t, rc.JSON200.Allowed, "a refused plan is still a plan")
	require.NotNil(t, rc.JSON200.Problem)
	rb, err := e.mgmt.RollbackDeploymentWithResponse(t.Context(), id, nil, sdk.RollbackRequest{DryRun: ptrTo(true)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, rb.StatusCode(), string(rb.Body))

	assert.Equal(t, before, counts(), "row counts unchanged")
	_, etag2 := dev.manifest()
	assert.Equal(t, etag, etag2, "manifest unchanged")
}

// reportPhase sends a drain-aware report for the current manifest.
func (a *agent) reportPhase(deploymentID, state, phase string, inFlight int) {
	a.t.Helper()
	m, _ := a.manifest()
	body, _ := json.Marshal(map[string]any{"deploymentId": deploymentID, "adoptedManifestVersion": m.ManifestVersion,
		"status": map[string]any{"state": state}, "components": []any{map[string]any{"name": "app", "state": state}},
		"x-wfm-extensions": map[string]any{"phase": phase, "inFlight": inFlight}})
	res, b := a.do("POST", "/api/v1/deployments/"+deploymentID+"/status", body)
	require.Less(a.t, res.StatusCode, 300, string(b))
}

const drainAbort = "  upgrade:\n    drain:\n      required: true\n      timeout: 5m\n      onTimeout: abort\n"

// Scenario 4: drain before the switch; abort on timeout.
func TestDrain(t *testing.T) {
	t.Run("drains then installs", func(t *testing.T) {
		e := newOpsEnv(t)
		dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": drainAbort}, "1.0.0")
		res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
		require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
		require.NotNil(t, res.JSON202.Drain)
		assert.True(t, res.JSON202.Drain.Required)
		e.tick(t)
		m, _ := dev.manifest()
		_, yml := dev.do("GET", m.Deployments[0].URL, nil)
		assert.Contains(t, string(yml), "drain:", "the agent is told to drain")
		assert.Contains(t, string(yml), "onTimeout: abort")

		dev.reportPhase(id, "installing", "draining", 3)
		d := e.deployment(t, id)
		assert.Equal(t, sdk.DeploymentState("draining"), d.State)
		require.NotNil(t, d.Progress, "the agent's progress is shown on the deployment")
		assert.Equal(t, sdk.DrainPhase("draining"), *d.Progress.Phase)
		assert.Equal(t, 3, *d.Progress.InFlight)
		dev.reportPhase(id, "installing", "drained", 0)
		assert.Equal(t, sdk.DeploymentState("draining"), e.deployment(t, id).State)
		dev.installAll()
		e.tick(t)
		assert.Equal(t, sdk.DeploymentState("installed"), e.deployment(t, id).State)
		assert.Equal(t, sdk.OperationState("succeeded"), e.operation(t, res.JSON202.Id.String()).State)
		st, err := e.mgmt.GetDeploymentStatusWithResponse(t.Context(), id)
		require.NoError(t, err)
		assert.Equal(t, sdk.DeviceState("installed"), st.JSON200.State)
	})
	t.Run("never drains: abort keeps the old revision", func(t *testing.T) {
		e := newOpsEnv(t)
		dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": drainAbort}, "1.0.0")
		base := e.deployment(t, id).Revision
		res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
		require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
		e.tick(t)
		dev.reportPhase(id, "installing", "draining", 7)
		e.clock.Advance(4 * time.Minute)
		e.tick(t)
		assert.Equal(t, sdk.OperationState("running"), e.operation(t, res.JSON202.Id.String()).State, "still within the drain timeout")
		e.clock.Advance(2 * time.Minute)
		e.tick(t)
		op := e.operation(t, res.JSON202.Id.String())
		assert.Equal(t, sdk.OperationState("failed"), op.State)
		require.NotNil(t, op.Reason)
		assert.Equal(t, "drain-timeout", *op.Reason)
		got := e.deployment(t, id)
		// History is append-only: the revert publishes a new revision (after
		// the abandoned upgrade's) that repeats the old one byte for byte.
		assert.Equal(t, base+2, got.Revision, "a new revision repeats the old one")
		assert.Equal(t, sdk.DeploymentState("installed"), got.State, "the device still runs it")
		assert.Equal(t, "1.0.0", got.Version)
		assert.Equal(t, "1.0.0", dev.desiredVersion(id))
		old, err := e.mgmt.GetRevisionWithResponse(t.Context(), id, base)
		require.NoError(t, err)
		repeat, err := e.mgmt.GetRevisionWithResponse(t.Context(), id, base+2)
		require.NoError(t, err)
		require.NotNil(t, old.JSON200)
		require.NotNil(t, repeat.JSON200)
		assert.Equal(t, old.JSON200.Digest, repeat.JSON200.Digest, "the same content")
	})
}

// Scenario 5: failures.
func TestFailures(t *testing.T) {
	allowRollback := "  rollback:\n    allowed: true\n"
	t.Run("onFailure rollback where the failed version allows it", func(t *testing.T) {
		e := newOpsEnv(t)
		dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": allowRollback}, "1.0.0")
		rb := sdk.OnFailure("rollback")
		res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", OnFailure: &rb})
		require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
		e.tick(t)
		m, _ := dev.manifest()
		dev.report(id, m.ManifestVersion, "failed", "app")
		e.tick(t) // fails the upgrade, queues the rollback
		op := e.operation(t, res.JSON202.Id.String())
		assert.Equal(t, sdk.OperationState("failed"), op.State)
		require.NotNil(t, op.FollowUp, "a rollback operation follows")
		e.tick(t) // publishes the rollback revision
		assert.Equal(t, "1.0.0", dev.desiredVersion(id))
		dev.installAll()
		e.tick(t)
		assert.Equal(t, sdk.OperationState("succeeded"), e.operation(t, op.FollowUp.String()).State)
		got := e.deployment(t, id)
		assert.Equal(t, "1.0.0", got.Version)
		assert.Equal(t, sdk.DeploymentState("installed"), got.State)
	})
	t.Run("onFailure rollback refused by policy stays failed", func(t *testing.T) {
		e := newOpsEnv(t)
		dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")
		rb := sdk.OnFailure("rollback")
		res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", OnFailure: &rb})
		require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
		e.tick(t)
		m, _ := dev.manifest()
		dev.report(id, m.ManifestVersion, "failed", "app")
		e.tick(t)
		op := e.operation(t, res.JSON202.Id.String())
		assert.Equal(t, sdk.OperationState("failed"), op.State)
		assert.Nil(t, op.FollowUp)
		require.NotNil(t, op.Reason)
		assert.Contains(t, *op.Reason, "no automatic rollback")
		assert.Equal(t, sdk.DeploymentState("failed"), e.deployment(t, id).State)
		assert.Equal(t, "2.0.0", dev.desiredVersion(id))
	})
	t.Run("a device that never answers fails at the deadline", func(t *testing.T) {
		e := newOpsEnv(t)
		_, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")
		res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", Timeout: ptrTo("10m")})
		require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
		e.tick(t)
		e.clock.Advance(9 * time.Minute)
		e.tick(t)
		assert.Equal(t, sdk.OperationState("running"), e.operation(t, res.JSON202.Id.String()).State)
		e.clock.Advance(2 * time.Minute)
		e.tick(t)
		op := e.operation(t, res.JSON202.Id.String())
		assert.Equal(t, sdk.OperationState("failed"), op.State)
		assert.Equal(t, "timeout", *op.Reason)
		got := e.deployment(t, id)
		assert.Equal(t, sdk.DeploymentState("failed"), got.State, "nothing stays in progress forever")
		hist, err := e.mgmt.ListHistoryWithResponse(t.Context(), id, nil)
		require.NoError(t, err)
		last := hist.JSON200.Items[len(hist.JSON200.Items)-1]
		assert.Equal(t, sdk.TransitionCause("deadline"), last.Cause)
	})
	t.Run("cancel", func(t *testing.T) {
		e := newOpsEnv(t)
		_, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")
		res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
		require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
		c, err := e.mgmt.CancelOperationWithResponse(t.Context(), res.JSON202.Id.String(), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, c.StatusCode(), string(c.Body))
		assert.Equal(t, sdk.OperationState("cancelled"), c.JSON200.State)
		c, err = e.mgmt.CancelOperationWithResponse(t.Context(), res.JSON202.Id.String(), nil)
		require.NoError(t, err)
		assert.Equal(t, http.StatusConflict, c.StatusCode())
		e.tick(t)
		assert.Equal(t, "1.0.0", e.deployment(t, id).Version, "a cancelled queued operation publishes nothing")
	})
}

func TestIdempotencyKeyAndIfMatch(t *testing.T) {
	e := newOpsEnv(t)
	_, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")
	post := func(key, body string, ifMatch string) (*http.Response, []byte) {
		req, _ := http.NewRequest("POST", e.url+"/mgmt/v1/deployments/"+id+"/upgrade", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		}
		res, err := adminHTTP.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res, b
	}
	// If-Match: a stale tag is 412 and changes nothing.
	res, b := post("", `{"targetVersion":"2.0.0"}`, `"d-stale-1"`)
	require.Equal(t, http.StatusPreconditionFailed, res.StatusCode, string(b))

	get, err := e.mgmt.GetDeploymentWithResponse(t.Context(), id)
	require.NoError(t, err)
	etag := get.HTTPResponse.Header.Get("ETag")
	first, b1 := post("k-1", `{"targetVersion":"2.0.0"}`, etag)
	require.Equal(t, http.StatusAccepted, first.StatusCode, string(b1))
	again, b2 := post("k-1", `{"targetVersion":"2.0.0"}`, etag)
	require.Equal(t, http.StatusAccepted, again.StatusCode, "the same key and body replay the first answer")
	assert.Equal(t, b1, b2)
	assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))
	other, b3 := post("k-1", `{"targetVersion":"2.0.0","path":"auto"}`, "")
	p := problemOf(t, other, b3, http.StatusUnprocessableEntity)
	assert.Equal(t, httpapi.ProblemBase+"idempotency-key-reused", p.Type)

	// A refusal (here: the upgrade above is in progress) is replayed as it
	// was: the body (its requestId) is the first request's, the
	// X-Request-Id header the replay's own (docs/api.md).
	refused, rb1 := post("k-refused", `{"targetVersion":"2.0.0"}`, "")
	p1 := problemOf(t, refused, rb1, http.StatusConflict)
	replayed, rb2 := post("k-refused", `{"targetVersion":"2.0.0"}`, "")
	p2 := problemOf(t, replayed, rb2, http.StatusConflict)
	assert.Equal(t, "true", replayed.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, rb1, rb2, "the original body")
	require.NotEmpty(t, p1.RequestID)
	assert.Equal(t, refused.Header.Get("X-Request-Id"), p1.RequestID)
	assert.Equal(t, p1.RequestID, p2.RequestID)
	assert.NotEmpty(t, replayed.Header.Get("X-Request-Id"))
	assert.NotEqual(t, p2.RequestID, replayed.Header.Get("X-Request-Id"), "the replay's header names the replay")

	ops, err := e.mgmt.ListOperationsWithResponse(t.Context(), &sdk.ListOperationsParams{DeploymentId: &id})
	require.NoError(t, err)
	// The deployment's install operation and the one upgrade (created at
	// the same time on the test's clock: in either order).
	require.Len(t, ops.JSON200.Items, 2, "one operation for one key")
	assert.ElementsMatch(t, []sdk.OperationType{sdk.OperationTypeInstall, sdk.OperationTypeUpgrade},
		[]sdk.OperationType{ops.JSON200.Items[0].Type, ops.JSON200.Items[1].Type})
	upgradeOp := ops.JSON200.Items[0]
	if upgradeOp.Type != sdk.OperationTypeUpgrade {
		upgradeOp = ops.JSON200.Items[1]
	}

	// Concurrent first requests with one key: one runs, the other is told
	// the key is in use or gets the replayed answer, never a second run.
	_, err = e.mgmt.CancelOperationWithResponse(t.Context(), upgradeOp.Id.String(), nil)
	require.NoError(t, err)
	codes := make(chan int, 4)
	for range 4 {
		go func() {
			res, b := post("k-2", `{"targetVersion":"2.0.0","dryRun":false}`, "")
			if res.StatusCode != http.StatusAccepted && res.StatusCode != http.StatusConflict {
				t.Errorf("status %d: %s", res.StatusCode, b)
			}
			if res.StatusCode == http.StatusConflict {
				assert.Contains(t, string(b), "idempotency-key-in-use")
			}
			codes <- res.StatusCode
		}()
	}
	for range 4 {
		<-codes
	}
	ops, err = e.mgmt.ListOperationsWithResponse(t.Context(), &sdk.ListOperationsParams{DeploymentId: &id})
	require.NoError(t, err)
	assert.Len(t, ops.JSON200.Items, 3, "the key ran its request once (besides the install and the first upgrade)")
}

// Regressions found in review.
func TestOperationRegressions(t *testing.T) {
	t.Run("after a drain abort the next operation runs", func(t *testing.T) {
		e := newOpsEnv(t)
		dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": drainAbort}, "1.0.0")
		res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
		require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))
		e.tick(t)
		dev.reportPhase(id, "installing", "draining", 1)
		e.clock.Advance(6 * time.Minute)
		e.tick(t)
		require.Equal(t, "drain-timeout", *e.operation(t, res.JSON202.Id.String()).Reason)
		again := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", Drain: &sdk.DrainOverride{Required: false}})
		require.Equal(t, http.StatusAccepted, again.StatusCode(), string(again.Body))
		e.tick(t)
		assert.Equal(t, "2.0.0", dev.desiredVersion(id))
		dev.installAll()
		e.tick(t)
		assert.Equal(t, sdk.OperationState("succeeded"), e.operation(t, again.JSON202.Id.String()).State)
	})
	t.Run("drained in time is not a drain timeout", func(t *testing.T) {
		e := newOpsEnv(t)
		dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": drainAbort}, "1.0.0")
		res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
		require.Equal(t, http.StatusAccepted, res.StatusCode())
		e.tick(t)
		dev.reportPhase(id, "installing", "draining", 1)
		e.clock.Advance(2 * time.Minute)
		dev.reportPhase(id, "installing", "drained", 0)
		e.clock.Advance(4 * time.Minute)
		e.tick(t)
		assert.Equal(t, sdk.OperationState("running"), e.operation(t, res.JSON202.Id.String()).State)
		assert.Equal(t, "2.0.0", dev.desiredVersion(id))
	})
	t.Run("cancelling a running operation does not strand the deployment", func(t *testing.T) {
		e := newOpsEnv(t)
		_, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")
		res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
		require.Equal(t, http.StatusAccepted, res.StatusCode())
		e.tick(t)
		_, err := e.mgmt.CancelOperationWithResponse(t.Context(), res.JSON202.Id.String(), nil)
		require.NoError(t, err)
		assert.Equal(t, sdk.DeploymentState("failed"), e.deployment(t, id).State)
		again := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
		assert.Equal(t, http.StatusAccepted, again.StatusCode(), string(again.Body))
	})
	t.Run("minUpgradeFrom is checked against what the device runs", func(t *testing.T) {
		e := newOpsEnv(t)
		dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": "", "3.0.0": "  upgrade:\n    minUpgradeFrom: \"2.0.0\"\n"}, "1.0.0")
		res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
		require.Equal(t, http.StatusAccepted, res.StatusCode())
		e.tick(t)
		m, _ := dev.manifest()
		dev.report(id, m.ManifestVersion, "failed", "app")
		e.tick(t)
		jump := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "3.0.0"})
		p := problemOf(t, jump.HTTPResponse, jump.Body, http.StatusUnprocessableEntity)
		assert.Equal(t, httpapi.ProblemBase+"upgrade-path-required", p.Type, "the device still runs 1.0.0")
	})
	t.Run("a dry run sees the operation in progress", func(t *testing.T) {
		e := newOpsEnv(t)
		_, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")
		require.Equal(t, http.StatusAccepted, e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"}).StatusCode())
		dry := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", DryRun: ptrTo(true)})
		require.Equal(t, http.StatusOK, dry.StatusCode(), string(dry.Body))
		assert.False(t, dry.JSON200.Allowed)
		assert.Equal(t, httpapi.ProblemBase+"operation-in-progress", dry.JSON200.Problem.Type)
	})
	t.Run("a reconfiguration does not restart the rollback window", func(t *testing.T) {
		e := newOpsEnv(t)
		dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": "  rollback:\n    allowed: true\n    window: 1h\n"}, "1.0.0")
		step := func(res int, opID string) {
			require.Equal(t, http.StatusAccepted, res)
			e.tick(t)
			dev.installAll()
			e.tick(t)
			require.Equal(t, sdk.OperationState("succeeded"), e.operation(t, opID).State)
		}
		up := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
		step(up.StatusCode(), up.JSON202.Id.String())
		e.clock.Advance(50 * time.Minute)
		rc, err := e.mgmt.ReconfigureDeploymentWithResponse(t.Context(), id, nil, sdk.ReconfigureRequest{Parameters: map[string]any{"greeting": "later"}})
		require.NoError(t, err)
		step(rc.StatusCode(), rc.JSON202.Id.String())
		e.clock.Advance(40 * time.Minute)
		revs, err := e.mgmt.ListRevisionsWithResponse(t.Context(), id, nil)
		require.NoError(t, err)
		first := revs.JSON200.Items[len(revs.JSON200.Items)-1].Revision
		dry, err := e.mgmt.RollbackDeploymentWithResponse(t.Context(), id, nil, sdk.RollbackRequest{ToRevision: ptrTo(first), DryRun: ptrTo(true)})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, dry.StatusCode(), string(dry.Body))
		assert.False(t, dry.JSON200.Allowed, "90 minutes after 2.0.0 was installed the 1h window is closed")
	})
	t.Run("an upgrade cannot change an immutable parameter", func(t *testing.T) {
		e := newOpsEnv(t)
		_, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")
		pv := sdk.ParameterValues{"region": "us"}
		res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", Parameters: &pv})
		p := problemOf(t, res.HTTPResponse, res.Body, http.StatusUnprocessableEntity)
		assert.Equal(t, httpapi.ProblemBase+"immutable-parameter", p.Type)
	})
	t.Run("timeouts are bounded", func(t *testing.T) {
		e := newOpsEnv(t)
		_, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")
		res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0", Timeout: ptrTo("100000h")})
		p := problemOf(t, res.HTTPResponse, res.Body, http.StatusUnprocessableEntity)
		require.NotEmpty(t, p.Errors)
		assert.Equal(t, "/timeout", p.Errors[0].Field)
	})
	t.Run("device API requests ignore Idempotency-Key", func(t *testing.T) {
		e := newOpsEnv(t)
		dev, id := e.setup(t, map[string]string{"1.0.0": ""}, "1.0.0")
		m, _ := dev.manifest()
		body, _ := json.Marshal(map[string]any{"deploymentId": id, "adoptedManifestVersion": m.ManifestVersion,
			"status": map[string]any{"state": "installed"}, "components": []any{}})
		res, _ := dev.do("POST", "/api/v1/deployments/"+id+"/status", body, "Idempotency-Key", "k")
		assert.Equal(t, http.StatusOK, res.StatusCode)
		var n int
		require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT count(*) FROM idempotency_keys`).Scan(&n))
		assert.Zero(t, n)
	})
	t.Run("token secrets are not kept by idempotency", func(t *testing.T) {
		e := newOpsEnv(t)
		req, _ := http.NewRequest("POST", e.url+"/mgmt/v1/tokens", strings.NewReader(`{"name":"x","role":"viewer"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "tok-1")
		res, err := adminHTTP.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusCreated, res.StatusCode)
		var n int
		require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT count(*) FROM idempotency_keys`).Scan(&n))
		assert.Zero(t, n)
	})
}
