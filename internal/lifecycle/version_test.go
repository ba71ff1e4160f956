package lifecycle

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in    string
		want  string // canonical spelling
		major uint64
		minor uint64
		patch uint64
		pre   string
	}{
		{"1.0.0", "1.0.0", 1, 0, 0, ""},
		{"1.0", "1.0.0", 1, 0, 0, ""},
		{"1", "1.0.0", 1, 0, 0, ""},
		{"0", "0.0.0", 0, 0, 0, ""},
		{"0.0.0", "0.0.0", 0, 0, 0, ""},
		{"1.2.3", "1.2.3", 1, 2, 3, ""},
		{"10.20.30", "10.20.30", 10, 20, 30, ""},
		{"1.2.3-alpha", "1.2.3-alpha", 1, 2, 3, "alpha"},
		{"1.2.3-alpha.1", "1.2.3-alpha.1", 1, 2, 3, "alpha.1"},
		{"1.2.3-0.3.7", "1.2.3-0.3.7", 1, 2, 3, "0.3.7"},
		{"1.2.3-x.7.z.92", "1.2.3-x.7.z.92", 1, 2, 3, "x.7.z.92"},
		{"1.0.0-x-y-z.--", "1.0.0-x-y-z.--", 1, 0, 0, "x-y-z.--"},
		{"1.2-rc.1", "1.2.0-rc.1", 1, 2, 0, "rc.1"},
		{"1-beta", "1.0.0-beta", 1, 0, 0, "beta"},
		{"18446744073709551615.0.0", "18446744073709551615.0.0", 1<<64 - 1, 0, 0, ""},
	}
	for _, tt := range tests {
		v, err := ParseVersion(tt.in)
		require.NoError(t, err, "ParseVersion(%q)", tt.in)
		if v.String() != tt.want || v.Major() != tt.major || v.Minor() != tt.minor || v.Patch() != tt.patch || v.Prerelease() != tt.pre {
			t.Errorf("ParseVersion(%q) = %s (%d %d %d %q), want %s", tt.in, v, v.Major(), v.Minor(), v.Patch(), v.Prerelease(), tt.want)
		}
		if v.IsZero() {
			t.Errorf("ParseVersion(%q).IsZero() = true, want false", tt.in)
		}
		again, err := ParseVersion(v.String())
		require.NoError(t, err)
		if again != v {
			t.Errorf("ParseVersion(%q) = %#v, want %#v (round trip of %q)", v.String(), again, v, tt.in)
		}
	}
}

func TestParseVersionSpellingsAreOneVersion(t *testing.T) {
	a, b, c := MustParseVersion("1"), MustParseVersion("1.0"), MustParseVersion("1.0.0")
	if a != b || b != c || !a.Equal(c) || Compare(a, c) != 0 {
		t.Errorf("1, 1.0, 1.0.0 = %#v %#v %#v, want one version", a, b, c)
	}
	m := map[Version]string{a: "x"}
	if m[c] != "x" {
		t.Errorf("map lookup by 1.0.0 after storing 1 failed")
	}
}

func TestParseVersionInvalid(t *testing.T) {
	tests := []struct {
		in   string
		hint string // part of the message
	}{
		{"", "empty"},
		{"latest", "not SemVer"},
		{"1.0.0.0", "more than three numbers"},
		{"v1.2.3", `leading "v"`},
		{"V1.2.3", `leading "V"`},
		{"1.2.3+build.5", "build metadata"},
		{"1.2.3-rc.1+sha.abc", "build metadata"},
		{"1.2.3+", "build metadata"},
		{" 1.2.3", "spaces"},
		{"1.2.3 ", "spaces"},
		{"01.2.3", "leading zero"},
		{"1.02.3", "leading zero"},
		{"1.2.03", "leading zero"},
		{"1.2.3-01", "leading zero"},
		{"1.2.3-", "empty prerelease"},
		{"1.2.3-a..b", "empty prerelease identifier"},
		{"1.2.3-a_b", "letters, digits"},
		{"1..3", "is empty"},
		{"1.2.", "is empty"},
		{".1.2", "is empty"},
		{"-1.2.3", "is empty"},
		{"1.2.x", "not a number"},
		{"18446744073709551616.0.0", "too large"},
		{"1.0.0-99999999999999999999", "too large"},
		{"1.0.0-a.18446744073709551616", "too large"},
		{"vlatest", "not SemVer"},
		{"1.2.3-ü", "letters, digits"},
		{strings.Repeat("1", MaxVersionLength+1), "longer than"},
	}
	for _, tt := range tests {
		v, err := ParseVersion(tt.in)
		if err == nil {
			t.Errorf("ParseVersion(%q) = %s, want error", tt.in, v)
			continue
		}
		var e *Error
		require.True(t, errors.As(err, &e), "ParseVersion(%q) error %T, want *Error", tt.in, err)
		if e.Code != EINVALID || e.Type != "invalid-version" {
			t.Errorf("ParseVersion(%q) error = %s/%s, want %s/invalid-version", tt.in, e.Code, e.Type, EINVALID)
		}
		if !strings.Contains(e.Message, tt.hint) {
			t.Errorf("ParseVersion(%q) message = %q, want it to mention %q", tt.in, e.Message, tt.hint)
		}
		if !v.IsZero() {
			t.Errorf("ParseVersion(%q) returned %#v with its error, want the zero Version", tt.in, v)
		}
	}
}

func TestCompare(t *testing.T) {
	// Each version precedes the next (SemVer 2.0 rule 11 and its example).
	ordered := []string{
		"0.0.0",
		"0.0.1",
		"0.1.0",
		"0.9.9",
		"1.0.0-0",
		"1.0.0-1",
		"1.0.0-2",
		"1.0.0-10",
		"1.0.0-alpha",
		"1.0.0-alpha.1",
		"1.0.0-alpha.beta",
		"1.0.0-beta",
		"1.0.0-beta.2",
		"1.0.0-beta.11",
		"1.0.0-rc.1",
		"1.0.0",
		"1.0.1",
		"1.1.0",
		"1.9.0",
		"1.10.0",
		"2.0.0",
		"10.0.0",
		"18446744073709551615.0.0",
	}
	vs := make([]Version, len(ordered))
	for i, s := range ordered {
		vs[i] = MustParseVersion(s)
	}
	for i := range vs {
		for j := range vs {
			want := 0
			switch {
			case i < j:
				want = -1
			case i > j:
				want = 1
			}
			if got := Compare(vs[i], vs[j]); got != want {
				t.Errorf("Compare(%s, %s) = %d, want %d", vs[i], vs[j], got, want)
			}
			if got := vs[i].Less(vs[j]); got != (want < 0) {
				t.Errorf("%s.Less(%s) = %v, want %v", vs[i], vs[j], got, want < 0)
			}
			if got := vs[i].Equal(vs[j]); got != (want == 0) {
				t.Errorf("%s.Equal(%s) = %v, want %v", vs[i], vs[j], got, want == 0)
			}
		}
	}

	shuffled := slices.Clone(vs)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	slices.SortFunc(shuffled, Compare)
	if !slices.Equal(shuffled, vs) {
		t.Errorf("sorted by Compare = %v, want %v", shuffled, vs)
	}
}

func TestZeroVersion(t *testing.T) {
	var z Version
	if !z.IsZero() || z.String() != "" {
		t.Errorf("zero Version: IsZero %v String %q, want true \"\"", z.IsZero(), z.String())
	}
	v0 := MustParseVersion("0.0.0")
	if z == v0 || Compare(z, v0) != -1 || Compare(v0, z) != 1 || Compare(z, z) != 0 {
		t.Errorf("zero Version must precede and differ from 0.0.0")
	}
}

func TestVersionText(t *testing.T) {
	type doc struct {
		V Version  `json:"v"`
		P *Version `json:"p,omitempty"`
	}
	b, err := json.Marshal(doc{V: MustParseVersion("1.2")})
	require.NoError(t, err)
	if string(b) != `{"v":"1.2.0"}` {
		t.Errorf("json.Marshal = %s, want {\"v\":\"1.2.0\"}", b)
	}
	var d doc
	require.NoError(t, json.Unmarshal([]byte(`{"v":"2.0-rc.1"}`), &d))
	if d.V != MustParseVersion("2.0.0-rc.1") {
		t.Errorf("json.Unmarshal = %s, want 2.0.0-rc.1", d.V)
	}
	err = json.Unmarshal([]byte(`{"v":"latest"}`), &d)
	if ErrorCode(err) != EINVALID {
		t.Errorf("json.Unmarshal(latest) error = %v, want code %s", err, EINVALID)
	}
}

func TestMustParseVersionPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("MustParseVersion(latest) did not panic")
		}
	}()
	MustParseVersion("latest")
}

// FuzzParseVersion checks that parsing never panics, that refusals are
// EINVALID, and that the canonical spelling reads back to the same version.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"1", "1.0", "1.2.3", "1.0.0-alpha.1", "v1.2.3", "1.2.3+b", "01.2.3", "1.2.3-0a", "latest", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err != nil {
			if ErrorCode(err) != EINVALID || !v.IsZero() {
				t.Fatalf("ParseVersion(%q) = %#v, %v; want the zero Version and EINVALID", s, v, err)
			}
			return
		}
		again, err := ParseVersion(v.String())
		if err != nil || again != v || Compare(again, v) != 0 {
			t.Fatalf("ParseVersion(%q) = %s, which reads back as %#v, %v", s, v, again, err)
		}
	})
}
