package main

import (
	"strings"
	"testing"
)

// TestRegistrationsSummary: the summary line is printed once, after the
// last device concluded, with the registered ids in creation order.
func TestRegistrationsSummary(t *testing.T) {
	cases := []struct {
		name  string
		ids   []string
		steps []struct {
			id string
			ok bool
		}
		want string
	}{
		{"all", []string{"sim-1", "sim-2", "sim-3"}, []struct {
			id string
			ok bool
		}{{"sim-3", true}, {"sim-1", true}, {"sim-3", false}, {"sim-2", true}}, "registered 3 devices: sim-1 sim-2 sim-3\n"},
		{"one gave up", []string{"sim-1", "sim-2", "sim-3"}, []struct {
			id string
			ok bool
		}{{"sim-2", false}, {"sim-1", true}, {"sim-3", true}}, "registered 2 of 3 devices: sim-1 sim-3\n"},
		{"one", []string{"edge"}, []struct {
			id string
			ok bool
		}{{"edge", true}}, "registered 1 device: edge\n"},
	}
	for _, tc := range cases {
		var out strings.Builder
		r := newRegistrations(tc.ids, &out)
		for i, s := range tc.steps {
			if i < len(tc.steps)-1 && out.Len() > 0 {
				t.Fatalf("%s: printed %q before the last device concluded", tc.name, out.String())
			}
			r.done(s.id, s.ok)
		}
		if out.String() != tc.want {
			t.Errorf("%s: printed %q, want %q", tc.name, out.String(), tc.want)
		}
	}
}
