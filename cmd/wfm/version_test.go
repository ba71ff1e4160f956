package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/buildinfo"
	"github.com/wfm-dev/wfm/internal/pgtest"
)

// TestVersionCommand: `wfm version` and `wfm -version` print the build's
// version, revision and Go release, and nothing starts.
func TestVersionCommand(t *testing.T) {
	b := buildinfo.Read()
	want := "wfm " + b.Version + " (revision " + b.Revision + ", " + b.GoVersion + ")\n"
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		var out strings.Builder
		require.NoError(t, run(t.Context(), args, envWithout(), &out, io.Discard), "%v", args)
		assert.Equal(t, want, out.String(), "%v", args)
	}
	assert.Error(t, run(t.Context(), []string{"version", "extra"}, envWithout(), io.Discard, io.Discard))
}

// TestHelpListsTheCommands: `wfm -help` names every subcommand with its
// line, before the server's flags.
func TestHelpListsTheCommands(t *testing.T) {
	var help strings.Builder
	require.NoError(t, run(t.Context(), []string{"-help"}, envWithout(), io.Discard, &help))
	text := help.String()
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
		assert.Contains(t, text, "  "+c.name+" ", "the command's line")
		assert.Contains(t, text, c.summary)
		assert.Less(t, strings.Index(text, c.name), strings.Index(text, "-accept-clients"), "%s is listed before the flags", c.name)
	}
	assert.Subset(t, names, []string{"issue-client-cert", "print-admin-token", "version"})
}

// TestVersionSetAtLinkTime builds the server with the -ldflags -X that
// README.md and docs/deploy.md give, and checks that `wfm version` says
// what was set.
func TestVersionSetAtLinkTime(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the server")
	}
	const pkg = "github.com/wfm-dev/wfm/internal/buildinfo"
	flags := "-X " + pkg + ".version=9.8.7-test -X " + pkg + ".revision=0123abc"
	for _, doc := range []string{"../../README.md", "../../docs/deploy.md"} {
		b, err := os.ReadFile(doc)
		require.NoError(t, err)
		assert.Contains(t, string(b), "-X "+pkg+".version=", "%s gives the -X that sets the version", doc)
	}
	bin := filepath.Join(t.TempDir(), "wfm")
	build := exec.Command("go", "build", "-ldflags", flags, "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())
	out, err := exec.Command(bin, "version").Output()
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(out), "wfm 9.8.7-test (revision 0123abc, go"), "%q", out)
}

// TestVersionServed: /healthz carries the version, and /metrics serves
// wfm_build_info (1, labelled with version, revision and goversion).
func TestVersionServed(t *testing.T) {
	base, _ := startServer(t, nil, envWith(map[string]string{"DATABASE_URL": pgtest.URL(t)}))
	b := buildinfo.Read()
	status, _, body := getStatus(t, base+"/healthz")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, b.Version, body["version"])
	v, ok := value(scrape(t, base), "wfm_build_info", map[string]string{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion})
	assert.True(t, ok, "wfm_build_info with the build's labels")
	assert.Equal(t, 1.0, v)
}
