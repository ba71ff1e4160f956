package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/pglaunch"
	"github.com/wfm-dev/wfm/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv("WFM_TEST_RUN_SERVER") == "args" {
		// Re-executed by TestWebhookSurvivesSIGKILL: be the server, with
		// the arguments given and the environment as it is.
		if err := run(context.Background(), strings.Split(os.Getenv("WFM_TEST_SERVER_ARGS"), "\n"), os.Getenv, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv("WFM_TEST_RUN_SERVER") == "1" {
		// Re-executed by TestSIGKILLLeavesNoPostgres: be the server.
		if err := run(context.Background(), []string{"-listen", "127.0.0.1:0", "-device-listen", "127.0.0.1:0", "-data-dir", os.Getenv("WFM_TEST_DATA_DIR")}, envWithout("DATABASE_URL"), os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(pgtest.Main(m))
}

// envWithout is the process environment minus the named variables.
func envWithout(names ...string) func(string) string {
	return func(k string) string {
		for _, n := range names {
			if k == n {
				return ""
			}
		}
		return os.Getenv(k)
	}
}

func envWith(kv map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := kv[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
}

var listenLine = regexp.MustCompile(`wfm listening on (https?://\S+) `)

// startServer runs the server in the background and returns its base URL and
// a function that stops it and returns run's result.
func startServer(t *testing.T, args []string, getenv func(string) string) (string, func() error) {
	t.Helper()
	return startServerLogging(t, args, getenv, io.Discard)
}

// startServerLogging is startServer with the server's log written to
// stderr. The lines logged before the server prints its address are complete
// when it returns.
func startServerLogging(t *testing.T, args []string, getenv func(string) string, stderr io.Writer) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dataDir := reachableTempDir(t) // later -data-dir arguments win
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"-listen", "127.0.0.1:0", "-device-listen", "127.0.0.1:0", "-data-dir", dataDir}, args...), getenv, pw, stderr)
		pw.CloseWithError(fmt.Errorf("run returned: %v", err))
		done <- err
	}()
	base := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listenLine.FindStringSubmatch(sc.Text()); m != nil {
				base <- m[1]
			}
		}
		close(base)
	}()
	var url string
	select {
	case u, ok := <-base:
		if !ok {
			t.Fatalf("server ended before listening: %v", <-done)
		}
		url = u
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("server did not start listening within 60s")
	}
	var stopped bool
	var result error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			result = <-done
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return url, stop
}

func getStatus(t *testing.T, url string) (int, string, map[string]any) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(res.Body).Decode(&body)
	return res.StatusCode, res.Header.Get("Content-Type"), body
}

func TestServesWithDatabaseURL(t *testing.T) {
	base, stop := startServer(t, nil, envWith(map[string]string{"DATABASE_URL": pgtest.URL(t)}))

	status, _, body := getStatus(t, base+"/readyz")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "ready", body["status"])
	status, ct, body := getStatus(t, base+"/no-such-path")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Equal(t, "application/problem+json", ct)
	assert.Equal(t, float64(404), body["status"])
	status, _, _ = getStatus(t, base+"/docs/")
	assert.Equal(t, http.StatusOK, status)
	// Headers over the handler's bound get a problem, not Go's plain text:
	// the server's own limit is set above the handler's.
	req, _ := http.NewRequest("GET", base+"/healthz", nil)
	req.Header.Set("X-Padding", strings.Repeat("a", httpapi.MaxHeaderBytes+16<<10))
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, res.StatusCode)
	assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))

	require.NoError(t, stop(), "a cancelled run shuts down cleanly")
	_, err = http.Get(base + "/healthz")
	assert.Error(t, err, "nothing listens after shutdown")
}

// TestReadinessWhenDatabaseIsGone: with the database stopped, /readyz
// answers degraded while device polls are answered from memory (the
// default -manifest-stale-bound), and not-ready with a bound of 0.
func TestReadinessWhenDatabaseIsGone(t *testing.T) {
	bin, err := pglaunch.FindBinaries(os.Getenv)
	require.NoError(t, err)
	pg, err := pglaunch.Start(t.Context(), pglaunch.Options{BinDir: bin, DataDir: filepath.Join(reachableTempDir(t), "pg")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })

	env := envWith(map[string]string{"DATABASE_URL": pg.URL("postgres")})
	base, _ := startServer(t, nil, env)
	strict, _ := startServer(t, []string{"-manifest-stale-bound", "0"}, env)
	for _, b := range []string{base, strict} {
		status, _, body := getStatus(t, b+"/readyz")
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "ready", body["status"])
	}

	require.NoError(t, pg.Stop())
	status, _, body := getStatus(t, base+"/readyz")
	assert.Equal(t, http.StatusOK, status, "the load balancer keeps a replica that answers devices from memory")
	assert.Equal(t, "degraded", body["status"])
	assert.Contains(t, body["detail"], "answered from memory")
	status, ct, body := getStatus(t, strict+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Equal(t, "application/problem+json", ct)
	assert.Contains(t, body["type"], "#not-ready")
	status, _, _ = getStatus(t, base+"/healthz")
	assert.Equal(t, http.StatusOK, status, "liveness does not depend on the database")
}

func TestPrivatePostgresStartsReusesAndStops(t *testing.T) {
	dataDir := reachableTempDir(t)
	env := envWithout("DATABASE_URL")
	pidFile := filepath.Join(dataDir, "postgres", "postmaster.pid")

	for round := range 2 { // the second round reuses the data folder
		base, stop := startServer(t, []string{"-data-dir", dataDir}, env)
		status, _, _ := getStatus(t, base+"/readyz")
		require.Equal(t, http.StatusOK, status, "round %d", round)
		// The development admin token works as the README says.
		tok, err := os.ReadFile(filepath.Join(dataDir, "admin-token"))
		require.NoError(t, err)
		req, _ := http.NewRequest("GET", base+"/mgmt/v1/applications", nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, "the token in <data-dir>/admin-token is an admin token")
		pid := postmasterPID(t, pidFile)
		require.NoError(t, stop())
		assert.NoFileExists(t, pidFile, "postgres shut down cleanly")
		assert.False(t, processAlive(pid), "postgres %d still running after the server stopped", pid)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-log-level", "loud"},
		{"-log-format", "xml"},
		{"-manifest-stale-bound", "-1s"},
		{"-manifest-stale-bound", "25h"},
		{"extra"},
	} {
		err := run(t.Context(), args, envWithout(), io.Discard, io.Discard)
		assert.Error(t, err, "%v", args)
	}
	// A PG_BIN without server binaries is refused at once with the
	// launcher's explanation (never another PostgreSQL found elsewhere).
	err := run(t.Context(), []string{"-listen", "127.0.0.1:0", "-device-listen", "127.0.0.1:0", "-data-dir", t.TempDir()},
		envWith(map[string]string{"DATABASE_URL": "", "PG_BIN": "/nonexistent"}), io.Discard, io.Discard)
	require.ErrorIs(t, err, pglaunch.ErrNoBinaries)
	assert.Contains(t, err.Error(), "DATABASE_URL", "the message says what to set")
}

// TestSIGKILLLeavesNoPostgres kills the server process outright and checks
// that its private PostgreSQL dies with it.
func TestSIGKILLLeavesNoPostgres(t *testing.T) {
	dataDir := reachableTempDir(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "WFM_TEST_RUN_SERVER=1", "WFM_TEST_DATA_DIR="+dataDir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = io.Discard
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	sc := bufio.NewScanner(out)
	listening := false
	for sc.Scan() {
		if listenLine.MatchString(sc.Text()) {
			listening = true
			break
		}
	}
	require.True(t, listening, "server did not start")
	pid := postmasterPID(t, filepath.Join(dataDir, "postgres", "postmaster.pid"))
	require.True(t, processAlive(pid))

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for processAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	assert.False(t, processAlive(pid), "postgres %d outlived its killed parent", pid)
}

// reachableTempDir is t.TempDir opened up so that the postgres OS user can
// reach a data folder inside it when the tests run as root.
func reachableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

func postmasterPID(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	require.NoError(t, err)
	return pid
}

// processAlive reports whether pid runs and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestPrivatePostgresRestarted is issue 9's "stop the private PostgreSQL
// under the server": a smart shutdown (SIGTERM to the postmaster) makes the
// server not ready until the Supervisor restarted PostgreSQL, and a fast
// shutdown (SIGINT) no longer ends the server.
func TestPrivatePostgresRestarted(t *testing.T) {
	dataDir := reachableTempDir(t)
	base, stop := startServer(t, []string{"-data-dir", dataDir}, envWithout("DATABASE_URL"))
	pidFile := filepath.Join(dataDir, "postgres", "postmaster.pid")
	// readyz returns /readyz's status code and, on 200, its status member.
	readyz := func() string {
		status, _, body := getStatus(t, base+"/readyz")
		if status != http.StatusOK {
			return strconv.Itoa(status)
		}
		s, _ := body["status"].(string)
		return s
	}
	const ready = "ready"
	require.Equal(t, ready, readyz())

	pid := postmasterPID(t, pidFile)
	require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
	require.Eventually(t, func() bool { return readyz() == "degraded" }, 30*time.Second, 20*time.Millisecond,
		"degraded during a smart shutdown (devices are answered from memory)")
	require.Eventually(t, func() bool { return readyz() == ready }, 60*time.Second, 50*time.Millisecond,
		"ready again after the restart")
	next := postmasterPID(t, pidFile)
	assert.NotEqual(t, pid, next, "a new postmaster")

	require.NoError(t, syscall.Kill(next, syscall.SIGINT))
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		return err == nil && !strings.HasPrefix(string(b), strconv.Itoa(next)+"\n") && readyz() == ready
	}, 60*time.Second, 50*time.Millisecond, "ready again after a fast shutdown")
	require.NoError(t, stop(), "the server ran on and stops cleanly")
}

// TestRootWithDataDirInAPrivateFolder is issue 9's case through run: as
// root, with the data dir under a folder only root may enter (0700, as
// t.TempDir and many home folders are), the private PostgreSQL, which runs
// as the OS user postgres, is placed in /var/lib/wfm behind a link, and the
// server becomes ready. Nothing here opens the folders up.
func TestRootWithDataDirInAPrivateFolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root runs the private PostgreSQL as another OS user")
	}
	if _, err := user.Lookup("postgres"); err != nil {
		t.Skipf("no OS user postgres: %v", err)
	}
	const fallback = "/var/lib/wfm" // pglaunch's default FallbackDir
	_, err := os.Stat(fallback)
	madeFallback := errors.Is(err, fs.ErrNotExist)
	parent := t.TempDir()
	require.NoError(t, os.Chmod(parent, 0o700))
	dataDir := filepath.Join(parent, "wfm")
	var cluster string // the folder made in /var/lib/wfm
	t.Cleanup(func() { // runs after the server stopped (registered first)
		if cluster != "" {
			_ = os.RemoveAll(cluster)
		}
		if madeFallback {
			_ = os.Remove(fallback) // only when empty: nothing else is there
		}
	})

	base, stop := startServer(t, []string{"-data-dir", dataDir}, envWithout("DATABASE_URL"))
	link := filepath.Join(dataDir, "postgres")
	cluster, err = os.Readlink(link)
	require.NoError(t, err, "%s is a link to the cluster's folder", link)
	assert.Equal(t, fallback, filepath.Dir(cluster))
	status, _, body := getStatus(t, base+"/readyz")
	require.Equal(t, http.StatusOK, status, "%v", body)
	require.NoError(t, stop())

	fi, err := os.Stat(parent)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the private folder was left as it was")

	// wfm remove-data deletes the cluster in /var/lib/wfm with the folder.
	var out strings.Builder
	require.NoError(t, run(t.Context(), []string{"remove-data", "-data-dir", dataDir}, envWithout("DATABASE_URL"), &out, io.Discard))
	assert.Contains(t, out.String(), "removed "+cluster+"\n")
	assert.NoDirExists(t, cluster)
	assert.NoDirExists(t, dataDir)
}
