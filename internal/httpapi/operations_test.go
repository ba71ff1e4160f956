package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/internal/testpki"
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
	acc   *access.Service
	url   string
}

func newOpsEnv(t *testing.T) *opsEnv {
	t.Helper()
	pool := pgtest.New(t)
	clk := &clock{t: time.Now().UTC()}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), clk.Now)
	fl := fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true, AllowOverrides: true}, clk.Now, log)
	acc := access.NewService(postgres.NewAccessStore(pool), clk.Now)
	require.NoError(t, acc.Bootstrap(t.Context(), adminToken))
	ids := identity.Config{TrustDomain: "example.org", WFMID: "wfm-test"}
	h, err := httpapi.NewHandler(httpapi.Config{Logger: log, Ready: func(context.Context) error { return nil },
		Registry: prometheus.NewRegistry(), Catalog: cat, Fleet: fl, Access: acc, DeviceIdentity: ids.ClientIDFromRequest})
	require.NoError(t, err)
	mgmtH, deviceH := httpapi.Split(h)
	ca, err := testpki.NewCA("test CA")
	require.NoError(t, err)
	serverCert, err := ca.IssueServer([]string{"localhost"}, nil)
	require.NoError(t, err)
	dev := httptest.NewUnstartedServer(deviceH)
	dev.TLS = identity.ServerTLSConfig(serverCert, ca.Pool(), identity.RequireClientCert())
	dev.StartTLS()
	t.Cleanup(dev.Close)
	mgmt := httptest.NewServer(mgmtH)
	t.Cleanup(mgmt.Close)
	fe := &fleetEnv{mgmt: clientAs(t, mgmt.URL, adminToken), mgmtURL: mgmt.URL, deviceURL: dev.URL, ca: ca, ids: ids, fleet: fl}
	return &opsEnv{fleetEnv: fe, clock: clk, pool: pool, sched: fleet.NewScheduler(fl, time.Hour), acc: acc, url: mgmt.URL}
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

	auto := sdk.UpgradeRequestPath("auto")
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

	audit, err := e.mgmt.ListAuditWithResponse(t.Context(), &sdk.ListAuditParams{Action: ptrTo("rollbackDeployment"), Outcome: ptrTo(sdk.ListAuditParamsOutcome("success"))})
	require.NoError(t, err)
	require.NotEmpty(t, audit.JSON200.Items)
	detail := string(*audit.JSON200.Items[0].Detail)
	assert.Contains(t, detail, `"force":true`)
	assert.Contains(t, detail, "incident 42")
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
	auto := sdk.UpgradeRequestPath("auto")
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
