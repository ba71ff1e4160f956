package pgtest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDatabaseName(t *testing.T) {
	valid := regexp.MustCompile(`^t_[a-z0-9_]+_[0-9a-f]{10}$`)
	for _, testName := range []string{
		"TestX",
		"TestCatalog/yank a version/twice",
		strings.Repeat("TestVeryLongName/", 20),
		"Test/ÄÖÜ-ünicode",
	} {
		got := databaseName(testName)
		assert.Regexp(t, valid, got, "databaseName(%q)", testName)
		assert.LessOrEqual(t, len(got), 63, "databaseName(%q) = %q, longer than PostgreSQL allows", testName, got)
	}
	assert.NotEqual(t, databaseName("TestX"), databaseName("TestX"), "names of one test must differ")
}

func TestWithDatabase(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"postgres://u:p@h:5432/app?sslmode=disable", "postgres://u:p@h:5432/t_1?sslmode=disable"},
		{"postgresql://h/app", "postgresql://h/t_1"},
		{"postgres://h", "postgres://h/t_1"},
		{"host=h user=u dbname=app", "host=h user=u dbname=app dbname=t_1"},
	}
	for _, tt := range tests {
		got, err := withDatabase(tt.in, "t_1")
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, "withDatabase(%q)", tt.in)
		cfg, err := pgx.ParseConfig(got)
		require.NoError(t, err)
		assert.Equal(t, "t_1", cfg.Database, "database of withDatabase(%q)", tt.in)
	}
}

func TestSweepStale(t *testing.T) {
	base := t.TempDir()
	old := time.Now().Add(-time.Hour)
	mk := func(name string, lockFile, aged bool) string {
		dir := filepath.Join(base, name)
		require.NoError(t, os.Mkdir(dir, 0o700))
		if lockFile {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "lock"), nil, 0o600))
		}
		if aged {
			require.NoError(t, os.Chtimes(dir, old, old))
		}
		return dir
	}
	leftover := mk(dirPrefix+"leftover", true, true)
	young := mk(dirPrefix+"young", true, false)
	noLock := mk(dirPrefix+"nolock", false, true)
	other := mk("someone-elses", true, true)
	inUse := mk(dirPrefix+"inuse", true, true)
	f, err := os.Open(filepath.Join(inUse, "lock"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
	require.NoError(t, os.Chtimes(inUse, old, old))

	sweepStale(base)

	assert.NoDirExists(t, leftover, "unlocked old folder")
	for _, dir := range []string{young, noLock, other, inUse} {
		assert.DirExists(t, dir)
	}
}
