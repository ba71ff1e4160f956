package lifecycle

import (
	"fmt"
	"slices"
	"strings"
)

// RolloutState is the state of a fleet rollout (design section 13): one
// change of one application applied to many members in waves.
type RolloutState string

// The rollout states.
const (
	RolloutRunning   RolloutState = "running"   // the driver publishes waves
	RolloutPaused    RolloutState = "paused"    // nothing new starts; in-flight work finishes
	RolloutSucceeded RolloutState = "succeeded" // every wave passed; final
	RolloutAborting  RolloutState = "aborting"  // in-flight work is being cancelled and, if asked, members reverted
	RolloutAborted   RolloutState = "aborted"   // the abort finished; final
	RolloutCancelled RolloutState = "cancelled" // nothing new starts; in-flight work finishes on its own; final
	RolloutFailed    RolloutState = "failed"    // cannot go on for a reason outside thresholds; final
)

// InitialRolloutState is the state a rollout is created in (cause
// RolloutCauseStarted, from no state).
const InitialRolloutState = RolloutRunning

var allRolloutStates = []RolloutState{
	RolloutRunning, RolloutPaused, RolloutSucceeded, RolloutAborting, RolloutAborted, RolloutCancelled, RolloutFailed,
}

// AllRolloutStates returns every rollout state, in life-cycle order (the
// order of the rollouts.state CHECK). The result is a copy.
func AllRolloutStates() []RolloutState { return slices.Clone(allRolloutStates) }

// Valid reports whether s is one of the declared rollout states.
func (s RolloutState) Valid() bool { return slices.Contains(allRolloutStates, s) }

// Terminal reports whether the rollout has ended: succeeded, aborted,
// cancelled or failed.
func (s RolloutState) Terminal() bool { return s.Valid() && len(rolloutTransitions[s]) == 0 }

// Active reports whether the rollout has not ended (running, paused or
// aborting): its members are busy for every other rollout and refuse other
// lifecycle operations.
func (s RolloutState) Active() bool { return s.Valid() && !s.Terminal() }

// CanTransitionTo reports whether the rollout life cycle allows a move from
// s to to, whatever the cause. It is false for a no-op and for unknown
// states.
func (s RolloutState) CanTransitionTo(to RolloutState) bool { return rolloutTransitions.can(s, to) }

// rolloutTransitions is the rollout life cycle. The database mirrors it by a
// trigger on rollouts.state (RolloutTransitionsSQL); rolloutCauses says which
// causes take each edge.
//
//   - running → paused: an operator pauses; the current wave needs approval;
//     a threshold is exceeded with onThreshold: pause; the current wave
//     emptied (its members all left it before any result).
//   - paused → running: an operator resumes, or approves the waiting wave.
//   - running → succeeded: the last wave passed.
//   - running, paused → cancelled: an operator cancels (in-flight operations
//     finish on their own; the rollout starts nothing new).
//   - running, paused → aborting: an operator aborts, or a threshold is
//     exceeded with onThreshold: abort.
//   - aborting → aborted: the abort's cancellations and reverts finished.
//   - running, paused → failed: the target version was yanked or deleted,
//     or the rollout's deadline passed.
//   - succeeded, aborted, cancelled, failed: final.
var rolloutTransitions = table[RolloutState]{
	RolloutRunning:   {RolloutPaused, RolloutSucceeded, RolloutCancelled, RolloutAborting, RolloutFailed},
	RolloutPaused:    {RolloutRunning, RolloutCancelled, RolloutAborting, RolloutFailed},
	RolloutAborting:  {RolloutAborted},
	RolloutSucceeded: nil,
	RolloutAborted:   nil,
	RolloutCancelled: nil,
	RolloutFailed:    nil,
}

// RolloutTransitions returns every allowed (from, to) pair of the rollout
// life cycle, sorted by from and then to.
func RolloutTransitions() [][2]RolloutState { return rolloutTransitions.pairs() }

// RolloutTransitionsSQL returns the rollout life cycle as the SQL boolean
// expression the rollouts.state trigger tests:
//
//	(OLD.state, NEW.state) IN (('aborting','aborted'), …)
func RolloutTransitionsSQL() string { return rolloutTransitions.sql("OLD.state", "NEW.state") }

// RolloutStatesSQL returns the rollout states as a SQL list for the
// rollouts.state CHECK: ('running', 'paused', …).
func RolloutStatesSQL() string { return valuesSQL(allRolloutStates) }

// RolloutCause is why a rollout moved to its state; the rollout shows it
// and its events carry it.
type RolloutCause string

// The rollout causes.
const (
	RolloutCauseStarted              RolloutCause = "started"                // created (no previous state)
	RolloutCauseOperatorPaused       RolloutCause = "operator-paused"        // the pause action
	RolloutCauseApprovalRequired     RolloutCause = "approval-required"      // a manual wave waits for approve
	RolloutCauseThresholdExceeded    RolloutCause = "threshold-exceeded"     // maxFailures or minSuccess of a wave
	RolloutCauseWaveEmptied          RolloutCause = "wave-emptied"           // a wave's members all left it before any result
	RolloutCauseOperatorResumed      RolloutCause = "operator-resumed"       // the resume action
	RolloutCauseApproved             RolloutCause = "approved"               // the approve action
	RolloutCauseCompleted            RolloutCause = "completed"              // the last wave passed
	RolloutCauseOperatorCancelled    RolloutCause = "operator-cancelled"     // the cancel action
	RolloutCauseOperatorAborted      RolloutCause = "operator-aborted"       // the abort action
	RolloutCauseRevertFinished       RolloutCause = "revert-finished"        // the abort's cancellations and reverts ended
	RolloutCauseTargetVersionYanked  RolloutCause = "target-version-yanked"  // the target version was yanked
	RolloutCauseTargetVersionDeleted RolloutCause = "target-version-deleted" // the target version was deleted
	RolloutCauseDeadlinePassed       RolloutCause = "deadline-passed"        // the rollout's own deadline
)

var allRolloutCauses = []RolloutCause{
	RolloutCauseStarted, RolloutCauseOperatorPaused, RolloutCauseApprovalRequired, RolloutCauseThresholdExceeded,
	RolloutCauseWaveEmptied, RolloutCauseOperatorResumed, RolloutCauseApproved, RolloutCauseCompleted, RolloutCauseOperatorCancelled,
	RolloutCauseOperatorAborted, RolloutCauseRevertFinished, RolloutCauseTargetVersionYanked,
	RolloutCauseTargetVersionDeleted, RolloutCauseDeadlinePassed,
}

// AllRolloutCauses returns every rollout cause, in the order of the
// vocabulary. The result is a copy.
func AllRolloutCauses() []RolloutCause { return slices.Clone(allRolloutCauses) }

// Valid reports whether c is one of the declared causes.
func (c RolloutCause) Valid() bool { return slices.Contains(allRolloutCauses, c) }

// rolloutCauses lists, for each edge of rolloutTransitions (and the
// creation, from ""), the causes that may take it. A test checks that it
// covers exactly the table's edges.
var rolloutCauses = map[[2]RolloutState][]RolloutCause{
	{"", RolloutRunning}: {RolloutCauseStarted},
	{RolloutRunning, RolloutPaused}: {RolloutCauseOperatorPaused, RolloutCauseApprovalRequired,
		RolloutCauseThresholdExceeded, RolloutCauseWaveEmptied},
	{RolloutPaused, RolloutRunning}:    {RolloutCauseOperatorResumed, RolloutCauseApproved},
	{RolloutRunning, RolloutSucceeded}: {RolloutCauseCompleted},
	{RolloutRunning, RolloutCancelled}: {RolloutCauseOperatorCancelled},
	{RolloutPaused, RolloutCancelled}:  {RolloutCauseOperatorCancelled},
	{RolloutRunning, RolloutAborting}:  {RolloutCauseOperatorAborted, RolloutCauseThresholdExceeded},
	{RolloutPaused, RolloutAborting}:   {RolloutCauseOperatorAborted, RolloutCauseThresholdExceeded},
	{RolloutAborting, RolloutAborted}:  {RolloutCauseRevertFinished},
	{RolloutRunning, RolloutFailed}:    {RolloutCauseTargetVersionYanked, RolloutCauseTargetVersionDeleted, RolloutCauseDeadlinePassed},
	{RolloutPaused, RolloutFailed}:     {RolloutCauseTargetVersionYanked, RolloutCauseTargetVersionDeleted, RolloutCauseDeadlinePassed},
}

// RolloutCauses returns the causes that may move a rollout from one state
// to another (from "" is the creation), nil when no cause may: the move is
// not in the table. The result is a copy.
func RolloutCauses(from, to RolloutState) []RolloutCause {
	return slices.Clone(rolloutCauses[[2]RolloutState{from, to}])
}

// Problem type of a refused rollout move.
const ProblemRolloutStateConflict = "rollout-state-conflict" // ECONFLICT: the rollout's state does not allow the action

// CheckRolloutMove checks one move of a rollout (from "" for its creation)
// with its cause. The actions (pause, resume, approve, cancel, abort) call
// it with the state they read, so that an action the state does not allow
// is refused with a sentence saying why.
//
// Returns ECONFLICT (type "rollout-state-conflict", Extra {"state", "to",
// "cause"}) when the table has no such move or the cause does not take it
// (a paused rollout cannot be paused again, an ended one cannot be
// resumed); EINTERNAL for an unknown cause, which is a bug of the caller.
func CheckRolloutMove(from, to RolloutState, cause RolloutCause) error {
	if !cause.Valid() {
		return Errorf(EINTERNAL, "unknown rollout cause %q", cause)
	}
	if slices.Contains(rolloutCauses[[2]RolloutState{from, to}], cause) {
		return nil
	}
	var why string
	switch {
	case from.Terminal():
		why = fmt.Sprintf("the rollout already ended (%s)", from)
	case from == to:
		why = fmt.Sprintf("the rollout is already %s", from)
	default:
		why = fmt.Sprintf("%s %s rollout cannot become %s (cause %s)", Article(string(from)), from, to, cause)
	}
	return &Error{Code: ECONFLICT, Type: ProblemRolloutStateConflict,
		Message: fmt.Sprintf("The rollout is %s: %s.", from, why),
		Extra:   map[string]any{"state": string(from), "to": string(to), "cause": string(cause)}}
}

// Article is the indefinite article of word in an English sentence ("an"
// before a vowel, "a" otherwise): "an aborting rollout", "an upgrade
// rollout".
func Article(word string) string {
	if word != "" && strings.ContainsRune("aeiouAEIOU", rune(word[0])) {
		return "an"
	}
	return "a"
}

// MemberStatus is where one member of a rollout stands (its progress). A
// member is classified at start as pending (eligible) or excluded.
type MemberStatus string

// The member statuses.
const (
	MemberPending     MemberStatus = "pending"      // eligible, its operation not started
	MemberInProgress  MemberStatus = "in-progress"  // its operation runs
	MemberSucceeded   MemberStatus = "succeeded"    // its operation succeeded
	MemberFailed      MemberStatus = "failed"       // its operation failed or passed its deadline
	MemberCancelled   MemberStatus = "cancelled"    // the rollout cancelled its operation, or ended before starting it
	MemberReverted    MemberStatus = "reverted"     // an abort returned it to its revision from before the rollout; final
	MemberNotReverted MemberStatus = "not-reverted" // an abort may not revert it (the supplier's reason); final
	MemberRemoved     MemberStatus = "removed"      // its deployment was deleted or its device unregistered; final
	MemberExcluded    MemberStatus = "excluded"     // at start (a reason code), or later by the exclude action; final
)

var allMemberStatuses = []MemberStatus{
	MemberPending, MemberInProgress, MemberSucceeded, MemberFailed, MemberCancelled,
	MemberReverted, MemberNotReverted, MemberRemoved, MemberExcluded,
}

// AllMemberStatuses returns every member status, in life-cycle order (the
// order of the rollout_members.status CHECK). The result is a copy.
func AllMemberStatuses() []MemberStatus { return slices.Clone(allMemberStatuses) }

// Valid reports whether s is one of the declared member statuses.
func (s MemberStatus) Valid() bool { return slices.Contains(allMemberStatuses, s) }

// Terminal reports whether nothing can follow s: reverted, not-reverted,
// removed or excluded.
func (s MemberStatus) Terminal() bool { return s.Valid() && len(memberTransitions[s]) == 0 }

// CanTransitionTo reports whether the member life cycle allows a move from
// s to to. It is false for a no-op and for unknown statuses.
func (s MemberStatus) CanTransitionTo(to MemberStatus) bool { return memberTransitions.can(s, to) }

// memberTransitions is the member life cycle. The database mirrors it by a
// trigger on rollout_members.status (MemberTransitionsSQL). A member is
// created pending (eligible) or excluded (not eligible).
//
//   - pending → in-progress: the driver started its operation.
//   - pending → cancelled: the rollout ended (cancel, abort, fail) before
//     starting it.
//   - in-progress → succeeded, failed: its operation ended so.
//   - in-progress → cancelled: an abort cancelled its operation.
//   - succeeded, failed, cancelled → reverted, not-reverted: an abort with
//     revert decided its revert (DecideRevert) and ran it.
//   - any non-final status → removed: the deployment was deleted or the
//     device unregistered.
//   - any non-final status → excluded: the exclude action (reason
//     operator); the deployment keeps whatever state it reached.
//   - reverted, not-reverted, removed, excluded: final.
var memberTransitions = table[MemberStatus]{
	MemberPending:     {MemberInProgress, MemberCancelled, MemberRemoved, MemberExcluded},
	MemberInProgress:  {MemberSucceeded, MemberFailed, MemberCancelled, MemberRemoved, MemberExcluded},
	MemberSucceeded:   {MemberReverted, MemberNotReverted, MemberRemoved, MemberExcluded},
	MemberFailed:      {MemberReverted, MemberNotReverted, MemberRemoved, MemberExcluded},
	MemberCancelled:   {MemberReverted, MemberNotReverted, MemberRemoved, MemberExcluded},
	MemberReverted:    nil,
	MemberNotReverted: nil,
	MemberRemoved:     nil,
	MemberExcluded:    nil,
}

// MemberTransitions returns every allowed (from, to) pair of the member
// life cycle, sorted by from and then to.
func MemberTransitions() [][2]MemberStatus { return memberTransitions.pairs() }

// MemberTransitionsSQL returns the member life cycle as the SQL boolean
// expression the rollout_members.status trigger tests:
//
//	(OLD.status, NEW.status) IN (('cancelled','excluded'), …)
func MemberTransitionsSQL() string { return memberTransitions.sql("OLD.status", "NEW.status") }

// MemberStatusesSQL returns the member statuses as a SQL list for the
// rollout_members.status CHECK: ('pending', 'in-progress', …).
func MemberStatusesSQL() string { return valuesSQL(allMemberStatuses) }
