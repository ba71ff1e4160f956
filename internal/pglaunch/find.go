package pglaunch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrNoBinaries is returned (wrapped) by FindBinaries when no folder holding
// initdb and postgres was found, so that callers can tell "PostgreSQL is not
// installed" apart from a failing server and print the hint it carries.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found")

// FindBinaries returns the folder that holds the PostgreSQL server binaries
// (initdb and postgres). It looks, in order, in $PG_BIN, in the folder printed
// by `pg_config --bindir` (when pg_config is on $PATH), in Debian's
// /usr/lib/postgresql/<N>/bin (highest N first) and in /usr/local/pgsql/bin.
//
// getenv is passed in (rather than read from the process) so that the caller
// decides where configuration comes from; only PG_BIN and PATH are read.
//
// An explicit PG_BIN that lacks the binaries is an error rather than a reason
// to fall back, so that a typo never silently starts another major version.
// Returns an error wrapping ErrNoBinaries whose message says how to fix it.
func FindBinaries(getenv func(string) string) (dir string, err error) {
	return findBinaries(getenv, defaultFallbackDirs())
}

// noBinariesHint ends every ErrNoBinaries message: it names the three ways
// out, so that nobody has to read the code to get a server running.
const noBinariesHint = "install them (Debian/Ubuntu: apt-get install postgresql) or set PG_BIN to their folder, " +
	"or set DATABASE_URL to use an existing database"

// findBinaries is FindBinaries with the fallback folders as a parameter, so
// that tests can point them at empty folders without mutating shared state.
func findBinaries(getenv func(string) string, fallbacks []string) (string, error) {
	if dir := getenv("PG_BIN"); dir != "" {
		if hasServerBinaries(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("%w in PG_BIN=%s (it needs initdb and postgres): %s", ErrNoBinaries, dir, noBinariesHint)
	}
	looked := []string{"$PG_BIN (unset)"}
	if pgConfig := lookPath("pg_config", getenv("PATH")); pgConfig != "" {
		if dir, err := pgConfigBinDir(pgConfig); err == nil && hasServerBinaries(dir) {
			return dir, nil
		}
		looked = append(looked, pgConfig+" --bindir")
	} else {
		looked = append(looked, "pg_config on $PATH (not found)")
	}
	for _, dir := range fallbacks {
		if hasServerBinaries(dir) {
			return dir, nil
		}
	}
	looked = append(looked, fallbacks...)
	return "", fmt.Errorf("%w (looked in %s): %s", ErrNoBinaries, strings.Join(looked, ", "), noBinariesHint)
}

// defaultFallbackDirs lists Debian's versioned folders, newest major version
// first (so that an upgrade picks up the new server), then the folder a
// source build installs into.
func defaultFallbackDirs() []string {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin") // the pattern is valid, so no error
	major := func(dir string) float64 {
		n, err := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		if err != nil {
			return -1
		}
		return n
	}
	slices.SortFunc(matches, func(a, b string) int {
		return cmp.Compare(major(b), major(a))
	})
	if len(matches) == 0 {
		matches = []string{"/usr/lib/postgresql/<N>/bin"}
	}
	return append(matches, "/usr/local/pgsql/bin")
}

// hasServerBinaries reports whether dir holds executable initdb and postgres.
func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// lookPath finds an executable in the given PATH value; exec.LookPath is not
// used because it reads the process environment instead of the getenv the
// caller passed in.
func lookPath(name, path string) string {
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// pgConfigBinDir runs `pg_config --bindir`. It is bounded because a broken
// wrapper script must not hang the server start.
func pgConfigBinDir(pgConfig string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pgConfig, "--bindir")
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("run %s --bindir: %w", pgConfig, err)
	}
	return string(bytes.TrimSpace(out)), nil
}
