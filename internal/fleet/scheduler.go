package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
)

// wake nudges this process's scheduler (a no-op when none runs).
func (s *Service) wake() {
	select {
	case s.wakeups <- struct{}{}:
	default:
	}
}

// Wake nudges the scheduler: something may let an operation advance. Called
// on change notifications from other server processes.
func (s *Service) Wake() { s.wake() }

// Scheduler advances lifecycle operations in the background: it publishes
// their steps, watches the deployments' states, fails what passes its
// deadline. Several server processes may run one each: every operation is
// claimed with FOR UPDATE SKIP LOCKED for each visit.
type Scheduler struct {
	svc      *Service
	interval time.Duration

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewScheduler returns a scheduler that visits active operations at least
// every interval, and sooner when woken.
func NewScheduler(svc *Service, interval time.Duration) *Scheduler {
	return &Scheduler{svc: svc, interval: interval}
}

// Start runs the scheduler until Stop or ctx ends.
func (sc *Scheduler) Start(ctx context.Context) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	ctx, sc.cancel = context.WithCancel(ctx)
	sc.done = make(chan struct{})
	go func() {
		defer close(sc.done)
		t := time.NewTicker(sc.interval)
		defer t.Stop()
		down := false // the database was unavailable at the last pass
		for {
			pass, cancel := context.WithTimeout(ctx, passTimeout)
			_, err := sc.RunOnce(pass)
			cancel()
			switch {
			case ctx.Err() != nil:
			case collided(err):
				// Not an outage: the next pass tries again.
				sc.svc.log.InfoContext(ctx, "scheduler pass collided with a concurrent change; retrying at the next pass", "error", err)
			case lifecycle.ErrorCode(err) == lifecycle.EUNAVAILABLE:
				// One line per outage, not one per pass: the server
				// answers 503 and reports not-ready meanwhile.
				if !down {
					sc.svc.log.WarnContext(ctx, "scheduler paused: the database is unavailable; retrying every pass", "error", err)
				}
				down = true
			case err != nil:
				sc.svc.log.ErrorContext(ctx, "scheduler pass failed", "error", err)
			case down:
				sc.svc.log.InfoContext(ctx, "scheduler resumed: the database is reachable again")
				down = false
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-sc.svc.wakeups:
			}
		}
	}()
}

// passTimeout bounds one scheduler pass, visitTimeout one visit of an
// operation (its reads, its decision and its transaction): a database that
// hangs fails the pass instead of stalling the scheduler for good.
const (
	passTimeout  = 2 * time.Minute
	visitTimeout = 30 * time.Second
)

// Stop ends the scheduler and waits for its current pass.
func (sc *Scheduler) Stop() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.cancel != nil {
		sc.cancel()
		<-sc.done
		sc.cancel = nil
	}
}

// collided reports whether err is a collision with a concurrent change (a
// serialization failure or a deadlock, problem type "retry"). It carries
// EUNAVAILABLE, as the HTTP answer is the same 503 with Retry-After, but
// the database is there: trying again is all it takes.
func collided(err error) bool { return lifecycle.ErrorType(err) == "retry" }

// RunOnce visits every active operation once and returns how many it
// advanced (visited while not held by another scheduler). An operation
// whose visit collided with a concurrent change is left for the next pass;
// the others are still visited. Returns EUNAVAILABLE, ending the pass, when
// the database is unavailable.
func (sc *Scheduler) RunOnce(ctx context.Context) (int, error) {
	ids, err := sc.svc.store.ActiveOperations(ctx, 1000)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		var clientID string
		vctx, cancel := context.WithTimeout(ctx, visitTimeout)
		decide := sc.svc.decide(vctx)
		// The store calls decide before it locks anything: decide reads the
		// catalog and the device.
		visited, err := sc.svc.store.AdvanceOperation(vctx, id, func(v Visit) (Advance, error) {
			clientID = v.Deployment.ClientID
			return decide(v)
		}, sc.svc.now().UTC())
		cancel()
		if clientID != "" {
			// A visit may have published: this process's cached manifest goes
			// now; other processes hear the store's notification.
			sc.svc.cache.invalidate(clientID)
		}
		if ctx.Err() != nil {
			return n, ctx.Err() // stopped: not a failure of the operation
		}
		if collided(err) {
			sc.svc.log.InfoContext(ctx, "operation step collided with a concurrent change; retrying at the next pass", "operation", id, "error", err)
			continue
		}
		if lifecycle.ErrorCode(err) == lifecycle.EUNAVAILABLE {
			return n, err // no other operation can advance either
		}
		if err != nil {
			sc.svc.log.ErrorContext(ctx, "operation step failed", "operation", id, "error", err)
			continue
		}
		if visited {
			n++
		}
	}
	return n, nil
}

// decide is the scheduler's rule for one visit of an operation.
func (s *Service) decide(ctx context.Context) func(Visit) (Advance, error) {
	return func(v Visit) (Advance, error) {
		now := s.now().UTC()
		op, d := v.Op, v.Deployment
		if op.Type == lifecycle.OperationRemove {
			return decideRemoval(op, d, now), nil
		}
		cur := op.current()
		if cur == nil {
			return Advance{Finish: lifecycle.OperationSucceeded}, nil
		}
		if d.Removing {
			return Advance{Finish: lifecycle.OperationCancelled, Reason: "deployment-removed"}, nil
		}
		switch cur.State {
		case lifecycle.StepPending:
			if op.State == lifecycle.OperationQueued && now.After(op.Deadline) {
				return Advance{Finish: lifecycle.OperationFailed, Reason: "timeout: the operation could not start before its deadline"}, nil
			}
			pub, err := s.publication(ctx, op, *cur, d, v)
			if err != nil {
				return publishFailure(err)
			}
			return Advance{Publish: pub, Deadline: now.Add(stepBudget(op.StepTimeout, pub.Drain))}, nil
		case lifecycle.StepPublished:
		default:
			return Advance{}, nil
		}
		if d.Revision != cur.Revision {
			return Advance{Finish: lifecycle.OperationFailed, Reason: "superseded: the deployment's desired revision changed"}, nil
		}
		switch d.State {
		case lifecycle.StateInstalled:
			next := Advance{StepInstalled: cur.N}
			if cur.N == len(op.Steps) {
				next.Finish = lifecycle.OperationSucceeded
				return next, nil
			}
			pub, err := s.publication(ctx, op, op.Steps[cur.N], d, v) // steps are 1-based: index cur.N is the next one
			if err != nil {
				adv, err := publishFailure(err)
				adv.StepInstalled = cur.N
				return adv, err
			}
			next.Publish, next.Deadline = pub, now.Add(stepBudget(op.StepTimeout, pub.Drain))
			return next, nil
		case lifecycle.StateFailed:
			adv := Advance{Finish: lifecycle.OperationFailed, Reason: "device-failed: " + d.StateReason}
			s.followUpRollback(ctx, &adv, op, d, v, now)
			return adv, nil
		}
		drain, err := s.stepDrain(ctx, op, *cur, d)
		if err != nil {
			return Advance{}, err
		}
		stillDraining := d.State == lifecycle.StateDraining && v.LastPhase != string(margo.PhaseDrained)
		if drain != nil && drain.EffectiveOnTimeout() == lifecycle.OnTimeoutAbort && stillDraining &&
			now.After(cur.PublishedAt.Add(drain.EffectiveTimeout())) {
			adv := Advance{Finish: lifecycle.OperationFailed, Reason: "drain-timeout"}
			// The device keeps running what it ran: that revision becomes
			// desired again.
			if d.InstalledRevision > 0 && d.InstalledRevision != d.Revision {
				adv.RevertTo = d.InstalledRevision
			} else {
				adv.FailDeployment = true
			}
			return adv, nil
		}
		if now.After(op.Deadline) {
			adv := Advance{Finish: lifecycle.OperationFailed, Reason: "timeout", FailDeployment: true}
			if stillDraining {
				adv.Reason = "drain-timeout"
			}
			s.followUpRollback(ctx, &adv, op, d, v, now)
			return adv, nil
		}
		return Advance{}, nil
	}
}

// decideRemoval is the rule for a remove operation, which has no steps: the
// removal was published when it was created. It succeeds once the deployment
// is removed (the device confirmed, or it unregistered), fails when the
// device reported the removal failed, and fails the deployment (removing →
// failed, cause deadline) when the device stays silent past the deadline. A
// later DELETE retries the removal.
func decideRemoval(op Operation, d Deployment, now time.Time) Advance {
	switch {
	case d.State == lifecycle.StateRemoved:
		return Advance{Finish: lifecycle.OperationSucceeded}
	case d.State == lifecycle.StateFailed:
		return Advance{Finish: lifecycle.OperationFailed, Reason: "device-failed: " + d.StateReason}
	case now.After(op.Deadline):
		return Advance{Finish: lifecycle.OperationFailed, Reason: "timeout: the device did not confirm the removal", FailDeployment: true}
	}
	return Advance{}
}

// publishFailure turns a failure to render a step into the operation's
// end when it is a lasting one (an invalid description, no profile fits),
// and into a retried visit when it is not (a database hiccup).
func publishFailure(err error) (Advance, error) {
	switch lifecycle.ErrorCode(err) {
	case lifecycle.EINTERNAL, lifecycle.EUNAVAILABLE:
		return Advance{}, err
	}
	var de *lifecycle.Error
	errors.As(err, &de)
	return Advance{Finish: lifecycle.OperationFailed, Reason: "cannot publish: " + de.Type + ": " + de.Message}, nil
}

// stepDrain is the drain of a step: the operation's for its final step, the
// hop's own declaration for an intermediate one.
func (s *Service) stepDrain(ctx context.Context, op Operation, st Step, d Deployment) (*lifecycle.DrainPolicy, error) {
	if st.N == len(op.Steps) {
		return op.Drain, nil
	}
	cv, err := s.catalog.Get(ctx, d.ApplicationID, st.Version.String())
	if err != nil {
		return nil, err
	}
	desc, err := s.catalog.Description(cv)
	if err != nil {
		return nil, err
	}
	return lifecycle.ChooseDrain(nil, desc.Lifecycle.Upgrade), nil
}

// followUpRollback adds, for onFailure: rollback, an operation that restores
// the revision desired before — only where the failed version's rollback
// policy allows it (otherwise the reason says why not).
func (s *Service) followUpRollback(ctx context.Context, adv *Advance, op Operation, d Deployment, v Visit, now time.Time) {
	if op.OnFailure != OnFailureRollback || op.Type == lifecycle.OperationRollback {
		return
	}
	// Back to what ran just before: the last installed revision (a hop of
	// this operation, or the base).
	target := op.BaseRevision
	if d.InstalledRevision > target && d.InstalledRevision < d.Revision {
		target = d.InstalledRevision
	}
	base, ok := v.Revisions[target]
	if !ok {
		return
	}
	failed, ok := v.Revisions[d.Revision]
	if !ok {
		return
	}
	if lifecycle.Compare(base.Version, failed.Version) < 0 {
		cv, err := s.catalog.Get(ctx, d.ApplicationID, failed.Version.String())
		if err != nil {
			adv.Reason += "; no automatic rollback: " + err.Error()
			return
		}
		desc, err := s.catalog.Description(cv)
		if err != nil {
			adv.Reason += "; no automatic rollback: " + err.Error()
			return
		}
		if _, err := lifecycle.CheckRollback(lifecycle.RollbackInput{Installed: failed.Version, Policy: desc.Lifecycle.Rollback,
			InstalledAt: rollbackWindowStartIn(v.Revisions, failed.N), Now: now, Target: base.Version, ForceRefusal: "automatic rollbacks never override policy"}); err != nil {
			adv.Reason += "; no automatic rollback: " + err.Error()
			return
		}
	}
	f := s.newOperation(d, lifecycle.OperationRollback, base.Version, base.Parameters, base.ProfileID, base.Strategy, nil, OnFailureHalt, op.StepTimeout,
		Actor{ID: "scheduler (onFailure: rollback of " + op.ID + ")"}, nil)
	f.RestoreRevision = base.N
	f.Deadline = now.Add(stepBudget(f.StepTimeout, nil))
	adv.FollowUp = f
	adv.Reason += "; rolling back automatically (operation " + f.ID + ")"
}

// publication renders the revision a step publishes.
func (s *Service) publication(ctx context.Context, op Operation, st Step, d Deployment, v Visit) (*Publication, error) {
	cv, err := s.catalog.Get(ctx, d.ApplicationID, st.Version.String())
	if err != nil {
		return nil, err
	}
	desc, err := s.catalog.Description(cv)
	if err != nil {
		return nil, err
	}
	values := op.Parameters
	profileID := op.ProfileID
	strategy := op.Strategy
	if st.N < len(op.Steps) { // an intermediate hop: carry the running values over
		prev, err := s.catalog.Get(ctx, d.ApplicationID, d.Version.String())
		if err != nil {
			return nil, err
		}
		pdesc, err := s.catalog.Description(prev)
		if err != nil {
			return nil, err
		}
		values, _ = lifecycle.CarryOver(lifecycle.CarryInput{Current: d.Parameters, OldDefaults: pdesc.DefaultValues(),
			TargetParams: desc.ParameterNames(), TargetDefaults: desc.DefaultValues(), TargetPolicy: desc.Lifecycle})
		if strategy, err = lifecycle.ChooseStrategy("", desc.Lifecycle.Upgrade); err != nil {
			return nil, err
		}
	}
	if op.Type == lifecycle.OperationRollback {
		if r, ok := v.Revisions[op.RestoreRevision]; ok {
			values, profileID = r.Parameters, r.ProfileID
		}
	}
	profile, ok := desc.Profile(profileID)
	if !ok {
		dev, err := s.store.Device(ctx, d.ClientID, d.DeviceID)
		if err != nil {
			return nil, err
		}
		caps, err := margo.ParseCapabilities(dev.Capabilities, dev.ID)
		if err != nil {
			return nil, err
		}
		if profile, err = margo.ChooseProfile(desc, caps, ""); err != nil {
			return nil, err
		}
	}
	var components []string
	for _, c := range profile.Components {
		components = append(components, c.Name)
	}
	drain, err := s.stepDrain(ctx, op, st, d)
	if err != nil {
		return nil, err
	}
	yaml, err := margo.RenderDeployment(margo.DeploymentInput{
		DeploymentID: d.ID, DeviceID: d.DeviceID, Description: desc, Profile: profile, Values: values,
		Extension: margo.Extension{Revision: v.LastRevision + 1, Operation: op.Type, FromVersion: d.Version, Strategy: strategy, Drain: drain},
	})
	if err != nil {
		return nil, fmt.Errorf("render revision: %w", err)
	}
	return &Publication{Step: st.N, Revision: v.LastRevision + 1, Drain: drain, Version: st.Version, ProfileID: profile.ID, Components: components, Parameters: values,
		YAML: yaml, Kind: op.Type, Strategy: strategy, Forced: op.Forced, ForceReason: op.ForceReason}, nil
}
