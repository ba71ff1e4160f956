package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// wrkLatencies runs wrk with --latency and returns its request rate and
// the median and 99th percentile of its latency distribution (as b.wrk,
// which prints no distribution).
func (b *bench) wrkLatencies(ctx context.Context, args ...string) (rate float64, p50, p99 time.Duration, err error) {
	args = append([]string{"--latency"}, args...)
	fmt.Fprintf(b.cfg.log, "wrk %s\n", strings.Join(args, " "))
	out, err := exec.CommandContext(ctx, "wrk", args...).CombinedOutput()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("wrk: %w: %s", err, out)
	}
	if strings.Contains(string(out), "Non-2xx") {
		return 0, 0, 0, fmt.Errorf("wrk: the server refused requests:\n%s", out)
	}
	m := wrkRate.FindSubmatch(out)
	if m == nil {
		return 0, 0, 0, fmt.Errorf("wrk printed no Requests/sec:\n%s", out)
	}
	if rate, err = strconv.ParseFloat(string(m[1]), 64); err != nil {
		return 0, 0, 0, err
	}
	if p50, err = wrkPercentile(out, "50"); err != nil {
		return 0, 0, 0, err
	}
	p99, err = wrkPercentile(out, "99")
	return rate, p50, p99, err
}

// wrkPercentileLine matches a line of wrk's "Latency Distribution":
// "     99%   12.34ms".
var wrkPercentileLine = regexp.MustCompile(`(?m)^\s+([0-9]+)%\s+([0-9.]+)(us|ms|s|m)\s*$`)

// wrkPercentile returns percentile p ("50", "99") of wrk --latency's output.
func wrkPercentile(out []byte, p string) (time.Duration, error) {
	for _, m := range wrkPercentileLine.FindAllSubmatch(out, -1) {
		if string(m[1]) != p {
			continue
		}
		d, err := time.ParseDuration(string(m[2]) + string(m[3]))
		if err != nil {
			return 0, fmt.Errorf("wrk's %s%% latency %q: %w", p, m[2], err)
		}
		return d, nil
	}
	return 0, fmt.Errorf("wrk printed no %s%% latency:\n%s", p, out)
}
