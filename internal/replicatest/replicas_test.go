package replicatest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/devicesim"
	"github.com/wfm-dev/wfm/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const adminToken = "replicatest-admin-token-0123456789"

// replica is one wfm process.
type replica struct {
	name   string
	cmd    *exec.Cmd
	mgmt   string // http://127.0.0.1:port
	device string // http://127.0.0.1:port (development header identity)
	exited chan struct{}
	log    *bytes.Buffer
	mu     *sync.Mutex // guards log
}

var (
	mgmtLine   = regexp.MustCompile(`^wfm listening on (http://\S+) `)
	deviceLine = regexp.MustCompile(`^wfm device API \(Margo\) on (http://[^/]+)/api/v1/`)
)

// buildServer builds cmd/wfm into a temporary folder: the binary the
// Dockerfile ships, not the test binary.
func buildServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "wfm")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/wfm-dev/wfm/cmd/wfm")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// startReplica starts bin on dbURL and returns once it prints both
// addresses (its migrations done), or fails after a bound.
func startReplica(t *testing.T, bin, name, dbURL, webhookKey string) *replica {
	t.Helper()
	dataDir := t.TempDir()
	cmd := exec.Command(bin,
		"-listen", "127.0.0.1:0", "-device-listen", "127.0.0.1:0", "-data-dir", dataDir,
		"-dev-header-identity", "-mgmt-rate", "0", "-device-rate", "1000", "-device-burst", "1000")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "WFM_ADMIN_TOKEN="+adminToken,
		"WFM_WEBHOOK_KEY_FILE="+webhookKey, "WFM_LOG_LEVEL=warn")
	r := &replica{name: name, cmd: cmd, exited: make(chan struct{}), log: &bytes.Buffer{}, mu: &sync.Mutex{}}
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { r.mu.Lock(); defer r.mu.Unlock(); return r.log.Write(p) })
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() { _ = cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-r.exited
		}
		if t.Failed() {
			r.mu.Lock()
			t.Logf("replica %s log:\n%s", name, r.log.String())
			r.mu.Unlock()
		}
	})
	addrs := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		var a [2]string
		for sc.Scan() {
			if m := mgmtLine.FindStringSubmatch(sc.Text()); m != nil {
				a[0] = m[1]
			}
			if m := deviceLine.FindStringSubmatch(sc.Text()); m != nil {
				a[1] = m[1]
				addrs <- a
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case a := <-addrs:
		r.mgmt, r.device = a[0], a[1]
	case <-r.exited:
		t.Fatalf("replica %s exited before listening:\n%s", name, r.log.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("replica %s did not listen within 60 s", name)
	}
	return r
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// call sends a management request; it returns the status and the decoded
// JSON body, or the transport error (a killed replica).
func call(ctx context.Context, base, method, path, contentType string, body []byte, header ...string) (int, map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return res.StatusCode, nil, err
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return res.StatusCode, m, nil
}

// mustCall is call that fails the test on a transport error or an
// unexpected status.
func mustCall(t *testing.T, base, method, path, contentType string, body []byte, want int) map[string]any {
	t.Helper()
	status, m, err := call(context.Background(), base, method, path, contentType, body)
	require.NoError(t, err, "%s %s", method, path)
	require.Equal(t, want, status, "%s %s: %v", method, path, m)
	return m
}

// waitFor polls cond every 50 ms until it holds, failing after limit: a
// bounded wait on the replicas' background work (the test cannot hold a
// signal from another process).
func waitFor(t *testing.T, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s; last: %s", what, limit, state)
		}
		<-tick.C
	}
}

const appID = "com-northstartida-hello-world"

// TestThreeReplicasOneKilledMidOperation runs three wfm processes on one
// PostgreSQL, as the Helm chart does. They start together on an empty
// database (migrations serialize on goose's lock). Devices of one client
// poll replica A, those of another poll replica B; deployments and
// upgrades are driven through replica C, which is killed (SIGKILL) while
// upgrades are being requested and run (the test checks that some are
// running); the rest is driven through A: a request cut by the kill is
// retried there with the same Idempotency-Key, and when C had reserved the
// key (it stays reserved for 5 minutes) the deployment's operations say
// whether the upgrade was made, a new key asking again if not.
// Every device converges on the new version, and the database shows each
// deployment upgraded exactly once: two revisions, one install and one
// upgrade operation, and one event of each kind per operation.
func TestThreeReplicasOneKilledMidOperation(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three server processes")
	}
	bin, dbURL, keyFile := replicaSetup(t)
	began := time.Now()

	// Three replicas start at once on the empty database.
	replicas := make([]*replica, 3)
	var wg sync.WaitGroup
	for i, name := range []string{"A", "B", "C"} {
		wg.Go(func() { replicas[i] = startReplica(t, bin, name, dbURL, keyFile) })
	}
	wg.Wait()
	for _, r := range replicas {
		require.NotNil(t, r, "a replica did not start")
	}
	a, b, c := replicas[0], replicas[1], replicas[2]
	t.Logf("three replicas migrated and listening: %s", time.Since(began).Round(time.Millisecond))
	began = time.Now()

	// The application, versions 1.0 and 2.0, through C.
	desc, err := os.ReadFile("../margo/testdata/ApplicationDescription-001-hello_world.yaml")
	require.NoError(t, err)
	mustCall(t, c.mgmt, "POST", "/mgmt/v1/applications", "application/yaml", desc, http.StatusCreated)
	desc2 := bytes.Replace(desc, []byte(`version: "1.0"`), []byte(`version: "2.0"`), 1)
	require.NotEqual(t, desc, desc2)
	mustCall(t, c.mgmt, "POST", "/mgmt/v1/applications", "application/yaml", desc2, http.StatusCreated)

	// Devices: plant-a's poll A, plant-b's poll B.
	ctx, stopDevices := context.WithCancel(context.Background())
	var devWG sync.WaitGroup
	t.Cleanup(func() { stopDevices(); devWG.Wait() })
	type dev struct{ client, id string }
	var devices []dev
	for _, p := range []struct {
		client string
		r      *replica
	}{{"plant-a", a}, {"plant-b", b}} {
		cfg := &devicesim.Config{BaseURL: p.r.device, HTTP: &http.Client{Timeout: 10 * time.Second}, ClientID: p.client,
			Poll: 50 * time.Millisecond, InstallTime: 300 * time.Millisecond, Budget: devicesim.NewBudget(1000, 1000)}
		var sims []*devicesim.Device
		for i := range 4 {
			id := fmt.Sprintf("edge-%s-%d", p.client[len(p.client)-1:], i)
			sims = append(sims, devicesim.NewDevice(cfg, id))
			devices = append(devices, dev{p.client, id})
		}
		for _, d := range sims {
			devWG.Go(func() { _ = d.Run(ctx) })
		}
	}
	waitFor(t, 20*time.Second, "every device registered", func() (bool, string) {
		n := 0
		for _, d := range devices {
			if st, _, err := call(ctx, c.mgmt, "GET", "/mgmt/v1/clients/"+d.client+"/devices/"+d.id, "", nil); err == nil && st == http.StatusOK {
				n++
			}
		}
		return n == len(devices), fmt.Sprintf("%d of %d", n, len(devices))
	})

	// Install 1.0 everywhere, through C.
	deployments := make([]string, len(devices))
	for i, d := range devices {
		body := fmt.Sprintf(`{"applicationId":%q,"version":"1.0","clientId":%q,"deviceId":%q}`, appID, d.client, d.id)
		m := mustCall(t, c.mgmt, "POST", "/mgmt/v1/deployments", "application/json", []byte(body), http.StatusCreated)
		deployments[i] = m["id"].(string)
	}
	waitConverged(t, c, deployments, "1.0", 1)

	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()

	// Upgrade to 2.0 through C: half one after the other, the other half at
	// once, while C is killed. Requests the kill cut go to A with the same
	// Idempotency-Key.
	upgrade := []byte(`{"targetVersion":"2.0"}`)
	half := len(deployments) / 2
	for _, id := range deployments[:half] {
		st, m, err := call(context.Background(), c.mgmt, "POST", "/mgmt/v1/deployments/"+id+"/upgrade", "application/json", upgrade, "Idempotency-Key", "up-"+id)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, st, "%v", m)
	}
	results := make([]error, len(deployments))
	statuses := make([]int, len(deployments))
	var reqWG sync.WaitGroup
	for i := half; i < len(deployments); i++ {
		reqWG.Go(func() {
			statuses[i], _, results[i] = call(context.Background(), c.mgmt, "POST", "/mgmt/v1/deployments/"+deployments[i]+"/upgrade",
				"application/json", upgrade, "Idempotency-Key", "up-"+deployments[i])
		})
	}
	// The kill lands mid-operation: upgrades requested through C are still
	// running (their devices take 300 ms to install).
	var running int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM operations WHERE type = 'upgrade' AND state IN ('queued', 'running')`).Scan(&running))
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	t.Logf("C killed with %d upgrade operations running", running)
	require.Positive(t, running, "no upgrade was running when C was killed")
	reqWG.Wait()
	<-c.exited
	cut, reserved := 0, 0
	for i := half; i < len(deployments); i++ {
		if results[i] == nil && statuses[i] == http.StatusAccepted {
			continue
		}
		cut++
		id := deployments[i]
		st, m, err := call(context.Background(), a.mgmt, "POST", "/mgmt/v1/deployments/"+id+"/upgrade", "application/json", upgrade, "Idempotency-Key", "up-"+id)
		require.NoError(t, err)
		if st == http.StatusConflict && strings.HasSuffix(fmt.Sprint(m["type"]), "#idempotency-key-in-use") {
			// C reserved the key and died: the reservation outlives it (for
			// 5 minutes). Whether the upgrade was made is in the deployment's
			// operations; if it was not, a new key asks again.
			reserved++
			if !hasUpgrade(t, a, id) {
				st, m, err = call(context.Background(), a.mgmt, "POST", "/mgmt/v1/deployments/"+id+"/upgrade", "application/json", upgrade, "Idempotency-Key", "up-again-"+id)
				require.NoError(t, err)
				if st == http.StatusConflict && strings.HasSuffix(fmt.Sprint(m["type"]), "#operation-in-progress") {
					// C's transaction was committing when C died: its
					// backend finished the commit after the read above.
					// The upgrade was made then, once.
					require.True(t, hasUpgrade(t, a, id), "%s: an operation in progress that is not the upgrade: %v", id, m)
					continue
				}
				require.Equal(t, http.StatusAccepted, st, "%v", m)
			}
			continue
		}
		require.Contains(t, []int{http.StatusAccepted}, st, "retry of %s on A: %v", id, m)
	}
	t.Logf("upgrade requests cut by the kill and retried on A: %d of %d (%d found their key reserved by C)", cut, len(deployments)-half, reserved)

	// Every device converges on 2.0, seen through the surviving replicas.
	waitConverged(t, a, deployments, "2.0", 2)
	waitConverged(t, b, deployments, "2.0", 2)

	t.Logf("devices, installs, upgrades and the kill: %s", time.Since(began).Round(time.Millisecond))

	// An operation ends at the scheduler's visit after the report that
	// reached its goal: wait for that, bounded, rather than catch it still
	// running (seen under load in CI).
	waitFor(t, 30*time.Second, "operations ended", func() (bool, string) {
		var active int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM operations WHERE deployment_id = ANY($1::text[]::uuid[]) AND state IN ('queued', 'running')`,
			deployments).Scan(&active); err != nil {
			return false, err.Error()
		}
		return active == 0, fmt.Sprintf("%d operations still active", active)
	})

	// Nothing lost, nothing applied twice.
	for _, id := range deployments {
		var revisions []int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT coalesce(array_agg(n ORDER BY n), '{}') FROM revisions WHERE deployment_id = $1`, id).Scan(&revisions))
		require.Equal(t, []int{1, 2}, revisions, "revisions of %s", id)
		var ops []string
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT coalesce(array_agg(type || ':' || state ORDER BY created_at), '{}') FROM operations WHERE deployment_id = $1`, id).Scan(&ops))
		require.Equal(t, []string{"install:succeeded", "upgrade:succeeded"}, ops, "operations of %s", id)
		events := map[string]int{}
		rows, err := pool.Query(context.Background(),
			`SELECT type, count(*) FROM events WHERE 'deployment:' || $1 = ANY(refs) GROUP BY type`, id)
		require.NoError(t, err)
		for rows.Next() {
			var typ string
			var n int
			require.NoError(t, rows.Scan(&typ, &n))
			events[typ] = n
		}
		require.NoError(t, rows.Err())
		for _, typ := range []string{"operation.created", "operation.succeeded", "revision.published"} {
			require.Equal(t, 2, events[typ], "%s events of %s (install and upgrade): %v", typ, id, events)
		}
	}
}

// hasUpgrade reports whether the deployment has an upgrade operation.
func hasUpgrade(t *testing.T, r *replica, id string) bool {
	t.Helper()
	m := mustCall(t, r.mgmt, "GET", "/mgmt/v1/operations?deploymentId="+id, "", nil, http.StatusOK)
	items, _ := m["items"].([]any)
	for _, it := range items {
		if op, _ := it.(map[string]any); op["type"] == "upgrade" {
			return true
		}
	}
	return false
}

// waitConverged waits until every deployment is installed at version with
// the given revision installed by its device, as replica r reads it.
func waitConverged(t *testing.T, r *replica, deployments []string, version string, revision float64) {
	t.Helper()
	waitFor(t, 30*time.Second, "deployments installed at "+version+" (replica "+r.name+")", func() (bool, string) {
		for _, id := range deployments {
			st, m, err := call(context.Background(), r.mgmt, "GET", "/mgmt/v1/deployments/"+id, "", nil)
			if err != nil || st != http.StatusOK {
				return false, fmt.Sprintf("GET %s: %d %v", id, st, err)
			}
			if v, _ := m["version"].(string); m["state"] != "installed" || (v != version && v != version+".0") || m["installedRevision"] != revision {
				return false, fmt.Sprintf("%s: state %v version %v installedRevision %v", id, m["state"], m["version"], m["installedRevision"])
			}
		}
		return true, ""
	})
}

// replicaSetup builds the server, and gives the URL of an empty database
// and a webhook key file for the replicas a test starts.
func replicaSetup(t *testing.T) (bin, dbURL, keyFile string) {
	t.Helper()
	began := time.Now()
	bin = buildServer(t)
	t.Logf("go build: %s", time.Since(began).Round(time.Millisecond))
	dbURL = pgtest.EmptyURL(t)
	keyFile = filepath.Join(t.TempDir(), "webhook-key")
	require.NoError(t, os.WriteFile(keyFile, []byte("cmVwbGljYXRlc3Qtd2ViaG9vay1rZXktMDEyMzQ1Njc=\n"), 0o600))
	return bin, dbURL, keyFile
}
