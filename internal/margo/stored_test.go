package margo

import (
	"testing"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// TestDurationRangesWhenPublishingAndWhenStored: publishing refuses a
// lifecycle duration outside its range; reading the same bytes as a stored
// version uses the value in range instead and records the substitution.
func TestDurationRangesWhenPublishingAndWhenStored(t *testing.T) {
	desc := func(lc string) []byte {
		return []byte("apiVersion: v1\nid: app\nmetadata:\n  name: App\n  version: \"2.0.0\"\n" +
			"deploymentProfiles:\n  - type: compose\n    id: p\n    components:\n      - name: c\n" + "lifecycle:\n" + lc)
	}
	tests := []struct {
		name, lc, pointer string
		drain, window     time.Duration
	}{
		{"drain 0s", "  upgrade:\n    drain:\n      timeout: 0s\n", "/upgrade/drain/timeout", lifecycle.DefaultDrainTimeout, 0},
		{"drain -1m", "  upgrade:\n    drain:\n      timeout: -1m\n", "/upgrade/drain/timeout", lifecycle.DefaultDrainTimeout, 0},
		{"drain 200h", "  upgrade:\n    drain:\n      timeout: 200h\n", "/upgrade/drain/timeout", 168 * time.Hour, 0},
		{"window 500ms", "  rollback:\n    allowed: true\n    window: 500ms\n", "/rollback/window", 0, time.Second},
		{"window 0s", "  rollback:\n    allowed: true\n    window: 0s\n", "/rollback/window", 0, time.Second},
		{"window 9000h", "  rollback:\n    allowed: true\n    window: 9000h\n", "/rollback/window", 0, 8760 * time.Hour},
	}
	for _, tt := range tests {
		raw := desc(tt.lc)
		_, err := ParseDescription(raw, MediaTypeYAML)
		if got := pointers(t, err); len(got) != 1 || got[0] != "/lifecycle"+tt.pointer {
			t.Errorf("%s: ParseDescription problems = %v, want [/lifecycle%s]", tt.name, got, tt.pointer)
		}
		p, err := ParseStoredDescription(raw, MediaTypeYAML)
		if err != nil {
			t.Fatalf("%s: ParseStoredDescription: %v", tt.name, err)
		}
		l := p.Description.Lifecycle
		if len(l.Substitutions) != 1 || l.Substitutions[0].Pointer != tt.pointer {
			t.Errorf("%s: Substitutions = %+v, want one at %s", tt.name, l.Substitutions, tt.pointer)
		}
		if d := l.Upgrade.Drain; d != nil && d.Timeout != tt.drain {
			t.Errorf("%s: drain timeout used = %s, want %s", tt.name, d.Timeout, tt.drain)
		}
		if l.Rollback.Window != tt.window {
			t.Errorf("%s: window used = %s, want %s", tt.name, l.Rollback.Window, tt.window)
		}
	}
	// In range: the same either way, no substitution.
	p, err := ParseStoredDescription(desc("  upgrade:\n    drain:\n      timeout: 5m\n"), MediaTypeYAML)
	if err != nil || len(p.Description.Lifecycle.Substitutions) != 0 || p.Description.Lifecycle.Upgrade.Drain.Timeout != 5*time.Minute {
		t.Errorf("ParseStoredDescription(drain 5m) = %+v, %v, want 5m and no substitution", p, err)
	}
}
