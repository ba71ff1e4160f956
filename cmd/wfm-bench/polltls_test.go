package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPollTLSSmoke runs the poll-mtls group briefly against a real server
// built from this tree: both figures are measured (the generator got 304s
// over mutual TLS from both servers) and their lines parse.
func TestPollTLSSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "wfm")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/wfm")
	build.Dir = "../.."
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"-src", "../..", "-wfm", bin, "-only", "poll-mtls", "-duration", "2s", "-doc", ""},
		func(string) string { return "" }, &stdout, &stderr)
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	names := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		m := figureLine.FindStringSubmatch(line)
		require.NotNil(t, m, "line %q does not parse", line)
		require.NotEmpty(t, m[2], "line %q: not measured", line)
		names[m[1]] = line
	}
	require.Contains(t, names, "bare-tls-304", stdout.String())
	require.Contains(t, names, "poll-mtls-304", stdout.String())
	assert.Contains(t, names["poll-mtls-304"], "% of bare-tls-304; target >= 70%")
}
