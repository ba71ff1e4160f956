package lifecycle

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"
)

func TestSortKeyOrdersLikeCompare(t *testing.T) {
	fixed := []string{
		"0.0.0", "0.0.1", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
		"1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.9.0", "1.10.0", "2.0.0",
		"1.0.0-a-b", "1.0.0-a.b", "1.0.0-a", "1.0.0-ab", "1.0.0-0", "1.0.0-9", "1.0.0-10",
		"1.0.0-18446744073709551615", "1.0.0-a.18446744073709551615", "18446744073709551615.0.0",
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

// TestSortKeyOrdersLikeTheLibrary is the property that lets the database
// order versions: for random versions, the byte order of SortKey equals
// github.com/Masterminds/semver/v3's precedence, computed by the library
// directly on the canonical spellings (not through Compare).
func TestSortKeyOrdersLikeTheLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	num := func() string {
		switch r.IntN(4) {
		case 0:
			return "0"
		case 1:
			return strconv.Itoa(r.IntN(12))
		case 2:
			return strconv.FormatUint(r.Uint64(), 10)
		}
		return strconv.Itoa(r.IntN(1000))
	}
	ident := func() string {
		if r.IntN(2) == 0 {
			return num()
		}
		const chars = "-0123456789ABCZabcz"
		b := make([]byte, 1+r.IntN(4))
		for i := range b {
			b[i] = chars[r.IntN(len(chars))]
		}
		if isNumeric(string(b)) {
			return "x" + string(b) // a numeric one must not have a leading zero
		}
		return string(b)
	}
	var vs []Version
	for range 3000 {
		s := num() + "." + num() + "." + num()
		if n := r.IntN(4); n > 0 {
			ids := make([]string, n)
			for i := range ids {
				ids[i] = ident()
			}
			s += "-" + strings.Join(ids, ".")
		}
		vs = append(vs, MustParseVersion(s))
	}
	for i := range 20000 {
		a, b := vs[r.IntN(len(vs))], vs[r.IntN(len(vs))]
		if i%7 == 0 {
			b = a
		}
		want := semver.MustParse(a.String()).Compare(semver.MustParse(b.String()))
		if got := strings.Compare(a.SortKey(), b.SortKey()); got != want {
			t.Fatalf("strings.Compare(SortKey(%s), SortKey(%s)) = %d, want the library's %d", a, b, got, want)
		}
	}
}
