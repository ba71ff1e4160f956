package lifecycle

import (
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

	tests := []struct {
		name string
		in   RolloutStepInput
		want RolloutDecision
	}{
		{"publish up to maxInFlight", base(nil), RolloutDecision{Publish: 2, Reason: "Wave 2: 2 more members start."}},
		{"publish what is pending", base(func(in *RolloutStepInput) { in.MaxInFlight = 100 }), RolloutDecision{Publish: 5, Reason: "Wave 2: 5 more members start."}},
		{"in flight everywhere counts", base(func(in *RolloutStepInput) { in.Counts[0].InProgress = 2 }),
			RolloutDecision{Wait: WaitInFlight, Recheck: deadline, Reason: "5 member operations in flight (maxInFlight 5); 5 members of wave 2 wait."}},
		{"nothing pending waits for the wave", base(func(in *RolloutStepInput) { in.Counts[1] = WaveCounts{Succeeded: 7, InProgress: 3} }),
			RolloutDecision{Wait: WaitInFlight, Recheck: deadline, Reason: "Wave 2: 3 member operations in flight."}},
		{"maxFailures as results arrive, pause", base(func(in *RolloutStepInput) { in.Counts[1].Failed = 1 }),
			RolloutDecision{To: RolloutPaused, Cause: RolloutCauseThresholdExceeded, Reason: "Wave 2 exceeded maxFailures: 1 of 11 members failed, 0 allowed.",
				Breach: &ThresholdBreach{Wave: 1, Rule: ThresholdMaxFailures, Counted: 11, Succeeded: 2, Failed: 1}}},
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
			Breach: &ThresholdBreach{Wave: 1, Rule: ThresholdMinSuccess, Counted: 5, Succeeded: 4, Failed: 1, MinSuccess: 100}}},
		{"minSuccess when the wave settles", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Succeeded: 8, Failed: 2}
			in.Waves[1].MaxFailures, in.Waves[1].MinSuccess = CountOf(5), 90
			in.WaveSettledAt = now.Add(-time.Minute)
		}), RolloutDecision{To: RolloutPaused, Cause: RolloutCauseThresholdExceeded, Reason: "Wave 2 missed minSuccess: 8 of 10 members succeeded, 90% required.",
			Breach: &ThresholdBreach{Wave: 1, Rule: ThresholdMinSuccess, Counted: 10, Succeeded: 8, Failed: 2, MinSuccess: 90}}},
		{"minSuccess is not checked before the wave settles", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Failed: 2, Pending: 8}
			in.Waves[1].MaxFailures, in.Waves[1].MinSuccess = CountOf(5), 90
		}), RolloutDecision{Publish: 5, Reason: "Wave 2: 5 more members start."}},
		{"an accepted threshold is not checked again", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Succeeded: 5, Failed: 5}
			in.ThresholdAccepted, in.WaveSettledAt = true, now.Add(-2*time.Hour)
		}), RolloutDecision{NextWave: true, Reason: "Wave 2 passed."}},
		{"a settled wave records the instant and soaks", base(settled),
			RolloutDecision{WaveSettled: true, Wait: WaitSoak, Recheck: now.Add(time.Hour), Reason: "Wave 2 settled; its soak runs until 2026-12-01T13:00:00Z."}},
		{"a soak past the deadline rechecks at the deadline", base(func(in *RolloutStepInput) { settled(in); in.Deadline = now.Add(time.Minute) }),
			RolloutDecision{WaveSettled: true, Wait: WaitSoak, Recheck: now.Add(time.Minute), Reason: "Wave 2 settled; its soak runs until 2026-12-01T13:00:00Z."}},
		{"after the soak the next wave", base(func(in *RolloutStepInput) { settled(in); in.WaveSettledAt = now.Add(-time.Hour) }),
			RolloutDecision{NextWave: true, Reason: "Wave 2 passed."}},
		{"a wave with no counted member passes", base(func(in *RolloutStepInput) {
			in.Counts[1] = WaveCounts{Excluded: 10}
			in.Waves[1].Soak = 0
		}), RolloutDecision{WaveSettled: true, NextWave: true, Reason: "Wave 2 passed."}},
		{"a manual wave pauses for approval", base(func(in *RolloutStepInput) { in.Waves[1].Approval = ApprovalManual }),
			RolloutDecision{To: RolloutPaused, Cause: RolloutCauseApprovalRequired, Reason: "Wave 2 needs approval (approve) before it starts."}},
		{"an approved manual wave publishes", base(func(in *RolloutStepInput) { in.Waves[1].Approval, in.WaveApproved = ApprovalManual, true }),
			RolloutDecision{Publish: 2, Reason: "Wave 2: 2 more members start."}},
		{"outside the window", base(func(in *RolloutStepInput) { in.Window = utc }),
			RolloutDecision{Wait: WaitWindow, Recheck: now.Add(10 * time.Hour), Reason: "Outside the window 22:00-04:00 UTC until 2026-12-01T22:00:00Z."}},
		{"inside the window", base(func(in *RolloutStepInput) { in.Window, in.Now = utc, now.Add(11*time.Hour) }),
			RolloutDecision{Publish: 2, Reason: "Wave 2: 2 more members start."}},
		{"the last wave passed succeeds", base(lastSettled), RolloutDecision{To: RolloutSucceeded, Cause: RolloutCauseCompleted, WaveSettled: true, Reason: "Every wave passed."}},
		{"the last wave passed succeeds even past the deadline", base(func(in *RolloutStepInput) { lastSettled(in); in.Now = deadline.Add(time.Hour) }),
			RolloutDecision{To: RolloutSucceeded, Cause: RolloutCauseCompleted, WaveSettled: true, Reason: "Every wave passed."}},
		{"the last wave soaks before it succeeds", base(func(in *RolloutStepInput) { lastSettled(in); in.Waves[2].Soak = time.Hour }),
			RolloutDecision{WaveSettled: true, Wait: WaitSoak, Recheck: now.Add(time.Hour), Reason: "Wave 3 settled; its soak runs until 2026-12-01T13:00:00Z."}},
		{"the last wave's soak still runs", base(func(in *RolloutStepInput) {
			lastSettled(in)
			in.Waves[2].Soak, in.WaveSettledAt = time.Hour, now.Add(-59*time.Minute)
		}), RolloutDecision{Wait: WaitSoak, Recheck: now.Add(time.Minute), Reason: "Wave 3 settled; its soak runs until 2026-12-01T12:01:00Z."}},
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
