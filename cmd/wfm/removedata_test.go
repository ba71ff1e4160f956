package main

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/pglaunch"
)

// TestRemoveData: "wfm remove-data" refuses while a server runs its private
// PostgreSQL in the folder (naming its PID), and once it stopped deletes the
// cluster and everything else wfm keeps there, then the folder, printing
// each path.
func TestRemoveData(t *testing.T) {
	dataDir := filepath.Join(reachableTempDir(t), "data")
	env := envWithout("DATABASE_URL")
	_, stop := startServer(t, []string{"-data-dir", dataDir}, env)

	var out strings.Builder
	err := run(t.Context(), []string{"remove-data", "-data-dir", dataDir}, env, &out, io.Discard)
	var held *pglaunch.HeldError
	require.ErrorAs(t, err, &held, "refused while the server runs")
	assert.Contains(t, err.Error(), "PID "+strconv.Itoa(os.Getpid()))
	assert.Empty(t, out.String())
	assert.FileExists(t, filepath.Join(dataDir, "postgres", "PG_VERSION"), "nothing removed")

	require.NoError(t, stop())
	require.NoError(t, run(t.Context(), []string{"remove-data", "-data-dir", dataDir}, env, &out, io.Discard))
	for _, p := range []string{"postgres", "admin-token", "pki", pglaunch.LockFileName} {
		assert.Contains(t, out.String(), "removed "+filepath.Join(dataDir, p)+"\n")
	}
	assert.True(t, strings.HasSuffix(out.String(), "removed "+dataDir+"\n"), out.String())
	assert.NoDirExists(t, dataDir)

	out.Reset()
	require.NoError(t, run(t.Context(), []string{"remove-data", "-data-dir", dataDir}, env, &out, io.Discard))
	assert.Contains(t, out.String(), "does not exist: nothing removed")
}

// TestRemoveDataFollowsTheLink: a data folder whose postgres is a link (as
// wfm makes it when, as root, it places the cluster under /var/lib/wfm)
// loses the cluster the link points to as well; files wfm did not make are
// kept, and so is the folder that holds them; a link to a folder that is no
// cluster removes nothing.
func TestRemoveDataFollowsTheLink(t *testing.T) {
	dataDir, cluster := t.TempDir(), filepath.Join(t.TempDir(), "postgres-123")
	require.NoError(t, os.Mkdir(cluster, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(cluster, "PG_VERSION"), []byte("15\n"), 0o600))
	require.NoError(t, os.Symlink(cluster, filepath.Join(dataDir, "postgres")))
	require.NoError(t, os.WriteFile(filepath.Join(dataDir, "admin-token"), []byte("tok\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dataDir, "notes.txt"), []byte("mine\n"), 0o600))

	var out strings.Builder
	require.NoError(t, run(t.Context(), []string{"remove-data", "-data-dir", dataDir}, envWithout(), &out, io.Discard))
	assert.Equal(t, "removed "+cluster+"\nremoved "+filepath.Join(dataDir, "postgres")+"\nremoved "+filepath.Join(dataDir, "admin-token")+
		"\nremoved "+filepath.Join(dataDir, pglaunch.LockFileName)+"\nkept "+dataDir+": it holds files wfm did not make (notes.txt)\n", out.String())
	assert.NoDirExists(t, cluster)
	assert.FileExists(t, filepath.Join(dataDir, "notes.txt"))

	other := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(other, "thesis.tex"), []byte("x"), 0o600))
	require.NoError(t, os.Symlink(other, filepath.Join(dataDir, "postgres")))
	err := run(t.Context(), []string{"remove-data", "-data-dir", dataDir}, envWithout(), io.Discard, io.Discard)
	assert.ErrorContains(t, err, "no PostgreSQL cluster")
	assert.FileExists(t, filepath.Join(other, "thesis.tex"))
}
