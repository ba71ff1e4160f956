package lifecycle

import "testing"

func TestCheckImmutable(t *testing.T) {
	imm := func(n string) bool { return n == "region" }
	for _, tc := range []struct {
		name          string
		current, next map[string]any
		want          Code
	}{
		{"unchanged", map[string]any{"region": "eu", "g": 1}, map[string]any{"region": "eu", "g": 2}, ""},
		{"same number spelled differently", map[string]any{"region": 30}, map[string]any{"region": 30.0}, ""},
		{"changed", map[string]any{"region": "eu"}, map[string]any{"region": "us"}, EINVALID},
		{"dropped by the new version", map[string]any{"region": "eu"}, map[string]any{}, ""},
		{"new in the new version", map[string]any{}, map[string]any{"region": "us"}, ""},
	} {
		err := CheckImmutable(tc.current, tc.next, imm)
		if ErrorCode(err) != tc.want {
			t.Errorf("%s: CheckImmutable = %v, want code %q", tc.name, err, tc.want)
		}
		if err != nil && ErrorType(err) != "immutable-parameter" {
			t.Errorf("%s: type %q", tc.name, ErrorType(err))
		}
	}
}
