package margotest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// defaultSpec is Margo's rc.3 document as laid beside the repository
// (shared/ next to the clone), relative to this package's folder.
const defaultSpec = "../../../shared/reference/margo/workload-management-api-1.0.0-rc.3.yaml"

// specPath returns the document to test with: $MARGO_SPEC when set, else the
// copy beside the repository. Without either the test is skipped: the
// document is Margo's, not ours, and is not in this repository.
func specPath(t testing.TB) string {
	t.Helper()
	if spec := os.Getenv(EnvVar); spec != "" {
		p, err := resolveSpec(spec)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvVar, spec, err)
		}
		return p
	}
	p, err := filepath.Abs(defaultSpec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("Margo's rc.3 document is not at %s and %s is not set: skipping the conformance checker's tests", p, EnvVar)
	}
	return p
}

var (
	checkerOnce sync.Once
	checker     *Checker
	checkerErr  error
)

// load returns the Checker for the real rc.3 document, errata applied.
func load(t testing.TB) *Checker {
	t.Helper()
	p := specPath(t)
	checkerOnce.Do(func() { checker, checkerErr = Load(p) })
	if checkerErr != nil {
		t.Fatal(checkerErr)
	}
	return checker
}

// loadRaw returns a Checker for the same document with no errata applied.
func loadRaw(t testing.TB) *Checker {
	t.Helper()
	data, err := os.ReadFile(specPath(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := parse(data, false)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fakeTB captures what a checker reports; everything else goes to the real test.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
	fatals []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Error(args ...any) { f.Errorf("%s", fmt.Sprint(args...)) }

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

func (f *fakeTB) Errors() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.errors...)
}

// run calls fn with a fakeTB on its own goroutine (so Fatal can end it).
func run(t *testing.T, fn func(tb testing.TB)) *fakeTB {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

// passes asserts fn reports nothing.
func passes(t *testing.T, fn func(tb testing.TB)) {
	t.Helper()
	f := run(t, fn)
	for _, e := range append(f.Errors(), f.fatals...) {
		t.Errorf("unexpected conformance failure: %s", e)
	}
}

// fails asserts fn reports at least one problem, and that one report
// contains each of wants.
func fails(t *testing.T, fn func(tb testing.TB), wants ...string) {
	t.Helper()
	f := run(t, fn)
	errs := append(f.Errors(), f.fatals...)
	if len(errs) == 0 {
		t.Errorf("expected a conformance failure mentioning %q, got none", wants)
		return
	}
	for _, e := range errs {
		if containsAll(e, wants) {
			t.Logf("reported as expected: %s", e)
			return
		}
	}
	t.Errorf("no report mentions all of %q; reports:\n  %s", wants, strings.Join(errs, "\n  "))
}

func containsAll(s string, wants []string) bool {
	for _, w := range wants {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// respond builds the response a handler would give, through a recorder.
func respond(status int, header map[string]string, body []byte) (*http.Response, []byte) {
	rec := httptest.NewRecorder()
	for k, v := range header {
		rec.Header().Set(k, v)
	}
	rec.WriteHeader(status)
	_, _ = rec.Write(body)
	return rec.Result(), rec.Body.Bytes()
}

func get(path string) *http.Request { return httptest.NewRequest(http.MethodGet, path, nil) }
