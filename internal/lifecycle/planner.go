package lifecycle

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// CatalogEntry is one version of an application as the catalog knows it:
// the version, whether it is yanked, and the upgrade policy its description
// declares for reaching it.
type CatalogEntry struct {
	Version Version
	Yanked  bool
	Upgrade UpgradePolicy
}

// PathMode says what an upgrade does when its target cannot be reached
// directly from the installed version (design section 4, "Upgrade").
type PathMode string

// The path modes.
const (
	// PathDirect allows only a direct upgrade; a blocked one is refused with
	// the computed path. It is the default, so that nothing surprising
	// happens.
	PathDirect PathMode = "direct"
	// PathAuto runs the computed chain of hops one after the other.
	PathAuto PathMode = "auto"
)

// Valid reports whether m is one of the declared modes. The empty mode is
// not valid; PlanUpgrade reads it as PathDirect.
func (m PathMode) Valid() bool { return m == PathDirect || m == PathAuto }

// Plan is the outcome of PlanUpgrade.
type Plan struct {
	// Hops are the versions to publish, in order, ending with the target:
	// one hop for a direct upgrade. Every hop is a revision that must reach
	// installed before the next one is published. Nil when PlanUpgrade
	// refuses.
	Hops []Version `json:"hops"`
	// Direct says the target is reached in one hop.
	Direct bool `json:"direct"`
	// Checks lists the checks evaluated, in order, passed or not: also when
	// PlanUpgrade refuses, for dry runs.
	Checks []Check `json:"checks"`
}

// Problem types of the planner's errors (and of the rollback and parameter
// rules that share them).
const (
	ProblemNotFound                  = "not-found"                   // ENOTFOUND: the target version is not in the catalog
	ProblemInvalidRequest            = "invalid-request"             // EINVALID: a request member has a bad value
	ProblemInvalidVersion            = "invalid-version"             // EINVALID: a version is missing
	ProblemVersionYanked             = "version-yanked"              // EINVALID: the target version is yanked
	ProblemAlreadyAtVersion          = "already-at-version"          // EINVALID: target == installed
	ProblemDowngradeRequiresRollback = "downgrade-requires-rollback" // EINVALID: an upgrade to a lower version
	ProblemUpgradePathRequired       = "upgrade-path-required"       // EINVALID: not direct, path: direct
	ProblemNoUpgradePath             = "no-upgrade-path"             // EINVALID: no chain reaches the target
)

// maxPathShown bounds how many versions a message spells out; Extra always
// carries the whole path.
const maxPathShown = 10

// PlanUpgrade plans the upgrade of a deployment running installed to target,
// given every version of the application in the catalog (entries, in any
// order; installed need not be among them, target must). mode "" means
// PathDirect. The rules (design section 4, "Upgrade"):
//
//   - target must be in the catalog, newer than installed, and not yanked;
//   - the upgrade is direct when installed >= target's minUpgradeFrom (or
//     target declares none): Plan{Hops: [target], Direct: true};
//   - otherwise the planner looks for the shortest chain installed -> V1 ->
//     … -> target whose intermediates are catalog versions strictly between
//     installed and target, not yanked, strictly increasing, where every hop
//     a -> b satisfies b's minUpgradeFrom <= a. Prereleases are catalog
//     versions like any other and may be intermediates;
//   - tie-break: among all shortest chains it returns the one with the
//     highest intermediates. Precisely: its i-th intermediate is >= the
//     i-th intermediate of every other shortest chain, for every i. Such a
//     chain always exists, because the position-wise maximum of two shortest
//     chains is itself a valid shortest chain (each hop's target keeps a
//     predecessor at least as high as before, and so still meets its
//     minUpgradeFrom). It is therefore also the chain that wins when chains
//     are compared intermediate by intermediate from the first to the last,
//     preferring the higher version at the first difference, and equally
//     when compared from the last to the first;
//   - with PathAuto a chain gives Plan{Hops: [V1, …, target], Direct: false}.
//
// The search runs in O(n log n) for n catalog versions without building the
// O(n²) edges (see shortestChain); entries already in ascending order (as
// the catalog lists them) skip the sort. PlanUpgrade never modifies entries.
//
// Errors (the returned Plan then has nil Hops and the Checks evaluated):
//   - EINVALID (type "invalid-request", FieldError /path) for a mode other
//     than "", direct and auto;
//   - EINVALID (type "invalid-version") if installed or target is the zero
//     Version;
//   - ENOTFOUND (type "not-found") if target is not in entries;
//   - EINVALID (type "already-at-version") if target == installed;
//   - EINVALID (type "downgrade-requires-rollback") if target < installed: a
//     move to a lower version is a rollback, governed by the installed
//     version's rollback policy (CheckRollback);
//   - EINVALID (type "version-yanked") if target is yanked;
//   - EINVALID (type "upgrade-path-required", Extra {"path": [installed, V1,
//     …, target] as strings, "minUpgradeFrom", "installed", "target"}) if a
//     chain is needed and mode is direct; the message names the path and
//     says to send path: auto;
//   - EINVALID (type "no-upgrade-path", Extra {"minUpgradeFrom",
//     "installed", "target"}) if a chain is needed and none exists;
//   - EINTERNAL if entries lists one version twice (the catalog stores each
//     version once, so that is a bug of the caller).
//
// Every refusal from not-found on carries Extra "installed" and "target" as
// canonical strings, besides the members listed.
func PlanUpgrade(installed, target Version, entries []CatalogEntry, mode PathMode) (Plan, error) {
	var plan Plan
	if mode == "" {
		mode = PathDirect
	}
	if !mode.Valid() {
		msg := fmt.Sprintf("path must be %q or %q, got %q", PathDirect, PathAuto, mode)
		return plan, &Error{Code: EINVALID, Type: ProblemInvalidRequest, Message: msg,
			Fields: []FieldError{{Pointer: "/path", Detail: msg}}}
	}
	if installed.IsZero() || target.IsZero() {
		return plan, &Error{Code: EINVALID, Type: ProblemInvalidVersion,
			Message: "an upgrade needs both the installed and the target version"}
	}
	is, ts := installed.String(), target.String()
	check := func(name string, passed bool, format string, args ...any) {
		plan.Checks = append(plan.Checks, Check{Name: name, Passed: passed, Detail: fmt.Sprintf(format, args...)})
	}
	extra := func(kv ...any) map[string]any {
		m := map[string]any{"installed": is, "target": ts}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}

	te := -1
	for i := range entries {
		if entries[i].Version == target {
			if te >= 0 {
				return plan, duplicateVersion(target)
			}
			te = i
		}
	}
	if te < 0 {
		check(CheckTargetExists, false, "%s is not in the catalog", ts)
		return plan, &Error{Code: ENOTFOUND, Type: ProblemNotFound,
			Message: fmt.Sprintf("Version %s is not in the catalog of this application.", ts), Extra: extra()}
	}
	entry := &entries[te]
	check(CheckTargetExists, true, "%s is in the catalog", ts)

	order := Compare(target, installed)
	switch {
	case order > 0:
		check(CheckTargetNewer, true, "%s is newer than the installed %s", ts, is)
	case order == 0:
		check(CheckTargetNewer, false, "the deployment already runs %s", ts)
	default:
		check(CheckTargetNewer, false, "%s is older than the installed %s: that is a rollback, not an upgrade", ts, is)
	}
	if entry.Yanked {
		check(CheckTargetNotYanked, false, "%s is yanked", ts)
	} else {
		check(CheckTargetNotYanked, true, "%s is not yanked", ts)
	}
	switch {
	case order == 0:
		return plan, &Error{Code: EINVALID, Type: ProblemAlreadyAtVersion, Extra: extra(),
			Message: fmt.Sprintf("The deployment already runs %s; there is nothing to upgrade. To change its parameters, reconfigure it.", ts)}
	case order < 0:
		return plan, &Error{Code: EINVALID, Type: ProblemDowngradeRequiresRollback, Extra: extra(),
			Message: fmt.Sprintf("%s is older than the installed %s. A move to a lower version is a rollback, not an upgrade: it is governed by the rollback policy of %s (lifecycle.rollback). Request a rollback instead.", ts, is, is)}
	case entry.Yanked:
		return plan, &Error{Code: EINVALID, Type: ProblemVersionYanked, Extra: extra(),
			Message: fmt.Sprintf("Version %s was yanked: it cannot be the target of an upgrade. Choose another version.", ts)}
	}

	minFrom := entry.Upgrade.MinUpgradeFrom
	if entry.Upgrade.AllowsDirectFrom(installed) {
		if minFrom == nil {
			check(CheckMinUpgradeFrom, true, "%s declares no minUpgradeFrom: every older version may upgrade to it directly", ts)
		} else {
			check(CheckMinUpgradeFrom, true, "the installed %s is at least %s, the minUpgradeFrom of %s", is, minFrom, ts)
		}
		check(CheckPath, true, "direct: %s -> %s", is, ts)
		plan.Hops, plan.Direct = []Version{target}, true
		return plan, nil
	}
	ms := minFrom.String()
	hops, err := shortestChain(installed, target, *minFrom, entries)
	if err != nil {
		return plan, err
	}
	if hops != nil && mode == PathAuto {
		// The rule holds hop by hop: each hop meets its own target's bound.
		check(CheckMinUpgradeFrom, true, "the installed %s is below %s, the minUpgradeFrom of %s, so the upgrade goes through intermediate versions, each hop meeting its own target's minUpgradeFrom", is, ms, ts)
	} else {
		check(CheckMinUpgradeFrom, false, "the installed %s is below %s, the minUpgradeFrom of %s: a direct upgrade is not allowed", is, ms, ts)
	}
	if hops == nil {
		check(CheckPath, false, "no chain of non-yanked catalog versions leads from %s to %s", is, ts)
		return plan, &Error{Code: EINVALID, Type: ProblemNoUpgradePath, Extra: extra("minUpgradeFrom", ms),
			Message: fmt.Sprintf("%s cannot be reached from %s: %s requires an installed version of at least %s (minUpgradeFrom), and no chain of non-yanked catalog versions between %s and %s leads there with every hop meeting its own target's minUpgradeFrom. A version that bridges the gap must be published (or un-yanked) first.", ts, is, ts, ms, is, ts)}
	}
	shown := formatPath(installed, hops)
	if mode == PathDirect {
		path := make([]string, 0, len(hops)+1)
		path = append(path, is)
		for _, h := range hops {
			path = append(path, h.String())
		}
		check(CheckPath, false, "path: direct, but %s needs %d hops: %s; use path: auto", ts, len(hops), shown)
		return plan, &Error{Code: EINVALID, Type: ProblemUpgradePathRequired,
			Extra:   extra("path", path, "minUpgradeFrom", ms),
			Message: fmt.Sprintf("%s cannot be reached directly from %s: %s requires an installed version of at least %s (minUpgradeFrom). The shortest safe path is %s. Send the request again with path: auto to run these %d hops one after the other, or upgrade one hop at a time.", ts, is, ts, ms, shown, len(hops))}
	}
	check(CheckPath, true, "auto: %s (%d hops, each installed before the next)", shown, len(hops))
	plan.Hops = hops
	return plan, nil
}

// formatPath spells the path from installed along hops for a message,
// joined with " -> ", eliding the middle of a long path (only the versions
// shown are formatted: a plan of 1,000 hops stays cheap).
func formatPath(installed Version, hops []Version) string {
	n := len(hops) + 1
	at := func(i int) string {
		if i == 0 {
			return installed.String()
		}
		return hops[i-1].String()
	}
	var b strings.Builder
	for i := 0; i < n; i++ {
		if n > maxPathShown && i == maxPathShown-3 {
			fmt.Fprintf(&b, " -> … (%d more) …", n-maxPathShown+1)
			i = n - 3
			continue
		}
		if i > 0 {
			b.WriteString(" -> ")
		}
		b.WriteString(at(i))
	}
	return b.String()
}

func duplicateVersion(v Version) error {
	return &Error{Code: EINTERNAL, Type: string(EINTERNAL),
		Message: fmt.Sprintf("the catalog entries list version %s more than once", v)}
}

// chainNode is one vertex of the upgrade graph: a version and the
// minUpgradeFrom of reaching it (nil: from anywhere). It points into the
// caller's entries, so that sorting moves two words, not whole versions.
type chainNode struct {
	v   *Version
	min *Version
}

func compareNodes(a, b chainNode) int { return compareRefs(a.v, b.v) }

// compareRefs is Compare for two non-zero versions, without copying them.
func compareRefs(a, b *Version) int { return a.sv.Compare(&b.sv) }

// shortestChain returns the hops (intermediates, then target) of the
// preferred shortest chain from installed to target, which declares
// minUpgradeFrom minFrom, or nil if there is none. It assumes installed < target
// and installed < minFrom.
//
// The graph has an edge a -> b iff a < b and b.min <= a. Sorted ascending,
// the predecessors of b are therefore the contiguous index range
// [first index >= b.min, b), so the shortest distance from installed is a DP
// in ascending order: dist[b] = 1 + min(dist over that range). The range
// always ends at the current node, so a monotonic stack (indices ascending,
// distances strictly ascending; a new node pops every entry whose distance
// is >= its own) answers "minimum over [lo, current)" by binary search: the
// first stack entry with index >= lo. Because equal distances pop, that
// entry is the HIGHEST node with the minimal distance in the range. Following
// these predecessors back from target picks the highest possible last
// intermediate, then the highest possible one before it, and so on, which is
// the position-wise highest shortest chain (see PlanUpgrade).
//
// Cost: O(n) to filter, O(n log n) to sort (skipped when entries are sorted),
// O(n log n) for the DP; no edges are materialised.
func shortestChain(installed, target, minFrom Version, entries []CatalogEntry) ([]Version, error) {
	nodes := make([]chainNode, 1, len(entries)+2)
	nodes[0] = chainNode{v: &installed}
	for i := range entries {
		e := &entries[i]
		if e.Yanked || compareRefs(&e.Version, &installed) <= 0 || compareRefs(&e.Version, &target) >= 0 {
			continue
		}
		nodes = append(nodes, chainNode{v: &e.Version, min: e.Upgrade.MinUpgradeFrom})
	}
	if mid := nodes[1:]; !slices.IsSortedFunc(mid, compareNodes) {
		slices.SortFunc(mid, compareNodes)
	}
	for i := 2; i < len(nodes); i++ {
		if *nodes[i].v == *nodes[i-1].v {
			return nil, duplicateVersion(*nodes[i].v)
		}
	}
	nodes = append(nodes, chainNode{v: &target, min: &minFrom})

	n := len(nodes)
	dist := make([]int32, n) // -1: unreachable
	pred := make([]int32, n)
	stack := make([]int32, 1, n) // node indices; dist strictly increasing
	stack[0] = 0
	for j := 1; j < n; j++ {
		lo := 0
		if m := nodes[j].min; m != nil {
			lo = sort.Search(j, func(i int) bool { return compareRefs(nodes[i].v, m) >= 0 })
		}
		k := sort.Search(len(stack), func(i int) bool { return int(stack[i]) >= lo })
		if k == len(stack) {
			dist[j] = -1
			continue
		}
		p := stack[k]
		dist[j], pred[j] = dist[p]+1, p
		for len(stack) > 0 && dist[stack[len(stack)-1]] >= dist[j] {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, int32(j))
	}
	if dist[n-1] < 0 {
		return nil, nil
	}
	hops := make([]Version, dist[n-1])
	for i, j := len(hops)-1, int32(n-1); i >= 0; i, j = i-1, pred[j] {
		hops[i] = *nodes[j].v
	}
	return hops, nil
}
