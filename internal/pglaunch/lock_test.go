package pglaunch_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/pglaunch"
)

// TestLockFolder: a folder holds one lock at a time; a second attempt
// fails at once naming the holder's PID, and succeeds once it is released.
func TestLockFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, err := pglaunch.LockFolder(dir)
	require.NoError(t, err, "the folder is created")
	b, err := os.ReadFile(filepath.Join(dir, pglaunch.LockFileName))
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(os.Getpid()), strings.TrimSpace(string(b)))

	_, err = pglaunch.LockFolder(dir)
	var held *pglaunch.HeldError
	require.ErrorAs(t, err, &held)
	assert.Equal(t, os.Getpid(), held.PID)
	assert.Contains(t, err.Error(), "PID "+strconv.Itoa(os.Getpid()))

	require.NoError(t, first.Release())
	again, err := pglaunch.LockFolder(dir)
	require.NoError(t, err)
	require.NoError(t, again.Release())
}
