package lifecycle

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// ce builds a catalog entry: minFrom "" means no minUpgradeFrom.
func ce(v, minFrom string, yanked bool) CatalogEntry {
	e := CatalogEntry{Version: MustParseVersion(v), Yanked: yanked}
	if minFrom != "" {
		e.Upgrade.MinUpgradeFrom = vp(minFrom)
	}
	return e
}

func versionStrings(vs []Version) []string {
	if vs == nil {
		return nil
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return out
}

func checkNames(cs []Check) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		mark := "+"
		if !c.Passed {
			mark = "-"
		}
		out[i] = mark + c.Name
	}
	return out
}

// asError returns err as *Error, failing the test if it is not one.
func asError(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	return e
}

// designCatalog is the design's example: 2.0.0 can be reached directly only
// from 1.5.0 or later.
var designCatalog = []CatalogEntry{ce("1.0", "", false), ce("1.5", "", false), ce("2.0", "1.5", false)}

// docsCatalog is docs/lifecycle-extension.md's example: 1.8.0 is preferred
// over 1.5.0 as the higher intermediate.
var docsCatalog = []CatalogEntry{ce("1.0", "", false), ce("1.5", "", false), ce("1.8", "", false), ce("2.0", "1.5", false)}

func TestPlanUpgrade(t *testing.T) {
	tests := []struct {
		name              string
		entries           []CatalogEntry
		installed, target string
		mode              PathMode
		wantHops          []string // nil: refused
		wantDirect        bool
		wantCode          Code
		wantType          string
	}{
		// The design's example.
		{name: "design example, direct refused", entries: designCatalog, installed: "1.0", target: "2.0", mode: PathDirect,
			wantCode: EINVALID, wantType: ProblemUpgradePathRequired},
		{name: "design example, default mode is direct", entries: designCatalog, installed: "1.0", target: "2.0", mode: "",
			wantCode: EINVALID, wantType: ProblemUpgradePathRequired},
		{name: "design example, auto", entries: designCatalog, installed: "1.0", target: "2.0", mode: PathAuto,
			wantHops: []string{"1.5.0", "2.0.0"}},
		{name: "docs example prefers the higher intermediate", entries: docsCatalog, installed: "1.0", target: "2.0", mode: PathAuto,
			wantHops: []string{"1.8.0", "2.0.0"}},

		// Direct upgrades.
		{name: "installed exactly at minUpgradeFrom", entries: designCatalog, installed: "1.5", target: "2.0", mode: PathDirect,
			wantHops: []string{"2.0.0"}, wantDirect: true},
		{name: "installed above minUpgradeFrom, not in catalog", entries: designCatalog, installed: "1.7", target: "2.0",
			wantHops: []string{"2.0.0"}, wantDirect: true},
		{name: "no minUpgradeFrom", entries: designCatalog, installed: "1.0", target: "1.5", mode: PathAuto,
			wantHops: []string{"1.5.0"}, wantDirect: true},
		{name: "auto takes a direct upgrade when there is one", entries: docsCatalog, installed: "1.5", target: "2.0", mode: PathAuto,
			wantHops: []string{"2.0.0"}, wantDirect: true},
		{name: "prerelease bound admits the prerelease", entries: []CatalogEntry{ce("1.5.0-rc.1", "", false), ce("2.0", "1.5.0-0", false)},
			installed: "1.5.0-rc.1", target: "2.0", wantHops: []string{"2.0.0"}, wantDirect: true},
		{name: "installed yanked does not matter", entries: []CatalogEntry{ce("1.0", "", true), ce("2.0", "", false)},
			installed: "1.0", target: "2.0", wantHops: []string{"2.0.0"}, wantDirect: true},

		// Refusals before any path search.
		{name: "target not in catalog", entries: designCatalog, installed: "1.0", target: "3.0",
			wantCode: ENOTFOUND, wantType: ProblemNotFound},
		{name: "target yanked", entries: []CatalogEntry{ce("1.0", "", false), ce("2.0", "", true)}, installed: "1.0", target: "2.0",
			wantCode: EINVALID, wantType: ProblemVersionYanked},
		{name: "already at version", entries: designCatalog, installed: "2.0.0", target: "2.0",
			wantCode: EINVALID, wantType: ProblemAlreadyAtVersion},
		{name: "lower target is a rollback", entries: designCatalog, installed: "2.0", target: "1.5",
			wantCode: EINVALID, wantType: ProblemDowngradeRequiresRollback},
		{name: "lower and yanked target is still a rollback", entries: []CatalogEntry{ce("1.0", "", true), ce("2.0", "", false)},
			installed: "2.0", target: "1.0", wantCode: EINVALID, wantType: ProblemDowngradeRequiresRollback},
		{name: "unknown path mode", entries: designCatalog, installed: "1.0", target: "2.0", mode: "sideways",
			wantCode: EINVALID, wantType: ProblemInvalidRequest},

		// Chains.
		{name: "prerelease installed is below its release's bound", entries: []CatalogEntry{ce("1.5", "", false), ce("2.0", "1.5", false)},
			installed: "1.5.0-rc.1", target: "2.0", mode: PathAuto, wantHops: []string{"1.5.0", "2.0.0"}},
		{name: "yanked intermediate skipped", entries: []CatalogEntry{ce("1.0", "", false), ce("1.5", "", true), ce("1.6", "", false), ce("2.0", "1.5", false)},
			installed: "1.0", target: "2.0", mode: PathAuto, wantHops: []string{"1.6.0", "2.0.0"}},
		{name: "only bridge yanked", entries: []CatalogEntry{ce("1.0", "", false), ce("1.5", "", true), ce("2.0", "1.5", false)},
			installed: "1.0", target: "2.0", mode: PathAuto, wantCode: EINVALID, wantType: ProblemNoUpgradePath},
		{name: "no bridge, auto", entries: []CatalogEntry{ce("1.0", "", false), ce("2.0", "1.5", false)},
			installed: "1.0", target: "2.0", mode: PathAuto, wantCode: EINVALID, wantType: ProblemNoUpgradePath},
		{name: "no bridge, direct says no path rather than path required", entries: []CatalogEntry{ce("1.0", "", false), ce("2.0", "1.5", false)},
			installed: "1.0", target: "2.0", mode: PathDirect, wantCode: EINVALID, wantType: ProblemNoUpgradePath},
		{name: "versions below installed are not hops", entries: []CatalogEntry{ce("1.5", "", false), ce("1.6", "", false), ce("2.0", "1.5", false)},
			installed: "1.2", target: "2.0", mode: PathAuto, wantHops: []string{"1.6.0", "2.0.0"}},
		{name: "three hops", entries: []CatalogEntry{ce("1.0", "", false), ce("1.5", "", false), ce("2.0", "1.5", false), ce("3.0", "2.0", false)},
			installed: "1.0", target: "3.0", mode: PathAuto, wantHops: []string{"1.5.0", "2.0.0", "3.0.0"}},
		{name: "intermediate's own bound blocks it", entries: []CatalogEntry{ce("1.0", "", false), ce("1.5", "1.2", false), ce("2.0", "1.5", false)},
			installed: "1.0", target: "2.0", mode: PathAuto, wantCode: EINVALID, wantType: ProblemNoUpgradePath},
		{name: "intermediate's own bound met by another hop", entries: []CatalogEntry{ce("1.0", "", false), ce("1.2", "", false), ce("1.5", "1.2", false), ce("2.0", "1.5", false)},
			installed: "1.0", target: "2.0", mode: PathAuto, wantHops: []string{"1.2.0", "1.5.0", "2.0.0"}},
		{name: "bound that names no catalog version", entries: []CatalogEntry{ce("1.0", "", false), ce("1.4", "", false), ce("1.5", "", false), ce("2.0", "1.4.5", false)},
			installed: "1.0", target: "2.0", mode: PathAuto, wantHops: []string{"1.5.0", "2.0.0"}},
		{name: "malformed bound above its own version makes it unreachable", entries: []CatalogEntry{ce("1.0", "", false), ce("1.5", "1.7", false), ce("2.0", "1.5", false)},
			installed: "1.0", target: "2.0", mode: PathAuto, wantCode: EINVALID, wantType: ProblemNoUpgradePath},
		{name: "prerelease intermediate", entries: []CatalogEntry{ce("1.0", "", false), ce("2.0.0-rc.1", "", false), ce("2.0", "2.0.0-rc.1", false)},
			installed: "1.0", target: "2.0", mode: PathAuto, wantHops: []string{"2.0.0-rc.1", "2.0.0"}},
		{name: "shorter chain wins over higher intermediates",
			// 1.0 -> 1.1 -> 1.9 -> 2.0 ends on a higher intermediate than 1.0 -> 1.5 -> 2.0 but is longer.
			entries:   []CatalogEntry{ce("1.0", "", false), ce("1.1", "", false), ce("1.5", "", false), ce("1.9", "1.1", false), ce("2.0", "1.5", false)},
			installed: "1.0", target: "2.0", mode: PathAuto, wantHops: []string{"1.5.0", "2.0.0"}},
		{name: "tie-break: position-wise highest of crossing chains",
			// Shortest chains: 1.1->1.3, 1.2->1.3, 1.2->1.4. The highest is 1.2->1.4.
			entries:   []CatalogEntry{ce("1.0", "", false), ce("1.1", "", false), ce("1.2", "", false), ce("1.3", "1.1", false), ce("1.4", "1.2", false), ce("2.0", "1.3", false)},
			installed: "1.0", target: "2.0", mode: PathAuto, wantHops: []string{"1.2.0", "1.4.0", "2.0.0"}},
		{name: "tie-break: highest first hop even when a lower one also works",
			entries:   []CatalogEntry{ce("1.0", "", false), ce("1.1", "", false), ce("1.2", "", false), ce("1.3", "1.1", false), ce("2.0", "1.3", false)},
			installed: "1.0", target: "2.0", mode: PathAuto, wantHops: []string{"1.2.0", "1.3.0", "2.0.0"}},
		{name: "unsorted catalog", entries: []CatalogEntry{ce("2.0", "1.5", false), ce("1.8", "", false), ce("1.0", "", false), ce("1.5", "", false)},
			installed: "1.0", target: "2.0", mode: PathAuto, wantHops: []string{"1.8.0", "2.0.0"}},

		// Caller bugs.
		{name: "duplicate intermediate", entries: []CatalogEntry{ce("1.0", "", false), ce("1.5", "", false), ce("1.5.0", "1.0", false), ce("2.0", "1.5", false)},
			installed: "1.0", target: "2.0", mode: PathAuto, wantCode: EINTERNAL, wantType: string(EINTERNAL)},
		{name: "duplicate target", entries: []CatalogEntry{ce("1.0", "", false), ce("2.0", "", false), ce("2.0", "1.5", false)},
			installed: "1.0", target: "2.0", wantCode: EINTERNAL, wantType: string(EINTERNAL)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := fmt.Sprintf("%s -> %s, %s", tt.installed, tt.target, tt.mode)
			plan, err := PlanUpgrade(MustParseVersion(tt.installed), MustParseVersion(tt.target), tt.entries, tt.mode)
			if tt.wantHops == nil {
				if err == nil {
					t.Fatalf("PlanUpgrade(%v) = %v, want error %s/%s", in, versionStrings(plan.Hops), tt.wantCode, tt.wantType)
				}
				if ErrorCode(err) != tt.wantCode || ErrorType(err) != tt.wantType {
					t.Fatalf("PlanUpgrade(%v) error = %s/%s (%v), want %s/%s", in, ErrorCode(err), ErrorType(err), err, tt.wantCode, tt.wantType)
				}
				if plan.Hops != nil || plan.Direct {
					t.Errorf("PlanUpgrade(%v) refused but Hops = %v, Direct = %v; want nil, false", in, plan.Hops, plan.Direct)
				}
				return
			}
			if err != nil {
				t.Fatalf("PlanUpgrade(%v) error %v, want %v", in, err, tt.wantHops)
			}
			if got := versionStrings(plan.Hops); !slices.Equal(got, tt.wantHops) || plan.Direct != tt.wantDirect {
				t.Errorf("PlanUpgrade(%v) = %v (direct %v), want %v (direct %v)", in, got, plan.Direct, tt.wantHops, tt.wantDirect)
			}
			for _, c := range plan.Checks {
				if !c.Passed {
					t.Errorf("PlanUpgrade(%v) allowed with failed check %+v", in, c)
				}
			}
		})
	}
}

func TestPlanUpgradePathRequiredExtra(t *testing.T) {
	_, err := PlanUpgrade(MustParseVersion("1.0"), MustParseVersion("2.0"), designCatalog, PathDirect)
	e := asError(t, err)
	want := map[string]any{
		"path":           []string{"1.0.0", "1.5.0", "2.0.0"},
		"minUpgradeFrom": "1.5.0",
		"installed":      "1.0.0",
		"target":         "2.0.0",
	}
	if fmt.Sprint(e.Extra) != fmt.Sprint(want) {
		t.Errorf("PlanUpgrade(1.0 -> 2.0, direct) Extra = %v, want %v", e.Extra, want)
	}
	// The message must say what the path is and how to run it.
	for _, s := range []string{"1.0.0 -> 1.5.0 -> 2.0.0", "path: auto", "minUpgradeFrom"} {
		if !strings.Contains(e.Message, s) {
			t.Errorf("PlanUpgrade(1.0 -> 2.0, direct) message %q does not mention %q", e.Message, s)
		}
	}
}

func TestPlanUpgradeNoPathExtra(t *testing.T) {
	_, err := PlanUpgrade(MustParseVersion("1.0"), MustParseVersion("2.0"),
		[]CatalogEntry{ce("1.0", "", false), ce("1.5", "", true), ce("2.0", "1.5", false)}, PathAuto)
	e := asError(t, err)
	want := map[string]any{"minUpgradeFrom": "1.5.0", "installed": "1.0.0", "target": "2.0.0"}
	if fmt.Sprint(e.Extra) != fmt.Sprint(want) {
		t.Errorf("PlanUpgrade(1.0 -> 2.0, auto) Extra = %v, want %v", e.Extra, want)
	}
}

func TestPlanUpgradeChecks(t *testing.T) {
	v := MustParseVersion
	tests := []struct {
		name              string
		installed, target string
		entries           []CatalogEntry
		mode              PathMode
		want              []string
	}{
		{"direct", "1.5", "2.0", designCatalog, PathDirect,
			[]string{"+target-exists", "+target-newer", "+target-not-yanked", "+min-upgrade-from", "+path"}},
		{"auto chain", "1.0", "2.0", designCatalog, PathAuto,
			[]string{"+target-exists", "+target-newer", "+target-not-yanked", "+min-upgrade-from", "+path"}},
		{"path required", "1.0", "2.0", designCatalog, PathDirect,
			[]string{"+target-exists", "+target-newer", "+target-not-yanked", "-min-upgrade-from", "-path"}},
		{"no path", "1.0", "2.0", []CatalogEntry{ce("2.0", "1.5", false)}, PathAuto,
			[]string{"+target-exists", "+target-newer", "+target-not-yanked", "-min-upgrade-from", "-path"}},
		{"not found", "1.0", "9.0", designCatalog, PathAuto, []string{"-target-exists"}},
		{"yanked", "1.0", "2.0", []CatalogEntry{ce("2.0", "", true)}, PathAuto,
			[]string{"+target-exists", "+target-newer", "-target-not-yanked"}},
		{"lower and yanked", "3.0", "2.0", []CatalogEntry{ce("2.0", "", true)}, PathAuto,
			[]string{"+target-exists", "-target-newer", "-target-not-yanked"}},
	}
	for _, tt := range tests {
		plan, _ := PlanUpgrade(v(tt.installed), v(tt.target), tt.entries, tt.mode)
		if got := checkNames(plan.Checks); !slices.Equal(got, tt.want) {
			t.Errorf("PlanUpgrade(%s: %s -> %s).Checks = %v, want %v", tt.name, tt.installed, tt.target, got, tt.want)
		}
		for _, c := range plan.Checks {
			if c.Detail == "" {
				t.Errorf("PlanUpgrade(%s) check %s has no detail", tt.name, c.Name)
			}
		}
	}
}

func TestPlanUpgradeInvalidInput(t *testing.T) {
	_, err := PlanUpgrade(Version{}, MustParseVersion("2.0"), designCatalog, PathAuto)
	if ErrorCode(err) != EINVALID || ErrorType(err) != ProblemInvalidVersion {
		t.Errorf("PlanUpgrade(zero installed) = %v, want EINVALID/invalid-version", err)
	}
	_, err = PlanUpgrade(MustParseVersion("1.0"), Version{}, designCatalog, PathAuto)
	if ErrorCode(err) != EINVALID || ErrorType(err) != ProblemInvalidVersion {
		t.Errorf("PlanUpgrade(zero target) = %v, want EINVALID/invalid-version", err)
	}
	_, err = PlanUpgrade(MustParseVersion("1.0"), MustParseVersion("2.0"), designCatalog, "Auto")
	if e := asError(t, err); e.Type != ProblemInvalidRequest || len(e.Fields) != 1 || e.Fields[0].Pointer != "/path" {
		t.Errorf("PlanUpgrade(mode Auto) = %+v, want invalid-request at /path", e)
	}
}

func TestPlanUpgradeDoesNotModifyEntries(t *testing.T) {
	entries := []CatalogEntry{ce("2.0", "1.5", false), ce("1.8", "", false), ce("1.0", "", false), ce("1.5", "", false)}
	before := slices.Clone(entries)
	if _, err := PlanUpgrade(MustParseVersion("1.0"), MustParseVersion("2.0"), entries, PathAuto); err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(entries, before, func(a, b CatalogEntry) bool { return a.Version == b.Version }) {
		t.Errorf("PlanUpgrade reordered its entries: %v, want %v", entries, before)
	}
}

func TestFormatPath(t *testing.T) {
	hops := func(n int) []Version {
		var out []Version
		for i := 1; i < n; i++ {
			out = append(out, MustParseVersion(fmt.Sprint(i)))
		}
		return out
	}
	zero := MustParseVersion("0")
	tests := []struct {
		n    int // versions on the path, installed included
		want string
	}{
		{2, "0.0.0 -> 1.0.0"},
		{3, "0.0.0 -> 1.0.0 -> 2.0.0"},
		{10, "0.0.0 -> 1.0.0 -> 2.0.0 -> 3.0.0 -> 4.0.0 -> 5.0.0 -> 6.0.0 -> 7.0.0 -> 8.0.0 -> 9.0.0"},
		{11, "0.0.0 -> 1.0.0 -> 2.0.0 -> 3.0.0 -> 4.0.0 -> 5.0.0 -> 6.0.0 -> … (2 more) … -> 9.0.0 -> 10.0.0"},
		{20, "0.0.0 -> 1.0.0 -> 2.0.0 -> 3.0.0 -> 4.0.0 -> 5.0.0 -> 6.0.0 -> … (11 more) … -> 18.0.0 -> 19.0.0"},
	}
	for _, tt := range tests {
		if got := formatPath(zero, hops(tt.n)); got != tt.want {
			t.Errorf("formatPath(%d versions) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestPlanUpgradeLongPathMessageIsBounded(t *testing.T) {
	entries := longChainCatalog(500)
	_, err := PlanUpgrade(entries[0].Version, entries[len(entries)-1].Version, entries, PathDirect)
	e := asError(t, err)
	if e.Type != ProblemUpgradePathRequired {
		t.Fatalf("PlanUpgrade(long chain, direct) = %v, want upgrade-path-required", err)
	}
	if n := len(e.Extra["path"].([]string)); n != 500 {
		t.Errorf("PlanUpgrade(long chain, direct) Extra path has %d versions, want 500", n)
	}
	if len(e.Message) > 1000 {
		t.Errorf("PlanUpgrade(long chain, direct) message is %d bytes long, want the path elided", len(e.Message))
	}
}

// --- property test against a brute force over materialised edges ---

// bruteNode is a vertex of the brute-force graph.
type bruteNode struct {
	v   Version
	min *Version
}

// bruteGraph builds the upgrade graph the slow, obvious way: every pair.
func bruteGraph(installed, target Version, entries []CatalogEntry) ([]bruteNode, [][]int) {
	nodes := []bruteNode{{v: installed}}
	var tmin *Version
	for _, e := range entries {
		if e.Version == target {
			tmin = e.Upgrade.MinUpgradeFrom
		}
		if !e.Yanked && installed.Less(e.Version) && e.Version.Less(target) {
			nodes = append(nodes, bruteNode{e.Version, e.Upgrade.MinUpgradeFrom})
		}
	}
	nodes = append(nodes, bruteNode{target, tmin})
	adj := make([][]int, len(nodes))
	for a := range nodes {
		for b := range nodes {
			if nodes[a].v.Less(nodes[b].v) && (nodes[b].min == nil || !nodes[a].v.Less(*nodes[b].min)) {
				adj[a] = append(adj[a], b)
			}
		}
	}
	return nodes, adj
}

// bruteBest returns the number of hops of the shortest path from node 0 to
// the last node, and the chain that prefers the higher version at the first
// difference comparing from the FIRST intermediate (the planner compares
// from the last; the two agree only if the planner's claim about the
// position-wise maximum holds). ok is false when no path exists.
func bruteBest(nodes []bruteNode, adj [][]int) (hops []Version, ok bool) {
	n := len(nodes)
	// Distance to the target, by BFS over reversed edges.
	rev := make([][]int, n)
	for a, bs := range adj {
		for _, b := range bs {
			rev[b] = append(rev[b], a)
		}
	}
	dist := make([]int, n)
	for i := range dist {
		dist[i] = -1
	}
	dist[n-1] = 0
	queue := []int{n - 1}
	for len(queue) > 0 {
		b := queue[0]
		queue = queue[1:]
		for _, a := range rev[b] {
			if dist[a] < 0 {
				dist[a] = dist[b] + 1
				queue = append(queue, a)
			}
		}
	}
	if dist[0] < 0 {
		return nil, false
	}
	for cur := 0; cur != n-1; {
		next := -1
		for _, b := range adj[cur] {
			if dist[b] == dist[cur]-1 && (next < 0 || nodes[next].v.Less(nodes[b].v)) {
				next = b
			}
		}
		hops = append(hops, nodes[next].v)
		cur = next
	}
	return hops, true
}

// allShortest enumerates every shortest path (as hops) by DFS; small graphs
// only.
func allShortest(nodes []bruteNode, adj [][]int, length int) [][]Version {
	var out [][]Version
	var walk func(cur int, path []Version)
	walk = func(cur int, path []Version) {
		if len(path) == length {
			if cur == len(nodes)-1 {
				out = append(out, slices.Clone(path))
			}
			return
		}
		for _, b := range adj[cur] {
			walk(b, append(path, nodes[b].v))
		}
	}
	walk(0, nil)
	return out
}

// randomCatalog returns n distinct versions (some prereleases) with random
// minUpgradeFrom bounds (none, near the version, anywhere below it, or a
// prerelease bound that names no catalog version) and yanked flags, in
// random order.
func randomCatalog(rng *rand.Rand, n int) []CatalogEntry {
	yankOneIn := []int{1000, 10, 5, 3}[rng.IntN(4)] // per catalog: a few yanks, or many
	nearBound := 2 + rng.IntN(6)                    // how far below itself a "near" bound may lie
	seen := map[Version]bool{}
	var vs []Version
	for len(vs) < n {
		s := fmt.Sprintf("%d.%d.%d", rng.IntN(4), rng.IntN(10), rng.IntN(4))
		if rng.IntN(8) == 0 {
			s += fmt.Sprintf("-rc.%d", 1+rng.IntN(3))
		}
		v := MustParseVersion(s)
		if !seen[v] {
			seen[v] = true
			vs = append(vs, v)
		}
	}
	slices.SortFunc(vs, Compare)
	entries := make([]CatalogEntry, n)
	for i, v := range vs {
		e := CatalogEntry{Version: v, Yanked: rng.IntN(yankOneIn) == 0}
		if i > 0 && rng.IntN(10) < 8 {
			var j int
			if rng.IntN(4) != 0 {
				j = i - 1 - rng.IntN(min(i, nearBound)) // near: forces long chains
			} else {
				j = rng.IntN(i)
			}
			m := vs[j]
			if rng.IntN(5) == 0 && m.Prerelease() == "" {
				m = MustParseVersion(m.String() + "-0") // a bound below vs[j], named by no entry
			}
			e.Upgrade.MinUpgradeFrom = &m
		}
		entries[i] = e
	}
	rng.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
	return entries
}

func TestPlanUpgradeProperties(t *testing.T) {
	for seed := uint64(1); seed <= 2000; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x9a7f))
		n := 2 + rng.IntN(199)
		if seed%3 == 0 {
			n = 2 + rng.IntN(11) // small catalogs: enumerate every shortest chain
		}
		entries := randomCatalog(rng, n)
		sorted := slices.Clone(entries)
		slices.SortFunc(sorted, func(a, b CatalogEntry) int { return Compare(a.Version, b.Version) })
		i := rng.IntN(n - 1)
		if rng.IntN(2) == 0 {
			i = rng.IntN((n + 2) / 3) // far apart: long chains
		}
		j := i + 1 + rng.IntN(n-1-i)
		installed, target := sorted[i].Version, sorted[j].Version
		if rng.IntN(5) == 0 { // an installed version the catalog no longer lists
			entries = slices.DeleteFunc(entries, func(e CatalogEntry) bool { return e.Version == installed })
		}
		targetYanked := false
		for k := range entries {
			if entries[k].Version == target {
				if rng.IntN(10) != 0 {
					entries[k].Yanked = false
				}
				targetYanked = entries[k].Yanked
			}
		}
		in := fmt.Sprintf("seed %d: %s -> %s over %d versions", seed, installed, target, len(entries))

		plan, err := PlanUpgrade(installed, target, entries, PathAuto)
		if targetYanked {
			if ErrorType(err) != ProblemVersionYanked {
				t.Errorf("PlanUpgrade(%v) = %v, want version-yanked", in, err)
			}
			continue
		}
		nodes, adj := bruteGraph(installed, target, entries)
		want, ok := bruteBest(nodes, adj)
		if !ok {
			if ErrorType(err) != ProblemNoUpgradePath {
				t.Errorf("PlanUpgrade(%v) = %v, %v; want no-upgrade-path (brute force finds none)", in, versionStrings(plan.Hops), err)
			}
			continue
		}
		if err != nil {
			t.Errorf("PlanUpgrade(%v) error %v, want %v", in, err, versionStrings(want))
			continue
		}
		hops := plan.Hops
		// The path is valid on its own terms.
		byVersion := map[Version]CatalogEntry{}
		for _, e := range entries {
			byVersion[e.Version] = e
		}
		prev := installed
		for k, h := range hops {
			e, inCatalog := byVersion[h]
			switch {
			case !inCatalog:
				t.Errorf("PlanUpgrade(%v) hop %s is not a catalog version", in, h)
			case !prev.Less(h):
				t.Errorf("PlanUpgrade(%v) = %v is not strictly increasing at %s", in, versionStrings(hops), h)
			case !e.Upgrade.AllowsDirectFrom(prev):
				t.Errorf("PlanUpgrade(%v) hop %s -> %s breaks minUpgradeFrom %s", in, prev, h, e.Upgrade.MinUpgradeFrom)
			case e.Yanked && k < len(hops)-1:
				t.Errorf("PlanUpgrade(%v) uses the yanked %s as an intermediate", in, h)
			}
			prev = h
		}
		if len(hops) == 0 || hops[len(hops)-1] != target {
			t.Errorf("PlanUpgrade(%v) = %v does not end with the target", in, versionStrings(hops))
		}
		// No shorter path exists, and ties go to the highest chain.
		if len(hops) != len(want) {
			t.Errorf("PlanUpgrade(%v) = %d hops %v, want %d hops %v", in, len(hops), versionStrings(hops), len(want), versionStrings(want))
		} else if !slices.Equal(hops, want) {
			t.Errorf("PlanUpgrade(%v) = %v, want the highest shortest chain %v", in, versionStrings(hops), versionStrings(want))
		}
		if plan.Direct != (len(hops) == 1) {
			t.Errorf("PlanUpgrade(%v).Direct = %v with %d hops", in, plan.Direct, len(hops))
		}
		if len(nodes) <= 14 {
			for _, other := range allShortest(nodes, adj, len(want)) {
				for k := range other {
					if hops[k].Less(other[k]) {
						t.Errorf("PlanUpgrade(%v) = %v, but the shortest chain %v is higher at hop %d", in, versionStrings(hops), versionStrings(other), k)
						break
					}
				}
			}
		}
		// path: direct refuses exactly the chains, with the same path.
		_, derr := PlanUpgrade(installed, target, entries, PathDirect)
		if len(hops) == 1 {
			if derr != nil {
				t.Errorf("PlanUpgrade(%v, direct) = %v, want the direct upgrade", in, derr)
			}
		} else {
			e := asError(t, derr)
			wantPath := append([]string{installed.String()}, versionStrings(hops)...)
			if e.Type != ProblemUpgradePathRequired || !slices.Equal(e.Extra["path"].([]string), wantPath) {
				t.Errorf("PlanUpgrade(%v, direct) = %v %v, want upgrade-path-required with path %v", in, e.Type, e.Extra["path"], wantPath)
			}
		}
	}
}
