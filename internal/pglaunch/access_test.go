package pglaunch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nobody returns the credential of the OS user "nobody", skipping the test
// when this process cannot switch to it (only root can).
func nobody(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("only root can run a client as the OS user nobody to check that another user is refused")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no OS user nobody: %v", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	require.NoError(t, err)
	gid, err := strconv.Atoi(u.Gid)
	require.NoError(t, err)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}

// psqlAs runs `psql -c 'SELECT 1'` on conninfo as cred (nil: as this
// process) and returns its error and output.
func psqlAs(t *testing.T, cred *syscall.Credential, conninfo string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir(t), "psql"), "-X", "-w", "-At", "-d", conninfo, "-c", "SELECT 1")
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/bin:/bin", "HOME=/"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestOtherOSUserIsRefused is the probe of issue 9: an OS user other than
// the one running wfm (here nobody) must not get into the private cluster,
// neither through the address the server gives out nor through TCP on
// loopback.
func TestOtherOSUserIsRefused(t *testing.T) {
	cred := nobody(t)
	t.Parallel()
	// A port nothing listens on over TCP (a system PostgreSQL may hold
	// 5432): a listener found there afterwards can only be this server's.
	port := portWithoutTCPListener(t)
	s := start(t, Options{BinDir: binDir(t), DataDir: dataDir(t), Port: port, Settings: fastSettings})

	// The owner gets in: the checks below can fail for the right reason only.
	out, err := psqlAs(t, nil, s.URL("postgres"))
	require.NoError(t, err, "psql as the owner: %s", out)

	out, err = psqlAs(t, cred, s.URL("postgres"))
	assert.Error(t, err, "nobody connected through %s: %s", s.URL("postgres"), out)

	// No TCP listener at all: the server is configured without one, holds
	// no listening TCP socket, and nothing listens on its port.
	assert.Empty(t, queryOne[string](t, s.URL("postgres"), "SHOW listen_addresses"), "listen_addresses")
	listeners := tcpListeners(t)
	for inode := range socketInodes(t, s.PID()) {
		assert.NotContains(t, listeners, inode, "postgres %d holds a listening TCP socket", s.PID())
	}
	assert.NotContains(t, slices.Collect(maps.Values(listeners)), port, "something listens on TCP port %d", port)
	tcp := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", s.Port())
	out, err = psqlAs(t, cred, tcp)
	assert.Error(t, err, "nobody connected through %s: %s", tcp, out)

	// Behind the folder, authentication refuses too: open the folder and
	// the socket to everyone, and nobody is still not let in.
	assertPeerOnly(t, s, cred)
}

// assertPeerOnly checks that, with the socket folder and the socket opened
// to everyone, the server itself refuses nobody and admits this process.
func assertPeerOnly(t *testing.T, s *Server, cred *syscall.Credential) {
	t.Helper()
	sock := filepath.Join(s.SocketDir(), socketName(s.Port()))
	fi, err := os.Stat(s.SocketDir())
	require.NoError(t, err)
	require.NoError(t, os.Chmod(s.SocketDir(), 0o711))
	require.NoError(t, os.Chmod(sock, 0o777))
	t.Cleanup(func() {
		_ = os.Chmod(s.SocketDir(), fi.Mode().Perm())
		_ = os.Chmod(sock, 0o700)
	})
	out, err := psqlAs(t, cred, s.URL("postgres"))
	assert.Error(t, err, "nobody connected through an open socket: %s", out)
	assert.Contains(t, out, "Peer authentication failed", "refused by pg_hba.conf, not by the folder")
	out, err = psqlAs(t, nil, s.URL("postgres"))
	assert.NoError(t, err, "psql as the owner: %s", out)
}

// TestConvertsTrustDataDir starts a cluster whose pg_hba.conf is the one an
// earlier build left (initdb -A trust: every local user is superuser) and
// checks that the start converts it and keeps the data.
func TestConvertsTrustDataDir(t *testing.T) {
	cred := nobody(t)
	t.Parallel()
	opts := Options{BinDir: binDir(t), DataDir: dataDir(t), Settings: fastSettings}
	s := start(t, opts)
	exec1(t, s, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (5)")
	require.NoError(t, s.Stop())
	// What initdb -A trust writes (comments left out).
	old := "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n" +
		"local replication all trust\nhost replication all 127.0.0.1/32 trust\nhost replication all ::1/128 trust\n"
	require.NoError(t, os.WriteFile(filepath.Join(s.DataDir(), "pg_hba.conf"), []byte(old), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(s.DataDir(), "pg_ident.conf"), nil, 0o600))

	s = start(t, opts)
	assert.Equal(t, 5, queryOne[int](t, s.URL("postgres"), "SELECT n FROM kept"), "data survives the conversion")
	hba, err := os.ReadFile(filepath.Join(s.DataDir(), "pg_hba.conf"))
	require.NoError(t, err)
	assert.NotContains(t, string(hba), "trust")
	fi, err := os.Stat(filepath.Join(s.DataDir(), "pg_hba.conf"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	assertPeerOnly(t, s, cred)
}

// TestLongDataDirGetsPrivateSocketFolder: a data dir too deep for a socket
// path gets a private socket folder that Stop removes.
func TestLongDataDirGetsPrivateSocketFolder(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(dataDir(t), strings.Repeat("d", 100))
	s := start(t, Options{BinDir: binDir(t), DataDir: dir, Settings: fastSettings})
	assert.NotEqual(t, s.DataDir(), s.SocketDir())
	fi, err := os.Stat(s.SocketDir())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "socket folder mode")
	assert.Equal(t, 1, queryOne[int](t, s.URL("postgres"), "SELECT 1"))
	require.NoError(t, s.Stop())
	assert.NoDirExists(t, s.SocketDir(), "Stop removes the socket folder it made")
}

// tcpListeners returns the TCP sockets in state LISTEN, IPv4 and IPv6, as
// /proc/net/tcp{,6} list them: inode -> port.
func tcpListeners(t *testing.T) map[string]int {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/net/tcp")
	}
	out := map[string]int{}
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(name)
		if errors.Is(err, fs.ErrNotExist) && name == "/proc/net/tcp6" {
			continue // no IPv6
		}
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		require.NotEmpty(t, lines)
		for _, line := range lines[1:] { // sl local_address rem_address st ... inode
			f := strings.Fields(line)
			require.GreaterOrEqual(t, len(f), 10, "%s: %q", name, line)
			if f[3] != "0A" { // TCP_LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(f[1], ":")
			require.True(t, ok, "%s: %q", name, line)
			p, err := strconv.ParseUint(hexPort, 16, 16)
			require.NoError(t, err)
			out[f[9]] = int(p)
		}
	}
	return out
}

// socketInodes returns the inodes of the sockets process pid holds open.
func socketInodes(t *testing.T, pid int) map[string]bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]bool{}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			out[strings.TrimSuffix(inode, "]")] = true
		}
	}
	require.NotEmpty(t, out, "postgres %d holds no socket at all; is procfs mounted?", pid)
	return out
}

// portWithoutTCPListener returns a port number nothing listens on over TCP.
func portWithoutTCPListener(t *testing.T) int {
	t.Helper()
	used := map[int]bool{}
	for _, p := range tcpListeners(t) {
		used[p] = true
	}
	for p := 55432; p < 56432; p++ {
		if !used[p] {
			return p
		}
	}
	t.Fatal("no port without a TCP listener between 55432 and 56432")
	return 0
}

// TestProcessWithoutPasswdEntry: a uid the user database does not know (a
// container started with an arbitrary uid) stops Start before it makes
// anything, with an error that says what to do.
func TestProcessWithoutPasswdEntry(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	_, err := Start(t.Context(), Options{BinDir: binDir(t), DataDir: dir, Settings: fastSettings,
		lookupID: func(uid string) (*user.User, error) { return nil, user.UnknownUserIdError(1234) }})
	var unknown user.UnknownUserIdError
	require.ErrorAs(t, err, &unknown)
	for _, advice := range []string{"no entry in the user database", "add a passwd entry", "DATABASE_URL"} {
		assert.Contains(t, err.Error(), advice)
	}
	assert.NoDirExists(t, dir, "nothing was made")
}

// TestProcessUserIsLookedUpByUID: the name comes from the uid's entry, not
// from the environment.
func TestProcessUserIsLookedUpByUID(t *testing.T) {
	var asked string
	name, err := processUser(func(uid string) (*user.User, error) {
		asked = uid
		return &user.User{Uid: uid, Username: "wfm"}, nil
	}, 4321)
	require.NoError(t, err)
	assert.Equal(t, "4321", asked)
	assert.Equal(t, "wfm", name)
}
