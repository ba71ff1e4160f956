package lifecycle

import (
	"fmt"
	"testing"
	"time"
)

// mixedFleet returns n deployments, one in three on 1.0.0 and the others on
// 1.5.0, each on its own device of one of 1,000 clients.
func mixedFleet(n int) []MemberFacts {
	out := make([]MemberFacts, n)
	for i := range out {
		v := "1.5.0"
		if i%3 == 0 {
			v = "1.0.0"
		}
		m := member(v)
		m.Key = MemberKey{fmt.Sprintf("client-%04d", i%1000), fmt.Sprintf("device-%06d", i), fmt.Sprintf("dep-%06d", i)}
		out[i] = m
	}
	return out
}

// BenchmarkClassifyUpgrade100k classifies 100,000 deployments of a mixed
// fleet for an upgrade to 2.0.0 with path auto, resolves the default waves
// and assigns them: the pure part of planning or starting a rollout over
// 100,000 deployments (the issue asks under 2 s for the whole plan).
func BenchmarkClassifyUpgrade100k(b *testing.B) {
	fleet := mixedFleet(100_000)
	s := RolloutSettings{Action: RolloutUpgrade, Target: MustParseVersion("2.0.0"), Path: PathAuto, NotSeenFor: time.Hour}
	b.ReportAllocs()
	for b.Loop() {
		c, err := NewClassifier(s, clVersions(), clNow)
		if err != nil {
			b.Fatal(err)
		}
		keys := make([]MemberKey, 0, len(fleet))
		for _, m := range fleet {
			if x := c.Classify(m); x.Eligible {
				keys = append(keys, m.Key)
			}
		}
		waves, err := ResolveWaveSizes(DefaultWaves(), len(keys), true)
		if err != nil {
			b.Fatal(err)
		}
		sizes := make([]int, len(waves))
		for i, w := range waves {
			sizes[i] = w.Size
		}
		if _, err := AssignWaves(keys, sizes); err != nil {
			b.Fatal(err)
		}
		if len(keys) != len(fleet) {
			b.Fatalf("%d of %d eligible", len(keys), len(fleet))
		}
	}
}
