package replicatest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAcknowledgedReportsSurviveKill is the durability test of the status
// reports' group commit: devices report concurrently to a wfm process,
// which is killed (SIGKILL) during the load. Every report that got its
// 200/201 must be in the database: a deployment's report count is at least
// the number of its acknowledged reports (and at most the number sent: one
// report in flight at the kill may have committed unanswered), and a
// deployment whose "installed" report was acknowledged is installed, with
// the history row and the event of that move.
func TestAcknowledgedReportsSurviveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a server process")
	}
	bin, dbURL, keyFile := replicaSetup(t)
	began := time.Now()
	r := startReplica(t, bin, "A", dbURL, keyFile)

	desc, err := os.ReadFile("../margo/testdata/ApplicationDescription-001-hello_world.yaml")
	require.NoError(t, err)
	mustCall(t, r.mgmt, "POST", "/mgmt/v1/applications", "application/yaml", desc, http.StatusCreated)
	const client, devices = "plant", 16
	ids := make([]string, devices)
	for i := range devices {
		dev := fmt.Sprint("edge-", i)
		caps := fmt.Appendf(nil, `{"properties":{"id":%q,"vendor":"v","modelNumber":"m","serialNumber":"s-%d","cpus":[{"cores":2,"architecture":"amd64"}],"memory":"1Gi","storage":"1Gi","supportedRuntimes":["oci"],"supportedDeploymentTypes":["helm","compose"]}}`, dev, i)
		status, m, err := call(t.Context(), r.device, "PUT", "/api/v1/capabilities/"+dev, "application/json", caps, "X-WFM-Client-ID", client)
		require.NoError(t, err)
		require.Contains(t, []int{http.StatusOK, http.StatusCreated}, status, "%v", m)
		d := mustCall(t, r.mgmt, "POST", "/mgmt/v1/deployments", "application/json",
			fmt.Appendf(nil, `{"applicationId":%q,"version":"1.0","clientId":%q,"deviceId":%q}`, appID, client, dev), http.StatusCreated)
		ids[i] = d["id"].(string)
	}
	status, m, err := call(t.Context(), r.device, "GET", "/api/v1/deployments", "", nil, "X-WFM-Client-ID", client)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "%v", m)
	since, _ := m["manifestVersion"].(float64)
	require.Positive(t, since, "the state manifest's version: %v", m)
	t.Logf("server started, %d deployments: %s", devices, time.Since(began).Round(time.Millisecond))

	// Each device reports in a loop, one report at a time: "installing"
	// first, then "installed" again and again. acked counts the 2xx answers.
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	acked, sent := make([]int, devices), make([]int, devices)
	var total atomic.Int64
	var wg sync.WaitGroup
	for i := range devices {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				state := "installed"
				if n == 0 {
					state = "installing"
				}
				body := fmt.Appendf(nil, `{"deploymentId":%q,"adoptedManifestVersion":%d,"status":{"state":%q},"components":[{"name":"hello-world","state":%q}]}`,
					ids[i], int64(since), state, state)
				sent[i]++
				status, m, err := call(ctx, r.device, "POST", "/api/v1/deployments/"+ids[i]+"/status", "application/json", body, "X-WFM-Client-ID", client)
				if err != nil {
					return // the server is gone
				}
				if status != http.StatusOK && status != http.StatusCreated {
					t.Errorf("deployment %d: report %d answered %d: %v", i, n, status, m)
					return
				}
				acked[i]++
				total.Add(1)
			}
		})
	}
	// Kill the server during the load, once it has acknowledged a few
	// hundred reports.
	waitFor(t, 20*time.Second, "reports acknowledged", func() (bool, string) {
		n := total.Load()
		return n >= 400, fmt.Sprint(n)
	})
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGKILL))
	<-r.exited
	wg.Wait()
	t.Logf("killed after %d acknowledged reports: %s", total.Load(), time.Since(began).Round(time.Millisecond))

	pool, err := pgxpool.New(t.Context(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	for i, id := range ids {
		var reports int
		var state string
		var moves, events int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT d.reports, d.state,
(SELECT count(*) FROM deployment_history h WHERE h.deployment_id = d.id AND h.cause = 'report' AND h.to_state = 'installed'),
(SELECT count(*) FROM events e WHERE e.subject_id = d.id::text AND e.type = 'deployment.state_changed' AND e.body->>'to' = 'installed')
FROM deployments d WHERE d.id = $1`, id).Scan(&reports, &state, &moves, &events))
		assert.GreaterOrEqual(t, reports, acked[i], "deployment %d: every acknowledged report is stored", i)
		assert.LessOrEqual(t, reports, sent[i], "deployment %d: no report stored twice", i)
		if acked[i] >= 2 {
			assert.Equal(t, "installed", state, "deployment %d: its acknowledged installed report moved it", i)
			assert.Equal(t, 1, moves, "deployment %d: the move's history row", i)
			assert.Equal(t, 1, events, "deployment %d: the move's event", i)
		}
	}
}
