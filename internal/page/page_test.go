package page

import (
	"testing"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		limit   int
		cursor  string
		want    int
		wantKey string
		code    lifecycle.Code
	}{
		{0, "", DefaultLimit, "", ""},
		{1, "", 1, "", ""},
		{MaxLimit, Encode("k"), MaxLimit, "k", ""},
		{-1, "", 0, "", lifecycle.EINVALID},
		{MaxLimit + 1, "", 0, "", lifecycle.EINVALID},
		{10, "!!", 0, "", lifecycle.EINVALID},
	} {
		got, key, err := Args(tc.limit, tc.cursor)
		if lifecycle.ErrorCode(err) != tc.code || (err == nil && (got != tc.want || key != tc.wantKey)) {
			t.Errorf("Args(%d, %q) = %d, %q, %v; want %d, %q, %s", tc.limit, tc.cursor, got, key, err, tc.want, tc.wantKey, tc.code)
		}
	}
}

// FuzzDecode: a cursor from a query string never panics and round-trips.
func FuzzDecode(f *testing.F) {
	f.Add("")
	f.Add(Encode("2026-01-01T00:00:00Z|00000000-0000-4000-8000-000000000000"))
	f.Add("!!")
	f.Fuzz(func(t *testing.T, c string) {
		key, err := Decode(c)
		if err != nil {
			if lifecycle.ErrorCode(err) != lifecycle.EINVALID {
				t.Fatalf("Decode(%q) error %v", c, err)
			}
			return
		}
		if len(key) > maxKey {
			t.Fatalf("Decode(%q) key of %d bytes", c, len(key))
		}
		if k2, err := Decode(Encode(key)); err != nil || k2 != key {
			t.Fatalf("round trip of %q: %q, %v", key, k2, err)
		}
	})
}
