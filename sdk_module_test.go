package wfm_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// sdkTestVersion is the version the test's module proxy serves the SDK as.
const sdkTestVersion = "v0.0.1"

// TestSDKReadmeProgramBuilds builds the complete program of sdk/README.md in
// a new module, as a user would: the SDK resolved through a module proxy
// (GOPROXY=file://…) that serves the sdk/ folder of this tree, with no
// replace directive, and the SDK's own dependencies from the module cache
// (a file:// proxy too), so that it runs offline. It fails when the SDK
// imports anything of the server (not in the module), when its go.mod lacks
// a requirement, or when the README's program does not compile against it.
func TestSDKReadmeProgramBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module: about 15 s the first time on a quiet machine")
	}
	goBin, err := exec.LookPath("go")
	require.NoError(t, err)
	goEnv := func(key string) string {
		out, err := exec.Command(goBin, "env", key).Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}
	modCache := goEnv("GOMODCACHE")

	// The proxy: <path>/@v/list, .info, .mod and .zip of the SDK module as
	// this tree holds it.
	gomod, err := os.ReadFile("sdk/go.mod")
	require.NoError(t, err)
	modPath := modfile.ModulePath(gomod)
	require.Equal(t, "github.com/wfm-dev/wfm/sdk", modPath, "the SDK's module path is the repository's plus /sdk")
	proxy := t.TempDir()
	escaped, err := module.EscapePath(modPath)
	require.NoError(t, err)
	dir := filepath.Join(proxy, escaped, "@v")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	write := func(name string, b []byte) { require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644)) }
	write("list", []byte(sdkTestVersion+"\n"))
	write(sdkTestVersion+".info", []byte(`{"Version":"`+sdkTestVersion+`","Time":"2026-01-01T00:00:00Z"}`))
	write(sdkTestVersion+".mod", gomod)
	var zip bytes.Buffer
	require.NoError(t, modzip.Create(&zip, module.Version{Path: modPath, Version: sdkTestVersion}, sdkFiles(t)))
	write(sdkTestVersion+".zip", zip.Bytes())

	// The user's module: the README's program and a go.mod without the SDK.
	readme, err := os.ReadFile("sdk/README.md")
	require.NoError(t, err)
	programs := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(readme, -1)
	require.Len(t, programs, 1, "sdk/README.md has one Go program")
	require.Contains(t, string(programs[0][1]), "package main")
	user := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(user, "main.go"), programs[0][1], 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(user, "go.mod"), []byte("module example.com/deploy\n\ngo 1.26.0\n"), 0o644))

	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = user
		cmd.Env = append(os.Environ(),
			"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(filepath.Join(modCache, "cache", "download")),
			// A module cache of its own, so that no SDK of an earlier run is
			// found there (a version's content is never fetched twice).
			"GOMODCACHE="+filepath.Join(t.TempDir(), "mod"),
			// The test's SDK version is in no checksum database, and the
			// dependencies come from the module cache, verified when first
			// downloaded: no lookup leaves the machine.
			"GOSUMDB=off",
			"GOFLAGS=-mod=mod -modcacherw", "GOWORK=off", "GOTOOLCHAIN=local")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		t.Logf("go %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	}
	run("get", modPath+"@"+sdkTestVersion)
	run("build", "-o", filepath.Join(t.TempDir(), "deploy"), ".")

	got, err := os.ReadFile(filepath.Join(user, "go.mod"))
	require.NoError(t, err)
	f, err := modfile.Parse("go.mod", got, nil)
	require.NoError(t, err)
	require.Empty(t, f.Replace, "the program resolves the SDK without a replace")
	var required []string
	for _, r := range f.Require {
		required = append(required, r.Mod.String())
	}
	require.Contains(t, required, modPath+"@"+sdkTestVersion)
	for _, r := range required {
		require.NotRegexp(t, `^github\.com/wfm-dev/wfm@`, r, "the SDK needs nothing of the server's module")
	}
}

// sdkFiles are the files of the SDK module's zip: the sdk/ folder of the
// tree, without the TypeScript SDK's dependencies and build output (not in
// the repository; a zip made from a clone holds sdk/ts's sources too, which
// no Go build reads).
func sdkFiles(t *testing.T) []modzip.File {
	t.Helper()
	var files []modzip.File
	err := filepath.WalkDir("sdk", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "dist", ".test-out":
				return filepath.SkipDir
			}
			return nil
		}
		files = append(files, sdkFile{path: path})
		return nil
	})
	require.NoError(t, err)
	return files
}

// sdkFile is a file of the sdk/ folder as modzip.File.
type sdkFile struct{ path string }

func (f sdkFile) Path() string {
	rel, _ := filepath.Rel("sdk", f.path)
	return filepath.ToSlash(rel)
}
func (f sdkFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.path) }
func (f sdkFile) Open() (io.ReadCloser, error) { return os.Open(f.path) }
