package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// figureLine is the printed form of a figure: measured, or not.
var figureLine = regexp.MustCompile(`^([a-z0-9-]+): (?:(-?[0-9.]+(?:e[-+][0-9]+)?) (\S+) \((.+)\)|not measured \((.+)\))$`)

// TestSmoke runs the harness with tiny sizes against a real server built
// from this tree, so that it does not rot: every group that needs a server
// runs, every printed line parses, and the section lands in the document.
func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "wfm")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/wfm")
	build.Dir = "../.."
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	doc := filepath.Join(dir, "benchmarks.md")
	require.NoError(t, os.WriteFile(doc, []byte("# Benchmarks\n\nIntro.\n"), 0o644))

	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"-src", "../..", "-wfm", bin, "-only", "poll,status,fleet,rollout", "-duration", "1s", "-rollout-members", "8",
		"-status-devices", "4", "-clients", "6", "-gateway-devices", "5", "-fleet-clients", "9", "-workers", "4",
		"-doc", doc, "-section", "Smoke"}, func(string) string { return "" }, &stdout, &stderr)
	require.NoError(t, err, "stderr:\n%s", stderr.String())

	names := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		m := figureLine.FindStringSubmatch(line)
		require.NotNil(t, m, "line %q does not parse", line)
		names[m[1]] = true
		assert.NotContains(t, line, "error", "line %q", line)
		if m[1] == "rss-fleet" {
			assert.Contains(t, line, "9 clients × 1 + 1 client × 5 deployments, 10 clients polled once")
			assert.NotContains(t, line, "INCOMPLETE")
		}
		if strings.HasPrefix(m[1], "rollout-") {
			assert.NotContains(t, line, "NOT COMPLETE")
		}
	}
	for _, want := range []string{"poll-304", "status-ingest", "create-6x1", "create-1x5", "rollout-plan", "rollout-start", "rss-fleet", "rss-fleet-peak",
		"rollout-drive-8"} {
		assert.True(t, names[want], "no %s line in:\n%s", want, stdout.String())
	}
	written, err := os.ReadFile(doc)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(written), "# Benchmarks\n\nIntro.\n"), "the document's head was changed:\n%s", written)
	assert.Contains(t, string(written), "## Smoke\n")
	assert.Contains(t, string(written), strings.TrimSpace(stdout.String()))
}

func TestReplaceSection(t *testing.T) {
	sec := func(title, body string) string {
		return "<!-- wfm-bench section: " + title + " -->\n## " + title + "\n" + body + "\n" + sectionEnd + "\n"
	}
	head := "# Benchmarks\n\nIntro.\n"
	before := sec("Before", "old figures")
	after1 := sec("After", "first run")
	after2 := sec("After", "second run")

	doc := replaceSection(head, "Before", before)
	assert.Equal(t, head+"\n"+before, doc, "a new section is appended")
	doc = replaceSection(doc, "After", after1)
	assert.Equal(t, head+"\n"+before+"\n"+after1, doc)
	doc = replaceSection(doc, "After", after2)
	assert.Equal(t, head+"\n"+before+"\n"+after2, doc, "a section with the same title is replaced, the others kept")
	doc = replaceSection(doc, "Before", sec("Before", "re-run"))
	assert.Equal(t, head+"\n"+sec("Before", "re-run")+"\n"+after2, doc, "replaced in place")
}

func TestGoBenchFigures(t *testing.T) {
	out := []byte(`goos: linux
goarch: amd64
pkg: github.com/wfm-dev/wfm/internal/lifecycle
BenchmarkPlanUpgrade1000/chain999/auto/shuffled-2         	    1461	    812345 ns/op	  394051 B/op	    2030 allocs/op
BenchmarkPlanUpgrade1000/direct/shuffled-2                	    5000	    230000 ns/op
BenchmarkCreateBatch10000-2   	       1	1234567890 ns/op	         1.235 s/batch
PASS
`)
	res := parseGoBench(out)
	require.Len(t, res, 3)
	assert.Equal(t, "BenchmarkPlanUpgrade1000/chain999/auto/shuffled", res[0].name)
	assert.Equal(t, 394051.0, res[0].metrics["B/op"])

	p := planFigure(res)
	assert.InDelta(t, 0.812345, p.Value, 1e-9)
	assert.Contains(t, p.Line(), "chain999/auto/shuffled")
	assert.Regexp(t, figureLine, p.Line())

	b := batchFigure(res)
	assert.InDelta(t, 1.235, b.Value, 1e-9)
	assert.Equal(t, "batch-10000: 1.24 s (62% of the 2 s target; target < 2 s; one batch of 10,000 deployments of one gateway client, BenchmarkCreateBatch10000 in -src)", b.Line())

	absent := batchFigure(parseGoBench([]byte("PASS\nok  \tgithub.com/wfm-dev/wfm/internal/fleet\t0.1s\n")))
	assert.Equal(t, "batch-10000: not measured (benchmark absent)", absent.Line())
	assert.Equal(t, "plan-upgrade-1000: not measured (benchmark absent)", planFigure(nil).Line())
}

func TestParseMemory(t *testing.T) {
	status := []byte("Name:\twfm\nVmPeak:\t 2000000 kB\nVmHWM:\t  250000 kB\nVmRSS:\t  200000 kB\nThreads:\t9\n")
	rss, hwm, err := parseMemory(status)
	require.NoError(t, err)
	assert.Equal(t, int64(200000*1024), rss)
	assert.Equal(t, int64(250000*1024), hwm)
	_, _, err = parseMemory([]byte("Name:\twfm\n"))
	assert.Error(t, err)
}

func TestCommandLine(t *testing.T) {
	got := commandLine([]string{"-section", "Before issue 11 (commit fa7a316)", "-note", "secret conditions", "-doc", "", "-only=fleet", "-note=x"})
	assert.Equal(t, `-section 'Before issue 11 (commit fa7a316)' -doc '' -only=fleet`, got)
}

func TestWrkPercentile(t *testing.T) {
	out := []byte(`Running 10s test @ http://127.0.0.1:1
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.91ms    2.01ms  40.12ms   90.00%
  Latency Distribution
     50%    3.52ms
     75%    4.60ms
     90%    5.81ms
     99%   12.07ms
  20000 requests in 10.00s, 1.91MB read
Requests/sec:   1999.87
`)
	for p, want := range map[string]time.Duration{"50": 3520 * time.Microsecond, "99": 12070 * time.Microsecond} {
		got, err := wrkPercentile(out, p)
		if err != nil || got != want {
			t.Errorf("wrkPercentile(%s) = %v, %v, want %v", p, got, err, want)
		}
	}
	if _, err := wrkPercentile([]byte("Requests/sec: 1\n"), "50"); err == nil {
		t.Error("wrkPercentile of an output without a distribution: no error")
	}
}
