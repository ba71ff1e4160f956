package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// wantTransitions is the transition table written out independently of
// state.go, one "from>to" per allowed move. A change to the table must be
// made in both places, deliberately.
var wantTransitions = map[string]bool{
	"pending>installing": true, "pending>draining": true, "pending>upgrading": true,
	"pending>reconfiguring": true, "pending>rolling-back": true, "pending>installed": true,
	"pending>failed": true, "pending>removing": true, "pending>removed": true,

	"installing>installed": true, "installing>failed": true, "installing>removing": true, "installing>removed": true,

	"installed>pending": true, "installed>failed": true, "installed>removing": true, "installed>removed": true,

	"draining>upgrading": true, "draining>reconfiguring": true, "draining>rolling-back": true,
	"draining>installed": true, "draining>failed": true, "draining>removing": true, "draining>removed": true,

	"upgrading>draining": true, "upgrading>installed": true, "upgrading>failed": true, "upgrading>removing": true, "upgrading>removed": true,
	"reconfiguring>draining": true, "reconfiguring>installed": true, "reconfiguring>failed": true, "reconfiguring>removing": true, "reconfiguring>removed": true,
	"rolling-back>draining": true, "rolling-back>installed": true, "rolling-back>failed": true, "rolling-back>removing": true, "rolling-back>removed": true,

	"failed>pending": true, "failed>installed": true, "failed>removing": true, "failed>removed": true,

	"removing>failed": true, "removing>removed": true,
}

// probeStates is every state plus values that are not states.
func probeStates() []State {
	return append(AllStates(), "", "bogus", "Pending", "rolling_back")
}

func TestStates(t *testing.T) {
	want := []State{"pending", "installing", "installed", "draining", "upgrading", "reconfiguring",
		"rolling-back", "failed", "removing", "removed"}
	if got := AllStates(); !slices.Equal(got, want) {
		t.Fatalf("AllStates() = %v, want %v", got, want)
	}
	all := AllStates()
	all[0] = "mutated"
	if AllStates()[0] != StatePending {
		t.Errorf("AllStates() returns shared storage")
	}
	for _, s := range probeStates() {
		if got, want := s.Valid(), slices.Contains(want, s); got != want {
			t.Errorf("State(%q).Valid() = %v, want %v", s, got, want)
		}
		if got, want := s.Terminal(), s == StateRemoved; got != want {
			t.Errorf("State(%q).Terminal() = %v, want %v", s, got, want)
		}
		if got, want := s.Settled(), s == StateInstalled || s == StateFailed || s == StateRemoved; got != want {
			t.Errorf("State(%q).Settled() = %v, want %v", s, got, want)
		}
	}
	if InitialState != StatePending {
		t.Errorf("InitialState = %q, want pending", InitialState)
	}
	for _, k := range append(AllOperationKinds(), "", "delete") {
		want := map[OperationKind]State{
			OperationInstall: StateInstalling, OperationUpgrade: StateUpgrading,
			OperationReconfigure: StateReconfiguring, OperationRollback: StateRollingBack,
			OperationRemove: StateRemoving,
		}[k]
		if got := k.ApplyingState(); got != want {
			t.Errorf("OperationKind(%q).ApplyingState() = %q, want %q", k, got, want)
		}
		if got := k.Valid(); got != (want != "") {
			t.Errorf("OperationKind(%q).Valid() = %v", k, got)
		}
		wantDrains := k == OperationUpgrade || k == OperationReconfigure || k == OperationRollback
		if got := k.Drains(); got != wantDrains {
			t.Errorf("OperationKind(%q).Drains() = %v, want %v", k, got, wantDrains)
		}
	}
}

func TestCanTransitionEveryPair(t *testing.T) {
	for _, from := range probeStates() {
		for _, to := range probeStates() {
			want := wantTransitions[string(from)+">"+string(to)]
			if got := CanTransition(from, to); got != want {
				t.Errorf("CanTransition(%q, %q) = %v, want %v", from, to, got, want)
			}
		}
	}
	// Every state the table names is a state; every state is in the table.
	for from, tos := range transitions {
		if !from.Valid() {
			t.Errorf("table has unknown from-state %q", from)
		}
		for _, to := range tos {
			if !to.Valid() {
				t.Errorf("table has unknown to-state %q (from %q)", to, from)
			}
		}
		if len(slices.Compact(slices.Sorted(slices.Values(tos)))) != len(tos) {
			t.Errorf("table lists a target of %q twice: %v", from, tos)
		}
	}
	for _, s := range AllStates() {
		if _, ok := transitions[s]; !ok {
			t.Errorf("state %q is missing from the table", s)
		}
	}
}

func TestTransitionTableProperties(t *testing.T) {
	reach := func(from State) map[State]bool {
		seen := map[State]bool{from: true}
		queue := []State{from}
		for len(queue) > 0 {
			s := queue[0]
			queue = queue[1:]
			for _, n := range transitions[s] {
				if !seen[n] {
					seen[n] = true
					queue = append(queue, n)
				}
			}
		}
		return seen
	}
	fromPending := reach(StatePending)
	for _, s := range AllStates() {
		if !fromPending[s] {
			t.Errorf("state %q is not reachable from pending", s)
		}
		if CanTransition(s, s) {
			t.Errorf("self-transition %q -> %q: a no-op is not a transition", s, s)
		}
		if s == StateRemoved {
			continue
		}
		if !reach(s)[StateRemoved] {
			t.Errorf("removed is not reachable from %q: removal must always be possible", s)
		}
		if !CanTransition(s, StateRemoving) && s != StateRemoving {
			t.Errorf("%q cannot start a removal", s)
		}
		if !s.Settled() && !CanTransition(s, StateFailed) {
			t.Errorf("in-progress state %q cannot fail: a deadline could not end it", s)
		}
	}
	if len(transitions[StateRemoved]) != 0 {
		t.Errorf("removed has exits %v; it must be final", transitions[StateRemoved])
	}
	// failed is leavable other than by removal: a new revision, or recovery.
	if !CanTransition(StateFailed, StatePending) || !CanTransition(StateFailed, StateInstalled) {
		t.Errorf("failed must lead to pending (new revision) and installed (recovery)")
	}
	// Only publishing enters pending, and only from settled states.
	for _, s := range AllStates() {
		if CanTransition(s, StatePending) && s != StateInstalled && s != StateFailed {
			t.Errorf("%q -> pending: only installed and failed may publish a new revision", s)
		}
	}
}

func TestTransitionsSortedAndComplete(t *testing.T) {
	got := Transitions()
	if len(got) != len(wantTransitions) {
		t.Fatalf("Transitions() has %d pairs, want %d", len(got), len(wantTransitions))
	}
	for i, p := range got {
		if !wantTransitions[string(p[0])+">"+string(p[1])] {
			t.Errorf("Transitions()[%d] = %v is not an allowed move", i, p)
		}
		if i > 0 {
			prev := got[i-1]
			if prev[0] > p[0] || prev[0] == p[0] && prev[1] >= p[1] {
				t.Errorf("Transitions() not strictly sorted at %d: %v then %v", i, prev, p)
			}
		}
	}
	if again := Transitions(); !slices.Equal(again, got) {
		t.Errorf("Transitions() is not stable")
	}
}

func TestTransitionsSQL(t *testing.T) {
	sql := TransitionsSQL()
	const prefix, suffix = `coalesce(('{"draining": ["failed", "installed", `, `"upgrading": ["draining", "failed", "installed", "removed", "removing"]}'::jsonb -> from_state) ? to_state, false)`
	if !strings.HasPrefix(sql, prefix) || !strings.HasSuffix(sql, suffix) {
		t.Fatalf("TransitionsSQL() = %s, want prefix %s and suffix %s", sql, prefix, suffix)
	}
	// Read the pairs back out of the SQL, in the order written: exactly the
	// table, in order; and the constant is one JSON object.
	object := strings.TrimSuffix(strings.TrimPrefix(sql, "coalesce(('"), "'::jsonb -> from_state) ? to_state, false)")
	var decoded map[string][]string
	if err := json.Unmarshal([]byte(object), &decoded); err != nil {
		t.Fatalf("TransitionsSQL(): the constant is not JSON: %v", err)
	}
	source := regexp.MustCompile(`"([a-z-]+)": \[([^\]]*)\]`)
	target := regexp.MustCompile(`"([a-z-]+)"`)
	var back [][2]State
	for _, m := range source.FindAllStringSubmatch(object, -1) {
		for _, to := range target.FindAllStringSubmatch(m[2], -1) {
			back = append(back, [2]State{State(m[1]), State(to[1])})
		}
	}
	if !slices.Equal(back, Transitions()) {
		t.Errorf("TransitionsSQL() pairs = %v, want %v", back, Transitions())
	}
	n := 0
	for _, tos := range decoded {
		n += len(tos)
	}
	if n != len(Transitions()) {
		t.Errorf("TransitionsSQL() decodes to %d pairs, want %d", n, len(Transitions()))
	}
	if want := "('pending', 'installing', 'installed', 'draining', 'upgrading', 'reconfiguring', 'rolling-back', 'failed', 'removing', 'removed')"; StatesSQL() != want {
		t.Errorf("StatesSQL() = %s, want %s", StatesSQL(), want)
	}
}

func TestPublish(t *testing.T) {
	const ok = Code("")
	type want struct {
		state State
		code  Code
	}
	pendingOK := want{StatePending, ok}
	conflict := want{"", ECONFLICT}
	invalid := want{"", EINVALID}
	rows := map[State]map[OperationKind]want{
		"": {
			OperationInstall: pendingOK, OperationUpgrade: invalid, OperationReconfigure: invalid,
			OperationRollback: invalid, OperationRemove: invalid,
		},
		StateInstalled: {
			OperationInstall: conflict, OperationUpgrade: pendingOK, OperationReconfigure: pendingOK,
			OperationRollback: pendingOK, OperationRemove: {StateRemoving, ok},
		},
		StateFailed: {
			OperationInstall: pendingOK, OperationUpgrade: pendingOK, OperationReconfigure: pendingOK,
			OperationRollback: pendingOK, OperationRemove: {StateRemoving, ok},
		},
		StateRemoving: {
			OperationInstall: conflict, OperationUpgrade: conflict, OperationReconfigure: conflict,
			OperationRollback: conflict, OperationRemove: {StateRemoving, ok},
		},
		StateRemoved: {
			OperationInstall: conflict, OperationUpgrade: conflict, OperationReconfigure: conflict,
			OperationRollback: conflict, OperationRemove: conflict,
		},
	}
	for _, s := range []State{StatePending, StateInstalling, StateDraining, StateUpgrading, StateReconfiguring, StateRollingBack} {
		rows[s] = map[OperationKind]want{
			OperationInstall: conflict, OperationUpgrade: conflict, OperationReconfigure: conflict,
			OperationRollback: conflict, OperationRemove: {StateRemoving, ok},
		}
	}
	rows["bogus"] = map[OperationKind]want{}
	for _, k := range AllOperationKinds() {
		rows["bogus"][k] = invalid
	}
	for cur, byOp := range rows {
		for _, op := range append(AllOperationKinds(), "", "delete") {
			w, known := byOp[op]
			if !known {
				w = invalid // unknown operations
			}
			got, err := Publish(cur, op)
			if code := ErrorCode(err); code != w.code {
				t.Errorf("Publish(%q, %q) error = %v, want code %q", cur, op, err, w.code)
				continue
			}
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Message == "" {
					t.Errorf("Publish(%q, %q) error %v is not a described *Error", cur, op, err)
				}
				if e.Code == ECONFLICT && (e.Type != ProblemStateConflict || e.Extra["state"] != string(cur) || e.Extra["operation"] != string(op)) {
					t.Errorf("Publish(%q, %q) conflict = %+v, want type %s naming state and operation", cur, op, e, ProblemStateConflict)
				}
				if got != cur {
					t.Errorf("Publish(%q, %q) = %q with an error, want the current state back", cur, op, got)
				}
				continue
			}
			if got != w.state {
				t.Errorf("Publish(%q, %q) = %q, want %q", cur, op, got, w.state)
			}
			// Every state change Publish makes is in the table.
			if cur != "" && got != cur && !CanTransition(cur, got) {
				t.Errorf("Publish(%q, %q) = %q, which the table refuses", cur, op, got)
			}
		}
	}
	// Every valid state is covered above.
	for _, s := range AllStates() {
		if _, ok := rows[s]; !ok {
			t.Errorf("TestPublish has no row for %q", s)
		}
	}
}

// report builds an observation for the common case: the report concerns the
// desired revision (adopted == desired since == newest).
func obs(cur State, op OperationKind, removing bool, state, phase string) Observation {
	return Observation{Current: cur, Op: op, DesiredSince: 10, Removing: removing, NewestAdopted: 10,
		Report: ReportView{State: state, Adopted: 10, Phase: phase}}
}

func TestDecideRows(t *testing.T) {
	const (
		inst = OperationInstall
		upg  = OperationUpgrade
		rec  = OperationReconfigure
		rb   = OperationRollback
		rm   = OperationRemove
	)
	tests := []struct {
		name    string
		in      Observation
		next    State
		changed bool
		stale   bool
	}{
		{"install adopted, pending", obs(StatePending, inst, false, "pending", ""), StatePending, false, false},
		{"install applying", obs(StatePending, inst, false, "installing", ""), StateInstalling, true, false},
		{"install done", obs(StateInstalling, inst, false, "installed", ""), StateInstalled, true, false},
		{"install fast device", obs(StatePending, inst, false, "installed", ""), StateInstalled, true, false},
		{"install failed", obs(StateInstalling, inst, false, "failed", ""), StateFailed, true, false},
		{"install ignores drain phase", obs(StatePending, inst, false, "installing", "draining"), StateInstalling, true, false},
		{"install phase starting-new", obs(StatePending, inst, false, "installing", "starting-new"), StateInstalling, true, false},
		{"upgrade applying", obs(StatePending, upg, false, "installing", ""), StateUpgrading, true, false},
		{"reconfigure applying", obs(StatePending, rec, false, "installing", ""), StateReconfiguring, true, false},
		{"rollback applying", obs(StatePending, rb, false, "installing", ""), StateRollingBack, true, false},
		{"upgrade draining", obs(StatePending, upg, false, "installing", "draining"), StateDraining, true, false},
		{"upgrade drained", obs(StateDraining, upg, false, "installing", "drained"), StateDraining, false, false},
		{"upgrade after drain", obs(StateDraining, upg, false, "installing", ""), StateUpgrading, true, false},
		{"rollback after drain, phase", obs(StateDraining, rb, false, "installing", "starting-new"), StateRollingBack, true, false},
		{"blue/green old drains after switch", obs(StateUpgrading, upg, false, "installed", "draining"), StateDraining, true, false},
		{"upgrade done", obs(StateUpgrading, upg, false, "installed", ""), StateInstalled, true, false},
		{"drain done, installed", obs(StateDraining, rec, false, "installed", ""), StateInstalled, true, false},
		{"upgrade: recreate stops old", obs(StatePending, upg, false, "removing", ""), StateUpgrading, true, false},
		{"desired but device says removed", obs(StateInstalled, upg, false, "removed", ""), StateFailed, true, false},
		{"crash after install", obs(StateInstalled, inst, false, "failed", ""), StateFailed, true, false},
		{"recovered after failure", obs(StateFailed, upg, false, "installed", ""), StateInstalled, true, false},
		{"retry after failure stays failed", obs(StateFailed, upg, false, "installing", ""), StateFailed, false, false},
		{"installed never goes back to pending", obs(StateInstalled, upg, false, "pending", ""), StateInstalled, false, false},
		{"installed never goes back to applying", obs(StateInstalled, upg, false, "installing", ""), StateInstalled, false, false},
		{"installing not back to pending", obs(StateInstalling, inst, false, "pending", ""), StateInstalling, false, false},
		{"removal not started", obs(StateRemoving, upg, true, "installed", ""), StateRemoving, false, false},
		{"removal in progress", obs(StateRemoving, upg, true, "removing", ""), StateRemoving, false, false},
		{"removal done", obs(StateRemoving, upg, true, "removed", ""), StateRemoved, true, false},
		{"removal failed", obs(StateRemoving, rm, false, "failed", ""), StateFailed, true, false},
		{"removal retried after failure stays failed", obs(StateFailed, rm, true, "removing", ""), StateFailed, false, false},
		{"removal done after failure", obs(StateFailed, upg, true, "removed", ""), StateRemoved, true, false},
		{"removed is final", obs(StateRemoved, upg, true, "installed", ""), StateRemoved, false, false},
		{"unknown device state", obs(StateInstalling, inst, false, "exploded", ""), StateInstalling, false, false},
		{"unknown operation", obs(StatePending, "", false, "installing", ""), StatePending, false, false},
		{"unknown phase ignored", obs(StatePending, upg, false, "installing", "warming"), StateUpgrading, true, false},
		{"unknown current", obs("bogus", upg, false, "installed", ""), "bogus", false, false},
		{
			"stale report",
			Observation{Current: StateUpgrading, Op: upg, DesiredSince: 10, NewestAdopted: 12, Report: ReportView{State: "installed", Adopted: 11}},
			StateUpgrading, false, true,
		},
		{
			"older revision",
			Observation{Current: StatePending, Op: upg, DesiredSince: 10, NewestAdopted: 9, Report: ReportView{State: "installed", Adopted: 9}},
			StatePending, false, false,
		},
		{
			"older revision while removing: old installed",
			Observation{Current: StateRemoving, Op: upg, Removing: true, DesiredSince: 10, NewestAdopted: 9, Report: ReportView{State: "removed", Adopted: 9}},
			StateRemoving, false, false,
		},
		{
			"newer manifest (another deployment changed)",
			Observation{Current: StateUpgrading, Op: upg, DesiredSince: 10, NewestAdopted: 12, Report: ReportView{State: "installed", Adopted: 15}},
			StateInstalled, true, false,
		},
		{
			"recreate: drain report after applying is out of order",
			Observation{Current: StateUpgrading, Op: upg, Strategy: StrategyRecreate, DesiredSince: 10, NewestAdopted: 10, Report: ReportView{State: "installing", Adopted: 10, Phase: "drained"}},
			StateUpgrading, false, false,
		},
		{
			"blueGreen: starting-new after draining is out of order",
			Observation{Current: StateDraining, Op: upg, Strategy: StrategyBlueGreen, DesiredSince: 10, NewestAdopted: 10, Report: ReportView{State: "installing", Adopted: 10, Phase: "starting-new"}},
			StateDraining, false, false,
		},
		{
			"blueGreen: drain after switching",
			Observation{Current: StateUpgrading, Op: upg, Strategy: StrategyBlueGreen, DesiredSince: 10, NewestAdopted: 10, Report: ReportView{State: "installed", Adopted: 10, Phase: "draining"}},
			StateDraining, true, false,
		},
		{
			"recreate: apply after drain",
			Observation{Current: StateDraining, Op: upg, Strategy: StrategyRecreate, DesiredSince: 10, NewestAdopted: 10, Report: ReportView{State: "installing", Adopted: 10}},
			StateUpgrading, true, false,
		},
	}
	for _, tt := range tests {
		got := Decide(tt.in)
		if got.Next != tt.next || got.Changed != tt.changed || got.Stale != tt.stale {
			t.Errorf("%s: Decide(%+v) = %+v, want next %q changed %v stale %v", tt.name, tt.in, got, tt.next, tt.changed, tt.stale)
		}
		if got.Reason == "" {
			t.Errorf("%s: Decide(%+v) has no reason", tt.name, tt.in)
		}
	}
}

// adoption is one relation between a report's adopted manifest version and
// the deployment's desired-since and newest-adopted versions.
type adoption struct {
	name                            string
	desiredSince, newest, adopted   uint64
	wantStale, wantOlder, wantFresh bool
}

var adoptions = []adoption{
	{name: "older than newest, not older than desired", desiredSince: 10, newest: 12, adopted: 11, wantStale: true},
	{name: "older than newest and desired", desiredSince: 10, newest: 12, adopted: 9, wantStale: true},
	{name: "older than desired", desiredSince: 10, newest: 9, adopted: 9, wantOlder: true},
	{name: "older than desired, first report", desiredSince: 10, newest: 0, adopted: 3, wantOlder: true},
	{name: "equal", desiredSince: 10, newest: 10, adopted: 10, wantFresh: true},
	{name: "first report, equal", desiredSince: 10, newest: 0, adopted: 10, wantFresh: true},
	{name: "newer", desiredSince: 10, newest: 12, adopted: 15, wantFresh: true},
	{name: "max", desiredSince: 1, newest: 1<<64 - 2, adopted: 1<<64 - 1, wantFresh: true},
}

func TestDecideExhaustive(t *testing.T) {
	deviceStates := []string{"pending", "installing", "installed", "failed", "removing", "removed", "", "bogus"}
	phases := []string{"", "draining", "drained", "starting-new", "verifying", "switching", "bogus"}
	ops := append(AllOperationKinds(), "", "bogus")
	strategies := []Strategy{"", StrategyRecreate, StrategyBlueGreen}
	n := 0
	for _, cur := range probeStates() {
		for _, ds := range deviceStates {
			for _, ph := range phases {
				for _, op := range ops {
					for _, removing := range []bool{false, true} {
						for _, st := range strategies {
							for _, a := range adoptions {
								in := Observation{Current: cur, Op: op, Strategy: st, DesiredSince: a.desiredSince,
									Removing: removing, NewestAdopted: a.newest,
									Report: ReportView{State: ds, Adopted: a.adopted, Phase: ph}}
								checkDecision(t, in, a)
								n++
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d observations checked", n)
}

func checkDecision(t *testing.T, in Observation, a adoption) {
	t.Helper()
	d := Decide(in)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("Decide(%+v) = %+v: %s", in, d, fmt.Sprintf(format, args...))
	}
	if d.Reason == "" {
		fail("no reason")
	}
	if d.Changed {
		if d.Next == in.Current {
			fail("changed to the same state")
		}
		if !CanTransition(in.Current, d.Next) {
			fail("a transition the table refuses")
		}
	} else if d.Next != in.Current {
		fail("unchanged but Next differs from Current")
	}
	if d.Stale != (in.Report.Adopted < in.NewestAdopted) || d.Stale != a.wantStale {
		fail("stale = %v, want %v", d.Stale, a.wantStale)
	}
	if (a.wantStale || a.wantOlder) && d.Changed {
		fail("a stale or older-revision report changed the state")
	}
	if in.Current == StateRemoved && d.Changed {
		fail("left removed")
	}
	if d.Changed && d.Next == StatePending {
		fail("a report moved the deployment to pending")
	}
	removing := in.Removing || in.Op == OperationRemove
	if d.Changed && d.Next == StateRemoved && !removing {
		fail("removed a deployment that is desired")
	}
	if d.Changed && d.Next == StateRemoving && !removing {
		fail("removing a deployment that is desired")
	}
	if d.Changed && removing && d.Next != StateRemoving && d.Next != StateRemoved && d.Next != StateFailed {
		fail("a removal moved to %q", d.Next)
	}
	if d.Changed && d.Next == StateDraining && in.Op == OperationInstall {
		fail("an install drains")
	}
	if d.Changed && in.Report.State == DeviceFailed && d.Next != StateFailed {
		fail("a failure report moved to %q", d.Next)
	}
}

// progress is the test's own order of the states of one revision: a
// deployment never moves to a lower progress within a revision. Within the
// in-progress group, the strategy orders drain and apply; without a
// strategy they are one level.
func progress(removal bool, st Strategy, s State) int {
	if removal {
		switch s {
		case StateRemoving:
			return 0
		case StateFailed:
			return 5
		case StateRemoved:
			return 10
		}
		return -1 // states a removal must never enter
	}
	switch s {
	case StatePending:
		return 0
	case StateDraining:
		if st == StrategyBlueGreen {
			return 6
		}
		return 4
	case StateInstalling, StateUpgrading, StateReconfiguring, StateRollingBack:
		if st == StrategyRecreate {
			return 6
		}
		return 4
	case StateInstalled, StateFailed:
		return 10
	}
	return -1
}

// sent is one report as the device sent it, with the revision it concerns.
type sent struct {
	rev    int
	report ReportView
}

// deviceScript returns the truthful sequence of (state, phase) reports a
// device sends while applying a revision, and whether it ends well.
func deviceScript(rng *rand.Rand, op OperationKind, st Strategy, removal bool) [][2]string {
	if removal {
		switch rng.IntN(3) {
		case 0:
			return [][2]string{{"installed", ""}, {"removing", ""}, {"removed", ""}}
		case 1:
			return [][2]string{{"removing", ""}, {"failed", ""}, {"removing", ""}, {"removed", ""}}
		}
		return [][2]string{{"removing", ""}, {"failed", ""}}
	}
	var s [][2]string
	if rng.IntN(2) == 0 {
		s = append(s, [2]string{"pending", ""})
	}
	drain := op.Drains() && rng.IntN(2) == 0
	switch {
	case st == StrategyBlueGreen && op != OperationInstall:
		s = append(s, [2]string{"installing", "starting-new"}, [2]string{"installing", "verifying"}, [2]string{"installing", "switching"})
		if drain {
			s = append(s, [2]string{"installed", "draining"}, [2]string{"installed", "drained"})
		}
	default:
		if drain {
			s = append(s, [2]string{"installing", "draining"}, [2]string{"installing", "drained"})
		}
		s = append(s, [2]string{"removing", ""}, [2]string{"installing", ""})
	}
	switch rng.IntN(4) {
	case 0:
		return append(s, [2]string{"failed", ""})
	case 1: // fails, retries by itself, then succeeds
		return append(s, [2]string{"failed", ""}, [2]string{"installing", ""}, [2]string{"installed", ""})
	}
	return append(s, [2]string{"installed", ""})
}

// TestDecideRandomDeliveries simulates deployments through many revisions
// while the network duplicates, reorders and delays reports, and old
// revisions' reports arrive late. State never moves backwards within a
// revision, stale reports never change anything, and once the device's
// final report arrives again (agents re-report), the state is its truth.
func TestDecideRandomDeliveries(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		simulate(t, seed, rng)
	}
}

func simulate(t *testing.T, seed uint64, rng *rand.Rand) {
	var (
		cur           = InitialState
		manifest      = uint64(1) // the client's manifestVersion
		desiredSince  = manifest
		newestAdopted uint64
		op            = OperationInstall
		history       []sent // every report ever sent, for late deliveries
	)
	strategies := []Strategy{"", StrategyRecreate, StrategyBlueGreen}
	ops := []OperationKind{OperationUpgrade, OperationReconfigure, OperationRollback}
	revisions := 2 + rng.IntN(5)
	for rev := 0; rev <= revisions; rev++ {
		removal := rev == revisions
		st := strategies[rng.IntN(len(strategies))]
		if rev > 0 {
			next := ops[rng.IntN(len(ops))]
			if removal {
				next = OperationRemove
			}
			if _, err := Publish(cur, next); err != nil {
				// An operation is still under way: its deadline fails it.
				if !CanTransition(cur, StateFailed) {
					t.Fatalf("seed %d: %q cannot fail by deadline", seed, cur)
				}
				cur = StateFailed
			}
			s, err := Publish(cur, next)
			if err != nil {
				t.Fatalf("seed %d: Publish(%q, %q): %v", seed, cur, next, err)
			}
			cur, op = s, next
			manifest++
			desiredSince = manifest
		}
		// The device adopts the revision, perhaps after unrelated manifest
		// bumps, and sends its script; more bumps may happen meanwhile.
		var reports []sent
		script := deviceScript(rng, op, st, removal)
		for _, step := range script {
			if rng.IntN(3) == 0 {
				manifest++ // another deployment of the client changed
			}
			reports = append(reports, sent{rev, ReportView{State: step[0], Phase: step[1], Adopted: manifest}})
		}
		final := reports[len(reports)-1]
		history = append(history, reports...)

		// The network: duplicates, late reports of earlier revisions, and
		// local reordering.
		var wire []sent
		for _, r := range reports {
			wire = append(wire, r)
			if rng.IntN(4) == 0 {
				wire = append(wire, r)
			}
			if rng.IntN(5) == 0 {
				wire = append(wire, history[rng.IntN(len(history))])
			}
		}
		for i := range wire {
			if j := i + rng.IntN(3); j < len(wire) {
				wire[i], wire[j] = wire[j], wire[i]
			}
		}
		wire = append(wire, final) // the agent reports its settled state again

		level := progress(removal, st, cur)
		for _, w := range wire {
			in := Observation{Current: cur, Op: op, Strategy: st, DesiredSince: desiredSince,
				Removing: removal, NewestAdopted: newestAdopted, Report: w.report}
			d := Decide(in)
			if d.Stale && d.Changed {
				t.Fatalf("seed %d: stale report changed state: %+v -> %+v", seed, in, d)
			}
			if d.Changed && !CanTransition(cur, d.Next) {
				t.Fatalf("seed %d: refused transition: %+v -> %+v", seed, in, d)
			}
			if w.rev != rev && d.Changed {
				t.Fatalf("seed %d: a report of revision %d changed revision %d: %+v -> %+v", seed, w.rev, rev, in, d)
			}
			if p := progress(removal, st, d.Next); p < level {
				t.Fatalf("seed %d: state moved backwards (%q, progress %d -> %q, progress %d): %+v -> %+v",
					seed, cur, level, d.Next, p, in, d)
			} else {
				level = p
			}
			if cur == StateRemoved && d.Changed {
				t.Fatalf("seed %d: left removed: %+v", seed, d)
			}
			cur = d.Next
			newestAdopted = max(newestAdopted, w.report.Adopted)
		}
		want := map[string]State{"installed": StateInstalled, "failed": StateFailed, "removed": StateRemoved}[final.report.State]
		if cur != want {
			t.Fatalf("seed %d: revision %d (%s, strategy %q) ended %q after final report %q, want %q",
				seed, rev, op, st, cur, final.report.State, want)
		}
	}
}

// TestDecideCarriesTheAgentMessage: a failed report's Reason carries what
// the agent said, on one line and bounded; other reports do not.
func TestDecideCarriesTheAgentMessage(t *testing.T) {
	long := strings.Repeat("é", MaxAgentMessage+10)
	cases := []struct {
		name    string
		in      Observation
		want    string
		changed bool
	}{
		{"install failed", withMessage(obs(StateInstalling, OperationInstall, false, DeviceFailed, ""), "pull\tfailed\r\n"),
			"the device reported failure: pull failed", true},
		{"removal failed", withMessage(obs(StateRemoving, OperationRemove, true, DeviceFailed, ""), "volume busy"),
			"the device failed to remove the deployment: volume busy", true},
		{"format characters", withMessage(obs(StateInstalling, OperationInstall, false, DeviceFailed, ""), "\u202eevil\u2066x\u2028y\u2029z\ufeffw\u200b"),
			"the device reported failure: evil x y z w", true},
		{"blank message", withMessage(obs(StateInstalling, OperationInstall, false, DeviceFailed, ""), " \n "),
			"the device reported failure", true},
		{"bounded", withMessage(obs(StateInstalling, OperationInstall, false, DeviceFailed, ""), long),
			"the device reported failure: " + strings.Repeat("é", MaxAgentMessage-1) + "…", true},
		{"installed ignores it", withMessage(obs(StateInstalling, OperationInstall, false, DeviceInstalled, ""), "old warning"),
			"the device runs the desired revision", true},
	}
	for _, tc := range cases {
		got := Decide(tc.in)
		if got.Reason != tc.want || got.Changed != tc.changed {
			t.Errorf("%s: Decide = %q (changed %v), want %q (changed %v)", tc.name, got.Reason, got.Changed, tc.want, tc.changed)
		}
	}
}

func withMessage(o Observation, m string) Observation {
	o.Report.Message = m
	return o
}
