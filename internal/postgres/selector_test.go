package postgres_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestLabelSelector runs label selectors (fleet.ParseSelector) through the
// SQL that evaluates them (selectorSQL, via FleetStore.Devices): every
// operator, conjunctions, absent keys, and labels that are not strings,
// which compare in their JSON text form (4, true).
func TestLabelSelector(t *testing.T) {
	ctx := t.Context()
	store := postgres.NewFleetStore(pgtest.New(t), 100)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	_, _, err := store.AcceptClient(ctx, "plant", now)
	require.NoError(t, err)
	devices := map[string]map[string]any{
		"alfa":  {"site": "alfa", "tier": "edge", "cores": 4, "gpu": true},
		"bravo": {"site": "bravo", "tier": "core"},
		"bare":  {},
		"zone":  {"example.com/zone": "1"},
	}
	for id, labels := range devices {
		_, err := store.PutDevice(ctx, "plant", id, []byte(`{}`), labels, now)
		require.NoError(t, err)
	}
	tests := []struct {
		sel  string
		want []string // device ids, sorted
	}{
		{"", []string{"alfa", "bare", "bravo", "zone"}},
		{"site=alfa", []string{"alfa"}},
		{"site==alfa", []string{"alfa"}},
		{"site=charlie", nil},
		{"site!=bravo", []string{"alfa", "bare", "zone"}},
		{"absent!=x", []string{"alfa", "bare", "bravo", "zone"}},
		{"tier", []string{"alfa", "bravo"}},
		{"absent", nil},
		{"!tier", []string{"bare", "zone"}},
		{"site=alfa,tier=edge", []string{"alfa"}},
		{"site=alfa,tier=core", nil},
		{"tier,!gpu", []string{"bravo"}},
		{"cores=4", []string{"alfa"}},
		{"cores!=4", []string{"bare", "bravo", "zone"}},
		{"gpu=true", []string{"alfa"}},
		{" site = alfa , !absent ", []string{"alfa"}},
		{"example.com/zone=1", []string{"zone"}},
	}
	for _, tt := range tests {
		t.Run(tt.sel, func(t *testing.T) {
			sel, err := fleet.ParseSelector(tt.sel)
			require.NoError(t, err)
			ds, err := store.Devices(ctx, fleet.DeviceFilter{ClientID: "plant", Selector: sel}, "", 10)
			require.NoError(t, err)
			var got []string
			for _, d := range ds {
				got = append(got, d.ID)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Devices(%q) = %v, want %v", tt.sel, got, tt.want)
			}
		})
	}
}
