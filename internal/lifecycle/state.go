package lifecycle

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// State is the lifecycle state of a deployment (design section 6). The
// device reports only Margo's six states; the server combines a report with
// the desired revision, the operation that produced it and the adopted
// manifest version into one of these (see Decide).
type State string

// The deployment states.
const (
	StatePending       State = "pending"       // desired revision published, not yet adopted by the device
	StateInstalling    State = "installing"    // first install being applied
	StateInstalled     State = "installed"     // the device runs the desired revision
	StateDraining      State = "draining"      // an operation's drain phase
	StateUpgrading     State = "upgrading"     // the device applies an upgrade revision
	StateReconfiguring State = "reconfiguring" // the device applies a reconfiguration revision
	StateRollingBack   State = "rolling-back"  // the device applies a rollback revision
	StateFailed        State = "failed"        // the device reported failure, or a deadline passed
	StateRemoving      State = "removing"      // deleted; the device is removing it
	StateRemoved       State = "removed"       // deleted and confirmed gone; final
)

// InitialState is the state a deployment is created in: its first revision
// is published and not yet adopted. History records the creation as a
// transition from no state ("") to InitialState.
const InitialState = StatePending

// allStates lists the states in lifecycle order (the order of the design's
// table), which is also the order AllStates returns.
var allStates = []State{
	StatePending, StateInstalling, StateInstalled, StateDraining, StateUpgrading,
	StateReconfiguring, StateRollingBack, StateFailed, StateRemoving, StateRemoved,
}

// AllStates returns every state, in lifecycle order. The result is a copy.
func AllStates() []State { return slices.Clone(allStates) }

// Valid reports whether s is one of the declared states.
func (s State) Valid() bool { return slices.Contains(allStates, s) }

// Terminal reports whether nothing can follow s (only removed).
func (s State) Terminal() bool { return s == StateRemoved }

// Settled reports whether s is a resting state: installed, failed or
// removed. Every other state is a step of an operation under way, which a
// deadline must eventually end (design section 6: nothing stays in progress
// forever).
func (s State) Settled() bool {
	return s == StateInstalled || s == StateFailed || s == StateRemoved
}

// OperationKind is the kind of change an operation makes, and so the kind of
// revision it publishes.
type OperationKind string

// The operation kinds.
const (
	OperationInstall     OperationKind = "install"
	OperationUpgrade     OperationKind = "upgrade"
	OperationReconfigure OperationKind = "reconfigure"
	OperationRollback    OperationKind = "rollback"
	OperationRemove      OperationKind = "remove"
)

var allOperations = []OperationKind{
	OperationInstall, OperationUpgrade, OperationReconfigure, OperationRollback, OperationRemove,
}

// AllOperationKinds returns every operation kind. The result is a copy.
func AllOperationKinds() []OperationKind { return slices.Clone(allOperations) }

// Valid reports whether k is one of the declared operation kinds.
func (k OperationKind) Valid() bool { return slices.Contains(allOperations, k) }

// ApplyingState returns the state of a deployment whose device applies a
// revision of kind k: installing, upgrading, reconfiguring or rolling-back;
// removing for remove; "" for an unknown kind.
func (k OperationKind) ApplyingState() State {
	switch k {
	case OperationInstall:
		return StateInstalling
	case OperationUpgrade:
		return StateUpgrading
	case OperationReconfigure:
		return StateReconfiguring
	case OperationRollback:
		return StateRollingBack
	case OperationRemove:
		return StateRemoving
	}
	return ""
}

// Drains reports whether an operation of kind k may have a drain phase:
// upgrade, reconfigure and rollback replace a running version; install has
// nothing running and remove simply stops it.
func (k OperationKind) Drains() bool {
	return k == OperationUpgrade || k == OperationReconfigure || k == OperationRollback
}

// transitions is THE transition table: from each state, the states it may
// move to. Nothing else in wfm decides which moves exist; the database
// mirrors it as a CHECK constraint (TransitionsSQL). A no-op is not a
// transition, so no state lists itself.
//
// Who takes each edge (the cause recorded in history):
//   - → pending: publishing a new revision (Publish; operation).
//   - pending → installing/draining/upgrading/reconfiguring/rolling-back/
//     installed: the device adopted the revision and reports progress or
//     success (report; a fast device may skip steps).
//   - draining ⇄ upgrading/reconfiguring/rolling-back: recreate drains before
//     applying, blueGreen applies, switches and then drains the old instance
//     (report).
//   - → installed: the device runs the desired revision (report). From failed
//     too: the device recovered or finished after a deadline failed the
//     operation.
//   - installed → failed: the device reported failure after running (report).
//   - any non-final state → failed: report, operation deadline, or an
//     operator cancelling.
//   - any non-final state → removing: the deployment was deleted (Publish).
//   - any non-final state → removed: the device confirmed removal (report,
//     from removing or from failed while removing), or the removal was
//     forced: the device was unregistered or an operator confirmed it gone.
//   - removing → failed: the device failed to remove it (report, deadline);
//     failed → removing: only by publishing a removal (Publish), never by a
//     report: a report cannot tell a retry from a reordered old report.
//   - removed: final.
var transitions = table[State]{
	StatePending: {
		StateInstalling, StateDraining, StateUpgrading, StateReconfiguring, StateRollingBack,
		StateInstalled, StateFailed, StateRemoving, StateRemoved,
	},
	StateInstalling:    {StateInstalled, StateFailed, StateRemoving, StateRemoved},
	StateInstalled:     {StatePending, StateFailed, StateRemoving, StateRemoved},
	StateDraining:      {StateUpgrading, StateReconfiguring, StateRollingBack, StateInstalled, StateFailed, StateRemoving, StateRemoved},
	StateUpgrading:     {StateDraining, StateInstalled, StateFailed, StateRemoving, StateRemoved},
	StateReconfiguring: {StateDraining, StateInstalled, StateFailed, StateRemoving, StateRemoved},
	StateRollingBack:   {StateDraining, StateInstalled, StateFailed, StateRemoving, StateRemoved},
	StateFailed:        {StatePending, StateInstalled, StateRemoving, StateRemoved},
	StateRemoving:      {StateFailed, StateRemoved},
	StateRemoved:       nil,
}

// CanTransition reports whether the table allows a move from one state to
// another. It is false for a no-op (from == to) and for unknown states.
func CanTransition(from, to State) bool { return transitions.can(from, to) }

// Transitions returns every allowed (from, to) pair, sorted by from and then
// to (byte order of the names), so that the result is stable.
func Transitions() [][2]State { return transitions.pairs() }

// TransitionsSQL returns the transition table as a SQL boolean expression
// over the columns from_state and to_state, for the CHECK constraint of
// deployment_history (migration 00023): true for an allowed pair, false for
// any other, a NULL from_state included:
//
//	coalesce(('{"draining": ["failed", …], …}'::jsonb -> from_state) ? to_state, false)
//
// The pairs are in Transitions order, so a migration can embed the text and a
// test can compare it byte for byte.
func TransitionsSQL() string { return transitions.jsonSQL("from_state", "to_state") }

// StatesSQL returns the states as a SQL list for a CHECK constraint on a
// state column: ('pending', 'installing', …) in AllStates order.
func StatesSQL() string { return valuesSQL(allStates) }

// Problem types of the state machine's errors.
const (
	ProblemStateConflict    = "state-conflict"    // ECONFLICT: the deployment's state does not allow the operation
	ProblemInvalidOperation = "invalid-operation" // EINVALID: unknown operation kind or state
)

// Publish returns the state a deployment takes when a new desired revision
// of kind op is published (design section 6: "pending = desired revision
// published, not yet adopted"): pending for install, upgrade, reconfigure and
// rollback; removing for remove. The returned state may equal current (remove
// while removing), which is not a transition and records no history.
//
// Allowed:
//   - install from "" (the deployment is being created) or failed (a first
//     install that failed is retried);
//   - upgrade, reconfigure and rollback from installed or failed;
//   - remove from every state but removed (removal is always possible, also
//     while an operation is under way; it is idempotent while removing).
//
// Returns EINVALID (type "invalid-operation") for an unknown op, an unknown
// current state, or a non-install op on a deployment that does not exist
// (""). Returns ECONFLICT (type "state-conflict", Extra {"state",
// "operation"}) when the state does not allow op: the deployment is removed
// or being removed, an operation is under way (pending or any applying or
// draining state: end it first, by its deadline or by cancelling it, which
// fails the deployment), or install on an installed deployment.
//
// Publish sees only the state. A deployment whose removal failed is failed
// like any other, so the caller must itself refuse every operation but
// remove on a deployment it has deleted (Observation.Removing).
func Publish(current State, op OperationKind) (State, error) {
	if !op.Valid() {
		return current, &Error{Code: EINVALID, Type: ProblemInvalidOperation,
			Message: fmt.Sprintf("unknown operation %q", op)}
	}
	if current == "" {
		if op == OperationInstall {
			return InitialState, nil
		}
		return current, &Error{Code: EINVALID, Type: ProblemInvalidOperation,
			Message: fmt.Sprintf("cannot %s a deployment that does not exist; install it first", op)}
	}
	if !current.Valid() {
		return current, &Error{Code: EINVALID, Type: ProblemInvalidOperation,
			Message: fmt.Sprintf("unknown deployment state %q", current)}
	}
	conflict := func(why string) (State, error) {
		return current, &Error{Code: ECONFLICT, Type: ProblemStateConflict,
			Message: fmt.Sprintf("cannot %s a deployment that is %s: %s", op, current, why),
			Extra:   map[string]any{"state": string(current), "operation": string(op)}}
	}
	switch {
	case current == StateRemoved:
		return conflict("a removed deployment is final; create a new deployment")
	case op == OperationRemove:
		return StateRemoving, nil
	case current == StateRemoving:
		return conflict("it is being removed")
	case current == StateInstalled && op == OperationInstall:
		return conflict("it is already installed; upgrade or reconfigure it instead")
	case current == StateInstalled, current == StateFailed:
		return StatePending, nil
	}
	return conflict("an operation is under way; wait for it to end or cancel it")
}

// Margo's six device states, as a status report carries them.
const (
	DevicePending    = "pending"
	DeviceInstalling = "installing"
	DeviceInstalled  = "installed"
	DeviceFailed     = "failed"
	DeviceRemoving   = "removing"
	DeviceRemoved    = "removed"
)

// The drain phases a drain-aware agent may report (the optional phase
// member of wfm's status extension).
const (
	PhaseDraining    = "draining"
	PhaseDrained     = "drained"
	PhaseStartingNew = "starting-new"
	PhaseVerifying   = "verifying"
	PhaseSwitching   = "switching"
)

// ReportView is what Decide needs from one device status report.
type ReportView struct {
	// State is the deployment's overall state as reported: one of Margo's
	// six (DevicePending … DeviceRemoved).
	State string
	// Adopted is the report's adoptedManifestVersion.
	Adopted uint64
	// Phase is the optional drain phase (PhaseDraining … PhaseSwitching), ""
	// when absent. Unknown phases are ignored.
	Phase string
	// Message is what the agent said went wrong (Margo's status.error and
	// components[].error), "" when it said nothing. A failed report's
	// Reason carries it, cut to MaxAgentMessage characters.
	Message string
}

// MaxAgentMessage bounds how many characters of an agent's failure message
// a Decision's Reason (and so the deployment's stateReason) carries; a
// longer message is cut and ends with "…". The whole report is kept with
// the deployment's reports.
const MaxAgentMessage = 512

// Observation is everything Decide looks at: the deployment as stored and
// one new report.
type Observation struct {
	Current State
	// Op is the operation that produced the desired revision.
	Op OperationKind
	// Strategy is the desired revision's strategy. It orders the drain phase
	// against the applying state within one revision: recreate drains
	// before applying, blueGreen applies, switches and then drains the old
	// instance. "" (unknown) orders neither before the other.
	Strategy Strategy
	// DesiredSince is the client manifestVersion that first published the
	// desired revision (or the removal).
	DesiredSince uint64
	// Removing says the deployment was deleted and is absent from the
	// manifest. Op == OperationRemove implies it.
	Removing bool
	// NewestAdopted is the highest adoptedManifestVersion already seen for
	// this deployment, 0 if none.
	NewestAdopted uint64
	Report        ReportView
}

// Decision is the outcome of Decide.
type Decision struct {
	// Next is the state after the report: Current when nothing changes.
	Next State
	// Changed says Next differs from Current; CanTransition(Current, Next)
	// then holds.
	Changed bool
	// Stale says the report is older than one already seen: store it, change
	// nothing.
	Stale bool
	// Reason is a short sentence for history and for the deployment's
	// state reason.
	Reason string
}

// Decide turns one device status report into a state decision. It is total:
// every input gives a Decision, and a Decision never carries a transition
// the table refuses. The rules, in order:
//
//  1. Adopted < NewestAdopted: stale (whatever the state); stored, no
//     change.
//  2. An unknown or final (removed) current state never changes.
//  3. Adopted < DesiredSince: the report concerns an older revision (the
//     device has not adopted the desired one yet); no change.
//  4. The report is mapped to a target state:
//     - while removing (Removing or Op remove): removing → removing; removed
//     → removed; failed → failed (the removal failed); pending, installing
//     and installed → no change (the device has not started removing yet).
//     - otherwise: failed → failed; removed → failed (the device dropped a
//     deployment that is desired); pending → pending; installing and
//     removing → the Op's applying state (a recreate stops the old version
//     first); installed → installed; and for pending, installing and
//     installed reports a known Phase wins: draining and drained → draining
//     when Op drains (upgrade, reconfigure, rollback; ignored for install),
//     starting-new, verifying, switching → the Op's applying state.
//  5. A report never moves a deployment back to pending: pending is entered
//     only by publishing (Publish).
//  6. Target == Current: no change. A target the table refuses from
//     Current: no change, with the refusal as Reason.
//  7. Within one revision (or removal) progress never goes back: pending <
//     drain and apply (ordered by Observation.Strategy) < installed, failed;
//     removing < failed < removed. So failed is left only by installed
//     (the device recovered or finished late), by removed during a removal,
//     or by publishing; a device that retries after failing stays failed
//     until it succeeds. A report out of that order changes nothing.
//     Otherwise the state changes to the target.
func Decide(in Observation) Decision {
	cur := in.Current
	keep := func(format string, args ...any) Decision {
		return Decision{Next: cur, Reason: fmt.Sprintf(format, args...)}
	}
	r := in.Report
	switch {
	case r.Adopted < in.NewestAdopted:
		d := keep("stale report: adopted manifest version %d is older than %d, already seen", r.Adopted, in.NewestAdopted)
		d.Stale = true
		return d
	case !cur.Valid():
		return keep("unknown current state %q; report ignored", cur)
	case cur.Terminal():
		return keep("the deployment is removed; nothing leaves removed")
	case r.Adopted < in.DesiredSince:
		return keep("the report concerns an older revision: adopted manifest version %d, desired since %d", r.Adopted, in.DesiredSince)
	}

	target, why := mapReport(in)
	switch {
	case target == "":
		return keep("%s", why)
	case target == StatePending && cur != StatePending:
		return keep("the device reports pending; a report never moves a deployment back to pending")
	case target == cur:
		return keep("no change: %s", why)
	}
	if !CanTransition(cur, target) {
		return keep("refused: %s cannot move to %s (%s)", cur, target, why)
	}
	if removal := in.Removing || in.Op == OperationRemove; rank(removal, in.Strategy, target) < rank(removal, in.Strategy, cur) {
		if removal || cur == StateFailed {
			return keep("%s is settled for this revision; a %s report does not undo it (%s)", cur, target, why)
		}
		return keep("out-of-order report: with strategy %s, %s comes before %s (%s)", in.Strategy, target, cur, why)
	}
	return Decision{Next: target, Changed: true, Reason: why}
}

// mapReport returns the state a report points to, or "" and a reason when
// it points to none (the state does not change).
func mapReport(in Observation) (State, string) {
	r := in.Report
	if in.Removing || in.Op == OperationRemove {
		switch r.State {
		case DeviceRemoving:
			return StateRemoving, "the device is removing the deployment"
		case DeviceRemoved:
			return StateRemoved, "the device removed the deployment"
		case DeviceFailed:
			return StateFailed, withAgentMessage("the device failed to remove the deployment", r.Message)
		case DevicePending, DeviceInstalling, DeviceInstalled:
			return "", fmt.Sprintf("the device reports %s: it has not started removing the deployment yet", r.State)
		}
		return "", fmt.Sprintf("unknown device state %q; report ignored", r.State)
	}
	applying := in.Op.ApplyingState()
	if applying == "" {
		return "", fmt.Sprintf("unknown operation %q; report ignored", in.Op)
	}
	switch r.State {
	case DeviceFailed:
		return StateFailed, withAgentMessage("the device reported failure", r.Message)
	case DeviceRemoved:
		return StateFailed, "the device reports the deployment removed, but it is desired"
	case DeviceRemoving:
		return applying, "the device is removing the old version as part of the " + string(in.Op)
	case DevicePending, DeviceInstalling, DeviceInstalled:
		switch r.Phase {
		case PhaseDraining, PhaseDrained:
			if in.Op.Drains() {
				return StateDraining, "the device reports drain phase " + r.Phase
			}
		case PhaseStartingNew, PhaseVerifying, PhaseSwitching:
			return applying, "the device reports phase " + r.Phase
		}
		switch r.State {
		case DevicePending:
			return StatePending, "the device has adopted the revision and not started applying it"
		case DeviceInstalling:
			return applying, "the device is applying the " + string(in.Op)
		}
		return StateInstalled, "the device runs the desired revision"
	}
	return "", fmt.Sprintf("unknown device state %q; report ignored", r.State)
}

// withAgentMessage appends what the agent reported to reason, as
// "reason: message", the message cut to MaxAgentMessage characters and its
// control characters (line breaks included), format characters (direction
// overrides and isolates, zero-width ones, the byte order mark) and line
// and paragraph separators replaced by spaces, so that a state reason
// stays one bounded line, shown as it reads, whatever a device sends.
func withAgentMessage(reason, message string) string {
	message = strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) {
			return ' '
		}
		return r
	}, message))
	if message == "" {
		return reason
	}
	if utf8.RuneCountInString(message) > MaxAgentMessage {
		message = string([]rune(message)[:MaxAgentMessage-1]) + "…"
	}
	return reason + ": " + message
}

// rank orders the states of one revision: a report may not move a
// deployment to a lower rank. For a revision: pending < (drain and apply,
// ordered by the strategy) < installed, failed. For a removal: removing <
// failed (the removal failed) < removed. Moves between equal ranks
// (failed → installed, installed → failed) are allowed.
func rank(removal bool, s Strategy, st State) int {
	if removal {
		switch st {
		case StateRemoving:
			return 0
		case StateFailed:
			return 1
		case StateRemoved:
			return 2
		}
		return -1 // not a state of a removal; the table refuses moves into it
	}
	switch st {
	case StatePending:
		return 0
	case StateDraining:
		if s == StrategyBlueGreen {
			return 2
		}
		return 1
	case StateInstalling, StateUpgrading, StateReconfiguring, StateRollingBack:
		if s == StrategyRecreate {
			return 2
		}
		return 1
	}
	return 3
}
