package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/page"
)

// The rollout driver: each scheduler pass visits the active rollouts that
// are due (Store.ClaimRollouts leases them, so that two schedulers never
// drive one at once and a crashed one's rollouts are taken over when its
// lease runs out). A visit syncs the members from their operations, asks
// lifecycle.DecideRolloutStep what to do, and applies it: publishing
// members creates their operations with the single-operation planners, so
// that the supplier's rules apply exactly as to one deployment.

// rolloutLease is how long a driver holds a rollout it claimed; a visit
// ends long before (visitTimeout).
const rolloutLease = 2 * visitTimeout

// maxRolloutsPerPass bounds the rollouts one pass visits.
const maxRolloutsPerPass = 100

// publishConcurrency bounds the member operations one visit creates at
// once (each is a transaction of its own; the pool has 10 connections by
// default, shared with the HTTP handlers).
const publishConcurrency = 8

// maxPublishPerVisit bounds the members one visit publishes: then the
// visit ends, and the scheduler's next pass (woken at once) visits the
// operations just created before the rollout publishes more, so a large
// wave gets going while it is still being published. A first wave of 1%
// of 100,000 is published in one visit (their deployments and active
// operations are read at once; their operations are created 250 per
// transaction).
const maxPublishPerVisit = 1000

// maxStepsPerVisit bounds the decisions one visit applies (publish, next
// wave, publish...); the next pass goes on.
const maxStepsPerVisit = 8

// errRolloutMoved ends a visit whose rollout changed since it was read (an
// action, another driver): the next visit decides again.
var errRolloutMoved = errors.New("the rollout changed during the visit")

// DriveRollouts visits every due active rollout once and returns how many
// it visited. The scheduler calls it at each pass, after the operations;
// tests call it to run the driver once. Returns EUNAVAILABLE, ending the
// pass, when the database is unavailable.
func (s *Service) DriveRollouts(ctx context.Context) (int, error) {
	ids, err := s.store.ClaimRollouts(ctx, s.leaseOwner, maxRolloutsPerPass, s.now().UTC(), rolloutLease)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		vctx, cancel := context.WithTimeout(WithActor(ctx, lifecycle.ActorScheduler), visitTimeout)
		err := s.visitRollout(vctx, id)
		cancel()
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		n++
		switch {
		case err == nil:
		case errors.Is(err, ErrLeaseLost):
			// Another driver claimed the rollout after this one's lease ran
			// out: it is that driver's now.
			s.log.WarnContext(ctx, "rollout visit stopped: its lease was lost", "rollout", id)
		case lifecycle.ErrorCode(err) == lifecycle.EUNAVAILABLE && !collided(err):
			return n, err
		default:
			s.log.ErrorContext(ctx, "rollout visit failed", "rollout", id, "error", err)
			s.release(ctx, id)
		}
	}
	return n, nil
}

// release ends the lease on a rollout whose visit stopped early; it is due
// at the next pass. A lease lost meanwhile is left to its new owner.
func (s *Service) release(ctx context.Context, id string) {
	_, err := s.driverUpdate(ctx, id, func(r Rollout) (RolloutChange, error) {
		return RolloutChange{Release: true, Waiting: r.Waiting}, nil
	}, s.now().UTC())
	if err != nil && ctx.Err() == nil && !errors.Is(err, ErrLeaseLost) {
		s.log.WarnContext(ctx, "releasing a rollout failed; its lease runs out", "rollout", id, "error", err)
	}
}

// driverUpdate is store.UpdateRollout for the driver: the change is
// applied only while this service holds the rollout's lease (ErrLeaseLost
// otherwise).
func (s *Service) driverUpdate(ctx context.Context, id string, decide func(Rollout) (RolloutChange, error), now time.Time) (Rollout, error) {
	return s.store.UpdateRollout(ctx, id, func(r Rollout) (RolloutChange, error) {
		c, err := decide(r)
		c.Owner = s.leaseOwner
		return c, err
	}, now)
}

// renew extends this service's lease on rollout id before the visit acts
// again; ErrLeaseLost when another driver holds it now.
func (s *Service) renew(ctx context.Context, id string) error {
	ok, err := s.store.RenewRolloutLease(ctx, id, s.leaseOwner, s.now().UTC(), rolloutLease)
	if err != nil {
		return err
	}
	if !ok {
		return ErrLeaseLost
	}
	return nil
}

// visitRollout drives one claimed rollout. It checks (and renews) its
// lease before each step: a visit whose lease ran out and was claimed by
// another driver stops (ErrLeaseLost).
func (s *Service) visitRollout(ctx context.Context, id string) error {
	if err := s.renew(ctx, id); err != nil {
		return err
	}
	now := s.now().UTC()
	_, unpublished, err := s.store.SyncRolloutMembers(ctx, id, now)
	if err != nil {
		return err
	}
	r, err := s.store.Rollout(ctx, id)
	if err != nil {
		return err
	}
	settings, err := lifecycle.ValidateRolloutSpec(r.Request.Spec)
	if err != nil {
		return fmt.Errorf("rollout %s: stored request: %w", id, err)
	}
	switch {
	case len(unpublished) == 0:
	case r.State == lifecycle.RolloutRunning || r.State == lifecycle.RolloutPaused:
		// A publication a crash (or a visit's timeout) interrupted: create
		// what is missing with the ids reserved.
		if err := s.publishMembers(ctx, r, settings, unpublished); err != nil {
			return err
		}
		if _, _, err := s.store.SyncRolloutMembers(ctx, id, now); err != nil {
			return err
		}
	default:
		// The rollout ended or aborts: it starts nothing new.
		results := make([]MemberResult, len(unpublished))
		for i, m := range unpublished {
			results[i] = MemberResult{Ord: m.Ord, Status: lifecycle.MemberCancelled, Result: resultNotStarted, IfStatus: lifecycle.MemberInProgress}
		}
		if err := s.store.SetMemberResults(ctx, id, results, now); err != nil {
			return err
		}
	}
	if r.State.Terminal() {
		// Settling: the sync above moved what ended; look again at the
		// next pass while members are in flight.
		_, err := s.driverUpdate(ctx, id, func(cur Rollout) (RolloutChange, error) {
			return RolloutChange{Release: true, Waiting: cur.Waiting}, nil
		}, now)
		return err
	}
	for range maxStepsPerVisit {
		if err := s.renew(ctx, id); err != nil {
			return err
		}
		r, err = s.store.Rollout(ctx, id)
		if err != nil {
			return err
		}
		done, err := s.stepRollout(ctx, r, settings)
		if errors.Is(err, errRolloutMoved) {
			s.release(ctx, id)
			return nil
		}
		if err != nil || done {
			return err
		}
	}
	s.release(ctx, id)
	return nil
}

// stepInput is what lifecycle.DecideRolloutStep decides r's next step
// from, at now, as far as r itself knows it (the target version's fate and
// the abort's outstanding work are the caller's to add).
func stepInput(r Rollout, settings lifecycle.RolloutSettings, now time.Time) lifecycle.RolloutStepInput {
	in := lifecycle.RolloutStepInput{Now: now, State: r.State, Deadline: r.DeadlineAt, Waves: make([]lifecycle.Wave, len(r.Waves)),
		Counts: make([]lifecycle.WaveCounts, len(r.Waves)), Wave: r.CurrentWave - 1, WaveAccepted: r.WaveAccepted,
		MaxInFlight: settings.MaxInFlight, Window: settings.Window, OnThreshold: settings.OnThreshold}
	for i, w := range r.Waves {
		in.Waves[i], in.Counts[i] = w.Wave, w.Counts
	}
	cur := r.Waves[in.Wave]
	in.WaveSettledAt, in.WaveApproved = cur.SettledAt, !cur.ApprovedAt.IsZero()
	return in
}

// stepRollout decides and applies one step; done says the visit is over
// (the lease was released).
func (s *Service) stepRollout(ctx context.Context, r Rollout, settings lifecycle.RolloutSettings) (bool, error) {
	now := s.now().UTC()
	in, dec, err := s.decideStep(ctx, r, settings, now)
	if err != nil {
		return false, err
	}
	switch {
	case dec.Publish > 0:
		return s.publishStep(ctx, r, settings, in.Wave, dec.Publish, now)
	case dec.NextWave:
		return false, s.nextWaveStep(ctx, r, dec, now)
	case dec.To != "":
		return false, s.moveStep(ctx, r, dec, now)
	}
	return s.waitStep(ctx, r, dec, now)
}

// decideStep loads what lifecycle.DecideRolloutStep decides r's next step
// on (the abort's outstanding work, the target version's fate, and, for a
// wave that waits for its members, the oldest of them) and decides it.
func (s *Service) decideStep(ctx context.Context, r Rollout, settings lifecycle.RolloutSettings, now time.Time) (lifecycle.RolloutStepInput, lifecycle.RolloutDecision, error) {
	in := stepInput(r, settings, now)
	if r.State == lifecycle.RolloutAborting {
		outstanding, err := s.driveAbort(ctx, r)
		if err != nil {
			return in, lifecycle.RolloutDecision{}, err
		}
		in.Outstanding = outstanding
	}
	if (r.State == lifecycle.RolloutRunning || r.State == lifecycle.RolloutPaused) && r.Action != lifecycle.RolloutReconfigure {
		v, err := s.catalog.Get(ctx, r.ApplicationID, settings.Target.String())
		switch {
		case lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND:
			in.TargetDeleted = true
		case err != nil:
			return in, lifecycle.RolloutDecision{}, err
		default:
			in.TargetYanked = v.Yanked
		}
	}
	dec, err := lifecycle.DecideRolloutStep(in)
	if err == nil && dec.Wait == lifecycle.WaitInFlight {
		// The wave waits for its members: its waiting names the oldest,
		// read only now (the other decisions do not need it).
		if in.Oldest, err = s.oldestInProgress(ctx, r.ID, r.CurrentWave); err != nil {
			return in, lifecycle.RolloutDecision{}, err
		}
		dec, err = lifecycle.DecideRolloutStep(in)
	}
	return in, dec, err
}

// publishStep starts n pending members of wave (from 0) of r; the visit
// ends.
func (s *Service) publishStep(ctx context.Context, r Rollout, settings lifecycle.RolloutSettings, wave, n int, now time.Time) (bool, error) {
	ms, err := s.store.ReserveRolloutMembers(ctx, r.ID, s.leaseOwner, r.Generation, wave, min(n, maxPublishPerVisit), now)
	if err != nil {
		return false, err
	}
	if len(ms) == 0 {
		return false, errRolloutMoved // or the lease was lost: release checks
	}
	if err := s.publishMembers(ctx, r, settings, ms); err != nil {
		return false, err
	}
	if _, _, err = s.store.SyncRolloutMembers(ctx, r.ID, now); err != nil {
		return false, err
	}
	// Due again at the next pass, which publishes the steps of these
	// operations first (publishMembers woke the scheduler).
	s.release(ctx, r.ID)
	return true, nil
}

// nextWaveStep passes r's current wave and starts the next one (a manual
// one waits for approve).
func (s *Service) nextWaveStep(ctx context.Context, r Rollout, dec lifecycle.RolloutDecision, now time.Time) error {
	_, err := s.driverUpdate(ctx, r.ID, func(cur Rollout) (RolloutChange, error) {
		if cur.Generation != r.Generation {
			return RolloutChange{}, errRolloutMoved
		}
		waves := cur.Waves
		i := cur.CurrentWave - 1
		waves[i].State, waves[i].FinishedAt = WavePassed, now
		next, accepted := cur.CurrentWave+1, false
		c := RolloutChange{Waves: waves, CurrentWave: &next, WaveAccepted: &accepted, Bump: true}
		if dec.WaveSettled {
			if err := s.settle(&c, cur, i, now); err != nil {
				return RolloutChange{}, err
			}
			waves[i].State = WavePassed // no soak to wait for
		}
		if !startWave(&waves[i+1], now) {
			return c, nil // a manual wave: started by approve
		}
		ev, err := s.rolloutEvent(now, lifecycle.ActorScheduler, cur, lifecycle.RolloutWaveStartedBody{Wave: next, Size: waves[i+1].ResolvedSize})
		c.Events = append(c.Events, ev...)
		return c, err
	}, now)
	return err
}

// moveStep moves r to the state dec decided, with what the move does to
// the current wave.
func (s *Service) moveStep(ctx context.Context, r Rollout, dec lifecycle.RolloutDecision, now time.Time) error {
	_, err := s.driverUpdate(ctx, r.ID, func(cur Rollout) (RolloutChange, error) {
		if cur.Generation != r.Generation {
			return RolloutChange{}, errRolloutMoved
		}
		c := RolloutChange{Waves: cur.Waves}
		i := cur.CurrentWave - 1
		if dec.WaveSettled {
			if err := s.settle(&c, cur, i, now); err != nil {
				return RolloutChange{}, err
			}
		}
		detail := dec.Reason
		if dec.Breach != nil {
			c.Waves[i].State = WaveFailed
			c.Waves[i].FinishedAt = now
		}
		if dec.To == lifecycle.RolloutSucceeded {
			c.Waves[i].State, c.Waves[i].FinishedAt = WavePassed, now
		}
		if dec.To == lifecycle.RolloutAborting {
			c.Abort = &RolloutAbort{Revert: cur.Request.RevertOnAbort, RequestedBy: lifecycle.ActorScheduler, Reason: detail, At: now}
		}
		if dec.To == lifecycle.RolloutPaused {
			c.Waiting = dec.Waiting
		}
		return s.move(c, cur, dec.To, dec.Cause, lifecycle.ActorScheduler, detail, now)
	}, now)
	return err
}

// waitStep records why r waits and when to look again, and ends the visit.
func (s *Service) waitStep(ctx context.Context, r Rollout, dec lifecycle.RolloutDecision, now time.Time) (bool, error) {
	_, err := s.driverUpdate(ctx, r.ID, func(cur Rollout) (RolloutChange, error) {
		if cur.Generation != r.Generation {
			return RolloutChange{}, errRolloutMoved
		}
		c := RolloutChange{Release: true}
		if dec.WaveSettled {
			c.Waves = cur.Waves
			if err := s.settle(&c, cur, cur.CurrentWave-1, now); err != nil {
				return RolloutChange{}, err
			}
		}
		c.Waiting = dec.Waiting
		if dec.Wait == lifecycle.WaitPaused {
			c.Waiting = cur.Waiting // the pause's
		}
		// Members in flight: look at each pass (their operations end
		// without touching the rollout); otherwise at the decision's
		// instant, and at least every RevisitBound.
		inFlight := cur.Counts.ByStatus.InProgress > 0 || cur.State == lifecycle.RolloutAborting
		if !inFlight {
			c.Recheck = now.Add(RevisitBound)
			if !dec.Recheck.IsZero() && dec.Recheck.Before(c.Recheck) {
				c.Recheck = dec.Recheck
			}
		}
		if c.Recheck.IsZero() {
			c.Recheck = now.Add(time.Millisecond) // due at the next pass
		}
		return c, nil
	}, now)
	if errors.Is(err, errRolloutMoved) {
		return false, err
	}
	return true, err
}

// oldestInProgress reads the member of wave (from 1) of rollout id in
// progress the longest, with its device's last contact, for the waiting
// of a wave that waits for its members (nil when none is in progress).
// Members start in their stable order, so the first one in progress in
// that order is the one that started first.
func (s *Service) oldestInProgress(ctx context.Context, id string, wave int) (*lifecycle.WaitingMember, error) {
	ms, err := s.store.RolloutMembers(ctx, id, MemberFilter{Wave: wave, Status: lifecycle.MemberInProgress}, -1, 1)
	if err != nil || len(ms) == 0 {
		return nil, err
	}
	m := ms[0]
	o := &lifecycle.WaitingMember{DeploymentID: m.DeploymentID, ClientID: m.ClientID, DeviceID: m.DeviceID, OperationID: m.OperationID, Since: m.UpdatedAt}
	d, err := s.store.Device(ctx, m.ClientID, m.DeviceID)
	switch {
	case lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND:
		// Unregistered meanwhile: the next sync removes the member.
	case err != nil:
		return nil, err
	default:
		o.LastSeenAt = d.LastSeenAt
	}
	return o, nil
}

// startWave starts w (publishing, from now) and reports whether it did: a
// manual wave not yet approved stays pending (ApproveRollout starts it).
func startWave(w *RolloutWave, now time.Time) bool {
	if w.Approval == lifecycle.ApprovalManual && w.ApprovedAt.IsZero() {
		return false
	}
	w.State, w.StartedAt = WavePublishing, now
	return true
}

// settle records that wave i settled at now (its soak runs from then; an
// emptied wave has nothing to soak), with its wave_settled event.
func (s *Service) settle(c *RolloutChange, r Rollout, i int, now time.Time) error {
	w := &c.Waves[i]
	w.SettledAt = now
	k := r.Waves[i].Counts
	if w.Soak > 0 && !k.Emptied() {
		w.State, w.SoakUntil = WaveSoaking, now.Add(w.Soak)
	}
	ev, err := s.rolloutEvent(now, lifecycle.ActorScheduler, r, lifecycle.RolloutWaveSettledBody{Wave: i + 1, Succeeded: k.Succeeded, Failed: k.Failed,
		Cancelled: k.Cancelled, Removed: k.Removed, Excluded: k.Excluded})
	c.Events = append(c.Events, ev...)
	return err
}

// withStateCause adds the rollout's state cause (stateCause) to a refusal
// of a move (its problem names the state, and the move asked: to, cause).
func withStateCause(err error, r Rollout) error {
	var de *lifecycle.Error
	if !errors.As(err, &de) || de.Type != lifecycle.ProblemRolloutStateConflict {
		return err
	}
	c := *de
	c.Extra = maps.Clone(de.Extra)
	if c.Extra == nil {
		c.Extra = map[string]any{}
	}
	c.Extra["stateCause"] = string(r.Cause)
	return &c
}

// stateConflict is the refusal of an action the rollout's state does not
// allow, with no state move asked: it names the state and its cause.
func stateConflict(r Rollout, why string) error {
	return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: lifecycle.ProblemRolloutStateConflict,
		Message: "The rollout is " + string(r.State) + ": " + why + ".",
		Extra:   map[string]any{"state": string(r.State), "stateCause": string(r.Cause)}}
}

// move returns c with the state move of r to to: its history row (by the
// store), its event, and what the move does to the members: pending ones
// are cancelled when the rollout ends or aborts; the waves not passed stop.
func (s *Service) move(c RolloutChange, r Rollout, to lifecycle.RolloutState, cause lifecycle.RolloutCause, actor, detail string, now time.Time) (RolloutChange, error) {
	if err := lifecycle.CheckRolloutMove(r.State, to, cause); err != nil {
		return RolloutChange{}, withStateCause(err, r)
	}
	c.To, c.Cause, c.Actor, c.Detail, c.Bump = to, cause, actor, detail, true
	if to.Terminal() || to == lifecycle.RolloutAborting {
		c.CancelPending = true
		if c.Waves == nil {
			c.Waves = r.Waves
		}
		for i := range c.Waves {
			if st := c.Waves[i].State; st == WavePending || st == WavePublishing || st == WaveSoaking {
				c.Waves[i].State, c.Waves[i].FinishedAt = WaveStopped, now
			}
		}
	}
	if to != lifecycle.RolloutPaused {
		c.Waiting = nil
	}
	ev, err := s.rolloutEvent(now, actor, r, lifecycle.RolloutStateChangedBody{From: r.State, To: to, Cause: cause, Detail: detail})
	c.Events = append(c.Events, ev...)
	return c, err
}

// rolloutEvent returns the event of body about rollout r.
func (s *Service) rolloutEvent(now time.Time, actor string, r Rollout, body lifecycle.EventBody, related ...lifecycle.Ref) ([]lifecycle.Event, error) {
	e, err := lifecycle.NewEvent(now, actor, lifecycle.Ref{Kind: lifecycle.SubjectRollout, ID: r.ID}, body,
		append([]lifecycle.Ref{{Kind: lifecycle.SubjectApplication, ID: r.ApplicationID}}, related...)...)
	if err != nil {
		return nil, err
	}
	return []lifecycle.Event{e}, nil
}

// resultNotStarted is the result of a member cancelled because its rollout
// ended (or aborted) before starting it.
const resultNotStarted = "The rollout ended before starting it."

// memberActor is who a rollout's member operations are requested by.
func memberActor(r Rollout) Actor { return Actor{ID: "rollout:" + r.ID} }

// publishMembers creates the operations of reserved members (install: their
// deployments) with the ids reserved, and records the ones that could not
// start as failed with the refusal.
func (s *Service) publishMembers(ctx context.Context, r Rollout, st lifecycle.RolloutSettings, ms []RolloutMember) error {
	spec := r.Request.Spec
	actor := memberActor(r)
	var results []MemberResult
	if r.Action == lifecycle.RolloutInstall {
		reqs := make([]CreateRequest, len(ms))
		for i, m := range ms {
			reqs[i] = CreateRequest{ApplicationID: r.ApplicationID, Version: st.Target.String(), ClientID: m.ClientID, DeviceID: m.DeviceID,
				ProfileID: m.ProfileID, Parameters: spec.Parameters, Timeout: spec.Timeout, deploymentID: m.DeploymentID, operationID: m.OperationID, rolloutID: r.ID}
		}
		res, err := s.CreateDeployments(WithActor(ctx, actor.ID), reqs)
		if err != nil {
			return err
		}
		for i, cr := range res {
			if cr.Err != nil {
				results = append(results, MemberResult{Ord: ms[i].Ord, Status: notStarted(cr.Err), Result: "Not started: " + message(cr.Err), Deactivate: true})
			}
		}
		s.wake()
		return s.store.SetMemberResults(ctx, r.ID, results, s.now().UTC())
	}
	// Each member's operation is planned as the single operation would be
	// (a few at a time: planning reads), then the allowed ones are created
	// a chunk per transaction (createMembers).
	// A member whose planning fails (the database, say) is left for the
	// next visit; the others go ahead.
	// The members' deployments and active operations are read at once;
	// one not found there is read again by itself (and refused as the
	// single operation would be).
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.DeploymentID
	}
	deps, active, err := s.store.DeploymentsByID(ctx, ids)
	if err != nil {
		return err
	}
	plans := make([]Plan, len(ms))
	refused, failed := make([]error, len(ms)), make([]error, len(ms))
	var g errgroup.Group
	g.SetLimit(publishConcurrency)
	for i, m := range ms {
		g.Go(func() error {
			var known *deploymentRead
			if d, ok := deps[m.DeploymentID]; ok {
				known = &deploymentRead{d: d, active: active[m.DeploymentID]}
			}
			p, err := s.planMember(ctx, r, st, m, actor, known)
			if err == nil && !p.Allowed {
				err = p.Refusal
			}
			if err != nil {
				// Nothing to create: a refusal to record, or nothing at
				// all when the member's operation already exists.
				refused[i], failed[i] = s.memberCreated(ctx, m, err)
				return nil
			}
			plans[i] = p
			return nil
		})
	}
	_ = g.Wait()
	err = errors.Join(s.createMembers(ctx, ms, plans, refused), errors.Join(failed...))
	for i, e := range refused {
		if e != nil {
			st := notStarted(e)
			results = append(results, MemberResult{Ord: ms[i].Ord, Status: st, Result: "Not started: " + message(e), Deactivate: st == lifecycle.MemberRemoved})
		}
	}
	s.wake()
	// The refusals are recorded even when another member's publication
	// failed: the failed ones are published again at the next visit.
	if rerr := s.store.SetMemberResults(ctx, r.ID, results, s.now().UTC()); rerr != nil {
		return rerr
	}
	return err
}

// memberChunk bounds the member operations created in one transaction.
const memberChunk = 250

// createMembers creates the planned operations of ms (those planned and
// not refused) with their reserved ids, memberChunk per transaction,
// recording in refused[i] a refusal of member i. A chunk whose transaction
// fails as a whole (a collision with a concurrent change, say) is created
// again one member per transaction, so that one member cannot hold back
// the others.
func (s *Service) createMembers(ctx context.Context, ms []RolloutMember, plans []Plan, refused []error) error {
	var failed []error
	var at []int
	for i := range ms {
		if refused[i] == nil && plans[i].op != nil {
			at = append(at, i)
		}
	}
	for len(at) > 0 {
		chunk := at[:min(len(at), memberChunk)]
		at = at[len(chunk):]
		ops := make([]Operation, len(chunk))
		byDeployment := make(map[string]Operation, len(chunk))
		for j, i := range chunk {
			op := *plans[i].op
			op.ID = ms[i].OperationID
			ops[j], byDeployment[op.DeploymentID] = op, op
		}
		errs, err := s.store.CreateOperations(ctx, ops, func(d Deployment, hold RolloutHold) error {
			return reservedFor(byDeployment[d.ID], d, hold)
		}, s.now().UTC())
		if err != nil {
			if lifecycle.ErrorCode(err) == lifecycle.EUNAVAILABLE && !collided(err) {
				return err
			}
			s.log.InfoContext(ctx, "rollout members' operations created one by one after their batch failed", "members", len(chunk), "error", err)
			var g errgroup.Group
			g.SetLimit(publishConcurrency)
			errs = make([]error, len(chunk))
			for j, i := range chunk {
				g.Go(func() error {
					errs[j] = s.createPlanned(ctx, plans[i], ms[i].OperationID)
					return nil
				})
			}
			_ = g.Wait()
		}
		for j, i := range chunk {
			e, err := s.memberCreated(ctx, ms[i], errs[j])
			if err != nil {
				failed = append(failed, err) // left for the next visit
			}
			refused[i] = e
		}
	}
	return errors.Join(failed...)
}

// memberCreated sorts out the error of the creation of member m's
// operation: nil when it was created (or was already, by an overlapping
// visit), a refusal to record, or an error that ends the visit.
func (s *Service) memberCreated(ctx context.Context, m RolloutMember, err error) (refusedErr, visitErr error) {
	if errors.Is(err, errNotReserved) || err == nil {
		return nil, nil // the member moved on meanwhile: its status says how
	}
	if lifecycle.ErrorType(err) == "operation-in-progress" {
		// The operation in progress may be the member's own, created by
		// a visit this one overlapped (a lease that ran out): the member
		// is in progress, not refused.
		var le *lifecycle.Error
		if errors.As(err, &le) && le.Extra["activeOperation"] == m.OperationID {
			return nil, nil
		}
		if _, oerr := s.store.Operation(ctx, m.OperationID); oerr == nil {
			return nil, nil
		}
	}
	if refusal(err) {
		return err, nil
	}
	return nil, err
}

// notStarted is the status of a member whose operation could not start:
// removed when its deployment or device went away meanwhile, failed for
// any other refusal (it counts toward the wave's thresholds).
func notStarted(err error) lifecycle.MemberStatus {
	switch lifecycle.ErrorType(err) {
	case "deployment-removed", "device-unregistered", "client-retired":
		return lifecycle.MemberRemoved
	}
	if lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND {
		return lifecycle.MemberRemoved
	}
	return lifecycle.MemberFailed
}

// deploymentRead is a deployment with the id of its active operation (""
// none), read together.
type deploymentRead struct {
	d      Deployment
	active string
}

// planMember plans one member's operation as the single operation would
// be planned, on known (its deployment as read with the others of its
// wave) or, when nil, on its deployment read now.
func (s *Service) planMember(ctx context.Context, r Rollout, st lifecycle.RolloutSettings, m RolloutMember, actor Actor, known *deploymentRead) (Plan, error) {
	spec := r.Request.Spec
	var d Deployment
	var active *string
	if known != nil {
		d, active = known.d, &known.active
	} else {
		var err error
		if d, err = s.store.Deployment(ctx, m.DeploymentID); err != nil {
			return Plan{}, err
		}
	}
	switch r.Action {
	case lifecycle.RolloutUpgrade:
		var drain *DrainOverride
		if spec.Drain != nil {
			drain = &DrainOverride{Required: spec.Drain.Required, Timeout: spec.Drain.Timeout, OnTimeout: spec.Drain.OnTimeout}
		}
		return s.planUpgrade(ctx, d, active, UpgradeRequest{TargetVersion: st.Target.String(), Path: st.Path, Strategy: st.Strategy, Drain: drain,
			Parameters: spec.Parameters, OnFailure: string(st.OnFailure), Timeout: spec.Timeout}, st.Drain, st.Timeout, actor)
	case lifecycle.RolloutReconfigure:
		return s.planReconfigure(ctx, d, active, ReconfigureRequest{Parameters: spec.Parameters, OnFailure: string(st.OnFailure), Timeout: spec.Timeout}, st.Timeout, actor)
	case lifecycle.RolloutRollback:
		return s.planRollback(ctx, d, active, RollbackRequest{ToRevision: m.RestoreRevision, Timeout: spec.Timeout}, st.Timeout, actor)
	}
	return Plan{}, lifecycle.Errorf(lifecycle.EINTERNAL, "rollout action %q", r.Action)
}

// errNotReserved refuses the creation of a member's operation (or revert)
// whose reservation no longer stands (the member was excluded, cancelled,
// or its rollout ended since): nothing is created, nothing to record.
var errNotReserved = &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "conflict",
	Message: "The rollout member's reservation no longer stands."}

// createPlanned creates a planned operation with id, as run does, for a
// rollout member: on the locked deployment, its membership must still hold
// the reservation of id (the member's operation, in progress, or its
// revert).
func (s *Service) createPlanned(ctx context.Context, p Plan, id string) error {
	op := *p.op
	op.ID = id
	_, err := s.store.CreateOperation(ctx, op, func(d Deployment, hold RolloutHold) error {
		return reservedFor(op, d, hold)
	}, s.now().UTC())
	return err
}

// reservedFor checks, under the lock of deployment d, that op (planned on
// d with a member's reserved id) may still be created: the member's
// reservation stands and d did not change since op was planned.
func reservedFor(op Operation, d Deployment, hold RolloutHold) error {
	if !(hold.OperationID == op.ID && hold.Status == lifecycle.MemberInProgress) && hold.RevertOperationID != op.ID {
		return errNotReserved
	}
	if d.Revision != op.BaseRevision {
		return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "conflict",
			Message: "The deployment changed while the operation was planned."}
	}
	return publishable(d, op.Type)
}

// allMembers reads every member of a rollout matching f.
func (s *Service) allMembers(ctx context.Context, id string, f MemberFilter) ([]RolloutMember, error) {
	var all []RolloutMember
	after := -1
	for {
		ms, err := s.store.RolloutMembers(ctx, id, f, after, page.MaxLimit)
		if err != nil {
			return nil, err
		}
		all = append(all, ms...)
		if len(ms) < page.MaxLimit {
			return all, nil
		}
		after = ms[len(ms)-1].Ord
	}
}

// driveAbort does an aborting rollout's work: it cancels its members'
// operations in flight and, when a revert was asked, decides and starts
// each changed member's revert. It returns how many member operations the
// abort still waits for.
func (s *Service) driveAbort(ctx context.Context, r Rollout) (int, error) {
	ms, err := s.allMembers(ctx, r.ID, MemberFilter{Classification: ClassEligible})
	if err != nil {
		return 0, err
	}
	now := s.now().UTC()
	outstanding := 0
	for _, m := range ms {
		if m.Status == lifecycle.MemberInProgress && m.OperationID != "" {
			outstanding++
			if _, err := s.store.CancelOperation(ctx, m.OperationID, "cancelled by the abort of rollout "+r.ID, now); err != nil &&
				lifecycle.ErrorCode(err) != lifecycle.ECONFLICT && lifecycle.ErrorCode(err) != lifecycle.ENOTFOUND {
				return 0, err
			}
		}
	}
	if r.Abort == nil || !r.Abort.Revert {
		return outstanding, nil
	}
	var results []MemberResult
	var facts []lifecycle.VersionFacts
	for _, m := range ms {
		if m.Revert != nil && (m.Revert.Outcome == RevertPending || m.Revert.Outcome == RevertInProgress) {
			outstanding++
			if m.Revert.Outcome == RevertPending {
				// Reserved by a visit that did not record the start: the
				// operation may exist already.
				res := MemberResult{Ord: m.Ord, Revert: &MemberRevert{Outcome: RevertInProgress, ToRevision: m.Revert.ToRevision,
					OperationID: m.Revert.OperationID, Forced: m.Revert.Forced}}
				_, err := s.store.Operation(ctx, m.Revert.OperationID)
				if lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND {
					res, err = s.startRevert(ctx, r, m, m.Revert.ToRevision, m.Revert.OperationID)
				}
				if err != nil {
					return 0, err
				}
				results = append(results, res)
			}
			continue
		}
		if m.Revert != nil || m.OperationID == "" {
			continue
		}
		switch m.Status {
		case lifecycle.MemberSucceeded, lifecycle.MemberFailed, lifecycle.MemberCancelled:
		default:
			continue
		}
		if facts == nil && r.Action != lifecycle.RolloutInstall {
			if facts, _, err = s.versionFacts(ctx, r.ApplicationID); err != nil {
				return 0, err
			}
		}
		res, started, err := s.decideRevert(ctx, r, m, facts, now)
		if err != nil {
			return 0, err
		}
		if res != nil {
			results = append(results, *res)
			if started {
				outstanding++
			}
		}
	}
	if len(results) > 0 {
		s.wake()
	}
	return outstanding, s.store.SetMemberResults(ctx, r.ID, results, now)
}

// decideRevert decides one changed member's revert (lifecycle.DecideRevert)
// and starts it; nil when there is nothing to revert.
func (s *Service) decideRevert(ctx context.Context, r Rollout, m RolloutMember, facts []lifecycle.VersionFacts, now time.Time) (*MemberResult, bool, error) {
	in := lifecycle.RevertInput{Action: r.Action, Status: m.Status, Now: now, Force: r.Abort.Forced, ForceReason: r.Abort.Reason,
		ForceAllowed: r.Abort.Forced && s.policy.AllowOverrides}
	if !in.ForceAllowed {
		in.ForceRefusal = "this server disables rollback overrides"
	}
	var d Deployment
	if m.DeploymentID != "" {
		var err error
		d, err = s.store.Deployment(ctx, m.DeploymentID)
		if lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND {
			return nil, false, nil // an install that never created it
		}
		if err != nil {
			return nil, false, err
		}
	}
	if d.Removing {
		return nil, false, nil
	}
	if r.Action == lifecycle.RolloutInstall {
		in.Changed = true
	} else {
		in.Changed = d.Revision > m.FromRevision
		base, err := lifecycle.ParseVersion(m.FromVersion)
		if err != nil {
			return nil, false, err
		}
		in.BaseRevision, in.BaseVersion = m.FromRevision, base
		revs, err := s.allRevisions(ctx, d.ID)
		if err != nil {
			return nil, false, err
		}
		in.Version, in.Revision = d.Version, d.Revision
		for _, rv := range revs {
			in.Revisions = append(in.Revisions, lifecycle.RevisionTimes{N: rv.N, Version: rv.Version, PublishedAt: rv.CreatedAt, InstalledAt: rv.InstalledAt})
			if rv.N == d.InstalledRevision && d.InstalledRevision > 0 {
				in.Version = rv.Version
			}
		}
		for _, f := range facts {
			in.Entries = append(in.Entries, lifecycle.CatalogEntry{Version: f.Version, Yanked: f.Yanked, Upgrade: f.Lifecycle.Upgrade})
			if f.Version == in.Version {
				in.Policy = f.Lifecycle.Rollback
			}
			if f.Version == base {
				in.BaseYanked = f.Yanked
			}
		}
	}
	rv, err := lifecycle.DecideRevert(in)
	if refusal(err) {
		// A refused override (EFORBIDDEN: the server disables overrides)
		// or a bad force request ends this member's revert, not the
		// abort: no rollout may stay aborting for a revert it cannot do.
		return &MemberResult{Ord: m.Ord, Status: lifecycle.MemberNotReverted,
			Revert: &MemberRevert{Outcome: RevertNotReverted, ToRevision: m.FromRevision, Reason: "Not reverted: " + message(err)}}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	switch {
	case rv.Kind == lifecycle.RevertNone:
		return nil, false, nil
	case !rv.Allowed:
		reason := rv.Reason
		if rv.SupplierReason != "" {
			reason += " (supplier: " + rv.SupplierReason + ")"
		}
		return &MemberResult{Ord: m.Ord, Status: lifecycle.MemberNotReverted,
			Revert: &MemberRevert{Outcome: RevertNotReverted, ToRevision: rv.ToRevision, Reason: reason}}, false, nil
	}
	// Reserve the revert's operation id first, so that a crash between the
	// creation and its record starts it again rather than twice.
	opID := newUUID()
	err = s.store.SetMemberResults(ctx, r.ID, []MemberResult{{Ord: m.Ord, IfNoRevert: true,
		Revert: &MemberRevert{Outcome: RevertPending, ToRevision: rv.ToRevision, OperationID: opID, Forced: rv.Forced}}}, now)
	if errors.Is(err, ErrMemberChanged) {
		return nil, false, nil // another visit reserved it: the next one follows it
	}
	if err != nil {
		return nil, false, err
	}
	res, err := s.startRevert(ctx, r, m, rv.ToRevision, opID)
	if err != nil {
		return nil, false, err
	}
	res.Revert.Forced = rv.Forced
	return &res, true, nil
}

// startRevert creates a member's revert operation with id: remove for an
// install member, a rollback to toRevision otherwise (an upgrade back for
// a rollback rollout).
func (s *Service) startRevert(ctx context.Context, r Rollout, m RolloutMember, toRevision int, id string) (MemberResult, error) {
	res := MemberResult{Ord: m.Ord, Revert: &MemberRevert{Outcome: RevertInProgress, ToRevision: toRevision, OperationID: id}}
	notReverted := func(err error) (MemberResult, error) {
		return MemberResult{Ord: m.Ord, Status: lifecycle.MemberNotReverted,
			Revert: &MemberRevert{Outcome: RevertNotReverted, ToRevision: toRevision, Reason: message(err)}}, nil
	}
	now := s.now().UTC()
	if r.Action == lifecycle.RolloutInstall {
		t := lifecycle.DefaultRemoveTimeout
		op := Operation{ID: id, Type: lifecycle.OperationRemove, State: lifecycle.OperationQueued, Strategy: lifecycle.StrategyRecreate,
			OnFailure: OnFailureHalt, StepTimeout: t, RequestedBy: memberActor(r).ID, Deadline: now.Add(t)}
		d, err := s.store.RemoveDeployment(ctx, m.DeploymentID, op, func(Deployment) error { return nil }, now)
		if refusal(err) {
			return notReverted(err)
		}
		if err != nil {
			return res, err
		}
		s.cache.invalidate(d.ClientID)
		return res, nil
	}
	d, err := s.store.Deployment(ctx, m.DeploymentID)
	if err != nil {
		if refusal(err) {
			return notReverted(err)
		}
		return res, err
	}
	actor := memberActor(r)
	actor.Admin = r.Abort != nil && r.Abort.Forced
	var p Plan
	if r.Action == lifecycle.RolloutRollback {
		p, err = s.planUpgrade(ctx, d, nil, UpgradeRequest{TargetVersion: m.FromVersion}, nil, 0, actor)
	} else {
		req := RollbackRequest{ToRevision: toRevision}
		if actor.Admin {
			req.Force, req.Reason = true, r.Abort.Reason
		}
		p, err = s.planRollback(ctx, d, nil, req, 0, actor)
	}
	if err != nil {
		return res, err
	}
	if !p.Allowed {
		return notReverted(p.Refusal)
	}
	if err := s.createPlanned(ctx, p, id); err != nil {
		if refusal(err) {
			return notReverted(err)
		}
		return res, err
	}
	return res, nil
}
