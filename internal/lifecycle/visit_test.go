package lifecycle

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecideVisit(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	later, earlier := now.Add(time.Hour), now.Add(-time.Hour)
	abort := &DrainPolicy{Required: true, Timeout: 10 * time.Minute, OnTimeout: OnTimeoutAbort}
	proceed := &DrainPolicy{Required: true, Timeout: 10 * time.Minute, OnTimeout: OnTimeoutProceed}
	v1, v2 := MustParseVersion("1.0.0"), MustParseVersion("2.0.0")
	lasting := Errorf(EINVALID, "no profile fits")
	passing := Errorf(EUNAVAILABLE, "database away")

	// base: step 1 of 2 published as revision 5 five minutes ago; the
	// deployment is installing it; the deadline is in an hour.
	base := func(f func(*VisitInput)) VisitInput {
		in := VisitInput{Now: now, OpState: OperationRunning, Deadline: later, Steps: 2,
			Current:         &VisitStep{N: 1, State: StepPublished, Revision: 5, PublishedAt: now.Add(-5 * time.Minute)},
			DeploymentState: StateInstalling, Revision: 5, InstalledRevision: 4}
		if f != nil {
			f(&in)
		}
		return in
	}
	pending := func(in *VisitInput) { in.Current.State, in.Current.Revision, in.Revision = StepPending, 0, 4 }
	failedRollback := func(in *VisitInput) {
		in.DeploymentState, in.StateReason, in.AutoRollback = StateFailed, "image pull", true
		in.Rollback = AutoRollbackFacts{Target: 4, Found: true, TargetVersion: v1, FailedVersion: v2, Policy: RollbackPolicy{Allowed: true}}
	}

	tests := []struct {
		name    string
		in      VisitInput
		want    VisitDecision
		wantErr error
	}{
		{"every step installed succeeds", base(func(in *VisitInput) { in.Current = nil }), VisitDecision{Finish: OperationSucceeded}, nil},
		{"a removed deployment cancels", base(func(in *VisitInput) { in.Removing = true }), VisitDecision{Finish: OperationCancelled, Reason: "deployment-removed"}, nil},
		{"a pending step is published", base(func(in *VisitInput) { pending(in); in.Publish = Prepared{Drain: abort} }),
			VisitDecision{Publish: true, PublishDrain: abort}, nil},
		{"a queued operation past its deadline fails", base(func(in *VisitInput) { pending(in); in.OpState, in.Deadline = OperationQueued, earlier }),
			VisitDecision{Finish: OperationFailed, Reason: "timeout: the operation could not start before its deadline"}, nil},
		{"a step that cannot be rendered fails", base(func(in *VisitInput) { pending(in); in.Publish.Err = lasting }),
			VisitDecision{Finish: OperationFailed, Reason: "cannot publish: invalid: no profile fits"}, nil},
		{"a database hiccup is retried", base(func(in *VisitInput) { pending(in); in.Publish.Err = passing }), VisitDecision{}, passing},
		{"an installed step is not visited again", base(func(in *VisitInput) { in.Current.State = StepInstalled }), VisitDecision{Recheck: later}, nil},
		{"a superseded revision fails", base(func(in *VisitInput) { in.Revision = 6 }),
			VisitDecision{Finish: OperationFailed, Reason: "superseded: the deployment's desired revision changed"}, nil},
		{"the last step installed succeeds", base(func(in *VisitInput) { in.Current.N, in.DeploymentState = 2, StateInstalled }),
			VisitDecision{StepInstalled: 2, Finish: OperationSucceeded}, nil},
		{"an installed hop publishes the next", base(func(in *VisitInput) { in.DeploymentState, in.Publish = StateInstalled, Prepared{Drain: proceed} }),
			VisitDecision{StepInstalled: 1, Publish: true, PublishDrain: proceed}, nil},
		{"an installed hop whose next step cannot be rendered", base(func(in *VisitInput) { in.DeploymentState, in.Publish.Err = StateInstalled, lasting }),
			VisitDecision{StepInstalled: 1, Finish: OperationFailed, Reason: "cannot publish: invalid: no profile fits"}, nil},
		{"an installed hop, next step hit by a hiccup", base(func(in *VisitInput) { in.DeploymentState, in.Publish.Err = StateInstalled, passing }),
			VisitDecision{StepInstalled: 1}, passing},
		{"a device failure fails", base(func(in *VisitInput) { in.DeploymentState, in.StateReason = StateFailed, "image pull" }),
			VisitDecision{Finish: OperationFailed, Reason: "device-failed: image pull"}, nil},
		{"a device failure rolls back", base(failedRollback),
			VisitDecision{Finish: OperationFailed, Reason: "device-failed: image pull", RollBackTo: 4}, nil},
		{"no rollback where the policy refuses", base(func(in *VisitInput) { failedRollback(in); in.Rollback.Policy.Allowed = false }),
			VisitDecision{Finish: OperationFailed, Reason: "device-failed: image pull; no automatic rollback: " + mustRollbackErr(t, v2, v1, now)}, nil},
		{"no rollback where the policy cannot be read", base(func(in *VisitInput) { failedRollback(in); in.Rollback.PolicyErr = errors.New("gone") }),
			VisitDecision{Finish: OperationFailed, Reason: "device-failed: image pull; no automatic rollback: gone"}, nil},
		{"a rollback forward needs no policy", base(func(in *VisitInput) {
			failedRollback(in)
			in.Rollback.TargetVersion, in.Rollback.FailedVersion, in.Rollback.Policy = v2, v1, RollbackPolicy{}
		}), VisitDecision{Finish: OperationFailed, Reason: "device-failed: image pull", RollBackTo: 4}, nil},
		{"no rollback without its revisions", base(func(in *VisitInput) { failedRollback(in); in.Rollback.Found = false }),
			VisitDecision{Finish: OperationFailed, Reason: "device-failed: image pull"}, nil},
		{"no rollback unless asked", base(func(in *VisitInput) { failedRollback(in); in.AutoRollback = false }),
			VisitDecision{Finish: OperationFailed, Reason: "device-failed: image pull"}, nil},
		{"a drain that cannot be read is retried", base(func(in *VisitInput) { in.Drain.Err = passing }), VisitDecision{}, passing},
		{"a drain timeout reverts to the installed revision", base(func(in *VisitInput) {
			in.DeploymentState, in.Drain.Drain, in.Current.PublishedAt = StateDraining, abort, now.Add(-11*time.Minute)
		}), VisitDecision{Finish: OperationFailed, Reason: "drain-timeout", RevertTo: 4}, nil},
		{"a drain timeout with nothing installed fails the deployment", base(func(in *VisitInput) {
			in.DeploymentState, in.Drain.Drain, in.Current.PublishedAt, in.InstalledRevision = StateDraining, abort, now.Add(-11*time.Minute), 0
		}), VisitDecision{Finish: OperationFailed, Reason: "drain-timeout", FailDeployment: true}, nil},
		{"a drain within its timeout waits until its timeout", base(func(in *VisitInput) { in.DeploymentState, in.Drain.Drain = StateDraining, abort }),
			VisitDecision{Recheck: now.Add(5 * time.Minute)}, nil},
		{"a drain timeout after the deadline waits until the deadline", base(func(in *VisitInput) {
			in.DeploymentState, in.Drain.Drain, in.Deadline = StateDraining, abort, now.Add(time.Minute)
		}), VisitDecision{Recheck: now.Add(time.Minute)}, nil},
		{"a drain at its timeout instant still waits", base(func(in *VisitInput) {
			in.DeploymentState, in.Drain.Drain, in.Current.PublishedAt = StateDraining, abort, now.Add(-10*time.Minute)
		}), VisitDecision{Recheck: now}, nil},
		{"an installing device is not timed out by a drain", base(func(in *VisitInput) { in.Drain.Drain = abort }), VisitDecision{Recheck: later}, nil},
		{"a drained device is not timed out by its drain", base(func(in *VisitInput) {
			in.DeploymentState, in.Drain.Drain, in.Current.PublishedAt, in.Drained = StateDraining, abort, now.Add(-11*time.Minute), true
		}), VisitDecision{Recheck: later}, nil},
		{"a drain that proceeds waits for the deadline", base(func(in *VisitInput) {
			in.DeploymentState, in.Drain.Drain, in.Current.PublishedAt = StateDraining, proceed, now.Add(-11*time.Minute)
		}), VisitDecision{Recheck: later}, nil},
		{"a drain past the deadline", base(func(in *VisitInput) {
			in.DeploymentState, in.Drain.Drain, in.Deadline = StateDraining, proceed, earlier
		}),
			VisitDecision{Finish: OperationFailed, Reason: "drain-timeout", FailDeployment: true}, nil},
		{"a silent device fails at the deadline", base(func(in *VisitInput) { in.Deadline = earlier }),
			VisitDecision{Finish: OperationFailed, Reason: "timeout", FailDeployment: true}, nil},
		{"a deadline rolls back", base(func(in *VisitInput) { failedRollback(in); in.DeploymentState, in.Deadline = StateInstalling, earlier }),
			VisitDecision{Finish: OperationFailed, Reason: "timeout", FailDeployment: true, RollBackTo: 4}, nil},
		{"a step in progress waits until the deadline", base(nil), VisitDecision{Recheck: later}, nil},
		{"a silent device at its deadline instant still waits", base(func(in *VisitInput) { in.Deadline = now }), VisitDecision{Recheck: now}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecideVisit(tt.in)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr, "DecideVisit(%+v) error", tt.in)
			} else {
				require.NoError(t, err, "DecideVisit(%+v)", tt.in)
			}
			assert.Equal(t, tt.want, got, "DecideVisit(%+v)", tt.in)
		})
	}
}

// mustRollbackErr is CheckRollback's refusal of a rollback from installed
// to target that the policy does not allow.
func mustRollbackErr(t *testing.T, installed, target Version, now time.Time) string {
	t.Helper()
	_, err := CheckRollback(RollbackInput{Installed: installed, Now: now, Target: target, ForceRefusal: "automatic rollbacks never override policy"})
	require.Error(t, err)
	return err.Error()
}

func TestRollbackTarget(t *testing.T) {
	tests := []struct{ base, installed, desired, want int }{
		{3, 3, 5, 3}, // the base runs
		{3, 4, 5, 4}, // a hop of the operation runs
		{3, 5, 5, 3}, // the failed revision ran once: back to the base
		{3, 0, 5, 3}, // nothing installed
	}
	for _, tt := range tests {
		if got := RollbackTarget(tt.base, tt.installed, tt.desired); got != tt.want {
			t.Errorf("RollbackTarget(%d, %d, %d) = %d, want %d", tt.base, tt.installed, tt.desired, got, tt.want)
		}
	}
}

func TestDecideRemovalVisit(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		state    State
		deadline time.Time
		want     VisitDecision
	}{
		{"removed", StateRemoved, now.Add(-time.Hour), VisitDecision{Finish: OperationSucceeded}},
		{"the removal failed", StateFailed, now.Add(time.Hour), VisitDecision{Finish: OperationFailed, Reason: "device-failed: boom"}},
		{"a silent device past the deadline", StateRemoving, now.Add(-time.Hour),
			VisitDecision{Finish: OperationFailed, Reason: "timeout: the device did not confirm the removal", FailDeployment: true}},
		{"waiting until the deadline", StateRemoving, now.Add(time.Hour), VisitDecision{Recheck: now.Add(time.Hour)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DecideRemovalVisit(tt.state, "boom", tt.deadline, now); got != tt.want {
				t.Errorf("DecideRemovalVisit(%s) = %+v, want %+v", tt.state, got, tt.want)
			}
		})
	}
}
