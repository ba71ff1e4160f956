package fleet

import (
	"context"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Failure policies of an operation.
const (
	OnFailureHalt     = "halt"
	OnFailureRollback = "rollback"
)

// Operation is one requested change of one deployment, run by the scheduler
// step by step (one step per published revision; an upgrade along a path has
// one step per hop).
type Operation struct {
	ID              string
	DeploymentID    string
	Type            lifecycle.OperationKind
	State           lifecycle.OperationState
	Reason          string
	FromVersion     lifecycle.Version
	ToVersion       lifecycle.Version
	Parameters      map[string]any // of the final revision
	ProfileID       string
	Strategy        lifecycle.Strategy
	Drain           *lifecycle.DrainPolicy
	OnFailure       string
	StepTimeout     time.Duration
	Forced          bool
	ForceReason     string
	RequestedBy     string
	BaseRevision    int // the desired revision before the operation
	RestoreRevision int // rollbacks: the revision whose content is restored
	FollowUp        string
	Deadline        time.Time
	CreatedAt       time.Time
	UpdatedAt       time.Time
	FinishedAt      time.Time
	Steps           []Step
}

// Active reports whether the operation has not ended.
func (o Operation) Active() bool { return o.State.Active() }

// Step is one revision an operation publishes.
type Step struct {
	N           int
	Version     lifecycle.Version
	Revision    int // 0 until published
	State       lifecycle.StepState
	PublishedAt time.Time
	FinishedAt  time.Time
}

// current returns the first step not installed, or nil when all are.
func (o *Operation) current() *Step {
	for i := range o.Steps {
		if o.Steps[i].State != lifecycle.StepInstalled {
			return &o.Steps[i]
		}
	}
	return nil
}

// OperationFilter selects operations.
type OperationFilter struct {
	DeploymentID string
	State        string
}

// Publication is a revision a step publishes.
type Publication struct {
	Step        int
	Revision    int // the new revision's number
	Drain       *lifecycle.DrainPolicy
	Version     lifecycle.Version
	ProfileID   string
	Components  []string
	Parameters  map[string]any
	YAML        []byte
	Kind        lifecycle.OperationKind
	Strategy    lifecycle.Strategy
	Forced      bool
	ForceReason string
}

// Advance is what one scheduler visit decides for an operation. The store
// turns it into a lifecycle.Change through the lifecycle's decisions and
// applies it in the visit's transaction.
type Advance struct {
	Publish       *Publication             // publish this revision (and mark its step published)
	StepInstalled int                      // mark this step installed (0: none)
	Finish        lifecycle.OperationState // end the operation in this state ("" : keep running)
	Reason        string
	// RevertTo is the installed revision a drain abort goes back to: a new
	// revision repeating it is published and becomes desired and active
	// (lifecycle.Change.RevertAfterDrainTimeout); history stays append-only.
	RevertTo int
	// FailDeployment moves the deployment to failed (deadline) with Reason.
	FailDeployment bool
	// FollowUp is a queued operation to start after this one ends
	// (onFailure: rollback).
	FollowUp *Operation
	// Deadline, when not zero, replaces the operation's deadline.
	Deadline time.Time
	// Recheck, on an advance that does nothing, is when the operation is
	// due again unless its deployment changes first (see
	// Store.ActiveOperations).
	Recheck time.Time
}

// ChangesManifest reports whether applying a changes the client's
// manifest: it publishes a revision (a step, or the revert of a drain
// timeout). Ending an operation or failing a deployment does not.
func (a Advance) ChangesManifest() bool { return a.Publish != nil || a.RevertTo > 0 }

// Nothing reports whether a does nothing but wait (its Recheck aside).
func (a Advance) Nothing() bool {
	a.Recheck = time.Time{}
	return a == Advance{}
}

// Visit is what the scheduler sees of an operation when it advances it.
type Visit struct {
	Op         Operation
	Deployment Deployment
	// Revisions of the deployment by number (the ones the decision needs:
	// the base and current ones).
	Revisions map[int]Revision
	// LastPhase is the drain phase of the newest status report ("" if none).
	LastPhase string
	// LastRevision is the highest revision number the deployment has; a new
	// revision is LastRevision+1 (the desired one may be lower after a revert).
	LastRevision int
}

type actorKey struct{}

// WithActor returns ctx carrying the name of who causes the changes made
// with it (a token's id, as the audit log names it); events and
// operations' requestedBy record it.
func WithActor(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, actorKey{}, name)
}

// ActorOf returns the actor WithActor put in ctx, or the scheduler's
// (lifecycle.ActorScheduler) when there is none.
func ActorOf(ctx context.Context) string {
	if a, ok := ctx.Value(actorKey{}).(string); ok && a != "" {
		return a
	}
	return lifecycle.ActorScheduler
}
