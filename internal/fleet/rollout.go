package fleet

import (
	"context"
	"strconv"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/page"
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
	// WaveAccepted: an operator resumed the rollout after its current
	// wave exceeded a threshold or emptied (lifecycle.ResumeAcceptsWave);
	// the wave passes as it is once settled.
	WaveAccepted bool

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
	ApprovedBy                                              string
}

// RolloutWaiting is why a rollout waits, and until when when known
// (decided by lifecycle.DecideRolloutStep and lifecycle.PausedWaiting).
type RolloutWaiting = lifecycle.RolloutWaiting

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
	// Ord is the member's place in the stable order, from 0.
	Ord int
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
	// ProfileID: install, the profile chosen at start. RestoreRevision:
	// rollback, the revision the member returns to.
	ProfileID       string
	RestoreRevision int
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
	Wave int // from 1
	// DeploymentID, ClientID and DeviceID select one member by its key.
	DeploymentID, ClientID, DeviceID string
	Status                           lifecycle.MemberStatus
	Classification                   string // ClassEligible or ClassExcluded
	Reason                           lifecycle.ExclusionReason
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
func rolloutMemberError(what, id string) error { return RolloutMemberError(what, id) }

// RolloutMemberError is the refusal (ECONFLICT, ProblemRolloutMember) of a
// change of what (a sentence's subject: "Deployment <id>") while it is a
// member of active rollout id.
func RolloutMemberError(what, id string) error {
	return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: ProblemRolloutMember,
		Message: what + " is a member of active rollout " + id + " (GET /mgmt/v1/rollouts/" + id +
			"); pause, cancel or abort the rollout, or exclude the member first.",
		Extra: map[string]any{"rolloutId": id}}
}

// Rollout returns one rollout with its progress. Returns ENOTFOUND.
func (s *Service) Rollout(ctx context.Context, id string) (Rollout, error) {
	r, err := s.store.Rollout(ctx, id)
	if err != nil {
		return Rollout{}, err
	}
	return decorate(r), nil
}

// decorate fills in what a stored rollout derives from its request: the
// validated options (the request was valid when stored).
func decorate(r Rollout) Rollout {
	if st, err := lifecycle.ValidateRolloutSpec(r.Request.Spec); err == nil {
		r.MaxInFlight, r.OnThreshold, r.Window, r.Deadline = st.MaxInFlight, st.OnThreshold, st.Window, st.Deadline
	}
	if r.State.Terminal() {
		r.CurrentWave = 0
	}
	return r
}

// Rollouts returns a page of rollouts, newest first, and the cursor of the
// next page ("" at the end).
func (s *Service) Rollouts(ctx context.Context, f RolloutFilter, limit int, cursor string) ([]Rollout, string, error) {
	limit, after, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	rs, err := s.store.Rollouts(ctx, f, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	rs, next := page.Trim(rs, limit, func(r Rollout) string { return r.CreatedAt.UTC().Format(time.RFC3339Nano) + "|" + r.ID })
	for i := range rs {
		rs[i] = decorate(rs[i])
	}
	return rs, next, nil
}

// RolloutMembers returns a page of a rollout's members in their stable
// order (client id, device id, deployment id), and the next cursor.
// Returns ENOTFOUND if there is no such rollout.
func (s *Service) RolloutMembers(ctx context.Context, id string, f MemberFilter, limit int, cursor string) ([]RolloutMember, string, error) {
	limit, after, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	from := -1
	if after != "" {
		n, err := strconv.Atoi(after)
		if err != nil || n < 0 {
			return nil, "", page.BadCursor()
		}
		from = n
	}
	ms, err := s.store.RolloutMembers(ctx, id, f, from, limit+1)
	if err != nil {
		return nil, "", err
	}
	ms, next := page.Trim(ms, limit, func(m RolloutMember) string { return strconv.Itoa(m.Ord) })
	return ms, next, nil
}
