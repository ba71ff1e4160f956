package lifecycle

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// longChainCatalog returns n versions 0.0.0, 0.1.0, … in which every version
// but the first can be reached only from its immediate predecessor, so that
// going from the first to the last takes n-1 hops: the longest chain n
// versions allow, and the most work for the planner's DP and path rebuild.
func longChainCatalog(n int) []CatalogEntry {
	entries := make([]CatalogEntry, n)
	for i := range entries {
		entries[i].Version = MustParseVersion(fmt.Sprintf("%d.%d.0", i/100, i%100))
		if i > 0 {
			prev := entries[i-1].Version
			entries[i].Upgrade.MinUpgradeFrom = &prev
		}
	}
	return entries
}

// wideCatalog returns n versions where each version's minUpgradeFrom lies
// 2 to 8 versions below it and about one in five versions is yanked (never
// two in a row, so a chain always exists): many chains of equal length, so
// the tie-break does real work.
func wideCatalog(n int, rng *rand.Rand) []CatalogEntry {
	entries := longChainCatalog(n)
	for i := 1; i < n; i++ {
		j := max(0, i-2-rng.IntN(7))
		m := entries[j].Version
		entries[i].Upgrade.MinUpgradeFrom = &m
		entries[i].Yanked = i < n-1 && !entries[i-1].Yanked && rng.IntN(4) == 0
	}
	return entries
}

func shuffled(entries []CatalogEntry, seed uint64) []CatalogEntry {
	out := append([]CatalogEntry(nil), entries...)
	rand.New(rand.NewPCG(seed, seed)).Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// BenchmarkPlanUpgrade1000 plans one upgrade over a catalog of 1,000
// versions (design section 11: < 1 ms). Each case checks its outcome once
// before timing, so that it measures the plan it names.
func BenchmarkPlanUpgrade1000(b *testing.B) {
	const n = 1000
	chain := longChainCatalog(n)
	first, last := chain[0].Version, chain[n-1].Version
	wide := wideCatalog(n, rand.New(rand.NewPCG(7, 7)))
	direct := longChainCatalog(n)
	direct[n-1].Upgrade.MinUpgradeFrom = nil

	cases := []struct {
		name    string
		entries []CatalogEntry
		mode    PathMode
		hops    int    // want len(Hops), 0 for a refusal
		refusal string // want this problem type
	}{
		// The worst case: 999 hops, input in random order (sorting included).
		{"chain999/auto/shuffled", shuffled(chain, 1), PathAuto, n - 1, ""},
		{"chain999/auto/sorted", chain, PathAuto, n - 1, ""},
		// The refusal builds the 1,000-version path for Extra.
		{"chain999/direct-refused/shuffled", shuffled(chain, 1), PathDirect, 0, ProblemUpgradePathRequired},
		{"wide/auto/shuffled", shuffled(wide, 2), PathAuto, -1, ""},
		{"direct/shuffled", shuffled(direct, 3), PathDirect, 1, ""},
	}
	for _, c := range cases {
		plan, err := PlanUpgrade(first, last, c.entries, c.mode)
		switch {
		case c.refusal != "" && ErrorType(err) != c.refusal:
			b.Fatalf("%s: PlanUpgrade = %v, want %s", c.name, err, c.refusal)
		case c.refusal == "" && err != nil:
			b.Fatalf("%s: PlanUpgrade error %v", c.name, err)
		case c.hops > 0 && len(plan.Hops) != c.hops:
			b.Fatalf("%s: PlanUpgrade = %d hops, want %d", c.name, len(plan.Hops), c.hops)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = PlanUpgrade(first, last, c.entries, c.mode)
			}
		})
	}
}
