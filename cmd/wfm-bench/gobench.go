package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// goBench is one result line of `go test -bench`: the benchmark's name
// (without the -GOMAXPROCS suffix) and its metrics by unit.
type goBench struct {
	name    string
	metrics map[string]float64
}

var benchLine = regexp.MustCompile(`^(Benchmark\S*?)(-\d+)?\s+(\d+)\s+(.*)$`)

// parseGoBench reads the result lines of `go test -bench` output.
func parseGoBench(out []byte) []goBench {
	var res []goBench
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		b := goBench{name: m[1], metrics: map[string]float64{}}
		f := strings.Fields(m[4])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			b.metrics[f[i+1]] = v
		}
		res = append(res, b)
	}
	return res
}

// runGoBench runs the benchmarks matching pattern in pkg of the source
// tree, capped by -go-bench-timeout, and returns their results.
func (b *bench) runGoBench(ctx context.Context, pkg, pattern string, extra ...string) ([]goBench, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.goBenchTimeout)
	defer cancel()
	args := append([]string{"test", "-run", "^$", "-bench", pattern, "-timeout", b.cfg.goBenchTimeout.String()}, extra...)
	args = append(args, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = b.cfg.src
	fmt.Fprintf(b.cfg.log, "go %s\n", strings.Join(args, " "))
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("go test -bench %s %s: capped at %s", pattern, pkg, b.cfg.goBenchTimeout)
		}
		return nil, fmt.Errorf("go test -bench %s %s: %w\n%s", pattern, pkg, err, out)
	}
	return parseGoBench(out), nil
}

// planFigures: planning one upgrade over 1,000 versions
// (BenchmarkPlanUpgrade1000, design section 11: < 1 ms). The figure is its
// slowest case.
func planFigures(ctx context.Context, b *bench) ([]Figure, error) {
	res, err := b.runGoBench(ctx, "./internal/lifecycle/", "^BenchmarkPlanUpgrade1000$")
	if err != nil {
		return nil, err
	}
	return []Figure{planFigure(res)}, nil
}

func planFigure(res []goBench) Figure {
	f := Figure{Name: "plan-upgrade-1000", Unit: "ms", Target: "< 1 ms"}
	worst := ""
	for _, r := range res {
		if ns, ok := r.metrics["ns/op"]; ok && strings.HasPrefix(r.name, "BenchmarkPlanUpgrade1000") && ns/1e6 > f.Value {
			f.Value, worst = ns/1e6, r.name
		}
	}
	if worst == "" {
		f.Absent = "benchmark absent"
		return f
	}
	f.Ratio, f.Baseline = f.Value/1, "the 1 ms target"
	f.Notes = []string{"slowest case, " + strings.TrimPrefix(worst, "BenchmarkPlanUpgrade1000/") + ", of BenchmarkPlanUpgrade1000 in -src"}
	return f
}

// batchFigures: one batch publishing 10,000 deployments of one gateway
// client (BenchmarkCreateBatch10000 in internal/fleet, metric s/batch;
// issue 11: < 2 s). A tree without that benchmark says so.
func batchFigures(ctx context.Context, b *bench) ([]Figure, error) {
	res, err := b.runGoBench(ctx, "./internal/fleet/", "^BenchmarkCreateBatch10000$", "-benchtime", "1x")
	if err != nil {
		return nil, err
	}
	return []Figure{batchFigure(res)}, nil
}

func batchFigure(res []goBench) Figure {
	f := Figure{Name: "batch-10000", Unit: "s", Target: "< 2 s"}
	for _, r := range res {
		if r.name != "BenchmarkCreateBatch10000" {
			continue
		}
		v, ok := r.metrics["s/batch"]
		if !ok {
			f.Absent = "BenchmarkCreateBatch10000 reported no s/batch"
			return f
		}
		f.Value = v
		f.Ratio, f.Baseline = v/2, "the 2 s target"
		f.Notes = []string{"one batch of 10,000 deployments of one gateway client, BenchmarkCreateBatch10000 in -src"}
		return f
	}
	f.Absent = "benchmark absent"
	return f
}
