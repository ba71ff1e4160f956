package fleet

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

func TestParseSelector(t *testing.T) {
	labels := map[string]any{"site": "alfa", "tier": "edge", "cores": 4, "gpu": true}
	for _, tc := range []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"site=alfa", true}, {"site==alfa", true}, {"site=bravo", false},
		{"site!=bravo", true}, {"site!=alfa", false}, {"absent!=x", true},
		{"tier", true}, {"absent", false}, {"!absent", true}, {"!tier", false},
		{"site=alfa,tier=edge", true}, {"site=alfa,tier=core", false},
		{"cores=4", true}, {"gpu=true", true}, {" site = alfa , !absent ", true},
		{"example.com/zone=1", false},
	} {
		sel, err := ParseSelector(tc.sel)
		require.NoError(t, err, tc.sel)
		assert.Equal(t, tc.want, sel.Matches(labels), "ParseSelector(%q).Matches", tc.sel)
	}
	for _, bad := range []string{",", "site=alfa,", "=x", "!", "a b=c", "k=v=w", "-k=v"} {
		_, err := ParseSelector(bad)
		require.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "ParseSelector(%q) = %v, want EINVALID", bad, err)
	}
}

// FuzzParseSelector: untrusted query input never panics; whatever parses
// has bounded terms and valid keys.
func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"", "site=alfa", "a!=b,!c,d", "example.com/zone==1", ",,", "!", "k=v=w"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := ParseSelector(s)
		if err != nil {
			if lifecycle.ErrorCode(err) != lifecycle.EINVALID {
				t.Fatalf("ParseSelector(%q) error %v is not EINVALID", s, err)
			}
			return
		}
		if len(sel) > MaxSelectorTerms {
			t.Fatalf("ParseSelector(%q) = %d terms", s, len(sel))
		}
		for _, r := range sel {
			if !labelKey.MatchString(r.Key) {
				t.Fatalf("ParseSelector(%q) accepted key %q", s, r.Key)
			}
		}
		sel.Matches(map[string]any{"a": "b"})
	})
}
