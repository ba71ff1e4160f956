package lifecycle

import (
	"fmt"
	"time"
)

// WaveCounts counts a wave's members by status.
type WaveCounts struct {
	Pending, InProgress, Succeeded, Failed, Cancelled, Reverted, NotReverted, Removed, Excluded int
}

// Add counts one member of status s (an unknown status counts nowhere).
func (c *WaveCounts) Add(s MemberStatus) { c.AddN(s, 1) }

// AddN counts n members of status s (an unknown status counts nowhere).
func (c *WaveCounts) AddN(s MemberStatus, n int) {
	switch s {
	case MemberPending:
		c.Pending += n
	case MemberInProgress:
		c.InProgress += n
	case MemberSucceeded:
		c.Succeeded += n
	case MemberFailed:
		c.Failed += n
	case MemberCancelled:
		c.Cancelled += n
	case MemberReverted:
		c.Reverted += n
	case MemberNotReverted:
		c.NotReverted += n
	case MemberRemoved:
		c.Removed += n
	case MemberExcluded:
		c.Excluded += n
	}
}

// Counted returns how many of the wave's members its thresholds count:
// every member but the ones the rollout cancelled, the removed and the
// excluded, which count toward nothing.
func (c WaveCounts) Counted() int {
	return c.Pending + c.InProgress + c.Succeeded + c.Failed + c.Reverted + c.NotReverted
}

// Settled reports whether no member of the wave is pending or in progress.
func (c WaveCounts) Settled() bool { return c.Pending == 0 && c.InProgress == 0 }

// WaitReason says why a rollout waits, for "why it waits" in its progress.
type WaitReason string

// The wait reasons.
const (
	WaitPaused   WaitReason = "paused"    // the rollout is paused (its cause says by whom)
	WaitInFlight WaitReason = "in-flight" // member operations run; maxInFlight, or the wave has not settled
	WaitSoak     WaitReason = "soak"      // the wave settled; its soak runs
	WaitWindow   WaitReason = "window"    // outside the daily window
	WaitAborting WaitReason = "aborting"  // the abort waits for member operations
)

// Threshold rules, as a ThresholdBreach names them.
const (
	ThresholdMaxFailures = "maxFailures"
	ThresholdMinSuccess  = "minSuccess"
)

// ThresholdBreach says which threshold of which wave was exceeded, with the
// counts that exceeded it.
type ThresholdBreach struct {
	Wave      int    `json:"wave"` // index, from 0
	Rule      string `json:"rule"` // ThresholdMaxFailures or ThresholdMinSuccess
	Counted   int    `json:"counted"`
	Succeeded int    `json:"succeeded"`
	Failed    int    `json:"failed"`
	// Allowed is, for maxFailures, how many failures the wave allows.
	Allowed int `json:"allowed"`
	// MinSuccess is, for minSuccess, the percent that had to succeed.
	MinSuccess int `json:"minSuccess"`
}

// Message says what was exceeded, in a sentence.
func (b ThresholdBreach) Message() string {
	if b.Rule == ThresholdMaxFailures {
		return fmt.Sprintf("Wave %d exceeded maxFailures: %d of %d members failed, %d allowed.", b.Wave+1, b.Failed, b.Counted, b.Allowed)
	}
	return fmt.Sprintf("Wave %d missed minSuccess: %d of %d members succeeded, %d%% required.", b.Wave+1, b.Succeeded, b.Counted, b.MinSuccess)
}

// RolloutStepInput is everything one visit of a rollout by the driver
// decides on, loaded before: no decision reads anything else.
type RolloutStepInput struct {
	Now   time.Time
	State RolloutState
	// Deadline is when a rollout not ended fails: its start plus
	// RolloutSettings.Deadline.
	Deadline time.Time
	// Waves and Counts are the rollout's waves and their counts, index by
	// index; Wave is the current one.
	Waves  []Wave
	Counts []WaveCounts
	Wave   int
	// WaveSettledAt is when the current wave was first seen settled (zero:
	// not yet; the decision then says WaveSettled).
	WaveSettledAt time.Time
	// WaveApproved says the current wave was approved (approve action).
	WaveApproved bool
	// WaveAccepted says an operator resumed the rollout after the current
	// wave exceeded a threshold or emptied (ResumeAcceptsWave): its
	// thresholds and its emptiness are no longer checked and it passes as
	// it is once settled (an emptied one at once: it has nothing to soak).
	// The caller clears it when the rollout passes to the next wave.
	WaveAccepted bool
	// Oldest is the current wave's member in progress the longest, with
	// its device's last contact, for the waiting of a wave that waits for
	// its members; nil when none is in progress or it was not read (a
	// caller may read it only when a decision without it waits with
	// WaitInFlight, and decide again: nothing else depends on it).
	Oldest      *WaitingMember
	MaxInFlight int
	Window      *RolloutWindow
	OnThreshold OnThreshold
	// TargetYanked and TargetDeleted say the target version was yanked or
	// deleted since the start.
	TargetYanked, TargetDeleted bool
	// Outstanding is, while aborting, how many member operations the abort
	// still waits for (operations being cancelled, reverts running).
	Outstanding int
}

// RolloutDecision is what one visit of a rollout does; the zero value does
// nothing. At most one of Publish, NextWave and To is set.
type RolloutDecision struct {
	// Publish is how many pending members of the current wave to start,
	// the first ones in stable order.
	Publish int
	// NextWave says the current wave passed: the next one becomes current.
	NextWave bool
	// To, when not "", moves the rollout to that state with Cause
	// (checked by CheckRolloutMove).
	To    RolloutState
	Cause RolloutCause
	// Breach says which threshold moved the rollout (cause
	// threshold-exceeded).
	Breach *ThresholdBreach
	// WaveSettled says the current wave is settled for the first time: the
	// caller records Now as its WaveSettledAt (with whatever else it does).
	WaveSettled bool
	// Wait says why nothing else happens (with Reason, a sentence); "" when
	// the decision acts.
	Wait   WaitReason
	Reason string
	// Waiting is what the rollout shows after the decision: why it starts
	// nothing now, for a wait of a running rollout and a move to paused;
	// nil for any other decision, and for the wait of a paused rollout,
	// which keeps the waiting its pause recorded.
	Waiting *RolloutWaiting
	// Recheck, on a wait, is the instant after which the same input with a
	// later Now can decide otherwise (the soak's end, the window's opening,
	// the deadline). Until then only a change of a member or an action can,
	// and those wake the driver. Zero when nothing but such a change can
	// (aborting: each member operation has its own deadline).
	Recheck time.Time
}

// DecideRolloutStep decides one visit of a rollout by the driver. In
// order:
//
//   - an ended rollout: nothing;
//   - aborting: aborted (revert-finished) once no member operation is
//     outstanding, else wait;
//   - running, the last wave settled, its soak over, its thresholds met
//     and not emptied (or accepted): succeeded (completed), even if the
//     target version went away or the deadline passed since (during the
//     last wave's soak, as during any other, they fail the rollout);
//   - running or paused: failed when the target version was deleted
//     (target-version-deleted) or yanked (target-version-yanked), or Now is
//     past Deadline (deadline-passed);
//   - paused: wait (until the deadline);
//   - running, unless WaveAccepted: the current wave's maxFailures,
//     checked as results arrive (failed > allowed of the counted members),
//     then, once the wave settled, its minSuccess (succeeded * 100 <
//     minSuccess * counted); either moves the rollout to paused or
//     aborting (OnThreshold), cause threshold-exceeded;
//   - running, unless WaveAccepted: a wave that had members and settled
//     with none counted (WaveCounts.Emptied: all excluded, removed or
//     cancelled) pauses the rollout, cause wave-emptied, whatever
//     OnThreshold says: it proved nothing, and the next wave must not
//     start unnoticed. Resumed (WaveAccepted), it passes at once;
//   - running, the wave settled: wait for its soak to end, then pass to
//     the next wave;
//   - running, the wave not settled: a manual wave not approved pauses
//     (approval-required); outside the window it waits for the window to
//     open; else it publishes min(pending, MaxInFlight - in progress over
//     every wave) members, or waits for operations in flight, its waiting
//     members-in-progress naming how many and the oldest (Oldest).
//
// Every wait but aborting's has a Recheck no later than Deadline, so that
// a rollout never stays running or paused past it unvisited.
//
// It stays one function because the order of the rules above is part of
// them: each returns before the next is considered, and the code reads in
// that order.
//
// Returns EINTERNAL when Wave is not an index of Waves or Counts has not
// the length of Waves (a bug of the caller).
func DecideRolloutStep(in RolloutStepInput) (RolloutDecision, error) {
	if len(in.Counts) != len(in.Waves) || in.Wave < 0 || in.Wave >= len(in.Waves) {
		return RolloutDecision{}, Errorf(EINTERNAL, "rollout wave %d of %d waves with %d counts", in.Wave, len(in.Waves), len(in.Counts))
	}
	switch in.State {
	case RolloutAborting:
		if in.Outstanding <= 0 {
			return RolloutDecision{To: RolloutAborted, Cause: RolloutCauseRevertFinished, Reason: "The abort finished."}, nil
		}
		return RolloutDecision{Wait: WaitAborting, Reason: fmt.Sprintf("The abort waits for %d member operations to end.", in.Outstanding)}, nil
	case RolloutRunning, RolloutPaused:
	default:
		return RolloutDecision{}, nil
	}

	w, c := in.Waves[in.Wave], in.Counts[in.Wave]
	settled := c.Settled()
	var d RolloutDecision
	if settled && in.WaveSettledAt.IsZero() {
		d.WaveSettled = true
		in.WaveSettledAt = in.Now
	}
	breach := waveBreach(in, w, c)
	emptied := c.Emptied() && !in.WaveAccepted
	soakEnd := in.WaveSettledAt.Add(w.Soak)
	// An emptied wave the operator accepted has nothing to soak.
	soaked := settled && (!in.Now.Before(soakEnd) || in.WaveAccepted && c.Emptied())
	last := in.Wave == len(in.Waves)-1
	if in.State == RolloutRunning && last && soaked && breach == nil && !emptied {
		d.To, d.Cause, d.Reason = RolloutSucceeded, RolloutCauseCompleted, "Every wave passed."
		return d, nil
	}

	switch {
	case in.TargetDeleted:
		d.To, d.Cause, d.Reason = RolloutFailed, RolloutCauseTargetVersionDeleted, "The target version was deleted."
		return d, nil
	case in.TargetYanked:
		d.To, d.Cause, d.Reason = RolloutFailed, RolloutCauseTargetVersionYanked, "The target version was yanked."
		return d, nil
	case in.Now.After(in.Deadline):
		d.To, d.Cause = RolloutFailed, RolloutCauseDeadlinePassed
		d.Reason = fmt.Sprintf("The rollout's deadline passed at %s.", in.Deadline.UTC().Format(time.RFC3339))
		return d, nil
	case in.State == RolloutPaused:
		d.Wait, d.Reason, d.Recheck = WaitPaused, "The rollout is paused.", in.Deadline
		return d, nil
	}

	pause := func(cause RolloutCause, reason string) (RolloutDecision, error) {
		d.To, d.Cause, d.Reason, d.Waiting = RolloutPaused, cause, reason, PausedWaiting(cause, reason)
		return d, nil
	}
	if breach != nil {
		if in.OnThreshold == OnThresholdAbort {
			d.To, d.Cause, d.Breach, d.Reason = RolloutAborting, RolloutCauseThresholdExceeded, breach, breach.Message()
			return d, nil
		}
		d.Breach = breach
		return pause(RolloutCauseThresholdExceeded, breach.Message())
	}
	if emptied {
		return pause(RolloutCauseWaveEmptied, fmt.Sprintf("Wave %d emptied: none of its %d members succeeded or failed (%d excluded, %d removed, %d cancelled); "+
			"resume to pass it and start the next wave, or abort.", in.Wave+1, c.Total(), c.Excluded, c.Removed, c.Cancelled))
	}
	wait := func(why WaitReason, until time.Time, waiting *RolloutWaiting) (RolloutDecision, error) {
		d.Wait, d.Reason, d.Recheck, d.Waiting = why, waiting.Message, in.Deadline, waiting
		if !until.IsZero() && until.Before(in.Deadline) {
			d.Recheck = until
		}
		return d, nil
	}
	if settled {
		if !soaked {
			return wait(WaitSoak, soakEnd, &RolloutWaiting{Reason: WaitingSoak, Until: soakEnd,
				Message: fmt.Sprintf("Wave %d settled; its soak runs until %s.", in.Wave+1, soakEnd.UTC().Format(time.RFC3339))})
		}
		d.NextWave, d.Reason = true, fmt.Sprintf("Wave %d passed.", in.Wave+1)
		return d, nil
	}
	if w.Approval == ApprovalManual && !in.WaveApproved {
		return pause(RolloutCauseApprovalRequired, fmt.Sprintf("Wave %d needs approval (approve) before it starts.", in.Wave+1))
	}
	inFlight := 0
	for _, wc := range in.Counts {
		inFlight += wc.InProgress
	}
	if c.Pending > 0 {
		if in.Window != nil && !in.Window.Contains(in.Now) {
			open := in.Window.NextOpen(in.Now)
			return wait(WaitWindow, open, &RolloutWaiting{Reason: WaitingWindow, Until: open,
				Message: fmt.Sprintf("Outside the window %s until %s.", in.Window, open.UTC().Format(time.RFC3339))})
		}
		if n := min(c.Pending, in.MaxInFlight-inFlight); n > 0 {
			d.Publish, d.Reason = n, fmt.Sprintf("Wave %d: %d more members start.", in.Wave+1, n)
			return d, nil
		}
	}
	return wait(WaitInFlight, time.Time{}, inFlightWaiting(in.Wave, c.InProgress, inFlight, c.Pending, in.MaxInFlight, in.Oldest))
}

// waveBreach returns the threshold the current wave w (counts c) exceeds,
// nil when none or when the operator accepted the wave.
func waveBreach(in RolloutStepInput, w Wave, c WaveCounts) *ThresholdBreach {
	if in.WaveAccepted {
		return nil
	}
	counted := c.Counted()
	b := ThresholdBreach{Wave: in.Wave, Counted: counted, Succeeded: c.Succeeded, Failed: c.Failed}
	if allowed := w.MaxFailures.Allowed(counted); c.Failed > allowed {
		b.Rule, b.Allowed = ThresholdMaxFailures, allowed
		return &b
	}
	if c.Settled() && c.Succeeded*100 < w.MinSuccess*counted {
		b.Rule, b.MinSuccess = ThresholdMinSuccess, w.MinSuccess
		return &b
	}
	return nil
}
