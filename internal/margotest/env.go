package margotest

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// EnvVar names the environment variable holding the path of the Margo
// document. A relative path is read from the module root (the folder holding
// go.mod), not from the test's package folder.
const EnvVar = "MARGO_SPEC"

var (
	offOnce sync.Once
	cacheMu sync.Mutex
	cache   = map[string]*loaded{}
)

type loaded struct {
	once sync.Once
	c    *Checker
	err  error
}

// FromEnv returns the Checker for the document $MARGO_SPEC names, loaded once
// per process and shared by every test.
//
// When MARGO_SPEC is unset or empty it returns nil, a Checker whose methods do
// nothing, and logs once per process that conformance checking is off. When it
// is set but the document cannot be found or loaded, the test fails at once
// (t.Fatalf): a CI that asked for conformance must not pass without it.
func FromEnv(t testing.TB) *Checker {
	t.Helper()
	spec := os.Getenv(EnvVar)
	if spec == "" {
		offOnce.Do(func() {
			t.Logf("margotest: %s is not set: Margo conformance checking is off", EnvVar)
		})
		return nil
	}
	path, err := resolveSpec(spec)
	if err != nil {
		t.Fatalf("margotest: %s=%q: %v", EnvVar, spec, err)
		return nil
	}
	cacheMu.Lock()
	l := cache[path]
	if l == nil {
		l = &loaded{}
		cache[path] = l
	}
	cacheMu.Unlock()
	l.once.Do(func() { l.c, l.err = Load(path) })
	if l.err != nil {
		t.Fatalf("margotest: %s=%q: %v", EnvVar, spec, l.err)
		return nil
	}
	return l.c
}

// resolveSpec makes a relative path absolute against the module root.
func resolveSpec(spec string) (string, error) {
	if filepath.IsAbs(spec) {
		return filepath.Clean(spec), nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, spec), nil
}

// moduleRoot walks up from the working directory to the folder holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if fi, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !fi.IsDir() {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod in the working directory or above it, so a relative path has no module root to start from")
		}
		dir = parent
	}
}
