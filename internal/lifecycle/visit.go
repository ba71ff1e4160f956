package lifecycle

import (
	"errors"
	"time"
)

// VisitStep is the current step of an operation (the first one not
// installed), as a visit sees it.
type VisitStep struct {
	N           int // 1-based
	State       StepState
	Revision    int // the revision the step published (0 before)
	PublishedAt time.Time
}

// Prepared is a revision the caller prepared for publication, or the error
// that kept it from doing so: the decision publishes it, fails the
// operation on it, or ignores it.
type Prepared struct {
	Drain *DrainPolicy // the drain of the published step
	Err   error
}

// AutoRollbackFacts is what the caller loaded for an automatic rollback
// (onFailure: rollback) of a failed operation.
type AutoRollbackFacts struct {
	// Target is the revision to restore (see RollbackTarget); Found says it
	// and the deployment's desired revision were both loaded.
	Target                       int
	Found                        bool
	TargetVersion, FailedVersion Version
	// Policy is the failed version's rollback policy, or PolicyErr why it
	// could not be read; only consulted when going back to a lower version.
	Policy    RollbackPolicy
	PolicyErr error
	// WindowStart is RollbackWindowStart of the failed revision.
	WindowStart time.Time
}

// VisitInput is everything one scheduler visit of an operation decides on,
// loaded before: no decision reads anything else.
type VisitInput struct {
	Now time.Time

	OpState  OperationState
	Deadline time.Time
	Steps    int        // how many steps the operation has
	Current  *VisitStep // nil: every step installed
	// AutoRollback: the operation rolls back automatically on failure
	// (onFailure: rollback, and it is no rollback itself).
	AutoRollback bool

	DeploymentState   State
	StateReason       string
	Removing          bool
	Revision          int // the deployment's desired revision
	InstalledRevision int
	// Drained says the newest status report's drain phase is "drained".
	Drained bool

	// Publish is the current step prepared for publication when it is
	// pending, or the next one when the current one is published and the
	// deployment installed (zero otherwise).
	Publish Prepared
	// Drain is the current, published step's drain (see Prepared).
	Drain Prepared
	// Rollback is loaded when AutoRollback and the operation may fail.
	Rollback AutoRollbackFacts
}

// VisitDecision is what one visit does; the zero value does nothing.
type VisitDecision struct {
	Publish       bool           // publish the prepared revision (VisitInput.Publish)
	StepInstalled int            // mark this step installed (0: none)
	Finish        OperationState // end the operation in this state ("": keep running)
	Reason        string
	// RevertTo is the installed revision a drain abort goes back to.
	RevertTo int
	// FailDeployment moves the deployment to failed (deadline) with Reason.
	FailDeployment bool
	// RollBackTo, when not zero, is the revision a follow-up rollback
	// operation restores; the caller creates it and names it in Reason.
	RollBackTo int
	// PublishDrain is the drain of the published step, for its deadline
	// (Now plus its drain and the step timeout).
	PublishDrain *DrainPolicy
	// Recheck, on a decision to do nothing, is the instant after which the
	// same inputs but a later Now can decide otherwise (the deadline, or
	// the drain timeout of a draining step): until then, and unless the
	// deployment changes, visiting again is useless. Zero on any other
	// decision.
	Recheck time.Time
}

// RollbackTarget is the revision an automatic rollback restores: what ran
// just before, the last installed revision (a hop of the operation, or the
// base).
func RollbackTarget(base, installed, desired int) int {
	if installed > base && installed < desired {
		return installed
	}
	return base
}

// DecideVisit decides one visit of an operation that has steps (not a
// removal, see DecideRemovalVisit): publish the next step, mark a step
// installed, succeed, fail at the deadline, revert after a drain timeout,
// or follow a failure with an automatic rollback.
//
// Returns an error, and no decision, when a prepared revision or drain
// failed for a passing reason (EINTERNAL, EUNAVAILABLE): the visit is
// retried.
func DecideVisit(in VisitInput) (VisitDecision, error) {
	cur := in.Current
	if cur == nil {
		return VisitDecision{Finish: OperationSucceeded}, nil
	}
	if in.Removing {
		return VisitDecision{Finish: OperationCancelled, Reason: "deployment-removed"}, nil
	}
	switch cur.State {
	case StepPending:
		if in.OpState == OperationQueued && in.Now.After(in.Deadline) {
			return VisitDecision{Finish: OperationFailed, Reason: "timeout: the operation could not start before its deadline"}, nil
		}
		if in.Publish.Err != nil {
			return publishFailure(in.Publish.Err)
		}
		return VisitDecision{Publish: true, PublishDrain: in.Publish.Drain}, nil
	case StepPublished:
	default:
		return VisitDecision{Recheck: in.Deadline}, nil
	}
	if in.Revision != cur.Revision {
		return VisitDecision{Finish: OperationFailed, Reason: "superseded: the deployment's desired revision changed"}, nil
	}
	switch in.DeploymentState {
	case StateInstalled:
		next := VisitDecision{StepInstalled: cur.N}
		if cur.N == in.Steps {
			next.Finish = OperationSucceeded
			return next, nil
		}
		if in.Publish.Err != nil {
			d, err := publishFailure(in.Publish.Err)
			d.StepInstalled = cur.N
			return d, err
		}
		next.Publish, next.PublishDrain = true, in.Publish.Drain
		return next, nil
	case StateFailed:
		d := VisitDecision{Finish: OperationFailed, Reason: "device-failed: " + in.StateReason}
		autoRollback(&d, in)
		return d, nil
	}
	if in.Drain.Err != nil {
		return VisitDecision{}, in.Drain.Err
	}
	drain := in.Drain.Drain
	stillDraining := in.DeploymentState == StateDraining && !in.Drained
	wait := VisitDecision{Recheck: in.Deadline}
	if drain != nil && drain.EffectiveOnTimeout() == OnTimeoutAbort && stillDraining {
		if t := cur.PublishedAt.Add(drain.EffectiveTimeout()); t.Before(wait.Recheck) {
			wait.Recheck = t
		}
	}
	if drain != nil && drain.EffectiveOnTimeout() == OnTimeoutAbort && stillDraining &&
		in.Now.After(cur.PublishedAt.Add(drain.EffectiveTimeout())) {
		d := VisitDecision{Finish: OperationFailed, Reason: "drain-timeout"}
		// The device keeps running what it ran: that revision becomes
		// desired again.
		if in.InstalledRevision > 0 && in.InstalledRevision != in.Revision {
			d.RevertTo = in.InstalledRevision
		} else {
			d.FailDeployment = true
		}
		return d, nil
	}
	if in.Now.After(in.Deadline) {
		d := VisitDecision{Finish: OperationFailed, Reason: "timeout", FailDeployment: true}
		if stillDraining {
			d.Reason = "drain-timeout"
		}
		autoRollback(&d, in)
		return d, nil
	}
	return wait, nil
}

// publishFailure turns a failure to prepare a step into the operation's end
// when it is a lasting one (an invalid description, no profile fits), and
// into a retried visit when it is not (a database hiccup).
func publishFailure(err error) (VisitDecision, error) {
	switch ErrorCode(err) {
	case EINTERNAL, EUNAVAILABLE:
		return VisitDecision{}, err
	}
	var de *Error
	errors.As(err, &de)
	return VisitDecision{Finish: OperationFailed, Reason: "cannot publish: " + de.Type + ": " + de.Message}, nil
}

// autoRollback adds, for onFailure: rollback, a follow-up rollback to the
// revision desired before — only where the failed version's rollback
// policy allows it (otherwise the reason says why not).
func autoRollback(d *VisitDecision, in VisitInput) {
	r := in.Rollback
	if !in.AutoRollback || !r.Found {
		return
	}
	if Compare(r.TargetVersion, r.FailedVersion) < 0 {
		if r.PolicyErr != nil {
			d.Reason += "; no automatic rollback: " + r.PolicyErr.Error()
			return
		}
		if _, err := CheckRollback(RollbackInput{Installed: r.FailedVersion, Policy: r.Policy,
			InstalledAt: r.WindowStart, Now: in.Now, Target: r.TargetVersion, ForceRefusal: "automatic rollbacks never override policy"}); err != nil {
			d.Reason += "; no automatic rollback: " + err.Error()
			return
		}
	}
	d.RollBackTo = r.Target
}

// DecideRemovalVisit is the rule for a remove operation, which has no
// steps: the removal was published when it was created. It succeeds once
// the deployment is removed (the device confirmed, or it unregistered),
// fails when the device reported the removal failed, and fails the
// deployment (removing → failed, cause deadline) when the device stays
// silent past the deadline. A later DELETE retries the removal.
func DecideRemovalVisit(state State, stateReason string, deadline, now time.Time) VisitDecision {
	switch {
	case state == StateRemoved:
		return VisitDecision{Finish: OperationSucceeded}
	case state == StateFailed:
		return VisitDecision{Finish: OperationFailed, Reason: "device-failed: " + stateReason}
	case now.After(deadline):
		return VisitDecision{Finish: OperationFailed, Reason: "timeout: the device did not confirm the removal", FailDeployment: true}
	}
	return VisitDecision{Recheck: deadline}
}
