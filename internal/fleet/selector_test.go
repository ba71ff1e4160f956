package fleet

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

func TestParseSelector(t *testing.T) {
	tests := []struct {
		sel  string
		want Selector
	}{
		{"", nil},
		{"site=alfa", Selector{{Key: "site", Op: OpEquals, Value: "alfa"}}},
		{"site==alfa", Selector{{Key: "site", Op: OpEquals, Value: "alfa"}}},
		{"site!=bravo", Selector{{Key: "site", Op: OpNotEquals, Value: "bravo"}}},
		{"tier", Selector{{Key: "tier", Op: OpExists}}},
		{"!tier", Selector{{Key: "tier", Op: OpNotExists}}},
		{" site = alfa , !absent ", Selector{{Key: "site", Op: OpEquals, Value: "alfa"}, {Key: "absent", Op: OpNotExists}}},
		{"example.com/zone=1", Selector{{Key: "example.com/zone", Op: OpEquals, Value: "1"}}},
		{"site=", Selector{{Key: "site", Op: OpEquals, Value: ""}}},
	}
	for _, tt := range tests {
		sel, err := ParseSelector(tt.sel)
		require.NoError(t, err, tt.sel)
		assert.Equal(t, tt.want, sel, "ParseSelector(%q)", tt.sel)
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
	})
}
