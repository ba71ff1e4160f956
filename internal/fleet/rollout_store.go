package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// RolloutStore is what rollouts need of storage (part of Store). Each
// method is one transaction.
type RolloutStore interface {
	// RolloutCandidates reads the candidate members of a rollout (in one
	// snapshot, but for the revisions, read a page at a time when asked),
	// in their stable order (client id, device id, deployment
	// id; the order of lifecycle.CompareMemberKeys), set-based: for
	// install, the registered devices matching q with the application's
	// deployment on each (if any); otherwise the application's deployments
	// (not removed) on devices matching q. It gives them to page pageSize
	// at a time (the last page may be shorter), each page after page
	// returned for the one before, and returns page's first error.
	// A candidate's Capabilities are not read (see DeviceCapabilities); its
	// FitKey is.
	RolloutCandidates(ctx context.Context, q CandidateQuery, pageSize int, page func([]RolloutCandidate) error) error
	// DeviceCapabilities returns the capabilities documents of these
	// devices (client id, device id; unknown ones are left out).
	DeviceCapabilities(ctx context.Context, devices [][2]string) (map[[2]string]json.RawMessage, error)
	// InsertRollout stores a new rollout: head is the rollout as known
	// before its members (id, application, action, request, creation).
	// It calls fill, which gives the rollout's members to write page by
	// page, in order of Ord (their Wave is not read: an eligible member's
	// wave follows from its place among the eligible ones and the waves'
	// ResolvedSize, as lifecycle.WaveStarts and WaveAt say), and returns
	// the rollout (its waves, state, deadline) and its events; the
	// rollout, its members, its first history rows and events are stored
	// in one transaction. fill's error is returned as it is, and nothing
	// is stored. Returns ECONFLICT (rollout-member) when an eligible member
	// became a member of another active rollout meanwhile (nothing is
	// stored).
	InsertRollout(ctx context.Context, head Rollout, fill func(write func([]RolloutMember) error) (Rollout, []lifecycle.Event, error)) error
	// Rollout returns one rollout with its history and counts (overall and
	// per wave). Returns ENOTFOUND.
	Rollout(ctx context.Context, id string) (Rollout, error)
	// Rollouts returns a page of rollouts, newest first, with ids after
	// after (cursor "<time>|<id>"), without history.
	Rollouts(ctx context.Context, f RolloutFilter, after string, limit int) ([]Rollout, error)
	// RolloutMembers returns up to limit members of a rollout with order
	// index above after (-1: from the start), in order. Returns ENOTFOUND
	// if there is no such rollout.
	RolloutMembers(ctx context.Context, id string, f MemberFilter, after, limit int) ([]RolloutMember, error)
	// ActiveRolloutOf returns the active rollout whose member deployment
	// deploymentID is ("" when none).
	ActiveRolloutOf(ctx context.Context, deploymentID string) (string, error)
	// ActiveRolloutOfOperation returns the active rollout that started
	// operation operationID for an active member ("" when none).
	ActiveRolloutOfOperation(ctx context.Context, operationID string) (string, error)

	// ClaimRollouts leases up to limit active rollouts that are due at now
	// (recheck_at passed or none) and not leased by another driver, for
	// lease; FOR UPDATE SKIP LOCKED, so that two drivers never claim one.
	// owner is the claiming driver's token: the lease is its own until it
	// runs out and another driver claims the rollout.
	ClaimRollouts(ctx context.Context, owner string, limit int, now time.Time, lease time.Duration) ([]string, error)
	// RenewRolloutLease extends owner's lease on rollout id to now+lease
	// and reports whether owner still holds it (false: another driver
	// claimed it, or it was released).
	RenewRolloutLease(ctx context.Context, id, owner string, now time.Time, lease time.Duration) (bool, error)
	// SyncRolloutMembers moves the statuses of a rollout's members from
	// their operations and deployments (succeeded, failed, cancelled,
	// removed; reverts: reverted or not-reverted) and returns how many
	// moved. Members in progress whose operation does not exist are
	// returned in unpublished (a publication interrupted by a crash).
	SyncRolloutMembers(ctx context.Context, id string, now time.Time) (moved int, unpublished []RolloutMember, err error)
	// ReserveRolloutMembers moves the first n pending members of wave
	// (from 0) to in-progress with new operation ids (install: new
	// deployment ids too), if the rollout's generation is still gen, it
	// is running and owner holds its lease. Returns the reserved members
	// (none when the rollout moved on or the lease was lost).
	ReserveRolloutMembers(ctx context.Context, id, owner string, gen int64, wave, n int, now time.Time) ([]RolloutMember, error)
	// SetMemberResults records what happened to members (by Ord).
	SetMemberResults(ctx context.Context, id string, results []MemberResult, now time.Time) error
	// UpdateRollout locks the rollout, reads it (with counts), calls
	// decide, and applies the change it returns, with history and events,
	// in one transaction. decide's error is returned and nothing changes;
	// so is ErrLeaseLost when the change names an Owner that no longer
	// holds the rollout's lease.
	UpdateRollout(ctx context.Context, id string, decide func(Rollout) (RolloutChange, error), now time.Time) (Rollout, error)
}

// RolloutHold is a deployment's rollout membership as CreateOperation sees
// it on the locked deployment: its active membership, or the membership
// whose (revert) operation is the one being created; zero when none.
type RolloutHold struct {
	RolloutID string
	// Active: the membership holds the deployment (an active rollout's
	// member not excluded or removed).
	Active bool
	// OperationID, RevertOperationID: the ids reserved for the member's
	// operation and its revert.
	OperationID, RevertOperationID string
	Status                         lifecycle.MemberStatus
}

// CandidateQuery selects a rollout's candidate members.
type CandidateQuery struct {
	ApplicationID string
	Install       bool
	Selector      Selector
	ClientIDs     []string
	Devices       [][2]string
	Versions      []string // canonical
	States        []lifecycle.State
	// Revisions asks for each deployment's revision history (rollback).
	Revisions bool
}

// RolloutCandidate is one candidate member with the facts its
// classification reads.
type RolloutCandidate struct {
	ClientID, DeviceID string
	// Capabilities: nil until read (Service.classifyPage reads those it
	// needs with DeviceCapabilities).
	Capabilities json.RawMessage
	// FitKey is the same for devices whose capabilities differ only in
	// margo.IdentityProperties ("": unknown).
	FitKey string
	// LastSeenAt: zero when unknown (never seen).
	LastSeenAt time.Time
	// Deployment: the application's deployment (nil for install when the
	// device has none).
	Deployment *Deployment
	// InstalledVersion: the version of the installed revision (zero: as
	// Deployment.Version).
	InstalledVersion lifecycle.Version
	ActiveOperation  string
	BusyRollout      string
	Revisions        []lifecycle.RevisionTimes
}

// MemberResult is what happened to one member (by Ord).
type MemberResult struct {
	Ord int
	// Status, when not "", is the member's new status.
	Status lifecycle.MemberStatus
	Result string
	// OperationID, DeploymentID, when not "", replace the member's.
	OperationID, DeploymentID string
	// Revert, when not nil, replaces the member's revert.
	Revert *MemberRevert
	// Deactivate ends the member's hold on its deployment.
	Deactivate bool
	// IfStatus, when not "", applies the change only if the member's
	// status still is IfStatus; otherwise the whole change fails with
	// ErrMemberChanged.
	IfStatus lifecycle.MemberStatus
	// IfNoRevert, like IfStatus, applies the change only if the member
	// has no revert yet (a revert is reserved once).
	IfNoRevert bool
}

// ErrLeaseLost is the error of a driver's change of a rollout whose lease
// it no longer holds (it ran out and another driver claimed the rollout):
// the visit stops.
var ErrLeaseLost = errors.New("the driver's lease on the rollout was lost")

// ErrMemberChanged is the error of a member change guarded by
// MemberResult.IfStatus whose member moved meanwhile (ECONFLICT).
var ErrMemberChanged = &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "conflict",
	Message: "The member changed while the change was decided; try again."}

// RolloutChange is what UpdateRollout applies; the zero value changes
// nothing but Recheck/Waiting/lease (see Touch).
type RolloutChange struct {
	// To, when not "", moves the rollout (history row, state_changed event).
	To     lifecycle.RolloutState
	Cause  lifecycle.RolloutCause
	Actor  string
	Detail string
	// Waves, when not nil, replace the stored waves (without counts).
	Waves []RolloutWave
	// CurrentWave, WaveApproved, WaveAccepted, Abort: when not nil,
	// replace the stored values.
	CurrentWave  *int
	WaveApproved *bool
	WaveAccepted *bool
	Abort        *RolloutAbort
	// CancelPending moves the pending members to cancelled.
	CancelPending bool
	// Members are per-member changes.
	Members []MemberResult
	// Waiting replaces the stored waiting (nil clears it).
	Waiting *RolloutWaiting
	// Recheck is when the driver must look again (zero: at once).
	Recheck time.Time
	// Release ends the driver's lease.
	Release bool
	// Owner, when not "", is the driver making the change: it is applied
	// only while Owner holds the rollout's lease (ErrLeaseLost otherwise).
	Owner string
	// Bump increments the generation (every change an operator can see
	// but counts).
	Bump   bool
	Events []lifecycle.Event
}

// Changes reports whether c changes what an operator sees of the rollout
// (a state move, members, the abort, anything that bumps the generation),
// rather than only the driver's bookkeeping (waiting, recheck, lease).
func (c RolloutChange) Changes() bool {
	return c.To != "" || c.Bump || c.Abort != nil || c.CancelPending || len(c.Members) > 0 || c.Waves != nil ||
		c.CurrentWave != nil || c.WaveAccepted != nil || c.WaveApproved != nil || len(c.Events) > 0
}
