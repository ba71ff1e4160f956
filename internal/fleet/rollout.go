package fleet

import (
	"context"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Fleet rollouts (design section 13, docs/rollouts.md): one change of one
// application applied to many members in waves. The rules live in
// internal/lifecycle (rollout*.go); the service resolves the members, the
// store keeps them, and the scheduler's pass drives them.
//
// Numbering: wave indexes, RolloutMember.Wave and Rollout.CurrentWave count
// from 1 as the contract does (0: none); the domain's indexes count from 0.

// RolloutRequest is a rollout as asked (the body of the create and plan
// operations, translated by the handler).
type RolloutRequest struct {
	ApplicationID string
	// Spec is the action with its options, the waves and the rollout-level
	// options; Spec.NotSeenFor carries the target's notSeenFor.
	Spec lifecycle.RolloutSpec
	// ProfileID is an install rollout's deployment profile; "": per device,
	// the first profile it can run.
	ProfileID string
	Target    RolloutTarget
	// RevertOnAbort: when the rollout aborts because of a threshold
	// (onThreshold: abort), it also reverts the members it changed.
	RevertOnAbort bool
}

// RolloutTarget selects the members: every criterion given must hold; none
// given, all of them (the devices of the fleet for install, the
// application's deployments otherwise).
type RolloutTarget struct {
	// Selector is a device label selector (ParseSelector's syntax).
	Selector  string
	ClientIDs []string
	// Devices are [client id, device id] pairs.
	Devices [][2]string
	// Versions and States select existing deployments (not for install).
	Versions []string
	States   []lifecycle.State
}

// WaveState is where one wave of a rollout stands.
type WaveState string

// The wave states (the contract's WaveState).
const (
	WavePending    WaveState = "pending"    // started nothing yet (a manual wave waits for approve)
	WavePublishing WaveState = "publishing" // starts its members' operations and waits for their results
	WaveSoaking    WaveState = "soaking"    // settled, thresholds met, the soak runs
	WavePassed     WaveState = "passed"     // settled, thresholds met, soak over
	WaveFailed     WaveState = "failed"     // a threshold was exceeded
	WaveStopped    WaveState = "stopped"    // the rollout ended before the wave passed or failed
)

// Rollout is a rollout with its progress.
type Rollout struct {
	ID            string
	ApplicationID string
	Action        lifecycle.RolloutAction
	// Request is the rollout as asked (for display).
	Request RolloutRequest
	// MaxInFlight, OnThreshold, Window and Deadline are the validated
	// options, defaults applied.
	MaxInFlight int
	OnThreshold lifecycle.OnThreshold
	Window      *lifecycle.RolloutWindow
	Deadline    time.Duration
	DeadlineAt  time.Time

	State          lifecycle.RolloutState
	Cause          lifecycle.RolloutCause
	StateChangedAt time.Time
	// History lists every transition, oldest first (the creation first).
	History []RolloutTransition
	Counts  RolloutCounts
	Waves   []RolloutWave
	// CurrentWave is the wave the rollout is at, from 1; 0 when it ended
	// or has not started one.
	CurrentWave int
	// Waiting says why the rollout waits; nil when it does not.
	Waiting *RolloutWaiting
	// Abort is the abort asked (by an operator, or a threshold); nil when none.
	Abort *RolloutAbort

	CreatedAt, UpdatedAt time.Time
	CreatedBy            string
	// Generation is bumped by every change of the rollout; what a
	// Precondition expects (the ETag).
	Generation int64
}

// RolloutTransition is one state move of a rollout (From "" for the creation).
type RolloutTransition struct {
	From, To lifecycle.RolloutState
	Cause    lifecycle.RolloutCause
	At       time.Time
	Actor    string // "scheduler" for the driver's moves
	Detail   string
}

// RolloutCounts counts a rollout's members.
type RolloutCounts struct {
	Total, Eligible, Excluded int
	// ExcludedByReason counts the members excluded, at start or by the
	// exclude action (reason operator).
	ExcludedByReason map[lifecycle.ExclusionReason]int
	ByStatus         lifecycle.WaveCounts
}

// RolloutWave is one wave with its progress.
type RolloutWave struct {
	Index int // from 1
	lifecycle.Wave
	ResolvedSize    int
	AllowedFailures int // MaxFailures of ResolvedSize
	State           WaveState
	Counts          lifecycle.WaveCounts
	// Instants; zero when not (yet) reached.
	StartedAt, SettledAt, SoakUntil, FinishedAt, ApprovedAt time.Time
	ApprovedBy                                               string
}

// Reasons a rollout waits (the contract's RolloutWaiting.reason).
const (
	WaitingApproval  = "approval-required"
	WaitingPaused    = "operator-paused"
	WaitingThreshold = "threshold-exceeded"
	WaitingSoak      = "soak"
	WaitingWindow    = "window"
)

// RolloutWaiting is why a rollout waits, and until when when known.
type RolloutWaiting struct {
	Reason  string
	Message string
	Until   time.Time // zero: until an action
}

// RolloutAbort is the abort a rollout was asked.
type RolloutAbort struct {
	Revert, Forced bool
	Reason         string
	RequestedBy    string
	At             time.Time
}

// Member classifications.
const (
	ClassEligible = "eligible"
	ClassExcluded = "excluded"
)

// RolloutMember is one member of a rollout.
type RolloutMember struct {
	// DeploymentID: the deployment (for install, the one the rollout
	// created, once created); "" before that.
	DeploymentID, ClientID, DeviceID string
	// Classification is ClassEligible or ClassExcluded.
	Classification string
	// Reason of an excluded member, with its detail and, for
	// policy-refused, the supplier's reason.
	Reason         lifecycle.ExclusionReason
	ReasonDetail   string
	SupplierReason string
	// Plan of an eligible member; nil for an excluded one.
	Plan *lifecycle.MemberPlan
	// Wave, from 1; 0 for an excluded member.
	Wave        int
	Status      lifecycle.MemberStatus
	OperationID string
	// FromVersion and FromRevision: what the member ran before the rollout.
	FromVersion  string
	FromRevision int
	// Result is a sentence on how its operation ended.
	Result    string
	Revert    *MemberRevert
	UpdatedAt time.Time
}

// Outcomes of a member's revert (the contract's MemberRevert.outcome).
const (
	RevertPending     = "pending"
	RevertInProgress  = "in-progress"
	RevertReverted    = "reverted"
	RevertNotReverted = "not-reverted"
	RevertFailed      = "failed"
)

// MemberRevert is what an abort with revert did to a member.
type MemberRevert struct {
	Outcome     string
	ToRevision  int // 0 for install members (removed)
	OperationID string
	Reason      string
	Forced      bool
}

// RolloutPlan is what creating a rollout would do.
type RolloutPlan struct {
	ApplicationID             string
	Action                    lifecycle.RolloutAction
	Total, Eligible, Excluded int
	ExcludedByReason          map[lifecycle.ExclusionReason]int
	// Plans groups the eligible members by plan (hops by path), the
	// largest group first.
	Plans []PlanGroup
	// Exclusions groups the excluded members by reason, the largest first.
	Exclusions []ExclusionGroup
	Waves      []PlannedWave
}

// MaxPlanExamples bounds the examples of each plan group.
const MaxPlanExamples = 5

// PlanGroup is the eligible members that share one plan.
type PlanGroup struct {
	Plan     lifecycle.MemberPlan
	Count    int
	Examples []PlanExample
}

// ExclusionGroup is the members excluded for one reason.
type ExclusionGroup struct {
	Reason   lifecycle.ExclusionReason
	Count    int
	Examples []PlanExample
}

// PlanExample is one member of a plan group.
type PlanExample struct {
	DeploymentID, ClientID, DeviceID string
	FromVersion                      string
	ReasonDetail                     string
}

// PlannedWave is one wave with its resolved size.
type PlannedWave struct {
	Index int // from 1
	lifecycle.Wave
	ResolvedSize    int
	AllowedFailures int
}

// RolloutFilter selects rollouts; zero fields select all.
type RolloutFilter struct {
	ApplicationID string
	State         lifecycle.RolloutState
}

// MemberFilter selects a rollout's members; zero fields select all.
type MemberFilter struct {
	Wave           int // from 1
	Status         lifecycle.MemberStatus
	Classification string // ClassEligible or ClassExcluded
	Reason         lifecycle.ExclusionReason
}

// AbortRequest is the body of the abort action.
type AbortRequest struct {
	Revert bool
	// Force overrides the rollback policy of the reverts (admin, with Reason).
	Force  bool
	Reason string
}

// MemberRef names a member: DeploymentID for upgrade, reconfigure and
// rollback rollouts; ClientID and DeviceID for install.
type MemberRef struct {
	DeploymentID, ClientID, DeviceID string
}

// ProblemRolloutMember is the problem type of a change refused because
// its deployment (or device) is a member of an active rollout (ECONFLICT,
// Extra {"rolloutId"}).
const ProblemRolloutMember = "rollout-member"

// rolloutMemberError refuses a change of a member of active rollout id.
func rolloutMemberError(what, id string) error {
	return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: ProblemRolloutMember,
		Message: what + " is a member of active rollout " + id + " (GET /mgmt/v1/rollouts/" + id +
			"); pause, cancel or abort the rollout, or exclude the member first.",
		Extra: map[string]any{"rolloutId": id}}
}

func notImplementedYet() error {
	return lifecycle.Errorf(lifecycle.EINTERNAL, "not implemented yet")
}

// CreateRollout validates the request, resolves and classifies its
// members, sizes its waves and stores the rollout running (cause started)
// with its members, history and events in one transaction.
//
// Returns EINVALID naming the field for a bad request (an unknown selector,
// waves that do not cover, a target version that does not exist or is
// yanked); lifecycle.NoEligibleError (EINVALID, type no-eligible-members,
// the counts by reason) when no member is eligible, creating nothing.
func (s *Service) CreateRollout(ctx context.Context, req RolloutRequest, actor Actor) (Rollout, error) {
	return Rollout{}, notImplementedYet()
}

// PlanRollout answers what CreateRollout would do, writing nothing. It
// refuses what CreateRollout refuses, except that an empty eligible set is
// answered (with its counts), not refused.
func (s *Service) PlanRollout(ctx context.Context, req RolloutRequest) (RolloutPlan, error) {
	return RolloutPlan{}, notImplementedYet()
}

// Rollout returns one rollout with its progress. Returns ENOTFOUND.
func (s *Service) Rollout(ctx context.Context, id string) (Rollout, error) {
	return Rollout{}, notImplementedYet()
}

// Rollouts returns a page of rollouts, newest first, and the cursor of the
// next page ("" at the end).
func (s *Service) Rollouts(ctx context.Context, f RolloutFilter, limit int, cursor string) ([]Rollout, string, error) {
	return nil, "", notImplementedYet()
}

// RolloutMembers returns a page of a rollout's members in their stable
// order (client id, device id, deployment id), and the next cursor.
// Returns ENOTFOUND if there is no such rollout.
func (s *Service) RolloutMembers(ctx context.Context, id string, f MemberFilter, limit int, cursor string) ([]RolloutMember, string, error) {
	return nil, "", notImplementedYet()
}

// PauseRollout pauses a running rollout (cause operator-paused); pausing a
// paused one changes nothing. Returns ENOTFOUND; ECONFLICT
// (rollout-state-conflict) when the state does not allow it; EPRECONDITION
// when the rollout does not meet expect.
func (s *Service) PauseRollout(ctx context.Context, id string, actor Actor, expect Precondition) (Rollout, error) {
	return Rollout{}, notImplementedYet()
}

// ResumeRollout resumes a rollout an operator or a threshold paused (cause
// operator-resumed; after a threshold pause the wave's thresholds are
// accepted); resuming a running one changes nothing. A rollout waiting for
// approval is refused (ECONFLICT): approve it. Errors as PauseRollout.
func (s *Service) ResumeRollout(ctx context.Context, id string, actor Actor, expect Precondition) (Rollout, error) {
	return Rollout{}, notImplementedYet()
}

// ApproveRollout starts the manual wave a rollout waits for (cause
// approved). ECONFLICT when no wave waits for approval. Errors as
// PauseRollout.
func (s *Service) ApproveRollout(ctx context.Context, id string, actor Actor, expect Precondition) (Rollout, error) {
	return Rollout{}, notImplementedYet()
}

// CancelRollout ends a running or paused rollout as cancelled: it starts
// nothing new, its pending members become cancelled, in-flight operations
// finish on their own. Errors as PauseRollout.
func (s *Service) CancelRollout(ctx context.Context, id string, actor Actor, expect Precondition) (Rollout, error) {
	return Rollout{}, notImplementedYet()
}

// AbortRollout moves a running or paused rollout to aborting (cause
// operator-aborted): it starts nothing new and cancels its members'
// in-flight operations; with Revert, the driver then returns every member
// it changed to its revision from before the rollout where the installed
// version's policy allows it. On an aborting rollout, a Revert not yet
// asked is added (no state move). Force needs an admin and a reason
// (EFORBIDDEN, EINVALID). Errors as PauseRollout.
func (s *Service) AbortRollout(ctx context.Context, id string, req AbortRequest, actor Actor, expect Precondition) (Rollout, error) {
	return Rollout{}, notImplementedYet()
}

// ExcludeRolloutMember excludes one member of an active rollout (status
// excluded, reason operator); its in-flight operation is left alone.
// Returns ENOTFOUND when the rollout or the member does not exist;
// ECONFLICT when the member already ended (reverted, removed, excluded...)
// or the rollout ended. Errors as PauseRollout.
func (s *Service) ExcludeRolloutMember(ctx context.Context, id string, m MemberRef, actor Actor, expect Precondition) (Rollout, error) {
	return Rollout{}, notImplementedYet()
}
