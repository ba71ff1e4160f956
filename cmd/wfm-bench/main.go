// Command wfm-bench is the project's benchmark harness (`make bench`): one
// unattended run that measures every figure of design section 11 next to
// its baseline, on this machine, in the same run, prints one line per figure
//
//	name: value unit (ratio to baseline; target; notes)
//
// and writes them, with a description of the machine, as one section of
// docs/benchmarks.md (a section with the same title is replaced, the others
// are kept, so "before" and "after" figures stand side by side).
//
// It starts the wfm server under test (bin/wfm built from -src, or the
// binary in $WFM_BIN, so that an old build can be measured by the same
// harness) with its private PostgreSQL in a temporary folder, the
// development header identity and the rate limits lifted. What a figure
// measures goes through the public APIs (management API creations and
// rollouts, device API polls), as a fleet would; the bulk of the fleets
// around it is seeded faster: registrations with COPY, the other
// deployments and the agents' reports by the harness acting as a second
// replica on the server's database (seed.go). Every phase has a time cap
// and the whole run a budget, so a slow server cannot hang it: a capped
// phase reports the rate it reached and says that it was capped.
//
// Load: the device-poll and status figures use wrk (the device-poll
// baseline's generator, and light on a 2-core machine); pgbench gives the
// INSERT baseline; the fleet phases use Go HTTP/1.1 keep-alive clients, N
// workers. Go benchmarks (the planner, the batch publication) run with
// `go test -bench` in -src.
//
// Adding a figure: write a function with the shape of group.run (see
// figures.go) returning its Figures and add it to groups.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "wfm-bench:", err)
		os.Exit(1)
	}
}

// config is what one run measures and how.
type config struct {
	src      string   // repository root: builds bin/wfm and runs the Go benchmarks there
	bin      string   // server binary; empty: build <src>/bin/wfm
	only     []string // groups to run (empty: all)
	doc      string   // Markdown file to write the section into; empty: none
	section  string   // section title
	note     string   // free text added to the section
	duration time.Duration
	workers  int
	conns    int // status: concurrent connections of wrk and pgbench
	devices  int // status: deployments the reports spread over

	singles int // clients × 1 device measured for creations
	gateway int // devices of the one gateway client
	fleet   int // clients × 1 device in the memory scenario (includes singles)
	// rolloutMembers are the clients × 1 device of the rollout group.
	rolloutMembers int
	createCap      time.Duration
	seedCap        time.Duration
	budget         time.Duration

	goBenchTimeout time.Duration
	getenv         func(string) string
	log            io.Writer // progress
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("wfm-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := config{getenv: getenv, log: stderr}
	var only string
	fs.StringVar(&c.src, "src", ".", "repository root: bin/wfm is built and the Go benchmarks run there")
	fs.StringVar(&c.bin, "wfm", getenv("WFM_BIN"), "server binary to measure (env WFM_BIN); empty: build <src>/bin/wfm")
	fs.StringVar(&only, "only", "", "comma-separated groups to run ("+strings.Join(groupNames(), ", ")+"); empty: all")
	fs.StringVar(&c.doc, "doc", "docs/benchmarks.md", "Markdown file that receives the run as a section; empty: print only")
	fs.StringVar(&c.section, "section", "Latest run", "title of the section written into -doc (a section with this title is replaced)")
	fs.StringVar(&c.note, "note", "", "text added to the section (conditions of the run)")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "length of each wrk and pgbench run")
	fs.IntVar(&c.workers, "workers", 16, "concurrent requests of the fleet phases")
	fs.IntVar(&c.conns, "status-conns", 8, "status: concurrent connections of wrk and pgbench")
	fs.IntVar(&c.devices, "status-devices", 64, "status: deployments the reports spread over")
	fs.IntVar(&c.singles, "clients", 10000, "creations: clients × 1 device")
	fs.IntVar(&c.gateway, "gateway-devices", 10000, "creations: devices of the one gateway client")
	fs.IntVar(&c.fleet, "fleet-clients", 90000, "memory scenario: clients × 1 device (the -clients ones included), next to the gateway")
	fs.IntVar(&c.rolloutMembers, "rollout-members", 10000, "rollout: clients × 1 device whose deployments one rollout upgrades at once (its drive is capped by -create-cap)")
	fs.DurationVar(&c.createCap, "create-cap", 60*time.Second, "time cap of each measured creation phase")
	fs.DurationVar(&c.seedCap, "seed-cap", 150*time.Second, "time cap of each seeding phase (registrations, the rest of the memory scenario, polls)")
	fs.DurationVar(&c.budget, "budget", 12*time.Minute, "time budget of the whole run: phases are capped to what is left")
	fs.DurationVar(&c.goBenchTimeout, "go-bench-timeout", 3*time.Minute, "time cap of each go test -bench run")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if only != "" {
		c.only = strings.Split(only, ",")
		for _, g := range c.only {
			if !knownGroup(g) {
				return fmt.Errorf("-only: unknown group %q (groups: %s)", g, strings.Join(groupNames(), ", "))
			}
		}
	}
	if c.fleet < c.singles {
		return fmt.Errorf("-fleet-clients %d is less than -clients %d: the measured clients are part of the memory scenario", c.fleet, c.singles)
	}
	src, err := filepath.Abs(c.src)
	if err != nil {
		return fmt.Errorf("-src: %w", err)
	}
	c.src = src

	start := time.Now()
	b := &bench{cfg: c, deadline: start.Add(c.budget)}
	tmp, err := os.MkdirTemp("", "wfm-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	b.tmp = tmp
	if err := b.prepare(ctx); err != nil {
		return err
	}
	// The tree and binary as they are when the run starts.
	m := describeMachine(ctx, b)

	var figures []Figure
	var failed []string
	for _, g := range allGroups() {
		if !c.selected(g.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fmt.Fprintf(c.log, "== %s\n", g.name)
		if time.Until(b.deadline) <= 0 {
			f := Figure{Name: g.name, Absent: fmt.Sprintf("the run's budget (-budget %s) was used up", c.budget)}
			figures = append(figures, f)
			fmt.Fprintln(stdout, f.Line())
			continue
		}
		got, err := g.run(ctx, b)
		figures = append(figures, got...)
		for _, f := range got {
			fmt.Fprintln(stdout, f.Line())
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			failed = append(failed, g.name)
			f := Figure{Name: g.name, Absent: "error: " + strings.ReplaceAll(err.Error(), "\n", " ")}
			figures = append(figures, f)
			fmt.Fprintln(stdout, f.Line())
		}
	}
	took := time.Since(start).Round(time.Second)
	fmt.Fprintf(c.log, "== done in %s\n", took)
	if c.doc != "" {
		// A failed group is written too (its line says "error"), so
		// that a long run is not lost; the exit status tells.
		if b.pgVersion != "" {
			m.PostgreSQL = b.pgVersion
		}
		sec := renderSection(c.section, m, args, c.note, took, figures)
		if err := writeSection(c.doc, c.section, sec); err != nil {
			return err
		}
		fmt.Fprintf(c.log, "== wrote section %q of %s\n", c.section, c.doc)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s failed", strings.Join(failed, ", "))
	}
	return nil
}

func (c config) selected(name string) bool {
	if len(c.only) == 0 {
		return true
	}
	for _, o := range c.only {
		if o == name {
			return true
		}
	}
	return false
}

// phaseCap is limit, or less if the run's budget ends sooner.
func (b *bench) phaseCap(limit time.Duration) time.Duration {
	return max(0, min(limit, time.Until(b.deadline)))
}
