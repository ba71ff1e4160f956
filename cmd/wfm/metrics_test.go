package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dto "github.com/prometheus/client_model/go"

	"github.com/wfm-dev/wfm/internal/pgtest"
)

// startBoth runs the server in this process and returns its management and
// device API base URLs.
func startBoth(t *testing.T, args []string, getenv func(string) string, stderr io.Writer) (mgmt, device string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"-listen", "127.0.0.1:0", "-device-listen", "127.0.0.1:0"}, args...), getenv, pw, stderr)
		pw.CloseWithError(fmt.Errorf("run returned: %v", err))
		done <- err
	}()
	t.Cleanup(func() { cancel(); <-done })
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if m := listenLine.FindStringSubmatch(sc.Text()); m != nil {
			mgmt = m[1]
		}
		if m := deviceLine.FindStringSubmatch(sc.Text()); m != nil && mgmt != "" {
			go func() { _, _ = io.Copy(io.Discard, pr) }()
			return mgmt, m[1]
		}
	}
	t.Fatalf("server did not start: %v", <-done)
	return "", ""
}

// do sends a request and returns the status and the decoded JSON body.
func do(t *testing.T, method, url, ct, body string, header http.Header) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if header != nil {
		req.Header = header.Clone()
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(res.Body).Decode(&m)
	return res.StatusCode, m
}

// scrape returns the metric families /metrics serves.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	require.NoError(t, err)
	return fams
}

// value is the value of the sample of family name whose labels include
// labels; ok false when there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// TestDomainMetrics drives some activity through the public APIs (a
// deployment with its install operation, a poll, a status report, a 429)
// and checks that /metrics shows each domain metric with a plausible value,
// and that the debug request lines name the caller and the problem type.
// The server creates its admin token in the data folder
// (-admin-token-create), as in docker compose.
func TestDomainMetrics(t *testing.T) {
	dataDir := t.TempDir()
	logs := &lockedBuffer{}
	getenv := envWith(map[string]string{"DATABASE_URL": pgtest.URL(t), "WFM_ADMIN_TOKEN_CREATE": "true", "WFM_ADMIN_TOKEN": "", "WFM_ADMIN_TOKEN_FILE": ""})
	base, device := startBoth(t, []string{"-data-dir", dataDir, "-dev-header-identity", "-log-format", "json", "-log-level", "debug",
		"-mgmt-rate", "0.001", "-mgmt-burst", "10"}, getenv, logs)

	token, err := os.ReadFile(filepath.Join(dataDir, "admin-token"))
	require.NoError(t, err, "-admin-token-create wrote the token with DATABASE_URL set")
	var printed strings.Builder
	require.NoError(t, run(t.Context(), []string{"print-admin-token", "-data-dir", dataDir}, func(string) string { return "" }, &printed, io.Discard))
	require.Equal(t, string(token), printed.String())
	admin := http.Header{"Authorization": {"Bearer " + strings.TrimSpace(string(token))}}
	plant := http.Header{"X-WFM-Client-ID": {"plant"}}
	const js = "application/json"

	app, err := os.ReadFile("../wfm-bench/app.yaml")
	require.NoError(t, err)
	status, body := do(t, "POST", base+"/mgmt/v1/applications", "application/yaml", string(app), admin)
	require.Equal(t, http.StatusCreated, status, body)
	status, body = do(t, "PUT", device+"/api/v1/capabilities/edge", js, `{"properties":{"id":"edge","vendor":"t","modelNumber":"b1","serialNumber":"S-1","cpus":[{"cores":4,"architecture":"amd64"}],"memory":"8Gi","storage":"64Gi","supportedRuntimes":["oci"],"supportedDeploymentTypes":["helm","compose"]}}`, plant)
	require.Contains(t, []int{200, 201}, status, body)
	status, body = do(t, "POST", base+"/mgmt/v1/deployments", js, `{"applicationId":"com-northstartida-hello-world","version":"1.0","clientId":"plant","deviceId":"edge"}`, admin)
	require.Equal(t, http.StatusCreated, status, body)
	depID, _ := body["id"].(string)
	require.NotEmpty(t, depID)

	// Two polls: the second is answered from the manifest cache.
	status, body = do(t, "GET", device+"/api/v1/deployments", "", "", plant)
	require.Equal(t, http.StatusOK, status, body)
	mv, _ := body["manifestVersion"].(float64)
	require.NotZero(t, mv)
	status, _ = do(t, "GET", device+"/api/v1/deployments", "", "", plant)
	require.Equal(t, http.StatusOK, status)
	status, body = do(t, "POST", device+"/api/v1/deployments/"+depID+"/status", js,
		fmt.Sprintf(`{"deploymentId":%q,"deviceId":"edge","adoptedManifestVersion":%d,"status":{"state":"installing"},"components":[]}`, depID, int(mv)), plant)
	require.Less(t, status, 300, body)
	status, body = do(t, "POST", device+"/api/v1/deployments/"+depID+"/status", js,
		fmt.Sprintf(`{"deploymentId":%q,"deviceId":"edge","adoptedManifestVersion":%d,"status":{"state":"installed"},"components":[]}`, depID, int(mv)), plant)
	require.Less(t, status, 300, body)
	// The scheduler ends the install operation; the event log's reader
	// counts its outcome.
	require.Eventually(t, func() bool {
		v, _ := value(scrape(t, base), "wfm_operations_finished_total", map[string]string{"type": "install", "outcome": "succeeded"})
		return v == 1
	}, 30*time.Second, 50*time.Millisecond, "the install operation's outcome is counted")

	// An install rollout to the other device stays running: no agent answers.
	status, body = do(t, "PUT", device+"/api/v1/capabilities/edge2", js, `{"properties":{"id":"edge2","vendor":"t","modelNumber":"b1","serialNumber":"S-2","cpus":[{"cores":4,"architecture":"amd64"}],"memory":"8Gi","storage":"64Gi","supportedRuntimes":["oci"],"supportedDeploymentTypes":["helm","compose"]}}`, plant)
	require.Contains(t, []int{200, 201}, status, body)
	status, body = do(t, "POST", base+"/mgmt/v1/rollouts", js, `{"applicationId":"com-northstartida-hello-world","target":{},"action":"install","install":{"version":"1.0"}}`, admin)
	require.Equal(t, http.StatusCreated, status, body)
	rolloutID, _ := body["id"].(string)
	require.NotEmpty(t, rolloutID)
	rolloutWave := body["currentWave"]

	// Callers without a valid token use up their network's budget: 429.
	var limited bool
	for range 20 {
		if status, _ = do(t, "GET", base+"/mgmt/v1/deployments", "", "", http.Header{"Authorization": {"Bearer wfm_nope"}}); status == http.StatusTooManyRequests {
			limited = true
			break
		}
	}
	require.True(t, limited, "a 429 within 20 calls over a burst of 10")

	// The fleet values are cached for 5 s: wait for a snapshot with the rollout.
	var fams map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		fams = scrape(t, base)
		v, _ := value(fams, "wfm_rollouts", map[string]string{"state": "running"})
		return v == 1
	}, 30*time.Second, 50*time.Millisecond, "the running rollout shows")
	check := func(name string, labels map[string]string, ok func(float64) bool) {
		t.Helper()
		v, found := value(fams, name, labels)
		if assert.True(t, found, "%s%v is served", name, labels) {
			assert.True(t, ok(v), "%s%v = %v", name, labels, v)
		}
	}
	positive := func(v float64) bool { return v > 0 }
	zero := func(v float64) bool { return v == 0 }
	check("wfm_deployments", map[string]string{"state": "installed"}, func(v float64) bool { return v == 1 })
	check("wfm_deployments", map[string]string{"state": "failed"}, zero)
	check("wfm_operations_in_flight", map[string]string{"type": "upgrade", "state": "queued"}, zero)
	var installOps float64
	for _, st := range []string{"queued", "running"} {
		v, _ := value(fams, "wfm_operations_in_flight", map[string]string{"type": "install", "state": st})
		installOps += v
	}
	assert.Equal(t, 1.0, installOps, "the rollout's install operation (edge2) is in flight")
	check("wfm_operations_finished_total", map[string]string{"type": "install", "outcome": "succeeded"}, func(v float64) bool { return v == 1 })
	check("wfm_operations_finished_total", map[string]string{"type": "upgrade", "outcome": "failed"}, zero)
	check("wfm_rollouts", map[string]string{"state": "running"}, func(v float64) bool { return v == 1 })
	check("wfm_rollouts", map[string]string{"state": "succeeded"}, zero)
	r := map[string]string{"rollout": rolloutID, "application": "com-northstartida-hello-world"}
	check("wfm_rollout_progress_ratio", r, func(v float64) bool { return v >= 0 && v < 1 })
	apiWave, _ := rolloutWave.(float64)
	require.Equal(t, 1.0, apiWave, "the API counts waves from 1")
	check("wfm_rollout_current_wave", r, func(v float64) bool { return v == apiWave })
	check("wfm_rollout_waves", r, func(v float64) bool { return v >= 1 })
	check("wfm_rollout_members", map[string]string{"rollout": rolloutID, "status": "excluded"}, func(v float64) bool { return v == 1 })
	var eligible float64
	for _, st := range []string{"pending", "in-progress"} {
		v, _ := value(fams, "wfm_rollout_members", map[string]string{"rollout": rolloutID, "status": st})
		eligible += v
	}
	assert.Equal(t, 1.0, eligible, "edge2 is the one eligible member, not done")
	check("wfm_scheduler_due", map[string]string{"kind": "operation"}, func(v float64) bool { return v <= 1 })
	check("wfm_scheduler_lag_seconds", map[string]string{"kind": "operation"}, func(v float64) bool { return v >= 0 && v < 60 })
	check("wfm_scheduler_lag_seconds", map[string]string{"kind": "rollout"}, func(v float64) bool { return v >= 0 && v < 60 })
	check("wfm_webhook_dispatch_backlog_events", nil, func(v float64) bool { return v >= 0 })
	check("wfm_webhook_dispatch_lag_seconds", nil, func(v float64) bool { return v >= 0 && v < 60 })
	check("wfm_manifest_cache_lookups_total", map[string]string{"result": "hit"}, positive)
	check("wfm_manifest_cache_lookups_total", map[string]string{"result": "miss"}, positive)
	check("wfm_status_reports_ingested_total", nil, func(v float64) bool { return v == 2 })
	check("wfm_http_rate_limited_total", map[string]string{"api": "mgmt", "route": "/mgmt/v1/deployments"}, func(v float64) bool { return v == 1 })
	check("wfm_http_requests_total", map[string]string{"route": "/mgmt/v1/deployments", "method": "GET", "status": "401"}, positive)
	check("wfm_metrics_snapshot_errors_total", nil, zero)
	check("wfm_metrics_snapshot_age_seconds", nil, func(v float64) bool { return v >= 0 && v < 10 })
	_, unmatched := value(fams, "wfm_http_rate_limited_total", map[string]string{"route": "unmatched"})
	assert.False(t, unmatched, "rate-limited requests are counted by the route they asked for")

	// The Grafana dashboard is built on these names only.
	checkDashboard(t, fams)

	// The debug request lines name the caller and the problem type.
	var sawLimited, sawDevice, sawAdmin bool
	for _, l := range logs.lines(t) {
		if l["msg"] != "http request" {
			continue
		}
		switch {
		case l["status"] == float64(429):
			sawLimited = true
			assert.Equal(t, "anonymous", l["actor"])
			assert.Equal(t, "too-many-requests", l["problem"])
			assert.Equal(t, "/mgmt/v1/deployments", l["route"])
		case l["route"] == statusRouteForTest:
			sawDevice = true
			assert.Equal(t, "client:plant", l["actor"])
			assert.Equal(t, "", l["problem"])
		case l["route"] == "/mgmt/v1/deployments" && l["status"] == float64(201):
			sawAdmin = true
			assert.Equal(t, "bootstrap", l["actor"])
		}
	}
	assert.True(t, sawLimited && sawDevice && sawAdmin, "request lines: 429 %v, status report %v, creation %v", sawLimited, sawDevice, sawAdmin)
}

const statusRouteForTest = "/api/v1/deployments/{deploymentId}/status"
