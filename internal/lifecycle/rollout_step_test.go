package lifecycle

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWaveCounts(t *testing.T) {
	var c WaveCounts
	for _, s := range AllMemberStatuses() {
		c.Add(s)
	}
	c.Add("bogus")
	assert.Equal(t, WaveCounts{1, 1, 1, 1, 1, 1, 1, 1, 1}, c)
	assert.Equal(t, 6, c.Counted(), "cancelled, removed and excluded count toward nothing")
	assert.False(t, c.Settled())
	assert.True(t, WaveCounts{Succeeded: 3, Cancelled: 1}.Settled())
	var n WaveCounts
	for i, s := range AllMemberStatuses() {
		n.AddN(s, i+1)
	}
	n.AddN("bogus", 5)
	assert.Equal(t, WaveCounts{1, 2, 3, 4, 5, 6, 7, 8, 9}, n)
}

func TestDecideRolloutStep(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	deadline := now.Add(48 * time.Hour)
	utc := &RolloutWindow{Start: 22 * 60, End: 4 * 60, Location: time.UTC}
	wave := func(f func(*Wave)) Wave {
		w := Wave{Size: CountOf(10), Approval: ApprovalAuto, MinSuccess: 100, MaxFailures: PercentOf(0)}
		if f != nil {
			f(&w)
		}
		return w
	}
	// base: three waves, the second current with 10 members: 2 succeeded,
	// 3 in progress, 5 pending; maxInFlight 5.
	base := func(f func(*RolloutStepInput)) RolloutStepInput {
		in := RolloutStepInput{Now: now, State: RolloutRunning, Deadline: deadline,
			Waves:  []Wave{wave(nil), wave(func(w *Wave) { w.Soak = time.Hour }), wave(nil)},
			Counts: []WaveCounts{{Succeeded: 1}, {Succeeded: 2, InProgress: 3, Pending: 5}, {Pending: 20}},
			Wave:   1, MaxInFlight: 5, OnThreshold: OnThresholdPause}
		if f != nil {
			f(&in)
		}
		return in
	}
	settled := func(in *RolloutStepInput) { in.Counts[1] = WaveCounts{Succeeded: 9, Cancelled: 1} }
	lastSettled := func(in *RolloutStepInput) {
		in.Wave = 2
		in.Counts[1] = WaveCounts{Succeeded: 10}
		in.Counts[2] = WaveCounts{Succeeded: 20}
	}

	paused := func(reason WaitingReason, msg string) *RolloutWaiting {
		return &RolloutWaiting{Reason: reason, Message: msg}
	}
	inFlight := func(msg string, count int, oldest *WaitingMember) RolloutDecision {
		return RolloutDecision{Wait: WaitInFlight, Recheck: deadline, Reason: msg,
			Waiting: &RolloutWaiting{Reason: WaitingMembersInProgress, Message: msg, Count: count, Oldest: oldest}}
	}
	soaking := func(first bool, recheck time.Time, msg string, until time.Time) RolloutDecision {
		return RolloutDecision{WaveSettled: first, Wait: WaitSoak, Recheck: recheck, Reason: msg,
			Waiting: &RolloutWaiting{Reason: WaitingSoak, Message: msg, Until: until}}
	}
	emptiedPause := func(first bool, msg string) RolloutDecision {
		return RolloutDecision{To: RolloutPaused, Cause: RolloutCauseWaveEmptied, WaveSettled: first, Reason: msg, Waiting: paused(WaitingWaveEmptied, msg)}
	}

	tests := []struct {
		name string
		in   RolloutStepInput
		want RolloutDecision
	}{
		{"publish up to maxInFlight", base(nil), RolloutDecision{Publish: 2, Reason: "Wave 2: 2 more members start."}},
		{"publish what is pending", base(func(in *RolloutStepInput) { in.MaxInFlight = 100 }), RolloutDecision{Publish: 5, Reason: "Wave 2: 5 more members start."}},
		{"in flight everywhere counts", base(func(in *RolloutStepInput) { in.Counts[0].InProgress = 2 }),
			inFlight("Wave 2: 5 members wait while 5 member operations are in flight (maxInFlight 5).", 3, nil)},
		{"nothing pending waits for the wave", base(func(in *RolloutStepInput) { in.Counts[1] = WaveCounts{Succeeded: 7, InProgress: 3} }),
			inFlight("Wave 2 waits for 3 member operations in progress.", 3, nil)},
		{"the wave's wait names its oldest member, whose device never contacted wfm", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Succeeded: 9, InProgress: 1}
			in.Oldest = &WaitingMember{DeploymentID: "dep-1", ClientID: "plant", DeviceID: "d-001", OperationID: "op-1", Since: now.Add(-time.Hour)}
		}), inFlight("Wave 2 waits for 1 member operation in progress. The oldest, deployment dep-1 on device plant/d-001, is in progress since "+
			"2026-12-01T11:00:00Z; its device has never contacted wfm (is its agent running?).", 1,
			&WaitingMember{DeploymentID: "dep-1", ClientID: "plant", DeviceID: "d-001", OperationID: "op-1", Since: now.Add(-time.Hour)})},
		{"a device silent since before the operation started", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Succeeded: 8, InProgress: 2}
			in.Oldest = &WaitingMember{DeploymentID: "dep-1", ClientID: "plant", DeviceID: "d-001", Since: now.Add(-time.Hour), LastSeenAt: now.Add(-2 * time.Hour)}
		}), inFlight("Wave 2 waits for 2 member operations in progress. The oldest, deployment dep-1 on device plant/d-001, is in progress since "+
			"2026-12-01T11:00:00Z; its device has not contacted wfm since 2026-12-01T10:00:00Z, before the operation started (is its agent running?).", 2,
			&WaitingMember{DeploymentID: "dep-1", ClientID: "plant", DeviceID: "d-001", Since: now.Add(-time.Hour), LastSeenAt: now.Add(-2 * time.Hour)})},
		{"a device in contact since the operation started", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Succeeded: 9, InProgress: 1}
			in.Oldest = &WaitingMember{ClientID: "plant", DeviceID: "d-001", Since: now.Add(-time.Hour), LastSeenAt: now.Add(-time.Minute)}
		}), inFlight("Wave 2 waits for 1 member operation in progress. The oldest, device plant/d-001, is in progress since "+
			"2026-12-01T11:00:00Z; its device last contacted wfm at 2026-12-01T11:59:00Z.", 1,
			&WaitingMember{ClientID: "plant", DeviceID: "d-001", Since: now.Add(-time.Hour), LastSeenAt: now.Add(-time.Minute)})},
		{"maxFailures as results arrive, pause", base(func(in *RolloutStepInput) { in.Counts[1].Failed = 1 }),
			RolloutDecision{To: RolloutPaused, Cause: RolloutCauseThresholdExceeded, Reason: "Wave 2 exceeded maxFailures: 1 of 11 members failed, 0 allowed.",
				Waiting: paused(WaitingThresholdExceeded, "Wave 2 exceeded maxFailures: 1 of 11 members failed, 0 allowed."),
				Breach:  &ThresholdBreach{Wave: 1, Rule: ThresholdMaxFailures, Counted: 11, Succeeded: 2, Failed: 1}}},
		{"maxFailures with onThreshold abort", base(func(in *RolloutStepInput) { in.Counts[1].Failed = 1; in.OnThreshold = OnThresholdAbort }),
			RolloutDecision{To: RolloutAborting, Cause: RolloutCauseThresholdExceeded, Reason: "Wave 2 exceeded maxFailures: 1 of 11 members failed, 0 allowed.",
				Breach: &ThresholdBreach{Wave: 1, Rule: ThresholdMaxFailures, Counted: 11, Succeeded: 2, Failed: 1}}},
		{"failures within maxFailures publish on", base(func(in *RolloutStepInput) {
			in.Counts[1].Failed = 2
			in.Waves[1].MaxFailures, in.Waves[1].MinSuccess = PercentOf(20), 80
		}), RolloutDecision{Publish: 2, Reason: "Wave 2: 2 more members start."}},
		{"cancelled and excluded count toward nothing", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Succeeded: 4, Failed: 1, Cancelled: 30, Excluded: 30, Removed: 30}
			in.Waves[1].MaxFailures = PercentOf(20) // of 5 counted: 1
		}), RolloutDecision{To: RolloutPaused, Cause: RolloutCauseThresholdExceeded, WaveSettled: true, Reason: "Wave 2 missed minSuccess: 4 of 5 members succeeded, 100% required.",
			Waiting: paused(WaitingThresholdExceeded, "Wave 2 missed minSuccess: 4 of 5 members succeeded, 100% required."),
			Breach:  &ThresholdBreach{Wave: 1, Rule: ThresholdMinSuccess, Counted: 5, Succeeded: 4, Failed: 1, MinSuccess: 100}}},
		{"minSuccess when the wave settles", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Succeeded: 8, Failed: 2}
			in.Waves[1].MaxFailures, in.Waves[1].MinSuccess = CountOf(5), 90
			in.WaveSettledAt = now.Add(-time.Minute)
		}), RolloutDecision{To: RolloutPaused, Cause: RolloutCauseThresholdExceeded, Reason: "Wave 2 missed minSuccess: 8 of 10 members succeeded, 90% required.",
			Waiting: paused(WaitingThresholdExceeded, "Wave 2 missed minSuccess: 8 of 10 members succeeded, 90% required."),
			Breach:  &ThresholdBreach{Wave: 1, Rule: ThresholdMinSuccess, Counted: 10, Succeeded: 8, Failed: 2, MinSuccess: 90}}},
		{"minSuccess is not checked before the wave settles", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Failed: 2, Pending: 8}
			in.Waves[1].MaxFailures, in.Waves[1].MinSuccess = CountOf(5), 90
		}), RolloutDecision{Publish: 5, Reason: "Wave 2: 5 more members start."}},
		{"an accepted threshold is not checked again", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Succeeded: 5, Failed: 5}
			in.WaveAccepted, in.WaveSettledAt = true, now.Add(-2*time.Hour)
		}), RolloutDecision{NextWave: true, Reason: "Wave 2 passed."}},
		{"a settled wave records the instant and soaks", base(settled),
			soaking(true, now.Add(time.Hour), "Wave 2 settled; its soak runs until 2026-12-01T13:00:00Z.", now.Add(time.Hour))},
		{"a soak past the deadline rechecks at the deadline", base(func(in *RolloutStepInput) { settled(in); in.Deadline = now.Add(time.Minute) }),
			soaking(true, now.Add(time.Minute), "Wave 2 settled; its soak runs until 2026-12-01T13:00:00Z.", now.Add(time.Hour))},
		{"after the soak the next wave", base(func(in *RolloutStepInput) { settled(in); in.WaveSettledAt = now.Add(-time.Hour) }),
			RolloutDecision{NextWave: true, Reason: "Wave 2 passed."}},
		{"a wave whose members were all excluded pauses, emptied", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Excluded: 10}
			in.Waves[1].Soak = 0
		}), emptiedPause(true, "Wave 2 emptied: none of its 10 members succeeded or failed (10 excluded, 0 removed, 0 cancelled); "+
			"resume to pass it and start the next wave, or abort.")},
		{"excluded, removed and cancelled members empty a wave together, onThreshold abort or not", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Excluded: 1, Removed: 2, Cancelled: 3}
			in.OnThreshold, in.WaveSettledAt = OnThresholdAbort, now.Add(-2*time.Hour)
		}), emptiedPause(false, "Wave 2 emptied: none of its 6 members succeeded or failed (1 excluded, 2 removed, 3 cancelled); "+
			"resume to pass it and start the next wave, or abort.")},
		{"an emptied last wave pauses instead of succeeding", base(func(in *RolloutStepInput) {
			lastSettled(in)
			in.Counts[2] = WaveCounts{Removed: 20}
		}), emptiedPause(true, "Wave 3 emptied: none of its 20 members succeeded or failed (0 excluded, 20 removed, 0 cancelled); "+
			"resume to pass it and start the next wave, or abort.")},
		{"a wave still publishing is not emptied", base(func(in *RolloutStepInput) { in.Counts[1] = WaveCounts{Excluded: 9, Pending: 1} }),
			RolloutDecision{Publish: 1, Reason: "Wave 2: 1 more members start."}},
		{"a wave with one success among the excluded passes", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Excluded: 9, Succeeded: 1}
			in.Waves[1].Soak = 0
		}), RolloutDecision{WaveSettled: true, NextWave: true, Reason: "Wave 2 passed."}},
		{"a wave with one failure among the excluded exceeds its threshold", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Excluded: 9, Failed: 1}
		}), RolloutDecision{To: RolloutPaused, Cause: RolloutCauseThresholdExceeded, WaveSettled: true, Reason: "Wave 2 exceeded maxFailures: 1 of 1 members failed, 0 allowed.",
			Waiting: paused(WaitingThresholdExceeded, "Wave 2 exceeded maxFailures: 1 of 1 members failed, 0 allowed."),
			Breach:  &ThresholdBreach{Wave: 1, Rule: ThresholdMaxFailures, Counted: 1, Failed: 1}}},
		{"an accepted emptied wave passes at once, without its soak", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Excluded: 10}
			in.WaveAccepted, in.WaveSettledAt = true, now.Add(-time.Minute)
		}), RolloutDecision{NextWave: true, Reason: "Wave 2 passed."}},
		{"an accepted emptied last wave succeeds", base(func(in *RolloutStepInput) {
			lastSettled(in)
			in.Counts[2], in.Waves[2].Soak = WaveCounts{Excluded: 20}, time.Hour
			in.WaveAccepted, in.WaveSettledAt = true, now.Add(-time.Minute)
		}), RolloutDecision{To: RolloutSucceeded, Cause: RolloutCauseCompleted, Reason: "Every wave passed."}},
		{"an emptied wave of a paused rollout waits", base(func(in *RolloutStepInput) {
			in.State = RolloutPaused
			in.Counts[1] = WaveCounts{Excluded: 10}
		}), RolloutDecision{WaveSettled: true, Wait: WaitPaused, Recheck: deadline, Reason: "The rollout is paused."}},
		{"a deleted target fails an emptied wave's rollout", base(func(in *RolloutStepInput) {
			in.Counts[1], in.TargetDeleted = WaveCounts{Excluded: 10}, true
		}), RolloutDecision{To: RolloutFailed, Cause: RolloutCauseTargetVersionDeleted, WaveSettled: true, Reason: "The target version was deleted."}},
		{"a manual wave pauses for approval", base(func(in *RolloutStepInput) { in.Waves[1].Approval = ApprovalManual }),
			RolloutDecision{To: RolloutPaused, Cause: RolloutCauseApprovalRequired, Reason: "Wave 2 needs approval (approve) before it starts.",
				Waiting: paused(WaitingApprovalRequired, "Wave 2 needs approval (approve) before it starts.")}},
		{"a manual wave emptied before its approval pauses, emptied", base(func(in *RolloutStepInput) {
			in.Waves[1].Approval, in.Waves[1].Soak = ApprovalManual, 0
			in.Counts[1] = WaveCounts{Excluded: 10}
		}), emptiedPause(true, "Wave 2 emptied: none of its 10 members succeeded or failed (10 excluded, 0 removed, 0 cancelled); "+
			"resume to pass it and start the next wave, or abort.")},
		{"an approved manual wave publishes", base(func(in *RolloutStepInput) { in.Waves[1].Approval, in.WaveApproved = ApprovalManual, true }),
			RolloutDecision{Publish: 2, Reason: "Wave 2: 2 more members start."}},
		{"outside the window", base(func(in *RolloutStepInput) { in.Window = utc }),
			RolloutDecision{Wait: WaitWindow, Recheck: now.Add(10 * time.Hour), Reason: "Outside the window 22:00-04:00 UTC until 2026-12-01T22:00:00Z.",
				Waiting: &RolloutWaiting{Reason: WaitingWindow, Until: now.Add(10 * time.Hour), Message: "Outside the window 22:00-04:00 UTC until 2026-12-01T22:00:00Z."}}},
		{"inside the window", base(func(in *RolloutStepInput) { in.Window, in.Now = utc, now.Add(11*time.Hour) }),
			RolloutDecision{Publish: 2, Reason: "Wave 2: 2 more members start."}},
		{"the last wave passed succeeds", base(lastSettled), RolloutDecision{To: RolloutSucceeded, Cause: RolloutCauseCompleted, WaveSettled: true, Reason: "Every wave passed."}},
		{"the last wave passed succeeds even past the deadline", base(func(in *RolloutStepInput) { lastSettled(in); in.Now = deadline.Add(time.Hour) }),
			RolloutDecision{To: RolloutSucceeded, Cause: RolloutCauseCompleted, WaveSettled: true, Reason: "Every wave passed."}},
		{"the last wave soaks before it succeeds", base(func(in *RolloutStepInput) { lastSettled(in); in.Waves[2].Soak = time.Hour }),
			soaking(true, now.Add(time.Hour), "Wave 3 settled; its soak runs until 2026-12-01T13:00:00Z.", now.Add(time.Hour))},
		{"the last wave's soak still runs", base(func(in *RolloutStepInput) {
			lastSettled(in)
			in.Waves[2].Soak, in.WaveSettledAt = time.Hour, now.Add(-59*time.Minute)
		}), soaking(false, now.Add(time.Minute), "Wave 3 settled; its soak runs until 2026-12-01T12:01:00Z.", now.Add(time.Minute))},
		{"the last wave succeeds after its soak", base(func(in *RolloutStepInput) {
			lastSettled(in)
			in.Waves[2].Soak, in.WaveSettledAt = time.Hour, now.Add(-time.Hour)
		}), RolloutDecision{To: RolloutSucceeded, Cause: RolloutCauseCompleted, Reason: "Every wave passed."}},
		{"the deadline during the last wave's soak fails", base(func(in *RolloutStepInput) {
			lastSettled(in)
			in.Waves[2].Soak, in.WaveSettledAt, in.Now = time.Hour, deadline.Add(-time.Minute), deadline.Add(time.Second)
		}), RolloutDecision{To: RolloutFailed, Cause: RolloutCauseDeadlinePassed, Reason: "The rollout's deadline passed at 2026-12-03T12:00:00Z."}},
		{"the deadline fails", base(func(in *RolloutStepInput) { in.Now = deadline.Add(time.Second) }),
			RolloutDecision{To: RolloutFailed, Cause: RolloutCauseDeadlinePassed, Reason: "The rollout's deadline passed at 2026-12-03T12:00:00Z."}},
		{"the deadline fails a paused rollout", base(func(in *RolloutStepInput) { in.State, in.Now = RolloutPaused, deadline.Add(time.Second) }),
			RolloutDecision{To: RolloutFailed, Cause: RolloutCauseDeadlinePassed, Reason: "The rollout's deadline passed at 2026-12-03T12:00:00Z."}},
		{"a yanked target fails", base(func(in *RolloutStepInput) { in.TargetYanked = true }),
			RolloutDecision{To: RolloutFailed, Cause: RolloutCauseTargetVersionYanked, Reason: "The target version was yanked."}},
		{"a deleted target fails", base(func(in *RolloutStepInput) { in.TargetDeleted, in.TargetYanked = true, true }),
			RolloutDecision{To: RolloutFailed, Cause: RolloutCauseTargetVersionDeleted, Reason: "The target version was deleted."}},
		{"paused waits until the deadline", base(func(in *RolloutStepInput) { in.State = RolloutPaused; in.Counts[1].Failed = 3 }),
			RolloutDecision{Wait: WaitPaused, Recheck: deadline, Reason: "The rollout is paused."}},
		{"a paused last wave does not succeed", base(func(in *RolloutStepInput) { lastSettled(in); in.State = RolloutPaused }),
			RolloutDecision{WaveSettled: true, Wait: WaitPaused, Recheck: deadline, Reason: "The rollout is paused."}},
		{"aborting waits for operations", base(func(in *RolloutStepInput) { in.State, in.Outstanding = RolloutAborting, 4 }),
			RolloutDecision{Wait: WaitAborting, Reason: "The abort waits for 4 member operations to end."}},
		{"aborting finishes", base(func(in *RolloutStepInput) { in.State = RolloutAborting }),
			RolloutDecision{To: RolloutAborted, Cause: RolloutCauseRevertFinished, Reason: "The abort finished."}},
		{"an ended rollout does nothing", base(func(in *RolloutStepInput) { in.State = RolloutCancelled }), RolloutDecision{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecideRolloutStep(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			if got.To != "" {
				assert.NoError(t, CheckRolloutMove(tt.in.State, got.To, got.Cause), "the decided move is in the table")
			}
			switch {
			case got.To == RolloutPaused:
				require.NotNil(t, got.Waiting, "a pause says why")
				assert.Equal(t, string(got.Cause), string(got.Waiting.Reason), "a pause's waiting is its cause")
			case got.Wait == WaitPaused || got.Wait == WaitAborting || got.Wait == "":
				assert.Nil(t, got.Waiting, "a paused rollout keeps its pause's waiting; nothing else waits")
			default:
				require.NotNil(t, got.Waiting, "a running rollout that starts nothing says why")
				assert.Equal(t, got.Reason, got.Waiting.Message)
			}
			if got.Wait != "" && got.Wait != WaitAborting {
				assert.False(t, got.Recheck.IsZero(), "a wait of a running or paused rollout has a recheck")
				assert.False(t, got.Recheck.After(tt.in.Deadline), "Recheck %s after the deadline %s", got.Recheck, tt.in.Deadline)
			}
		})
	}
}

// TestDecideRolloutStepCanary walks a canary that fails: the rollout stops
// before wave 2 publishes anything.
func TestDecideRolloutStepCanary(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	in := RolloutStepInput{Now: now, State: RolloutRunning, Deadline: now.Add(time.Hour), Waves: DefaultWaves(),
		Counts: []WaveCounts{{Pending: 1}, {Pending: 10}, {Pending: 89}}, MaxInFlight: 50, OnThreshold: OnThresholdPause}
	d, err := DecideRolloutStep(in)
	require.NoError(t, err)
	require.Equal(t, 1, d.Publish)
	in.Counts[0] = WaveCounts{InProgress: 1}
	d, err = DecideRolloutStep(in)
	require.NoError(t, err)
	require.Equal(t, WaitInFlight, d.Wait)
	in.Counts[0] = WaveCounts{Failed: 1}
	d, err = DecideRolloutStep(in)
	require.NoError(t, err)
	assert.Equal(t, RolloutPaused, d.To)
	assert.Equal(t, ThresholdMaxFailures, d.Breach.Rule)
	assert.Zero(t, d.Publish)
	assert.False(t, d.NextWave)
}

func TestDecideRolloutStepBadInput(t *testing.T) {
	for _, in := range []RolloutStepInput{
		{State: RolloutRunning, Waves: DefaultWaves(), Counts: make([]WaveCounts, 2)},
		{State: RolloutRunning, Waves: DefaultWaves(), Counts: make([]WaveCounts, 3), Wave: 3},
		{State: RolloutRunning, Waves: DefaultWaves(), Counts: make([]WaveCounts, 3), Wave: -1},
	} {
		_, err := DecideRolloutStep(in)
		assert.Equal(t, EINTERNAL, ErrorCode(err))
	}
}

// TestDecideRolloutStepCanaryVanishes walks a canary whose only member is
// excluded while its operation waits for a device that never contacts
// wfm: the wave says what it waits for, then pauses the rollout
// (wave-emptied) instead of passing; resumed, it passes and wave 2 starts.
func TestDecideRolloutStepCanaryVanishes(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	in := RolloutStepInput{Now: now, State: RolloutRunning, Deadline: now.Add(time.Hour), Waves: []Wave{{Size: CountOf(1), MinSuccess: 100, MaxFailures: PercentOf(0)},
		{Size: PercentOf(100), MinSuccess: 100, MaxFailures: PercentOf(0)}}, Counts: []WaveCounts{{Pending: 1}, {Pending: 5}}, MaxInFlight: 50}
	d, err := DecideRolloutStep(in)
	require.NoError(t, err)
	require.Equal(t, 1, d.Publish)

	in.Counts[0] = WaveCounts{InProgress: 1}
	in.Oldest = &WaitingMember{DeploymentID: "dep", ClientID: "c", DeviceID: "d", Since: now}
	d, err = DecideRolloutStep(in)
	require.NoError(t, err)
	require.NotNil(t, d.Waiting)
	assert.Equal(t, WaitingMembersInProgress, d.Waiting.Reason)
	assert.Equal(t, 1, d.Waiting.Count)
	assert.Equal(t, in.Oldest, d.Waiting.Oldest)
	assert.Contains(t, d.Waiting.Message, "never contacted")

	in.Counts[0], in.Oldest = WaveCounts{Excluded: 1}, nil
	d, err = DecideRolloutStep(in)
	require.NoError(t, err)
	assert.Equal(t, RolloutPaused, d.To)
	assert.Equal(t, RolloutCauseWaveEmptied, d.Cause)
	assert.False(t, d.NextWave, "wave 2 does not start unnoticed")
	assert.Zero(t, d.Publish)
	require.True(t, d.WaveSettled)

	in.State, in.WaveSettledAt = RolloutPaused, now
	d, err = DecideRolloutStep(in)
	require.NoError(t, err)
	assert.Equal(t, WaitPaused, d.Wait, "paused, it waits for resume or abort")

	require.True(t, ResumeAcceptsWave(RolloutCauseWaveEmptied))
	in.State, in.WaveAccepted = RolloutRunning, true
	d, err = DecideRolloutStep(in)
	require.NoError(t, err)
	assert.True(t, d.NextWave, "resumed, the emptied wave passes")
	assert.NoError(t, CheckRolloutMove(RolloutPaused, RolloutAborting, RolloutCauseOperatorAborted), "abort works as usual")
}

func TestWaveCountsEmptied(t *testing.T) {
	tests := []struct {
		c           WaveCounts
		total       int
		wantEmptied bool
	}{
		{WaveCounts{}, 0, false}, // no member: nothing left it
		{WaveCounts{Excluded: 1}, 1, true},
		{WaveCounts{Removed: 2, Cancelled: 1, Excluded: 1}, 4, true},
		{WaveCounts{Excluded: 1, Pending: 1}, 2, false},
		{WaveCounts{Excluded: 1, InProgress: 1}, 2, false},
		{WaveCounts{Excluded: 1, Succeeded: 1}, 2, false},
		{WaveCounts{Excluded: 1, Failed: 1}, 2, false},
		{WaveCounts{Excluded: 1, Reverted: 1}, 2, false},
		{WaveCounts{Excluded: 1, NotReverted: 1}, 2, false},
		{WaveCounts{1, 1, 1, 1, 1, 1, 1, 1, 1}, 9, false},
	}
	for _, tt := range tests {
		if got := tt.c.Total(); got != tt.total {
			t.Errorf("%+v.Total() = %d, want %d", tt.c, got, tt.total)
		}
		if got := tt.c.Emptied(); got != tt.wantEmptied {
			t.Errorf("%+v.Emptied() = %v, want %v", tt.c, got, tt.wantEmptied)
		}
	}
}

// TestPausedWaitingAndResume checks, for every cause, the waiting of a
// pause for it and whether resuming accepts the wave.
func TestPausedWaitingAndResume(t *testing.T) {
	wantReason := map[RolloutCause]WaitingReason{
		RolloutCauseApprovalRequired:  WaitingApprovalRequired,
		RolloutCauseThresholdExceeded: WaitingThresholdExceeded,
		RolloutCauseWaveEmptied:       WaitingWaveEmptied,
		RolloutCauseOperatorPaused:    WaitingOperatorPaused,
	}
	accepts := map[RolloutCause]bool{RolloutCauseThresholdExceeded: true, RolloutCauseWaveEmptied: true}
	for _, c := range AllRolloutCauses() {
		if slices.Contains(RolloutCauses(RolloutRunning, RolloutPaused), c) {
			w := PausedWaiting(c, "why")
			if want := wantReason[c]; w.Reason != want || w.Message != "why" || !w.Until.IsZero() || w.Count != 0 || w.Oldest != nil {
				t.Errorf("PausedWaiting(%s) = %+v, want reason %s", c, w, want)
			}
			if !slices.Contains(AllWaitingReasons(), w.Reason) {
				t.Errorf("PausedWaiting(%s).Reason = %s, not a waiting reason", c, w.Reason)
			}
		}
		if got := ResumeAcceptsWave(c); got != accepts[c] {
			t.Errorf("ResumeAcceptsWave(%s) = %v, want %v", c, got, accepts[c])
		}
	}
}
