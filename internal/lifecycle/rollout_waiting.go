package lifecycle

import (
	"fmt"
	"slices"
	"time"
)

// WaitingReason is why a running or paused rollout starts nothing now (the
// contract's RolloutWaiting.reason). A paused rollout's is its cause; a
// running one's says what it waits for.
type WaitingReason string

// The waiting reasons.
const (
	WaitingApprovalRequired  WaitingReason = "approval-required"   // paused: a manual wave waits for approve
	WaitingOperatorPaused    WaitingReason = "operator-paused"     // paused by an operator
	WaitingThresholdExceeded WaitingReason = "threshold-exceeded"  // paused: a wave exceeded a threshold
	WaitingWaveEmptied       WaitingReason = "wave-emptied"        // paused: a wave's members all left it
	WaitingSoak              WaitingReason = "soak"                // running: the settled wave soaks
	WaitingWindow            WaitingReason = "window"              // running: outside the daily window
	WaitingMembersInProgress WaitingReason = "members-in-progress" // running: the wave waits for its members' operations
)

var allWaitingReasons = []WaitingReason{
	WaitingApprovalRequired, WaitingOperatorPaused, WaitingThresholdExceeded, WaitingWaveEmptied,
	WaitingSoak, WaitingWindow, WaitingMembersInProgress,
}

// AllWaitingReasons returns every waiting reason, in the order of the
// contract's enum. The result is a copy.
func AllWaitingReasons() []WaitingReason { return slices.Clone(allWaitingReasons) }

// RolloutWaiting is why a running or paused rollout starts nothing now,
// as the rollout shows it.
type RolloutWaiting struct {
	Reason  WaitingReason
	Message string
	// Until is when the wait ends by itself (soak, window); zero when it
	// ends by an action or by the members' operations.
	Until time.Time
	// Count and Oldest, for members-in-progress: how many members of the
	// current wave are in progress, and the one in progress the longest.
	Count  int            `json:",omitempty"`
	Oldest *WaitingMember `json:",omitempty"`
}

// WaitingMember is the member a members-in-progress wait names: the one of
// the current wave in progress the longest, with its device's last
// contact, so that an operator sees which device holds the wave up and
// whether its agent is there at all.
type WaitingMember struct {
	// DeploymentID is "" for an install member whose deployment is not
	// created yet.
	DeploymentID, ClientID, DeviceID, OperationID string
	// Since is when the member's operation started.
	Since time.Time
	// LastSeenAt is when the member's device was last seen on the device
	// API; zero when never.
	LastSeenAt time.Time
}

// PausedWaiting is the waiting of a rollout paused for cause, with the
// pause's sentence: its reason is the cause (an operator pause for any
// cause that names no wait of its own).
func PausedWaiting(cause RolloutCause, message string) *RolloutWaiting {
	reason := WaitingOperatorPaused
	switch cause {
	case RolloutCauseApprovalRequired:
		reason = WaitingApprovalRequired
	case RolloutCauseThresholdExceeded:
		reason = WaitingThresholdExceeded
	case RolloutCauseWaveEmptied:
		reason = WaitingWaveEmptied
	}
	return &RolloutWaiting{Reason: reason, Message: message}
}

// ResumeAcceptsWave reports whether resuming a rollout paused for cause
// accepts its current wave as it is: after a threshold (its failures) or
// after the wave emptied (its lack of results). The wave then passes once
// settled without its thresholds or its emptiness being checked again.
func ResumeAcceptsWave(cause RolloutCause) bool {
	return cause == RolloutCauseThresholdExceeded || cause == RolloutCauseWaveEmptied
}

// Total returns how many members the wave has, whatever their status.
func (c WaveCounts) Total() int {
	return c.Pending + c.InProgress + c.Succeeded + c.Failed + c.Cancelled + c.Reverted + c.NotReverted + c.Removed + c.Excluded
}

// Emptied reports whether the wave had members and settled with none of
// them counted: every one was excluded, removed or cancelled, so the wave
// succeeded nothing and failed nothing. Such a wave proves nothing about
// the change; it does not pass on its own (a canary that vanished must not
// let the next wave start unnoticed).
func (c WaveCounts) Emptied() bool { return c.Total() > 0 && c.Settled() && c.Counted() == 0 }

// inFlightWaiting is the waiting of a running wave that starts nothing
// because of members in progress: maxInFlight is reached (pending > 0), or
// every member started and the wave waits for their results. oldest is the
// member in progress the longest (nil when not known).
func inFlightWaiting(wave, inProgress, inFlight, pending, maxInFlight int, oldest *WaitingMember) *RolloutWaiting {
	var msg string
	if pending > 0 {
		msg = fmt.Sprintf("Wave %d: %d members wait while %d member operations are in flight (maxInFlight %d).", wave+1, pending, inFlight, maxInFlight)
	} else {
		msg = fmt.Sprintf("Wave %d waits for %d member %s in progress.", wave+1, inProgress, plural(inProgress, "operation", "operations"))
	}
	w := &RolloutWaiting{Reason: WaitingMembersInProgress, Count: inProgress}
	if oldest != nil {
		o := *oldest
		w.Oldest = &o
		msg += " The oldest, " + memberName(o) + ", is in progress since " + o.Since.UTC().Format(time.RFC3339) + "; "
		switch {
		case o.LastSeenAt.IsZero():
			msg += "its device has never contacted wfm (is its agent running?)."
		case o.LastSeenAt.Before(o.Since):
			msg += "its device has not contacted wfm since " + o.LastSeenAt.UTC().Format(time.RFC3339) + ", before the operation started (is its agent running?)."
		default:
			msg += "its device last contacted wfm at " + o.LastSeenAt.UTC().Format(time.RFC3339) + "."
		}
	}
	w.Message = msg
	return w
}

// memberName names a member in a sentence: its deployment and device.
func memberName(m WaitingMember) string {
	dev := "device " + m.ClientID + "/" + m.DeviceID
	if m.DeploymentID == "" {
		return dev
	}
	return "deployment " + m.DeploymentID + " on " + dev
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
