package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/pgtest"
)

var deviceLine = regexp.MustCompile(`wfm device API \(Margo\) on (\S+)/api/v1/`)

// serverProcess starts the server as a child process (this test binary
// re-executed) on dbURL with args, and returns its management and device
// API URLs.
func serverProcess(t *testing.T, dbURL string, args ...string) (*exec.Cmd, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "WFM_TEST_RUN_SERVER=args", "DATABASE_URL="+dbURL, "WFM_ADMIN_TOKEN="+testAdminToken,
		"WFM_TEST_SERVER_ARGS="+strings.Join(append([]string{"-listen", "127.0.0.1:0", "-device-listen", "127.0.0.1:0"}, args...), "\n"))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	if os.Getenv("WFM_TEST_SERVER_LOG") != "" {
		f, err := os.OpenFile(os.Getenv("WFM_TEST_SERVER_LOG"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		require.NoError(t, err)
		defer f.Close()
		cmd.Stderr = f
	}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	mgmt := ""
	for sc.Scan() {
		if m := listenLine.FindStringSubmatch(sc.Text()); m != nil {
			mgmt = m[1]
		}
		if m := deviceLine.FindStringSubmatch(sc.Text()); m != nil && mgmt != "" {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return cmd, mgmt, m[1]
		}
	}
	t.Fatal("server did not start")
	return nil, "", ""
}

const testAdminToken = "test-admin-token-webhooks-0123456789"

// call sends body (JSON unless ct says otherwise) with header, and
// requires one of the statuses.
func call(t *testing.T, method, url, ct, body string, header http.Header, statuses ...int) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header = header
	req.Header.Set("Content-Type", ct)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	require.Contains(t, statuses, res.StatusCode, "%s %s: %s", method, url, b)
}

var admin = http.Header{"Authorization": {"Bearer " + testAdminToken}}

// TestWebhookSurvivesSIGKILL: an event committed, its delivery attempted
// and failed, then the server is killed outright (no shutdown): the server
// started again on the same database delivers it, with the same
// webhook-id.
func TestWebhookSurvivesSIGKILL(t *testing.T) {
	dbURL := pgtest.URL(t)
	dataDir := reachableTempDir(t) // holds the development webhook key both processes use
	var up atomic.Bool
	got := make(chan string, 100)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("webhook-id")
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	args := []string{"-data-dir", dataDir, "-webhook-allow-http", "-webhook-allow-cidr", "127.0.0.0/8", "-dev-header-identity"}

	first, base, device := serverProcess(t, dbURL, args...)
	const js = "application/json"
	call(t, "POST", base+"/mgmt/v1/webhooks", js, `{"url":"`+rcv.URL+`/hook","types":["revision.published"]}`, admin.Clone(), http.StatusCreated)
	app, err := os.ReadFile("../wfm-bench/app.yaml")
	require.NoError(t, err)
	call(t, "POST", base+"/mgmt/v1/applications", "application/yaml", string(app), admin.Clone(), http.StatusCreated)
	call(t, "PUT", device+"/api/v1/capabilities/edge", js, `{"properties":{"id":"edge","vendor":"t","modelNumber":"b1","serialNumber":"S-1","cpus":[{"cores":4,"architecture":"amd64"}],"memory":"8Gi","storage":"64Gi","supportedRuntimes":["oci"],"supportedDeploymentTypes":["helm","compose"]}}`,
		http.Header{"X-WFM-Client-ID": {"plant"}}, http.StatusOK, http.StatusCreated)
	// Commits a revision.published event.
	call(t, "POST", base+"/mgmt/v1/deployments", js, `{"applicationId":"com-northstartida-hello-world","version":"1.0","clientId":"plant","deviceId":"edge"}`,
		admin.Clone(), http.StatusCreated)

	var eventID string
	select {
	case eventID = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery attempt within 30 s")
	}
	// Kill once River has put the failed job back to wait for its retry
	// (not while it runs): the delivery lives only in the database.
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'webhook_delivery' AND state IN ('available', 'retryable') AND attempt >= 1`).Scan(&n)
		return err == nil && n == 1
	}, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_ = first.Wait()
	up.Store(true)

	serverProcess(t, dbURL, args...)
	deadline := time.After(60 * time.Second)
	for {
		select {
		case id := <-got:
			require.Equal(t, eventID, id, "the retry carries the event's webhook-id")
			var ok bool
			require.Eventually(t, func() bool {
				err := pool.QueryRow(ctx, `SELECT bool_or(succeeded) FROM webhook_deliveries WHERE event_id::text = $1`, eventID).Scan(&ok)
				return err == nil && ok
			}, 10*time.Second, 10*time.Millisecond)
			return
		case <-deadline:
			t.Fatal("the event was not delivered after the restart")
		}
	}
}

func TestWebhookSettings(t *testing.T) {
	noEnv := func(string) string { return "" }
	c, err := parseConfig(nil, noEnv, io.Discard)
	require.NoError(t, err)
	require.Equal(t, webhookConfig{timeout: 10 * time.Second, disableAfter: 50, deliveryRetention: 7 * 24 * time.Hour, workers: 50}, c.webhooks,
		"the documented defaults")
	c, err = parseConfig(nil, func(k string) string {
		return map[string]string{"WFM_WEBHOOK_ALLOW_CIDR": "10.20.0.0/16, 127.0.0.1", "WFM_WEBHOOK_ALLOW_HTTP": "true",
			"WFM_WEBHOOK_DELIVERY_RETENTION": "24h", "WFM_WEBHOOK_KEY_FILE": "/k"}[k]
	}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "[10.20.0.0/16 127.0.0.1/32]", fmt.Sprint(c.webhooks.allowCIDRs))
	require.True(t, c.webhooks.allowHTTP)
	require.Equal(t, 24*time.Hour, c.webhooks.deliveryRetention)
	require.Equal(t, "/k", c.webhooks.keyFile)
	for _, args := range [][]string{
		{"-webhook-allow-cidr", "10.0.0.0/33"}, {"-webhook-allow-cidr", "nope"}, {"-webhook-timeout", "0"}, {"-webhook-timeout", "2m"},
		{"-webhook-disable-after", "0"}, {"-webhook-delivery-retention", "30m"}, {"-webhook-workers", "0"},
	} {
		_, err := parseConfig(args, noEnv, io.Discard)
		require.Error(t, err, "parseConfig(%q)", args)
	}
}
