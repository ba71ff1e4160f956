package lifecycle

import (
	"slices"
	"testing"
)

func TestRolloutLifeCycle(t *testing.T) {
	lifeCycle[RolloutState]{
		tbl: rolloutTransitions, all: AllRolloutStates, valid: RolloutState.Valid, terminal: RolloutState.Terminal,
		can: RolloutState.CanTransitionTo, pairs: RolloutTransitions, sql: RolloutTransitionsSQL, values: RolloutStatesSQL,
		initial: InitialRolloutState,
		wantAll: []RolloutState{"running", "paused", "succeeded", "aborting", "aborted", "cancelled", "failed"},
		wantMoves: map[string]bool{
			"running>paused": true, "running>succeeded": true, "running>cancelled": true, "running>aborting": true, "running>failed": true,
			"paused>running": true, "paused>cancelled": true, "paused>aborting": true, "paused>failed": true,
			"aborting>aborted": true,
		},
		wantFinal:  []RolloutState{"succeeded", "aborted", "cancelled", "failed"},
		wantPrefix: "(OLD.state, NEW.state) IN (('aborting','aborted'), ",
	}.check(t)
}

func TestMemberLifeCycle(t *testing.T) {
	lifeCycle[MemberStatus]{
		tbl: memberTransitions, all: AllMemberStatuses, valid: MemberStatus.Valid, terminal: MemberStatus.Terminal,
		can: MemberStatus.CanTransitionTo, pairs: MemberTransitions, sql: MemberTransitionsSQL, values: MemberStatusesSQL,
		initial: MemberPending,
		wantAll: []MemberStatus{"pending", "in-progress", "succeeded", "failed", "cancelled", "reverted", "not-reverted", "removed", "excluded"},
		wantMoves: map[string]bool{
			"pending>in-progress": true, "pending>cancelled": true, "pending>removed": true, "pending>excluded": true,
			"in-progress>succeeded": true, "in-progress>failed": true, "in-progress>cancelled": true, "in-progress>removed": true, "in-progress>excluded": true,
			"succeeded>reverted": true, "succeeded>not-reverted": true, "succeeded>removed": true, "succeeded>excluded": true,
			"failed>reverted": true, "failed>not-reverted": true, "failed>removed": true, "failed>excluded": true,
			"cancelled>reverted": true, "cancelled>not-reverted": true, "cancelled>removed": true, "cancelled>excluded": true,
		},
		wantFinal:  []MemberStatus{"reverted", "not-reverted", "removed", "excluded"},
		wantPrefix: "(OLD.status, NEW.status) IN (('cancelled','excluded'), ",
	}.check(t)
}

func TestRolloutStateActive(t *testing.T) {
	for _, tc := range []struct {
		s    RolloutState
		want bool
	}{
		{RolloutRunning, true}, {RolloutPaused, true}, {RolloutAborting, true},
		{RolloutSucceeded, false}, {RolloutAborted, false}, {RolloutCancelled, false}, {RolloutFailed, false},
		{"", false}, {"bogus", false},
	} {
		if got := tc.s.Active(); got != tc.want {
			t.Errorf("RolloutState(%q).Active() = %v, want %v", tc.s, got, tc.want)
		}
	}
}

// TestRolloutCauses checks the causes of every edge against the
// vocabulary, written out independently, and that they cover exactly the
// table's edges plus the creation.
func TestRolloutCauses(t *testing.T) {
	want := map[string][]RolloutCause{
		">running":          {"started"},
		"running>paused":    {"operator-paused", "approval-required", "threshold-exceeded", "wave-emptied"},
		"paused>running":    {"operator-resumed", "approved"},
		"running>succeeded": {"completed"},
		"running>cancelled": {"operator-cancelled"},
		"paused>cancelled":  {"operator-cancelled"},
		"running>aborting":  {"operator-aborted", "threshold-exceeded"},
		"paused>aborting":   {"operator-aborted", "threshold-exceeded"},
		"aborting>aborted":  {"revert-finished"},
		"running>failed":    {"target-version-yanked", "target-version-deleted", "deadline-passed"},
		"paused>failed":     {"target-version-yanked", "target-version-deleted", "deadline-passed"},
	}
	froms := append([]RolloutState{""}, AllRolloutStates()...)
	for _, from := range froms {
		for _, to := range AllRolloutStates() {
			key := string(from) + ">" + string(to)
			got := RolloutCauses(from, to)
			if !slices.Equal(got, want[key]) {
				t.Errorf("RolloutCauses(%q, %q) = %v, want %v", from, to, got, want[key])
			}
			if from != "" && (len(got) > 0) != from.CanTransitionTo(to) {
				t.Errorf("RolloutCauses(%q, %q) = %v but CanTransitionTo = %v", from, to, got, from.CanTransitionTo(to))
			}
			for _, c := range AllRolloutCauses() {
				err := CheckRolloutMove(from, to, c)
				allowed := slices.Contains(want[key], c)
				if allowed != (err == nil) {
					t.Errorf("CheckRolloutMove(%q, %q, %q) = %v, want allowed %v", from, to, c, err, allowed)
				}
				if err != nil && ErrorCode(err) != ECONFLICT {
					t.Errorf("CheckRolloutMove(%q, %q, %q) code = %s, want %s", from, to, c, ErrorCode(err), ECONFLICT)
				}
			}
		}
	}
	used := map[RolloutCause]bool{}
	for _, cs := range want {
		for _, c := range cs {
			used[c] = true
		}
	}
	for _, c := range AllRolloutCauses() {
		if !used[c] {
			t.Errorf("cause %q takes no edge", c)
		}
	}
	if len(used) != len(AllRolloutCauses()) {
		t.Errorf("the edges use %d causes, AllRolloutCauses has %d", len(used), len(AllRolloutCauses()))
	}
	if got := ErrorCode(CheckRolloutMove(RolloutRunning, RolloutPaused, "bogus")); got != EINTERNAL {
		t.Errorf("CheckRolloutMove with an unknown cause: code %s, want %s", got, EINTERNAL)
	}
}
