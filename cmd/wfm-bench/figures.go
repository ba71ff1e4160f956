package main

import (
	"context"
	"fmt"
	"math"
	"strings"
)

// Figure is one measured value, printed as one line:
//
//	name: value unit (ratio% of baseline; target; note)
//	name: not measured (reason)
type Figure struct {
	Name  string
	Value float64
	Unit  string
	// Ratio is Value over the baseline's value (0: no ratio), described by
	// Baseline ("bare-304, 88012 req/s"; "the 2 s target").
	Ratio    float64
	Baseline string
	// Target is the design's target for this figure, as text.
	Target string
	// Notes say how the figure was taken when it matters (capped, scope).
	Notes []string
	// Absent, when not empty, says why the figure was not measured.
	Absent string
}

// Line is the figure's printed form.
func (f Figure) Line() string {
	if f.Absent != "" {
		return fmt.Sprintf("%s: not measured (%s)", f.Name, f.Absent)
	}
	var parts []string
	if f.Ratio > 0 {
		parts = append(parts, fmt.Sprintf("%s of %s", percent(f.Ratio), f.Baseline))
	} else if f.Baseline != "" {
		parts = append(parts, f.Baseline)
	}
	if f.Target != "" {
		parts = append(parts, "target "+f.Target)
	}
	parts = append(parts, f.Notes...)
	return fmt.Sprintf("%s: %s %s (%s)", f.Name, number(f.Value), f.Unit, strings.Join(parts, "; "))
}

// number prints a value with the digits that mean something here: whole
// numbers from 100 on, three significant digits below.
func number(v float64) string {
	if math.Abs(v) >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func percent(r float64) string {
	if r >= 0.1 {
		return fmt.Sprintf("%.0f%%", 100*r)
	}
	return fmt.Sprintf("%.2g%%", 100*r)
}

// group is a set of figures measured together (sharing a server or a
// seeded fleet). run returns the figures it measured even when it fails
// part-way.
type group struct {
	name string
	run  func(ctx context.Context, b *bench) ([]Figure, error)
	// server: the group starts the server under test (bin/wfm, built
	// unless -wfm names one).
	server bool
}

// allGroups are run in this order. The Go benchmarks come first: they do not
// depend on the run's budget; the fleet group, whose seeding is the longest
// (capped), comes last and gets what is left.
func allGroups() []group {
	return []group{
		{"plan", planFigures, false},
		{"batch", batchFigures, false},
		{"poll", pollFigures, true},
		{"poll-mtls", pollTLSFigures, true},
		{"status", statusFigures, true},
		{"webhooks", webhookFigures, true},
		{"sse", sseFigures, true},
		{"rollout", rolloutFigures, true},
		{"hostile-bodies", hostileFigures, true},
		{"fleet", fleetFigures, true},
	}
}

func groupNames() []string {
	var names []string
	for _, g := range allGroups() {
		names = append(names, g.name)
	}
	return names
}

func knownGroup(name string) bool {
	for _, g := range allGroups() {
		if g.name == name {
			return true
		}
	}
	return false
}
