package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/pglaunch"
	"github.com/wfm-dev/wfm/internal/pgtest"
)

// TestSecondServerOnADataFolderRefuses: while a server runs its private
// PostgreSQL in a data folder, a second one on that folder fails at once,
// naming the holder's PID, and leaves the first one's PostgreSQL alone; the
// subcommands that only read the folder still work.
func TestSecondServerOnADataFolderRefuses(t *testing.T) {
	dataDir := reachableTempDir(t)
	env := envWithout("DATABASE_URL")
	base, stop := startServer(t, []string{"-data-dir", dataDir}, env)
	pidFile := filepath.Join(dataDir, "postgres", "postmaster.pid")
	pid := postmasterPID(t, pidFile)

	// Bounded: a second server that does not refuse runs until cancelled.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var stderr strings.Builder
	started := time.Now()
	err := run(ctx, []string{"-listen", "127.0.0.1:0", "-device-listen", "127.0.0.1:0", "-data-dir", dataDir}, env, io.Discard, &stderr)
	elapsed := time.Since(started)
	require.Error(t, err, "a second server on the folder refuses")
	var held *pglaunch.HeldError
	require.ErrorAs(t, err, &held)
	assert.Equal(t, os.Getpid(), held.PID, "the holder is the first server (this process)")
	assert.Contains(t, err.Error(), "PID "+strconv.Itoa(os.Getpid()))
	assert.Less(t, elapsed, 2*time.Second, "it refuses at once")
	assert.Empty(t, stderr.String(), "it started nothing and logged nothing")
	assert.Equal(t, pid, postmasterPID(t, pidFile), "the first server's PostgreSQL was left alone")
	status, _, _ := getStatus(t, base+"/readyz")
	assert.Equal(t, http.StatusOK, status, "the first server is still ready")

	// The subcommands take no lock.
	var out strings.Builder
	require.NoError(t, run(t.Context(), []string{"print-admin-token", "-data-dir", dataDir}, env, &out, io.Discard))
	tok, err := os.ReadFile(filepath.Join(dataDir, "admin-token"))
	require.NoError(t, err)
	assert.Equal(t, string(tok), out.String())
	require.NoError(t, run(t.Context(), []string{"issue-client-cert", "-client-id", "plant", "-data-dir", dataDir}, env, io.Discard, io.Discard))
	assert.FileExists(t, filepath.Join(dataDir, "pki", "clients", "plant.pem"))

	require.NoError(t, stop())
	// Once the first server stopped, the folder is free.
	base, stop = startServer(t, []string{"-data-dir", dataDir}, env)
	status, _, _ = getStatus(t, base+"/readyz")
	assert.Equal(t, http.StatusOK, status)
	require.NoError(t, stop())
}

// TestReplicasWithDatabaseURLShareADataFolder: servers with DATABASE_URL
// take a shared lock: two of them run on one data folder, while wfm
// remove-data and a server running its private PostgreSQL there refuse
// and leave the folder alone.
func TestReplicasWithDatabaseURLShareADataFolder(t *testing.T) {
	dataDir := reachableTempDir(t)
	env := envWith(map[string]string{"DATABASE_URL": pgtest.URL(t)})
	first, stopFirst := startServer(t, []string{"-data-dir", dataDir}, env)
	second, stopSecond := startServer(t, []string{"-data-dir", dataDir}, env)
	for _, base := range []string{first, second} {
		status, _, _ := getStatus(t, base+"/readyz")
		assert.Equal(t, http.StatusOK, status, base)
	}

	err := run(t.Context(), []string{"remove-data", "-data-dir", dataDir}, env, io.Discard, io.Discard)
	var held *pglaunch.HeldError
	require.ErrorAs(t, err, &held, "remove-data refuses while servers use the folder")
	assert.Zero(t, held.PID, "a shared holder writes no PID")
	assert.FileExists(t, filepath.Join(dataDir, pglaunch.LockFileName), "remove-data removed nothing")

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err = run(ctx, []string{"-listen", "127.0.0.1:0", "-device-listen", "127.0.0.1:0", "-data-dir", dataDir},
		envWithout("DATABASE_URL"), io.Discard, io.Discard)
	require.ErrorAs(t, err, &held, "a private-PostgreSQL server refuses a shared folder")

	for _, base := range []string{first, second} {
		status, _, _ := getStatus(t, base+"/readyz")
		assert.Equal(t, http.StatusOK, status, base)
	}
	require.NoError(t, stopSecond())
	require.NoError(t, stopFirst())
	require.NoError(t, run(t.Context(), []string{"remove-data", "-data-dir", dataDir}, env, io.Discard, io.Discard),
		"once the servers stopped, remove-data deletes the folder")
	_, err = os.Stat(dataDir)
	assert.True(t, errors.Is(err, os.ErrNotExist), "folder removed: %v", err)
}
