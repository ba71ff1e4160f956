package fleet

import (
	"context"
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
	select {
	case s.rolloutWakeups <- struct{}{}:
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

// Start runs the scheduler until Stop or ctx ends: two loops, one visiting
// the due operations and one driving the due rollouts, each at least every
// interval and sooner when woken. Rollouts have a loop of their own so that
// a wave is published, and its members' results counted, without waiting
// for a pass over thousands of operations.
func (sc *Scheduler) Start(ctx context.Context) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	ctx, sc.cancel = context.WithCancel(ctx)
	sc.done = make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc.loop(ctx, "scheduler", func(ctx context.Context) error {
			_, err := sc.runOperations(ctx)
			return err
		}, sc.svc.wakeups)
	}()
	go func() {
		defer wg.Done()
		sc.loop(ctx, "rollout driver", func(ctx context.Context) error {
			_, err := sc.svc.DriveRollouts(ctx)
			return err
		}, sc.svc.rolloutWakeups)
	}()
	go func() {
		wg.Wait()
		close(sc.done)
	}()
}

// loop runs pass until ctx ends, once per interval or wake-up, logging
// what fails (an outage once).
func (sc *Scheduler) loop(ctx context.Context, name string, pass func(context.Context) error, wakeups <-chan struct{}) {
	t := time.NewTicker(sc.interval)
	defer t.Stop()
	down := false // the database was unavailable at the last pass
	for {
		started := time.Now()
		pctx, cancel := context.WithTimeout(ctx, passTimeout)
		err := pass(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
		case collided(err):
			// Not an outage: the next pass tries again.
			sc.svc.log.InfoContext(ctx, name+" pass collided with a concurrent change; retrying at the next pass", "error", err)
		case lifecycle.ErrorCode(err) == lifecycle.EUNAVAILABLE:
			// One line per outage, not one per pass: the server answers
			// 503 and reports not-ready meanwhile.
			if !down {
				sc.svc.log.WarnContext(ctx, name+" paused: the database is unavailable; retrying every pass", "error", err)
			}
			down = true
		case err != nil:
			sc.svc.log.ErrorContext(ctx, name+" pass failed", "error", err)
		case down:
			sc.svc.log.InfoContext(ctx, name+" resumed: the database is reachable again")
			down = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wakeups:
			// A burst of wake-ups (every status report sends one) makes
			// one pass per wakePacing, not one per wake-up.
			if wait := wakePacing - time.Since(started); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}
	}
}

// wakePacing is the least time between the starts of two passes of a loop
// when the second is woken rather than due by the interval: wake-ups that
// arrive meanwhile are served by one pass. Without it, a fleet reporting
// thousands of times a second kept both loops passing back to back, each
// pass a query or two: measured with wfm-bench -only status (2 cores,
// 8 connections), 1,144 operation passes and as many rollout passes a
// second, a sixth of the server's CPU. An operation waits at most this
// long more for the pass that a report made due.
const wakePacing = 10 * time.Millisecond

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

// RevisitBound is the scheduler's safety net: an active operation is
// visited at least this often even when neither its deployment changed nor
// a time-based condition (its deadline, a drain timeout) can have become
// true, so that no rule missed can leave an operation in progress forever.
const RevisitBound = 5 * time.Minute

// visitConcurrency bounds the operations one pass visits at once. Each
// visit is a transaction of its own on its deployment's row (different
// rows: visits do not wait for each other), mostly waiting for the
// database's round trips and commit; a few at once let PostgreSQL commit
// them together. The pool (10 connections by default) is shared with the
// HTTP handlers and the rollout driver.
const visitConcurrency = 4

// RunOnce visits every active operation that is due (see
// Store.ActiveOperations) once, up to visitConcurrency at a time, then
// every due rollout (DriveRollouts), and returns how many operations it
// visited (read and decided on, while not held by another scheduler). An
// operation whose visit collided with a concurrent change is left for the
// next pass; the others are still visited. Returns EUNAVAILABLE, ending the
// pass, when the database is unavailable.
func (sc *Scheduler) RunOnce(ctx context.Context) (int, error) {
	n, err := sc.runOperations(ctx)
	if err != nil {
		return n, err
	}
	// Then the rollouts: their members' operations just advanced.
	if _, err := sc.svc.DriveRollouts(ctx); err != nil {
		return n, err
	}
	return n, nil
}

// runOperations visits every due active operation once (RunOnce's first
// part, the operations loop's pass): up to visitConcurrency read and
// decided at once, the decisions that change something applied several
// per transaction (Store.AdvanceOperations).
func (sc *Scheduler) runOperations(ctx context.Context) (int, error) {
	ids, err := sc.svc.store.ActiveOperations(ctx, 1000, sc.svc.now().UTC())
	if err != nil {
		return 0, err
	}
	decide := sc.svc.decide(ctx)
	var mu sync.Mutex
	clients := map[string]bool{}
	results := sc.svc.store.AdvanceOperations(ctx, ids, func(v Visit) (Advance, error) {
		a, err := decide(v)
		if err == nil && a.ChangesManifest() {
			mu.Lock()
			clients[v.Deployment.ClientID] = true
			mu.Unlock()
		}
		return a, err
	}, sc.svc.now().UTC(), AdvanceOptions{Concurrency: visitConcurrency, Timeout: visitTimeout})
	// A visit that publishes changes its client's manifest: this process's
	// cached one goes now; other processes hear the store's notification.
	// Other visits (most follow a status report) leave it cached, so a
	// device that reports keeps its answers from memory in an outage.
	for c := range clients {
		sc.svc.cache.invalidate(c)
	}
	n := 0
	var failed error
	for i, r := range results {
		if r.Visited {
			n++
		}
		if err := sc.visitFailed(ctx, ids[i], r.Err); err != nil && failed == nil {
			failed = err
		}
	}
	if ctx.Err() != nil {
		return n, ctx.Err() // stopped: not a failure of the operations
	}
	return n, failed // an error: no other operation can advance either
}

// visitFailed logs the failure of the visit of operation id and returns it
// when the pass must end (the database is unavailable); a collision or
// another failure is logged, and the operation is visited again at the
// next pass.
func (sc *Scheduler) visitFailed(ctx context.Context, id string, err error) error {
	switch {
	case err == nil || ctx.Err() != nil:
		return nil
	case collided(err):
		sc.svc.log.InfoContext(ctx, "operation step collided with a concurrent change; retrying at the next pass", "operation", id, "error", err)
		return nil
	case lifecycle.ErrorCode(err) == lifecycle.EUNAVAILABLE:
		return err
	}
	sc.svc.log.ErrorContext(ctx, "operation step failed", "operation", id, "error", err)
	return nil
}

// decide is the scheduler's visit of an operation: it loads what the
// decision needs (the catalog, the device, rendered revisions), hands it to
// the pure lifecycle.DecideVisit and turns the decision into an Advance.
func (s *Service) decide(ctx context.Context) func(Visit) (Advance, error) {
	return func(v Visit) (Advance, error) {
		now := s.now().UTC()
		op, d := v.Op, v.Deployment
		if op.Type == lifecycle.OperationRemove {
			return s.advance(lifecycle.DecideRemovalVisit(d.State, d.StateReason, op.Deadline, now), nil, op, d, v, now), nil
		}
		in := lifecycle.VisitInput{Now: now, OpState: op.State, Deadline: op.Deadline, Steps: len(op.Steps),
			AutoRollback:    op.OnFailure == OnFailureRollback && op.Type != lifecycle.OperationRollback,
			DeploymentState: d.State, StateReason: d.StateReason, Removing: d.Removing, Revision: d.Revision,
			InstalledRevision: d.InstalledRevision, Drained: v.LastPhase == string(margo.PhaseDrained)}
		var pub *Publication
		if cur := op.current(); cur != nil {
			in.Current = &lifecycle.VisitStep{N: cur.N, State: cur.State, Revision: cur.Revision, PublishedAt: cur.PublishedAt}
			if !d.Removing {
				pub, in.Publish = s.prepare(ctx, op, *cur, d, v)
				if cur.State == lifecycle.StepPublished && d.Revision == cur.Revision && d.State != lifecycle.StateInstalled && d.State != lifecycle.StateFailed {
					in.Drain.Drain, in.Drain.Err = s.stepDrain(ctx, op, *cur, d)
				}
				if in.AutoRollback && cur.State == lifecycle.StepPublished && (d.State == lifecycle.StateFailed || now.After(op.Deadline)) {
					in.Rollback = s.rollbackFacts(ctx, op, d, v)
				}
			}
		}
		dec, err := lifecycle.DecideVisit(in)
		if err != nil {
			return Advance{StepInstalled: dec.StepInstalled}, err
		}
		return s.advance(dec, pub, op, d, v, now), nil
	}
}

// prepare renders the revision a visit may publish: the current step when
// it is pending, the next one when the current one is published and the
// deployment installed it.
func (s *Service) prepare(ctx context.Context, op Operation, cur Step, d Deployment, v Visit) (*Publication, lifecycle.Prepared) {
	st := cur
	switch {
	case cur.State == lifecycle.StepPending:
	case cur.State == lifecycle.StepPublished && d.Revision == cur.Revision && d.State == lifecycle.StateInstalled && cur.N < len(op.Steps):
		st = op.Steps[cur.N] // steps are 1-based: index cur.N is the next one
	default:
		return nil, lifecycle.Prepared{}
	}
	pub, err := s.publication(ctx, op, st, d, v)
	if err != nil {
		return nil, lifecycle.Prepared{Err: err}
	}
	return pub, lifecycle.Prepared{Drain: pub.Drain}
}

// rollbackFacts loads what an automatic rollback of a failing operation is
// decided on: the revision to restore and the failed version's policy.
func (s *Service) rollbackFacts(ctx context.Context, op Operation, d Deployment, v Visit) lifecycle.AutoRollbackFacts {
	f := lifecycle.AutoRollbackFacts{Target: lifecycle.RollbackTarget(op.BaseRevision, d.InstalledRevision, d.Revision)}
	base, ok := v.Revisions[f.Target]
	if !ok {
		return f
	}
	failed, ok := v.Revisions[d.Revision]
	if !ok {
		return f
	}
	f.Found, f.TargetVersion, f.FailedVersion = true, base.Version, failed.Version
	f.WindowStart = rollbackWindowStartIn(v.Revisions, failed.N)
	if lifecycle.Compare(base.Version, failed.Version) < 0 {
		cv, err := s.catalog.Get(ctx, d.ApplicationID, failed.Version.String())
		if err != nil {
			f.PolicyErr = err
			return f
		}
		desc, err := s.catalog.Description(cv)
		if err != nil {
			f.PolicyErr = err
			return f
		}
		f.Policy = desc.Lifecycle.Rollback
	}
	return f
}

// advance turns a visit's decision into what the store applies: the
// prepared publication with its deadline, and the follow-up rollback
// operation.
func (s *Service) advance(dec lifecycle.VisitDecision, pub *Publication, op Operation, d Deployment, v Visit, now time.Time) Advance {
	adv := Advance{StepInstalled: dec.StepInstalled, Finish: dec.Finish, Reason: dec.Reason, RevertTo: dec.RevertTo, FailDeployment: dec.FailDeployment,
		Recheck: now.Add(RevisitBound)}
	if !dec.Recheck.IsZero() && dec.Recheck.Before(adv.Recheck) {
		adv.Recheck = dec.Recheck
	}
	if dec.Publish {
		adv.Publish, adv.Deadline = pub, now.Add(stepBudget(op.StepTimeout, dec.PublishDrain))
	}
	if dec.RollBackTo != 0 {
		base := v.Revisions[dec.RollBackTo]
		f := s.newOperation(d, lifecycle.OperationRollback, base.Version, base.Parameters, base.ProfileID, base.Strategy, nil, OnFailureHalt, op.StepTimeout,
			Actor{ID: "scheduler (onFailure: rollback of " + op.ID + ")"}, nil)
		f.RestoreRevision = base.N
		f.Deadline = now.Add(stepBudget(f.StepTimeout, nil))
		adv.FollowUp = f
		adv.Reason += "; rolling back automatically (operation " + f.ID + ")"
	}
	return adv
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
	yaml, err := s.specs.Render(margo.DeploymentInput{
		DeploymentID: d.ID, DeviceID: d.DeviceID, Description: desc, Profile: profile, Values: values,
		Extension: margo.Extension{Revision: v.LastRevision + 1, Operation: op.Type, FromVersion: d.Version, Strategy: strategy, Drain: drain},
	})
	if err != nil {
		return nil, fmt.Errorf("render revision: %w", err)
	}
	return &Publication{Step: st.N, Revision: v.LastRevision + 1, Drain: drain, Version: st.Version, ProfileID: profile.ID, Components: components, Parameters: values,
		YAML: yaml, Kind: op.Type, Strategy: strategy, Forced: op.Forced, ForceReason: op.ForceReason}, nil
}
