package lifecycle

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestSortKeyOrdersLikeCompare(t *testing.T) {
	fixed := []string{
		"0.0.0", "0.0.1", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
		"1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.9.0", "1.10.0", "2.0.0",
		"1.0.0-a-b", "1.0.0-a.b", "1.0.0-a", "1.0.0-ab", "1.0.0-0", "1.0.0-9", "1.0.0-10",
		"1.0.0-99999999999999999999999", "1.0.0-a.99999999999999999999999", "18446744073709551615.0.0",
	}
	var vs []Version
	for _, s := range fixed {
		vs = append(vs, MustParseVersion(s))
	}
	r := rand.New(rand.NewPCG(1, 2))
	ids := []string{"0", "1", "2", "10", "alpha", "beta", "a-b", "a", "rc", "x1", "1x", "-"}
	for range 400 {
		s := []string{"0", "1", "2", "10"}[r.IntN(4)] + "." + []string{"0", "1", "10"}[r.IntN(3)] + "." + []string{"0", "3"}[r.IntN(2)]
		if n := r.IntN(4); n > 0 {
			var parts []string
			for range n {
				parts = append(parts, ids[r.IntN(len(ids))])
			}
			s += "-" + strings.Join(parts, ".")
		}
		vs = append(vs, MustParseVersion(s))
	}
	for _, a := range vs {
		for _, b := range vs {
			want := Compare(a, b)
			got := strings.Compare(a.SortKey(), b.SortKey())
			if got != want {
				t.Fatalf("strings.Compare(SortKey(%s), SortKey(%s)) = %d, want Compare = %d (keys %q, %q)", a, b, got, want, a.SortKey(), b.SortKey())
			}
		}
	}
}
