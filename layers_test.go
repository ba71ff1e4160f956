package wfm_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLayers checks the dependency rules of docs/architecture.md that a
// reader would otherwise check by hand: the packages on the left must not
// depend, directly or not, on those on the right (test-only imports are not
// dependencies: `go list -deps` leaves them out).
func TestLayers(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	const mod = "github.com/wfm-dev/wfm/"
	tests := []struct {
		pkg       string
		forbidden []string
	}{
		{"internal/httpapi", []string{"internal/postgres", "internal/pglaunch"}},
		{"internal/fleet", []string{"internal/postgres", "internal/httpapi"}},
		{"internal/catalog", []string{"internal/postgres", "internal/httpapi"}},
		{"internal/access", []string{"internal/postgres", "internal/httpapi"}},
		{"internal/feed", []string{"internal/postgres", "internal/httpapi"}},
		{"internal/lifecycle", []string{"internal/"}},
		// Test support stays out of the binary (the development CA is internal/devpki).
		{"cmd/wfm", []string{"internal/testpki", "internal/pgtest", "internal/margotest"}},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			out, err := exec.Command(goBin, "list", "-deps", "./"+tt.pkg).Output()
			require.NoError(t, err)
			deps := strings.Fields(string(out))
			require.Contains(t, deps, mod+tt.pkg)
			for _, f := range tt.forbidden {
				i := slices.IndexFunc(deps, func(d string) bool {
					return d != mod+tt.pkg && strings.HasPrefix(d, mod+f)
				})
				if i >= 0 {
					t.Errorf("go list -deps ./%s contains %s, want no %s", tt.pkg, deps[i], mod+f)
				}
			}
		})
	}
}
