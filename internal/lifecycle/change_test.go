package lifecycle

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var changeAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func dep(state State, rev, installed int) Deployment {
	return Deployment{ID: "d1", ClientID: "c1", DeviceID: "dev1", ApplicationID: "app", State: state,
		Revision: rev, InstalledRevision: installed, LastRevision: rev, Version: "1.0.0"}
}

func op(state OperationState, steps ...StepState) *Operation {
	o := &Operation{ID: "op1", Kind: OperationUpgrade, State: state}
	for i, s := range steps {
		o.Steps = append(o.Steps, Step{N: i + 1, State: s, Version: "2.0.0"})
	}
	return o
}

func removal(d Deployment, active *Operation) RemoveInput {
	return RemoveInput{Deployment: d, Active: active, OperationID: "op-remove", Deadline: changeAt.Add(DefaultRemoveTimeout)}
}

// TestChangeDecisions drives every kind of change and checks the state
// moves, the manifest effect and exactly the events each records.
func TestChangeDecisions(t *testing.T) {
	tests := []struct {
		name     string
		decide   func() (*Change, error)
		moves    [][2]State
		manifest bool
		events   []EventType
		wantErr  Code
	}{
		{"create", func() (*Change, error) {
			return DecideCreate(CreateInput{Deployment: dep("", 0, 0), Revision: NewRevision{Version: "1.0.0"}, Device: DeviceRegistered,
				OperationID: "op-install", Deadline: changeAt.Add(DefaultInstallTimeout)}, changeAt, "alice")
		}, [][2]State{{"", StatePending}}, true, []EventType{EventOperationCreated, EventDeploymentStateChanged, EventOperationStarted,
			EventOperationStepPublished, EventRevisionPublished}, ""},
		{"create yanked", func() (*Change, error) {
			return DecideCreate(CreateInput{Deployment: dep("", 0, 0), Device: DeviceRegistered, Yanked: true}, changeAt, "alice")
		}, nil, false, nil, EINVALID},
		{"create retired client", func() (*Change, error) {
			return DecideCreate(CreateInput{Deployment: dep("", 0, 0), Device: DeviceRegistered, ClientRetired: true}, changeAt, "alice")
		}, nil, false, nil, EINVALID},
		{"create on a missing device", func() (*Change, error) {
			return DecideCreate(CreateInput{Deployment: dep("", 0, 0)}, changeAt, "alice")
		}, nil, false, nil, ENOTFOUND},
		{"create on an unregistered device", func() (*Change, error) {
			return DecideCreate(CreateInput{Deployment: dep("", 0, 0), Device: DeviceUnregistered}, changeAt, "alice")
		}, nil, false, nil, EINVALID},
		{"report changes state", func() (*Change, error) {
			return DecideReport(dep(StatePending, 1, 0), Decision{Next: StateInstalled, Changed: true, Reason: "runs"}, changeAt, "c1")
		}, [][2]State{{StatePending, StateInstalled}}, false, []EventType{EventDeploymentStateChanged}, ""},
		{"report changes nothing", func() (*Change, error) {
			return DecideReport(dep(StateInstalled, 1, 1), Decision{Next: StateInstalled}, changeAt, "c1")
		}, nil, false, nil, ""},
		{"remove", func() (*Change, error) {
			return DecideRemove(removal(dep(StateInstalled, 1, 1), nil), changeAt, "alice")
		},
			[][2]State{{StateInstalled, StateRemoving}}, true, []EventType{EventOperationCreated, EventDeploymentStateChanged, EventOperationStarted}, ""},
		{"remove during an install", func() (*Change, error) {
			return DecideRemove(removal(dep(StatePending, 1, 0), op(OperationRunning, StepPublished)), changeAt, "alice")
		}, [][2]State{{StatePending, StateRemoving}}, true,
			[]EventType{EventOperationCancelled, EventOperationCreated, EventDeploymentStateChanged, EventOperationStarted}, ""},
		{"remove after the install was reached", func() (*Change, error) {
			o := op(OperationRunning, StepPublished)
			o.Steps[0].Revision = 1
			return DecideRemove(removal(dep(StateInstalled, 1, 1), o), changeAt, "alice")
		}, [][2]State{{StateInstalled, StateRemoving}}, true,
			[]EventType{EventOperationSucceeded, EventOperationCreated, EventDeploymentStateChanged, EventOperationStarted}, ""},
		{"settle a reached operation", func() (*Change, error) {
			c := NewChange(dep(StateInstalled, 2, 2), changeAt, "alice")
			o := op(OperationRunning, StepInstalled, StepPublished)
			o.Steps[1].Revision = 2
			return c, c.SettleOperation(o)
		}, nil, false, []EventType{EventOperationSucceeded}, ""},
		{"settle refused before the device installed", func() (*Change, error) {
			c := NewChange(dep(StateUpgrading, 2, 1), changeAt, "alice")
			o := op(OperationRunning, StepPublished)
			o.Steps[0].Revision = 2
			return c, c.SettleOperation(o)
		}, nil, false, nil, EINTERNAL},
		{"remove while removing", func() (*Change, error) {
			d := dep(StateRemoving, 1, 1)
			d.Removing = true
			return DecideRemove(removal(d, op(OperationRunning)), changeAt, "alice")
		}, nil, false, nil, ""},
		{"remove again after the removal failed", func() (*Change, error) {
			d := dep(StateFailed, 1, 1)
			d.Removing = true
			return DecideRemove(removal(d, nil), changeAt, "alice")
		}, [][2]State{{StateFailed, StateRemoving}}, false, []EventType{EventOperationCreated, EventDeploymentStateChanged, EventOperationStarted}, ""},
		{"remove removed", func() (*Change, error) { return DecideRemove(removal(dep(StateRemoved, 1, 1), nil), changeAt, "alice") },
			nil, false, nil, ECONFLICT},
		{"upgrade publish", func() (*Change, error) {
			c := NewChange(dep(StateInstalled, 1, 1), changeAt, ActorScheduler)
			return c, c.PublishStep(op(OperationQueued, StepPending), 1, NewRevision{Version: "2.0.0", Kind: OperationUpgrade})
		}, [][2]State{{StateInstalled, StatePending}}, true,
			[]EventType{EventDeploymentStateChanged, EventOperationStarted, EventOperationStepPublished, EventRevisionPublished}, ""},
		{"publish refused while under way", func() (*Change, error) {
			c := NewChange(dep(StateUpgrading, 2, 1), changeAt, ActorScheduler)
			return c, c.PublishStep(op(OperationRunning, StepPending), 1, NewRevision{Version: "2.0.0", Kind: OperationUpgrade})
		}, nil, false, nil, ECONFLICT},
		{"step installed, next published", func() (*Change, error) {
			c := NewChange(dep(StateInstalled, 2, 2), changeAt, ActorScheduler)
			o := op(OperationRunning, StepPublished, StepPending)
			if err := c.InstallStep(o, 1); err != nil {
				return c, err
			}
			return c, c.PublishStep(o, 2, NewRevision{Version: "3.0.0", Kind: OperationUpgrade})
		}, [][2]State{{StateInstalled, StatePending}}, true,
			[]EventType{EventDeploymentStateChanged, EventOperationStepPublished, EventRevisionPublished}, ""},
		{"succeed", func() (*Change, error) {
			c := NewChange(dep(StateInstalled, 2, 2), changeAt, ActorScheduler)
			o := op(OperationRunning, StepPublished)
			if err := c.InstallStep(o, 1); err != nil {
				return c, err
			}
			return c, c.SucceedOperation(o, "2.0.0")
		}, nil, false, []EventType{EventOperationSucceeded}, ""},
		{"fail by deadline", func() (*Change, error) {
			c := NewChange(dep(StateUpgrading, 2, 1), changeAt, ActorScheduler)
			return c, c.FailOperation(op(OperationRunning, StepPublished), "timeout", true, false)
		}, [][2]State{{StateUpgrading, StateFailed}}, false, []EventType{EventOperationFailed, EventDeploymentStateChanged}, ""},
		{"fail without failing the deployment", func() (*Change, error) {
			c := NewChange(dep(StateInstalled, 2, 1), changeAt, ActorScheduler)
			return c, c.FailOperation(op(OperationRunning, StepPublished), "superseded", false, false)
		}, nil, false, []EventType{EventOperationFailed}, ""},
		{"cancel by operator with a published step", func() (*Change, error) {
			c := NewChange(dep(StatePending, 2, 1), changeAt, "alice")
			return c, c.CancelOperation(op(OperationRunning, StepPublished), "cancelled", true)
		}, [][2]State{{StatePending, StateFailed}}, false, []EventType{EventOperationCancelled, EventDeploymentStateChanged}, ""},
		{"cancel queued", func() (*Change, error) {
			c := NewChange(dep(StateInstalled, 1, 1), changeAt, "alice")
			return c, c.CancelOperation(op(OperationQueued, StepPending), "cancelled", true)
		}, nil, false, []EventType{EventOperationCancelled}, ""},
		{"cancel because removed", func() (*Change, error) {
			d := dep(StateRemoving, 2, 1)
			d.Removing = true
			c := NewChange(d, changeAt, ActorScheduler)
			return c, c.CancelOperation(op(OperationRunning, StepPublished), "deployment-removed", false)
		}, nil, false, []EventType{EventOperationCancelled}, ""},
		{"cancel ended", func() (*Change, error) {
			c := NewChange(dep(StateInstalled, 1, 1), changeAt, "alice")
			return c, c.CancelOperation(op(OperationSucceeded, StepInstalled), "cancelled", true)
		}, nil, false, nil, ECONFLICT},
		{"revert after drain timeout", func() (*Change, error) {
			c := NewChange(dep(StateDraining, 2, 1), changeAt, ActorScheduler)
			o := op(OperationRunning, StepPublished)
			if err := c.RevertAfterDrainTimeout(o, NewRevision{Version: "1.0.0", Kind: OperationInstall}, "drain-timeout"); err != nil {
				return c, err
			}
			return c, c.FailOperation(o, "drain-timeout", false, false)
		}, [][2]State{{StateDraining, StateInstalled}}, true,
			[]EventType{EventDeploymentStateChanged, EventRevisionPublished, EventOperationFailed}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.decide()
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tt.wantErr, ErrorCode(err))
				return
			}
			require.NoError(t, err)
			var moves [][2]State
			for _, m := range c.Moves {
				moves = append(moves, [2]State{m.From, m.To})
				if m.From != "" {
					assert.True(t, CanTransition(m.From, m.To), "move %v", m)
				}
			}
			assert.Equal(t, tt.moves, moves)
			assert.Equal(t, tt.manifest, c.Manifest)
			assert.Equal(t, tt.events, nilIfEmpty(c.EventTypes()))
			evs, err := c.Events(7)
			require.NoError(t, err)
			for _, e := range evs {
				assert.Equal(t, changeAt, e.At)
				if e.Type == EventRevisionPublished {
					assert.Contains(t, string(e.Body), `"manifestVersion":7`)
				}
			}
			for _, m := range c.Operations {
				if m.From != "" {
					assert.True(t, m.From.CanTransitionTo(m.To), "operation move %v", m)
				}
			}
		})
	}
}

func nilIfEmpty(ts []EventType) []EventType {
	if len(ts) == 0 {
		return nil
	}
	return ts
}

func TestRevertAppendsARevision(t *testing.T) {
	c := NewChange(dep(StateDraining, 2, 1), changeAt, ActorScheduler)
	require.NoError(t, c.RevertAfterDrainTimeout(op(OperationRunning, StepPublished), NewRevision{Version: "1.0.0"}, "drain-timeout"))
	require.NotNil(t, c.Revision)
	assert.Equal(t, 3, c.Revision.N, "a new revision, not the old one")
	assert.Equal(t, 1, c.Revision.CopyOf)
	assert.Equal(t, 3, c.After.Revision)
	assert.Equal(t, 3, c.After.InstalledRevision)
	assert.True(t, slices.ContainsFunc(c.Outcomes, func(m OutcomeMove) bool { return m.Revision == 2 && m.To == OutcomeFailed }))
}

func TestDecideUnregister(t *testing.T) {
	cs, err := DecideUnregister("c1", "dev1", []Deployment{dep(StateInstalled, 1, 1), dep(StateFailed, 2, 1)}, changeAt, "c1")
	require.NoError(t, err)
	require.Len(t, cs, 2)
	assert.Equal(t, []EventType{EventDeploymentStateChanged}, cs[0].EventTypes())
	assert.Equal(t, []EventType{EventDeploymentStateChanged, EventDeviceUnregistered}, cs[1].EventTypes())
	none, err := DecideUnregister("c1", "dev1", nil, changeAt, "c1")
	require.NoError(t, err)
	require.Len(t, none, 1)
	assert.Equal(t, []EventType{EventDeviceUnregistered}, none[0].EventTypes())
	assert.True(t, none[0].Manifest)
}
