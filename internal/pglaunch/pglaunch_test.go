package pglaunch

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fastSettings make a throwaway cluster cheap; crash safety is not needed.
var fastSettings = map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

func binDir(t testing.TB) string {
	t.Helper()
	dir, err := FindBinaries(os.Getenv)
	require.NoError(t, err)
	return dir
}

// dataDir returns a not yet existing data dir inside a fresh folder that the
// postgres OS user can enter when the tests run as root (t.TempDir's folders
// are 0700).
func dataDir(t testing.TB) string {
	t.Helper()
	parent, err := os.MkdirTemp("", "pglaunch-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	require.NoError(t, os.Chmod(parent, 0o711))
	return filepath.Join(parent, "data")
}

func start(t testing.TB, opts Options) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

func exec1(t testing.TB, s *Server, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	require.NoError(t, err)
}

// queryOne returns the one value sql selects.
func queryOne[T any](t testing.TB, url, sql string) T {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var v T
	require.NoError(t, conn.QueryRow(ctx, sql).Scan(&v))
	return v
}

func TestStartStopRestart(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the process checks read /proc")
	}
	t.Parallel()
	opts := Options{BinDir: binDir(t), DataDir: dataDir(t), Settings: fastSettings}

	s := start(t, opts)
	exec1(t, s, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)")
	pids := serverProcesses(t, s.PID())
	require.NoError(t, s.Stop())
	require.NoError(t, s.Stop(), "second Stop")
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	assert.NoError(t, s.Err(), "Err after a clean Stop")
	assert.True(t, allGone(pids), "server processes %v still exist after Stop", pids)

	// A setting postgres rejects makes it exit at once; Start must say why.
	bad := opts
	bad.Settings = map[string]string{"shared_buffers": "plenty"}
	_, err := Start(context.Background(), bad)
	require.ErrorIs(t, err, ErrExited)
	assert.Contains(t, err.Error(), `invalid value for parameter "shared_buffers"`, "error shows the server log")

	s = start(t, opts)
	assert.Equal(t, 42, queryOne[int](t, s.URL("postgres"), "SELECT n FROM kept"), "data survives a restart")

	// A server that ends without Stop is noticed through Done and Err.
	// (SIGTERM rather than SIGKILL, which would leave its shared memory
	// segments behind, as only a restart on the same data dir removes them.)
	require.NoError(t, syscall.Kill(s.PID(), syscall.SIGTERM))
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10 s after postgres was told to stop")
	}
	require.ErrorIs(t, s.Err(), ErrExited)
	require.ErrorIs(t, s.Stop(), ErrExited)
}

// TestStartUnreachableDataDir is `make run` as root in a clone inside a
// 0700 folder: the server's OS user cannot reach the data dir, so the
// cluster goes to the fallback folder, the data dir becomes a link to it,
// and the next start finds the same cluster.
func TestStartUnreachableDataDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root hands the data dir to another OS user")
	}
	t.Parallel()
	parent := filepath.Join(t.TempDir(), "private") // 0700 folders owned by root
	require.NoError(t, os.Mkdir(parent, 0o700))
	fallback := filepath.Join(filepath.Dir(dataDir(t)), "fallback")
	asked := filepath.Join(parent, "data")
	opts := Options{BinDir: binDir(t), DataDir: asked, FallbackDir: fallback, Settings: fastSettings}

	s := start(t, opts)
	assert.Equal(t, fallback, filepath.Dir(s.DataDir()), "the cluster lives in the fallback folder")
	target, err := os.Readlink(asked)
	require.NoError(t, err, "the data dir is a link")
	assert.Equal(t, s.DataDir(), target)
	fi, err := os.Stat(parent)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the private folder is left as it was")
	exec1(t, s, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (9)")
	require.NoError(t, s.Stop())

	s = start(t, opts)
	assert.Equal(t, target, s.DataDir(), "the next start finds the same cluster")
	assert.Equal(t, 9, queryOne[int](t, s.URL("postgres"), "SELECT n FROM kept"), "data survives a restart")
	require.NoError(t, s.Stop())

	// A folder that already holds something is not moved behind the user's back.
	full := filepath.Join(parent, "full")
	require.NoError(t, os.Mkdir(full, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(full, "x"), nil, 0o600))
	_, err = Start(context.Background(), Options{BinDir: binDir(t), DataDir: full, FallbackDir: fallback})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "chmod o+x", "the error says how to fix it")
}

// TestServerDiesWithKilledParent runs Start in a child process (this test
// binary, see TestHelperProcess), SIGKILLs that child and checks that the
// kernel takes postgres down with it and that the data dir starts again.
func TestServerDiesWithKilledParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux only")
	}
	t.Parallel()
	bin, dir := binDir(t), dataDir(t)

	helper := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	helper.Env = append(os.Environ(), "GO_WANT_HELPER_PROCESS=1", "PGLAUNCH_HELPER_BIN="+bin, "PGLAUNCH_HELPER_DATA="+dir)
	stdout, err := helper.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	helper.Stderr = &stderr
	require.NoError(t, helper.Start())
	t.Cleanup(func() {
		_ = helper.Process.Kill()
		_ = helper.Wait()
	})

	lines := make(chan string, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") {
				lines <- sc.Text()
				return
			}
		}
	}()
	var pid int
	var url string
	select {
	case line, ok := <-lines:
		require.True(t, ok, "helper ended without starting postgres; stderr:\n%s", &stderr)
		_, err := fmt.Sscanf(line, "ready pid=%d url=%s", &pid, &url)
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("helper did not start postgres within 30 s; stderr:\n%s", &stderr)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	// With synchronous_commit=off a commit may still sit in shared memory
	// when the server is killed, and be lost; fsync=off alone loses nothing
	// on a process crash, only on an OS crash.
	_, err = conn.Exec(ctx, "SET synchronous_commit = on; CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)")
	require.NoError(t, err)
	// The session stays open: its backend must go away too.

	pids := serverProcesses(t, pid)
	require.NoError(t, helper.Process.Kill())
	_ = helper.Wait()
	require.Eventually(t, func() bool { return allGone(pids) }, 10*time.Second, 10*time.Millisecond,
		"postgres processes %v outlived the killed parent", pids)
	_ = conn.Close(ctx)

	s := start(t, Options{BinDir: bin, DataDir: dir, Settings: fastSettings})
	assert.Equal(t, 7, queryOne[int](t, s.URL("postgres"), "SELECT n FROM kept"), "data survives the crash")
}

// TestHelperProcess is not a test: TestServerDiesWithKilledParent runs this
// test binary again with GO_WANT_HELPER_PROCESS=1 to get a parent it can
// SIGKILL. It starts postgres, reports its pid and URL and waits.
func TestHelperProcess(t *testing.T) {
	if os.Getenv("GO_WANT_HELPER_PROCESS") != "1" {
		return
	}
	s, err := Start(context.Background(), Options{
		BinDir:   os.Getenv("PGLAUNCH_HELPER_BIN"),
		DataDir:  os.Getenv("PGLAUNCH_HELPER_DATA"),
		Settings: fastSettings,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("ready pid=%d url=%s\n", s.PID(), s.URL("postgres"))
	<-s.Done()
	os.Exit(3)
}

func TestFindBinaries(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	fake := t.TempDir()
	for _, name := range []string{"initdb", "postgres"} {
		require.NoError(t, os.WriteFile(filepath.Join(fake, name), []byte("#!/bin/sh\n"), 0o755))
	}
	pgConfigDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(pgConfigDir, "pg_config"),
		[]byte("#!/bin/sh\necho "+fake+"\n"), 0o755))

	tests := []struct {
		name      string
		env       map[string]string
		fallbacks []string
		want      string // "" means ErrNoBinaries
	}{
		{name: "bogus PG_BIN", env: map[string]string{"PG_BIN": empty}, fallbacks: []string{fake}},
		{name: "nothing anywhere", env: map[string]string{"PATH": empty}, fallbacks: []string{empty, filepath.Join(empty, "missing")}},
		{name: "PG_BIN", env: map[string]string{"PG_BIN": fake}, want: fake},
		{name: "pg_config on PATH", env: map[string]string{"PATH": empty + ":" + pgConfigDir}, want: fake},
		{name: "fallback folder", fallbacks: []string{empty, fake}, want: fake},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findBinaries(func(k string) string { return tt.env[k] }, tt.fallbacks)
			if tt.want == "" {
				require.ErrorIs(t, err, ErrNoBinaries)
				assert.Contains(t, err.Error(), "DATABASE_URL", "the error says how to fix it")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDefaultFallbackDirsNewestFirst(t *testing.T) {
	dirs := defaultFallbackDirs()
	require.NotEmpty(t, dirs)
	assert.Equal(t, "/usr/local/pgsql/bin", dirs[len(dirs)-1])
	prev := 1e9
	for _, d := range dirs[:len(dirs)-1] {
		n, err := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		if err != nil {
			continue
		}
		assert.LessOrEqual(t, n, prev, "defaultFallbackDirs() = %v, want highest version first", dirs)
		prev = n
	}
}

// serverProcesses returns the postmaster pid and the pids of its children
// (backends and auxiliary processes), which run in sessions of their own.
func serverProcesses(t testing.TB, pid int) []int {
	t.Helper()
	pids := []int{pid}
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(child); ok && ppid == pid {
			pids = append(pids, child)
		}
	}
	require.Greater(t, len(pids), 1, "postgres %d has no children; is procfs mounted?", pid)
	return pids
}

// allGone reports whether none of pids is alive. Zombies count as gone: a
// postgres whose parent was killed is reparented to PID 1, which in a
// container may never reap it.
func allGone(pids []int) bool {
	for _, pid := range pids {
		if _, state, ok := procStat(pid); ok && state != 'Z' && state != 'X' {
			return false
		}
	}
	return true
}

// procStat reads the parent pid and state of pid from /proc.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid …"; comm may itself contain spaces and ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	if err != nil {
		return 0, 0, false
	}
	return ppid, fields[0][0], true
}
