package lifecycle

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// lifeCycle is one transition table under test: what the package exports
// for it, and what it should be, written out independently of the table.
// A change to a table must be made in both places, deliberately.
type lifeCycle[S ~string] struct {
	tbl        table[S]
	all        func() []S
	valid      func(S) bool
	terminal   func(S) bool
	can        func(from, to S) bool
	pairs      func() [][2]S
	sql        func() string
	values     func() string
	initial    S
	wantAll    []S             // in life-cycle order
	wantMoves  map[string]bool // "from>to"
	wantFinal  []S
	wantPrefix string // of the SQL: "(OLD.x, NEW.x) IN ("
}

func (lc lifeCycle[S]) check(t *testing.T) {
	t.Helper()
	if got := lc.all(); !slices.Equal(got, lc.wantAll) {
		t.Fatalf("All() = %v, want %v", got, lc.wantAll)
	}
	mutated := lc.all()
	mutated[0] = "mutated"
	if lc.all()[0] != lc.wantAll[0] {
		t.Errorf("All() returns shared storage")
	}
	probes := append(lc.all(), "", "bogus", S(strings.ToUpper(string(lc.wantAll[0]))))

	t.Run("every pair", func(t *testing.T) {
		for _, from := range probes {
			if got, want := lc.valid(from), slices.Contains(lc.wantAll, from); got != want {
				t.Errorf("%q.Valid() = %v, want %v", from, got, want)
			}
			if got, want := lc.terminal(from), slices.Contains(lc.wantFinal, from); got != want {
				t.Errorf("%q.Terminal() = %v, want %v", from, got, want)
			}
			for _, to := range probes {
				if got, want := lc.can(from, to), lc.wantMoves[string(from)+">"+string(to)]; got != want {
					t.Errorf("%q.CanTransitionTo(%q) = %v, want %v", from, to, got, want)
				}
			}
		}
	})

	t.Run("shape", func(t *testing.T) {
		for _, s := range lc.wantAll {
			if lc.can(s, s) {
				t.Errorf("%q lists itself: a no-op is not a transition", s)
			}
			exits := slices.ContainsFunc(lc.wantAll, func(to S) bool { return lc.can(s, to) })
			if lc.terminal(s) == exits {
				t.Errorf("%q: Terminal() = %v but has exits = %v", s, lc.terminal(s), exits)
			}
			if _, ok := lc.tbl[s]; !ok {
				t.Errorf("state %q is missing from the table", s)
			}
		}
		for from, tos := range lc.tbl {
			if !lc.valid(from) {
				t.Errorf("table has unknown from-state %q", from)
			}
			for _, to := range tos {
				if !lc.valid(to) {
					t.Errorf("table has unknown to-state %q (from %q)", to, from)
				}
			}
			if len(slices.Compact(slices.Sorted(slices.Values(tos)))) != len(tos) {
				t.Errorf("table lists a target of %q twice: %v", from, tos)
			}
		}
		// Every state can be reached from the initial one.
		seen := map[S]bool{lc.initial: true}
		for queue := []S{lc.initial}; len(queue) > 0; queue = queue[1:] {
			for _, to := range lc.tbl[queue[0]] {
				if !seen[to] {
					seen[to] = true
					queue = append(queue, to)
				}
			}
		}
		for _, s := range lc.wantAll {
			if !seen[s] {
				t.Errorf("%q cannot be reached from %q", s, lc.initial)
			}
		}
	})

	t.Run("pairs", func(t *testing.T) {
		got := lc.pairs()
		if len(got) != len(lc.wantMoves) {
			t.Fatalf("Transitions() has %d pairs, want %d", len(got), len(lc.wantMoves))
		}
		for i, p := range got {
			if !lc.wantMoves[string(p[0])+">"+string(p[1])] {
				t.Errorf("Transitions()[%d] = %v is not an allowed move", i, p)
			}
			if i > 0 {
				prev := got[i-1]
				if prev[0] > p[0] || prev[0] == p[0] && prev[1] >= p[1] {
					t.Errorf("Transitions() not strictly sorted at %d: %v then %v", i, prev, p)
				}
			}
		}
	})

	t.Run("sql", func(t *testing.T) {
		sql := lc.sql()
		if !strings.HasPrefix(sql, lc.wantPrefix) || !strings.HasSuffix(sql, "'))") {
			t.Fatalf("TransitionsSQL() = %s, want prefix %s", sql, lc.wantPrefix)
		}
		pair := regexp.MustCompile(`\('([a-z-]+)','([a-z-]+)'\)`)
		var back [][2]S
		for _, m := range pair.FindAllStringSubmatch(sql, -1) {
			back = append(back, [2]S{S(m[1]), S(m[2])})
		}
		if !slices.Equal(back, lc.pairs()) {
			t.Errorf("TransitionsSQL() pairs = %v, want %v", back, lc.pairs())
		}
		quoted := make([]string, len(lc.wantAll))
		for i, s := range lc.wantAll {
			quoted[i] = fmt.Sprintf("'%s'", s)
		}
		if want := "(" + strings.Join(quoted, ", ") + ")"; lc.values() != want {
			t.Errorf("StatesSQL() = %s, want %s", lc.values(), want)
		}
	})
}

func TestOutcomeLifeCycle(t *testing.T) {
	lifeCycle[RevisionOutcome]{
		tbl: outcomeTransitions, all: AllOutcomes, valid: RevisionOutcome.Valid, terminal: RevisionOutcome.Terminal,
		can: RevisionOutcome.CanTransitionTo, pairs: OutcomeTransitions, sql: OutcomeTransitionsSQL, values: OutcomesSQL,
		initial: InitialOutcome,
		wantAll: []RevisionOutcome{"pending", "active", "superseded", "failed"},
		wantMoves: map[string]bool{
			"pending>active": true, "pending>superseded": true, "pending>failed": true,
			"active>superseded": true,
			"failed>active":     true,
		},
		wantFinal:  []RevisionOutcome{"superseded"},
		wantPrefix: "(OLD.outcome, NEW.outcome) IN (('active','superseded'), ",
	}.check(t)
}

func TestOperationLifeCycle(t *testing.T) {
	lifeCycle[OperationState]{
		tbl: operationTransitions, all: AllOperationStates, valid: OperationState.Valid, terminal: OperationState.Terminal,
		can: OperationState.CanTransitionTo, pairs: OperationTransitions, sql: OperationTransitionsSQL, values: OperationStatesSQL,
		initial: OperationQueued,
		wantAll: []OperationState{"queued", "running", "succeeded", "failed", "cancelled"},
		wantMoves: map[string]bool{
			"queued>running": true, "queued>failed": true, "queued>cancelled": true,
			"running>succeeded": true, "running>failed": true, "running>cancelled": true,
		},
		wantFinal:  []OperationState{"succeeded", "failed", "cancelled"},
		wantPrefix: "(OLD.state, NEW.state) IN (('queued','cancelled'), ",
	}.check(t)
}

func TestStepLifeCycle(t *testing.T) {
	lifeCycle[StepState]{
		tbl: stepTransitions, all: AllStepStates, valid: StepState.Valid, terminal: StepState.Terminal,
		can: StepState.CanTransitionTo, pairs: StepTransitions, sql: StepTransitionsSQL, values: StepStatesSQL,
		initial: StepPending,
		wantAll: []StepState{"pending", "published", "installed", "failed", "cancelled"},
		wantMoves: map[string]bool{
			"pending>published": true, "pending>failed": true, "pending>cancelled": true,
			"published>installed": true, "published>failed": true, "published>cancelled": true,
		},
		wantFinal:  []StepState{"installed", "failed", "cancelled"},
		wantPrefix: "(OLD.state, NEW.state) IN (('pending','cancelled'), ",
	}.check(t)
}

func TestOperationStateActive(t *testing.T) {
	for _, tc := range []struct {
		s    OperationState
		want bool
	}{
		{OperationQueued, true}, {OperationRunning, true},
		{OperationSucceeded, false}, {OperationFailed, false}, {OperationCancelled, false},
		{"", false}, {"bogus", false},
	} {
		if got := tc.s.Active(); got != tc.want {
			t.Errorf("OperationState(%q).Active() = %v, want %v", tc.s, got, tc.want)
		}
	}
}
