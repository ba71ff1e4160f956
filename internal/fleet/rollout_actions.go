package fleet

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// checkRollout returns EPRECONDITION (precondition-failed) when rollout r
// does not meet p (its generation, the rollout's ETag).
func (p Precondition) checkRollout(r Rollout) error {
	if !p.set || slices.Contains(p.generations, r.Generation) {
		return nil
	}
	return &lifecycle.Error{Code: lifecycle.EPRECONDITION, Type: "precondition-failed",
		Message: "The rollout changed since it was read (If-Match does not match its ETag); read it again."}
}

// act applies an operator's action to rollout id: decide runs on the locked
// rollout after expect passed.
func (s *Service) act(ctx context.Context, id string, expect Precondition, decide func(r Rollout) (RolloutChange, error)) (Rollout, error) {
	r, err := s.store.UpdateRollout(ctx, id, func(r Rollout) (RolloutChange, error) {
		if err := expect.checkRollout(r); err != nil {
			return RolloutChange{}, err
		}
		return decide(r)
	}, s.now().UTC())
	if err != nil {
		return Rollout{}, err
	}
	s.wake()
	return decorate(r), nil
}

// unchanged is the change of an action that finds the rollout as asked.
func unchanged(r Rollout) RolloutChange {
	return RolloutChange{Waiting: r.Waiting}
}

func zeroTime() time.Time { return time.Time{} }

// PauseRollout pauses a running rollout (cause operator-paused); pausing a
// paused one changes nothing. Returns ENOTFOUND; ECONFLICT
// (rollout-state-conflict) when the state does not allow it; EPRECONDITION
// when the rollout does not meet expect.
func (s *Service) PauseRollout(ctx context.Context, id string, actor Actor, expect Precondition) (Rollout, error) {
	return s.act(ctx, id, expect, func(r Rollout) (RolloutChange, error) {
		if r.State == lifecycle.RolloutPaused {
			return unchanged(r), nil
		}
		now := s.now().UTC()
		c := RolloutChange{Waiting: lifecycle.PausedWaiting(lifecycle.RolloutCauseOperatorPaused, "Paused by "+actor.ID+".")}
		return s.move(c, r, lifecycle.RolloutPaused, lifecycle.RolloutCauseOperatorPaused, actor.ID, "", now)
	})
}

// ResumeRollout resumes a rollout an operator, a threshold or an emptied
// wave paused (cause operator-resumed; after a threshold or an emptied
// wave the wave is accepted as it is: lifecycle.ResumeAcceptsWave);
// resuming a running one changes nothing. A rollout waiting for
// approval is refused (ECONFLICT): approve it. Errors as PauseRollout.
func (s *Service) ResumeRollout(ctx context.Context, id string, actor Actor, expect Precondition) (Rollout, error) {
	return s.act(ctx, id, expect, func(r Rollout) (RolloutChange, error) {
		if r.State == lifecycle.RolloutRunning {
			return unchanged(r), nil
		}
		if r.State == lifecycle.RolloutPaused && r.Cause == lifecycle.RolloutCauseApprovalRequired {
			return RolloutChange{}, stateConflict(r, "wave "+itoa(r.CurrentWave)+" waits for approval (approve), not for resume")
		}
		c := RolloutChange{}
		if r.State == lifecycle.RolloutPaused && lifecycle.ResumeAcceptsWave(r.Cause) {
			// The wave passes as it is once settled: after a threshold
			// with its failures, after it emptied at once.
			accepted := true
			c.WaveAccepted = &accepted
			c.Waves = r.Waves
			if w := &c.Waves[r.CurrentWave-1]; w.State == WaveFailed {
				w.State, w.FinishedAt = WavePublishing, zeroTime()
			}
		}
		return s.move(c, r, lifecycle.RolloutRunning, lifecycle.RolloutCauseOperatorResumed, actor.ID, "", s.now().UTC())
	})
}

// ApproveRollout starts the manual wave a rollout waits for (cause
// approved): the wave leaves pending for publishing, with its startedAt
// and its wave_started event. ECONFLICT when no wave waits for approval. Errors as
// PauseRollout.
func (s *Service) ApproveRollout(ctx context.Context, id string, actor Actor, expect Precondition) (Rollout, error) {
	return s.act(ctx, id, expect, func(r Rollout) (RolloutChange, error) {
		if r.State != lifecycle.RolloutPaused || r.Cause != lifecycle.RolloutCauseApprovalRequired {
			return RolloutChange{}, stateConflict(r, "no wave waits for approval")
		}
		now := s.now().UTC()
		c := RolloutChange{Waves: r.Waves}
		w := &c.Waves[r.CurrentWave-1]
		w.ApprovedAt, w.ApprovedBy = now, actor.ID
		if w.State == WavePending && startWave(w, now) {
			ev, err := s.rolloutEvent(now, actor.ID, r, lifecycle.RolloutWaveStartedBody{Wave: r.CurrentWave, Size: w.ResolvedSize})
			if err != nil {
				return RolloutChange{}, err
			}
			c.Events = ev
		}
		return s.move(c, r, lifecycle.RolloutRunning, lifecycle.RolloutCauseApproved, actor.ID, "", now)
	})
}

// CancelRollout ends a running or paused rollout as cancelled: it starts
// nothing new, its pending members become cancelled, in-flight operations
// finish on their own. Errors as PauseRollout.
func (s *Service) CancelRollout(ctx context.Context, id string, actor Actor, expect Precondition) (Rollout, error) {
	return s.act(ctx, id, expect, func(r Rollout) (RolloutChange, error) {
		return s.move(RolloutChange{}, r, lifecycle.RolloutCancelled, lifecycle.RolloutCauseOperatorCancelled, actor.ID, "", s.now().UTC())
	})
}

// AbortRollout moves a running or paused rollout to aborting (cause
// operator-aborted): it starts nothing new and cancels its members'
// in-flight operations; with Revert, the driver then returns every member
// it changed to its revision from before the rollout where the installed
// version's policy allows it. On an aborting rollout, a Revert not yet
// asked is added (no state move); any other abort there is ECONFLICT
// (rollout-state-conflict), as in a terminal state. Force needs an admin and a server that
// allows overrides (EFORBIDDEN break-glass-forbidden) and a reason (EINVALID force-reason-required).
// Errors as PauseRollout.
func (s *Service) AbortRollout(ctx context.Context, id string, req AbortRequest, actor Actor, expect Precondition) (Rollout, error) {
	if req.Force && !actor.Admin {
		return Rollout{}, &lifecycle.Error{Code: lifecycle.EFORBIDDEN, Type: "break-glass-forbidden",
			Message: "force is a break-glass override: only the admin role may use it."}
	}
	if req.Force && !s.policy.AllowOverrides {
		return Rollout{}, &lifecycle.Error{Code: lifecycle.EFORBIDDEN, Type: "break-glass-forbidden",
			Message: "force is a break-glass override: this server disables rollback overrides (-allow-rollback-override=false)."}
	}
	if req.Force && !req.Revert {
		return Rollout{}, &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-request",
			Message: "The abort request is not valid: /force: applies to a revert; send it with \"revert\": true.",
			Fields:  []lifecycle.FieldError{{Pointer: "/force", Detail: "applies to a revert; send it with \"revert\": true"}}}
	}
	if req.Force && req.Reason == "" {
		return Rollout{}, &lifecycle.Error{Code: lifecycle.EINVALID, Type: lifecycle.ProblemForceReasonRequired,
			Message: "force needs a reason, which is audited.", Fields: []lifecycle.FieldError{{Pointer: "/reason", Detail: "required with force"}}}
	}
	return s.act(ctx, id, expect, func(r Rollout) (RolloutChange, error) {
		now := s.now().UTC()
		abort := &RolloutAbort{Revert: req.Revert, Forced: req.Force, Reason: req.Reason, RequestedBy: actor.ID, At: now}
		if r.State == lifecycle.RolloutAborting {
			if !req.Revert || (r.Abort != nil && r.Abort.Revert) {
				// Only a revert the abort had not asked for adds anything;
				// any other abort of an aborting rollout is a conflict.
				return RolloutChange{}, lifecycle.CheckRolloutMove(r.State, lifecycle.RolloutAborting, lifecycle.RolloutCauseOperatorAborted)
			}
			return RolloutChange{Abort: abort, Bump: true}, nil
		}
		return s.move(RolloutChange{Abort: abort}, r, lifecycle.RolloutAborting, lifecycle.RolloutCauseOperatorAborted, actor.ID, req.Reason, now)
	})
}

// ExcludeRolloutMember excludes one member of an active rollout (status
// excluded, reason operator); its in-flight operation is left alone. The
// member's key fits the rollout's action: deploymentId for upgrade,
// reconfigure and rollback, clientId and deviceId for install (EINVALID
// naming the missing or extra field otherwise). Excluding an excluded
// member changes nothing. Returns ENOTFOUND when the rollout does not
// exist; EINVALID (ProblemNotAMember, naming the field) when the member
// does not; ECONFLICT when the member already ended otherwise (reverted,
// removed...) or the rollout ended. Errors as PauseRollout.
func (s *Service) ExcludeRolloutMember(ctx context.Context, id string, m MemberRef, actor Actor, expect Precondition) (Rollout, error) {
	r, err := s.store.Rollout(ctx, id)
	if err != nil {
		return Rollout{}, err
	}
	f, err := memberKey(r.Action, m)
	if err != nil {
		return Rollout{}, err
	}
	// The member read here may move before the rollout is locked (its
	// operation or revert ends): the change is guarded on the status seen,
	// and decided again on the member read anew when it moved.
	for attempt := 0; ; attempt++ {
		r, err := s.excludeMember(ctx, id, f, actor, expect)
		if errors.Is(err, ErrMemberChanged) && attempt < 3 {
			continue
		}
		return r, err
	}
}

// memberKey is the filter of the member m names in a rollout of action,
// or EINVALID naming the field that does not fit the action.
func memberKey(action lifecycle.RolloutAction, m MemberRef) (MemberFilter, error) {
	invalid := func(pointer, detail string) error {
		return &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-request",
			Message: "The exclude request is not valid: " + pointer + ": " + detail + ".",
			Fields:  []lifecycle.FieldError{{Pointer: pointer, Detail: detail}}}
	}
	if action == lifecycle.RolloutInstall {
		switch {
		case m.DeploymentID != "":
			return MemberFilter{}, invalid("/deploymentId", "an install rollout's member is named by clientId and deviceId")
		case m.ClientID == "":
			return MemberFilter{}, invalid("/clientId", "required (with deviceId) to name an install rollout's member")
		case m.DeviceID == "":
			return MemberFilter{}, invalid("/deviceId", "required (with clientId) to name an install rollout's member")
		}
		return MemberFilter{ClientID: m.ClientID, DeviceID: m.DeviceID}, nil
	}
	switch {
	case m.DeploymentID == "":
		return MemberFilter{}, invalid("/deploymentId", "required to name a member of a "+string(action)+" rollout")
	case m.ClientID != "":
		return MemberFilter{}, invalid("/clientId", lifecycle.Article(string(action))+" "+string(action)+" rollout's member is named by deploymentId alone")
	case m.DeviceID != "":
		return MemberFilter{}, invalid("/deviceId", lifecycle.Article(string(action))+" "+string(action)+" rollout's member is named by deploymentId alone")
	}
	return MemberFilter{DeploymentID: m.DeploymentID}, nil
}

// excludeMember is one attempt of ExcludeRolloutMember.
func (s *Service) excludeMember(ctx context.Context, id string, f MemberFilter, actor Actor, expect Precondition) (Rollout, error) {
	ms, err := s.store.RolloutMembers(ctx, id, f, -1, 2)
	if err != nil {
		return Rollout{}, err
	}
	if len(ms) != 1 {
		pointer := "/deploymentId"
		if f.DeploymentID == "" {
			pointer = "/deviceId"
		}
		return Rollout{}, &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemNotAMember, Message: "Rollout " + id + " has no such member.",
			Fields: []lifecycle.FieldError{{Pointer: pointer, Detail: "not a member of this rollout"}}}
	}
	mem := ms[0]
	return s.act(ctx, id, expect, func(r Rollout) (RolloutChange, error) {
		if !r.State.Active() {
			return RolloutChange{}, stateConflict(r, "it ended; its members can no longer be excluded")
		}
		if mem.Status == lifecycle.MemberExcluded {
			return unchanged(r), nil
		}
		if !mem.Status.CanTransitionTo(lifecycle.MemberExcluded) {
			return RolloutChange{}, &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "member-ended",
				Message: "The member is " + string(mem.Status) + ": it can no longer be excluded."}
		}
		now := s.now().UTC()
		rel := []lifecycle.Ref{lifecycle.DeviceRef(mem.ClientID, mem.DeviceID)}
		if mem.DeploymentID != "" {
			rel = append(rel, lifecycle.Ref{Kind: lifecycle.SubjectDeployment, ID: mem.DeploymentID})
		}
		ev, err := s.rolloutEvent(now, actor.ID, r, lifecycle.RolloutMemberExcludedBody{PreviousStatus: mem.Status}, rel...)
		// Guarded on the status seen: the member's operation or revert
		// may have moved it since it was read (ErrMemberChanged).
		return RolloutChange{Waiting: r.Waiting, Bump: true, Events: ev, Members: []MemberResult{{Ord: mem.Ord, Status: lifecycle.MemberExcluded,
			Result: "Excluded by " + actor.ID + ".", Deactivate: true, IfStatus: mem.Status}}}, err
	})
}

// ProblemNotAMember is the problem type of an exclude that names no member
// of the rollout.
const ProblemNotAMember = "not-a-member"

// checkNotMember refuses a single-deployment operation on a member of an
// active rollout (ECONFLICT rollout-member, naming the rollout).
func (s *Service) checkNotMember(ctx context.Context, deploymentID string) error {
	rid, err := s.store.ActiveRolloutOf(ctx, deploymentID)
	if err != nil {
		return err
	}
	if rid != "" {
		return rolloutMemberError("Deployment "+deploymentID, rid)
	}
	return nil
}
