package lifecycle

import (
	"fmt"
	"strings"
	"time"
)

// This file holds the decisions of the deployment aggregate (design section
// 12): publishing a revision, applying a report, failing (deadline, cancel),
// reverting after a drain timeout, removing, a removal by unregistration,
// ending an operation. Each is a pure function (or a method on the Change
// being built) that checks the life-cycle tables and returns, as a value,
// everything the store must write in one transaction: state moves with their
// history rows, a new revision, revision-outcome moves, operation and step
// moves, whether the client's manifest changes, and the events to record.
// The store has one applier for such a value and decides nothing itself.

// Causes of deployment state moves, as history and events record them.
const (
	CauseReport             = "report"
	CauseOperation          = "operation"
	CauseDeadline           = "deadline"
	CauseOperator           = "operator"
	CauseDeviceUnregistered = "device-unregistered"
)

// ActorScheduler is the actor of changes the server's scheduler makes.
const ActorScheduler = "wfm"

// Deployment is what a decision needs to know of a deployment as stored.
type Deployment struct {
	ID, ClientID, DeviceID, ApplicationID string
	State                                 State
	// Revision is the desired revision, InstalledRevision the last one the
	// device confirmed (0: none).
	Revision, InstalledRevision int
	// LastRevision is the highest revision number the deployment has; a
	// new revision is LastRevision+1.
	LastRevision int
	Removing     bool
	Version      string // of the desired revision
}

func (d Deployment) ref() Ref { return Ref{Kind: SubjectDeployment, ID: d.ID} }

func (d Deployment) related() []Ref {
	return []Ref{{Kind: SubjectApplication, ID: d.ApplicationID}, {Kind: SubjectClient, ID: d.ClientID}, DeviceRef(d.ClientID, d.DeviceID)}
}

// Operation is what a decision needs to know of an operation.
type Operation struct {
	ID    string
	Kind  OperationKind
	State OperationState
	Steps []Step
}

// Step is what a decision needs to know of an operation step.
type Step struct {
	N        int
	State    StepState
	Revision int
	Version  string
}

// NewRevision is a revision to publish. N is assigned by the decision.
type NewRevision struct {
	N          int
	Version    string
	ProfileID  string
	Parameters map[string]any
	Kind       OperationKind
	Components []string
	YAML       []byte
	// Digest, when set, is YAML's content digest as its renderer computed
	// it (margo.Digest); "": the store computes it from YAML.
	Digest      string
	Strategy    Strategy
	Forced      bool
	ForceReason string
	// OperationID and Step name the operation step that publishes it (""
	// and 0 for a deployment's creation).
	OperationID string
	Step        int
	// CopyOf, when not 0, says the revision repeats that revision of the
	// deployment byte for byte (a revert): the store copies its content,
	// and the fields above are informational.
	CopyOf int
}

// StateMove is one move of a deployment's state: a history row and a
// deployment.state_changed event.
type StateMove struct {
	From, To State
	Cause    string
	Reason   string
	Revision int
}

// OutcomeMove moves revision outcomes. It selects the revision numbered
// Revision, or with Others every other revision of the deployment; of
// those, only the ones whose outcome is one of From move (all of them when
// From is empty).
type OutcomeMove struct {
	Revision int
	Others   bool
	From     []RevisionOutcome
	To       RevisionOutcome
}

// OperationMove moves an operation's state (From "" creates it, queued).
type OperationMove struct {
	ID       string
	From, To OperationState
	Reason   string
}

// StepMove moves steps of an operation: step N, or with N == 0 every step
// whose state is one of From.
type StepMove struct {
	OperationID string
	N           int
	From        []StepState
	To          StepState
	Revision    int // published: the revision that carries the step
}

// Change is one decided change of one deployment (and of its operations).
// Build it with NewChange or a Decide* function and its methods; the store
// applies it as a whole, under the deployment's row lock, in one
// transaction.
type Change struct {
	At    time.Time
	Actor string
	// Before is the deployment as read; After as it is once the change is
	// applied (state, revisions, removing).
	Before, After Deployment
	// Create says the deployment is new: its row is inserted.
	Create bool
	// Moves are the state moves, in order (usually one).
	Moves []StateMove
	// Reason is the deployment's new state reason ("" keeps it).
	Reason string
	// Revision is the revision to publish, if any.
	Revision *NewRevision
	// Outcomes are revision outcome moves, in order.
	Outcomes []OutcomeMove
	// Operations and Steps are operation and step moves, in order.
	Operations []OperationMove
	Steps      []StepMove
	// Manifest says the client's manifest changes (the deployment's desired
	// revision or its presence in the manifest): the store bumps the
	// client's manifest version once and renders the manifest.
	Manifest bool
	// Deadline, when not zero, is the operation's new deadline.
	Deadline time.Time

	events []pendingEvent
}

type pendingEvent struct {
	subject Ref
	body    EventBody
	related []Ref
}

// NewChange starts an empty change of d, decided at at by actor.
func NewChange(d Deployment, at time.Time, actor string) *Change {
	return &Change{At: at, Actor: actor, Before: d, After: d}
}

// Empty reports whether the change writes nothing.
func (c *Change) Empty() bool {
	return !c.Create && len(c.Moves) == 0 && c.Revision == nil && len(c.Outcomes) == 0 && len(c.Operations) == 0 &&
		len(c.Steps) == 0 && !c.Manifest && c.Reason == "" && c.Deadline.IsZero() && c.After == c.Before
}

// DeploymentChanged reports whether the deployment's row changes.
func (c *Change) DeploymentChanged() bool {
	return c.Create || len(c.Moves) > 0 || c.Revision != nil || c.Manifest || c.Reason != "" || c.After != c.Before
}

func (c *Change) event(subject Ref, body EventBody, related ...Ref) {
	c.events = append(c.events, pendingEvent{subject: subject, body: body, related: related})
}

// EventTypes returns the types of the change's events, in order.
func (c *Change) EventTypes() []EventType {
	out := make([]EventType, len(c.events))
	for i, e := range c.events {
		out[i] = e.body.EventType()
	}
	return out
}

// Events returns the change's events; manifestVersion is the client's
// manifest version the store assigned (0 when the manifest does not
// change), which revision.published carries.
//
// Returns EINVALID if an event cannot be built (see NewEvent).
func (c *Change) Events(manifestVersion uint64) ([]Event, error) {
	out := make([]Event, 0, len(c.events))
	for _, p := range c.events {
		body := p.body
		if rp, ok := body.(RevisionPublishedBody); ok {
			rp.ManifestVersion = int64(manifestVersion)
			body = rp
		}
		e, err := NewEvent(c.At, c.Actor, p.subject, body, p.related...)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// move moves the deployment's state, refusing what the table refuses. A
// move to the current state is no move (nil, nothing recorded).
func (c *Change) move(to State, cause, reason, operationID string) error {
	from := c.After.State
	if to == from {
		return nil
	}
	if from != "" && !CanTransition(from, to) {
		return Errorf(EINTERNAL, "deployment %s: %s -> %s is not a transition", c.Before.ID, from, to)
	}
	c.Moves = append(c.Moves, StateMove{From: from, To: to, Cause: cause, Reason: reason, Revision: c.After.Revision})
	c.After.State = to
	c.Reason = reason
	c.event(c.After.ref(), DeploymentStateChangedBody{From: from, To: to, Cause: cause, Message: reason,
		Revision: c.After.Revision, OperationID: operationID}, c.After.related()...)
	return nil
}

func (c *Change) outcome(m OutcomeMove) { c.Outcomes = append(c.Outcomes, m) }

// CreateInput is what deciding a deployment's creation needs.
type CreateInput struct {
	Deployment Deployment // ids; the state is ignored
	Revision   NewRevision
	// Device, Yanked and ClientRetired are read under the locks the
	// creation holds (the device, version and client rows).
	Device                DevicePresence
	Yanked, ClientRetired bool
	// OperationID names the install operation the creation starts, and
	// Deadline is when it fails if the device has not installed revision 1
	// (design section 1.5: nothing waits forever on a silent device).
	OperationID string
	Deadline    time.Time
}

// DevicePresence is what a creation found of its device, under its lock.
type DevicePresence int

// The presences of a device.
const (
	DeviceMissing      DevicePresence = iota // the client has no device of that id
	DeviceRegistered                         // it may be deployed to
	DeviceUnregistered                       // known, but unregistered: it must report its capabilities again
)

// DeviceUnregisteredError is the refusal of a change to an unregistered
// device's deployments (EINVALID, type device-unregistered).
func DeviceUnregisteredError(clientID, deviceID string) error {
	return &Error{Code: EINVALID, Type: "device-unregistered",
		Message: "Device " + deviceID + " of client " + clientID + " is unregistered; it must report its capabilities again first."}
}

// DecideCreate decides a deployment's creation: an install operation of one
// step is created and its step published at once as revision 1 (state
// pending, the operation running). The scheduler ends it like any other
// operation: succeeded when the device installs revision 1, failed at its
// deadline.
//
// Returns ENOTFOUND if the client has no such device, EINVALID
// (device-unregistered) if it is unregistered, EINVALID (version-yanked) if
// the version was yanked, EINVALID (client-retired) if the client is
// retired.
func DecideCreate(in CreateInput, at time.Time, actor string) (*Change, error) {
	d := in.Deployment
	switch in.Device {
	case DeviceRegistered:
	case DeviceUnregistered:
		return nil, DeviceUnregisteredError(d.ClientID, d.DeviceID)
	default:
		return nil, &Error{Code: ENOTFOUND, Type: "not-found", Message: fmt.Sprintf("Client %s has no device %s.", d.ClientID, d.DeviceID)}
	}
	if in.Yanked {
		return nil, &Error{Code: EINVALID, Type: "version-yanked", Message: fmt.Sprintf("Version %s of %s was yanked; it cannot be deployed.", in.Revision.Version, d.ApplicationID)}
	}
	if in.ClientRetired {
		return nil, &Error{Code: EINVALID, Type: "client-retired",
			Message: fmt.Sprintf("Client %s is retired; accept it again before deploying to its devices.", d.ClientID)}
	}
	d.State, d.Revision, d.InstalledRevision, d.LastRevision, d.Removing = "", 0, 0, 0, false
	c := NewChange(d, at, actor)
	c.Create = true
	r := in.Revision
	r.Kind = OperationInstall
	if r.Strategy == "" {
		r.Strategy = StrategyRecreate // a first install replaces nothing
	}
	op := &Operation{ID: in.OperationID, Kind: OperationInstall, State: OperationQueued,
		Steps: []Step{{N: 1, State: StepPending, Version: r.Version}}}
	c.CreateOperation(*op, OperationCreatedBody{Operation: string(OperationInstall), ToVersion: r.Version, Steps: 1, Deadline: in.Deadline})
	if err := c.PublishStep(op, 1, r); err != nil {
		return nil, err
	}
	c.Reason = "Revision 1 published; waiting for the device to adopt it."
	return c, nil
}

// DecideReport turns Decide's decision on one status report into a change
// (cause report). A report that changes no state changes no outcome and
// records no event; the store still stores the report.
//
// Outcomes: installed makes the desired revision active (and supersedes the
// one active before); failed fails the desired revision if it was pending.
func DecideReport(d Deployment, dec Decision, at time.Time, actor string) (*Change, error) {
	c := NewChange(d, at, actor)
	if !dec.Changed {
		return c, nil
	}
	if err := c.move(dec.Next, CauseReport, dec.Reason, ""); err != nil {
		return nil, err
	}
	switch dec.Next {
	case StateInstalled:
		c.After.InstalledRevision = d.Revision
		c.outcome(OutcomeMove{Revision: d.Revision, To: OutcomeActive})
		c.outcome(OutcomeMove{Revision: d.Revision, Others: true, From: []RevisionOutcome{OutcomeActive}, To: OutcomeSuperseded})
	case StateFailed:
		c.outcome(OutcomeMove{Revision: d.Revision, From: []RevisionOutcome{OutcomePending}, To: OutcomeFailed})
	}
	return c, nil
}

// RemoveInput is what deciding a deployment's deletion needs.
type RemoveInput struct {
	Deployment Deployment
	// Active is the deployment's active operation, if any: the removal
	// cancels it.
	Active *Operation
	// OperationID names the remove operation the deletion starts, and
	// Deadline is when it fails if the device has not confirmed the removal.
	OperationID string
	Deadline    time.Time
}

// DecideRemove decides a deployment's deletion: it leaves its client's
// manifest and becomes removing (Publish), and a remove operation (no
// steps: a removal publishes no revision) starts, running at once, with a
// deadline. An active operation (an install, an upgrade) is cancelled in
// the same change (reason deployment-removed): removal always works.
//
// Deleting a deployment being removed changes nothing (an empty change),
// except when its removal failed (state failed while removing: the device
// reported failure, or the removal's deadline passed): then the removal is
// retried, failed → removing with a new remove operation and deadline; the
// manifest does not change, since the deployment already left it.
//
// Returns ECONFLICT (state-conflict) as Publish does.
func DecideRemove(in RemoveInput, at time.Time, actor string) (*Change, error) {
	d := in.Deployment
	c := NewChange(d, at, actor)
	retry := d.Removing && d.State == StateFailed
	if d.Removing && !retry {
		return c, nil
	}
	next, err := Publish(d.State, OperationRemove)
	if err != nil {
		return nil, err
	}
	switch {
	case in.Active != nil && in.Active.Reached(d):
		if err := c.SettleOperation(in.Active); err != nil {
			return nil, err
		}
	case in.Active != nil:
		why := "deployment-removed"
		if retry {
			why = "superseded: the removal was published again"
		}
		if err := c.CancelOperation(in.Active, why, false); err != nil {
			return nil, err
		}
	}
	reason := "Removal published; waiting for the device to remove the workload."
	if retry {
		reason = "Removal retried; waiting for the device to remove the workload."
	} else {
		c.After.Removing, c.Manifest = true, true
	}
	op := &Operation{ID: in.OperationID, Kind: OperationRemove, State: OperationQueued}
	c.CreateOperation(*op, OperationCreatedBody{Operation: string(OperationRemove), FromVersion: d.Version, ToVersion: d.Version, Deadline: in.Deadline})
	if err := c.move(next, CauseOperator, reason, op.ID); err != nil {
		return nil, err
	}
	c.Reason = reason
	return c, c.startOperation(op)
}

// DecideUnregister decides the removal of a device's deployments because the
// device unregistered: each becomes removed (cause device-unregistered) and
// leaves the manifest. The device.unregistered event is the last change's
// (or, with no deployment, the returned lone change's, which then changes
// only the manifest).
func DecideUnregister(clientID, deviceID string, ds []Deployment, at time.Time, actor string) ([]*Change, error) {
	reason := "The device unregistered (DELETE /api/v1/capabilities); its deployments left the manifest."
	out := make([]*Change, 0, len(ds)+1)
	for _, d := range ds {
		c := NewChange(d, at, actor)
		c.After.Removing, c.Manifest = true, true
		if err := c.move(StateRemoved, CauseDeviceUnregistered, reason, ""); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		out = append(out, &Change{At: at, Actor: actor, Manifest: true,
			Before: Deployment{ClientID: clientID}, After: Deployment{ClientID: clientID}})
	}
	last := out[len(out)-1]
	last.event(DeviceRef(clientID, deviceID), DeviceUnregisteredBody{RemovedDeployments: len(ds)},
		Ref{Kind: SubjectClient, ID: clientID})
	return out, nil
}

// CreateOperation records a new operation, queued (operation.created).
func (c *Change) CreateOperation(op Operation, body OperationCreatedBody) {
	c.Operations = append(c.Operations, OperationMove{ID: op.ID, To: OperationQueued})
	related := c.opRelated()
	if id, ok := strings.CutPrefix(c.Actor, "rollout:"); ok && id != "" {
		// A rollout's member operation: filtering by the rollout finds it.
		related = append(related, Ref{Kind: SubjectRollout, ID: id})
	}
	c.event(Ref{Kind: SubjectOperation, ID: op.ID}, body, related...)
}

// opRelated are the related refs of an operation's events: its deployment,
// and the deployment's application, client and device, so that filtering
// the log by any of them finds what happens to the deployment's
// operations.
func (c *Change) opRelated() []Ref { return append([]Ref{c.After.ref()}, c.After.related()...) }

// PublishStep publishes step n of op as a new revision (Publish decides the
// state), supersedes revisions published and never installed, and marks the
// step published; a queued operation starts (operation.started). r.N is
// assigned (LastRevision+1).
//
// Returns ECONFLICT as Publish does, EINTERNAL if the step is not pending.
func (c *Change) PublishStep(op *Operation, n int, r NewRevision) error {
	st := op.step(n)
	if st == nil || !st.State.CanTransitionTo(StepPublished) {
		return Errorf(EINTERNAL, "operation %s: step %d cannot be published", op.ID, n)
	}
	next, err := Publish(c.After.State, r.Kind)
	if err != nil {
		return err
	}
	r.N, r.OperationID, r.Step = c.After.LastRevision+1, op.ID, n
	c.Revision = &r
	c.After.Revision, c.After.LastRevision, c.After.Version = r.N, r.N, r.Version
	c.Manifest = true
	c.outcome(OutcomeMove{Revision: r.N, Others: true, From: []RevisionOutcome{OutcomePending}, To: OutcomeSuperseded})
	reason := fmt.Sprintf("%s to %s published as revision %d (operation %s, step %d).", r.Kind, r.Version, r.N, op.ID, n)
	if err := c.move(next, CauseOperation, reason, op.ID); err != nil {
		return err
	}
	c.Reason = reason
	if op.State == OperationQueued {
		if err := c.startOperation(op); err != nil {
			return err
		}
	}
	c.Steps = append(c.Steps, StepMove{OperationID: op.ID, N: n, From: []StepState{StepPending}, To: StepPublished, Revision: r.N})
	st.State, st.Revision = StepPublished, r.N
	c.event(Ref{Kind: SubjectOperation, ID: op.ID}, OperationStepPublishedBody{Step: n, Steps: len(op.Steps), Version: r.Version, Revision: r.N}, c.opRelated()...)
	c.event(c.After.ref(), RevisionPublishedBody{Revision: r.N, Version: r.Version, Operation: string(r.Kind), OperationID: op.ID}, c.After.related()...)
	return nil
}

// Reached reports whether the device already runs what op set out to
// install: op is running, its last step is published as d's desired
// revision, and d is installed with that revision. The scheduler succeeds
// such an operation at its next visit; a request that finds it active
// (another operation, a removal) settles it first (SettleOperation) rather
// than being refused for it.
func (op Operation) Reached(d Deployment) bool {
	if op.State != OperationRunning || len(op.Steps) == 0 {
		return false
	}
	last := op.Steps[len(op.Steps)-1]
	return last.State == StepPublished && last.Revision == d.Revision && d.State == StateInstalled && d.InstalledRevision == d.Revision
}

// SettleOperation ends op, which has Reached the deployment, as succeeded:
// its last step is installed (operation.succeeded), as the scheduler's next
// visit would have done.
//
// Returns EINTERNAL if op has not reached the deployment.
func (c *Change) SettleOperation(op *Operation) error {
	if !op.Reached(c.After) {
		return Errorf(EINTERNAL, "operation %s has not reached deployment %s", op.ID, c.After.ID)
	}
	last := op.Steps[len(op.Steps)-1]
	if err := c.InstallStep(op, last.N); err != nil {
		return err
	}
	return c.SucceedOperation(op, last.Version)
}

// startOperation moves a queued op to running (operation.started).
func (c *Change) startOperation(op *Operation) error {
	if err := c.opMove(op, OperationRunning, ""); err != nil {
		return err
	}
	c.event(Ref{Kind: SubjectOperation, ID: op.ID}, OperationStartedBody{Operation: string(op.Kind)}, c.opRelated()...)
	return nil
}

func (o *Operation) step(n int) *Step {
	for i := range o.Steps {
		if o.Steps[i].N == n {
			return &o.Steps[i]
		}
	}
	return nil
}

func (c *Change) opMove(op *Operation, to OperationState, reason string) error {
	if !op.State.CanTransitionTo(to) {
		return Errorf(EINTERNAL, "operation %s: %s -> %s is not a transition", op.ID, op.State, to)
	}
	c.Operations = append(c.Operations, OperationMove{ID: op.ID, From: op.State, To: to, Reason: reason})
	op.State = to
	return nil
}

// InstallStep marks step n of op installed: the device runs its revision.
//
// Returns EINTERNAL if the step is not published.
func (c *Change) InstallStep(op *Operation, n int) error {
	st := op.step(n)
	if st == nil || !st.State.CanTransitionTo(StepInstalled) {
		return Errorf(EINTERNAL, "operation %s: step %d cannot be installed", op.ID, n)
	}
	c.Steps = append(c.Steps, StepMove{OperationID: op.ID, N: n, From: []StepState{StepPublished}, To: StepInstalled})
	st.State = StepInstalled
	return nil
}

// SucceedOperation ends op as succeeded: every step is installed.
//
// Returns EINTERNAL if a step is not installed.
func (c *Change) SucceedOperation(op *Operation, version string) error {
	for _, st := range op.Steps {
		if st.State != StepInstalled {
			return Errorf(EINTERNAL, "operation %s: step %d is %s, not installed", op.ID, st.N, st.State)
		}
	}
	if err := c.opMove(op, OperationSucceeded, ""); err != nil {
		return err
	}
	c.event(Ref{Kind: SubjectOperation, ID: op.ID}, OperationSucceededBody{Operation: string(op.Kind), Version: version}, c.opRelated()...)
	return nil
}

// endSteps ends every step of op not yet final in to.
func (c *Change) endSteps(op *Operation, to StepState) (published int) {
	moved := false
	for i := range op.Steps {
		st := &op.Steps[i]
		if st.State.CanTransitionTo(to) {
			if st.State == StepPublished {
				published = st.N
			}
			st.State, moved = to, true
		}
	}
	if moved {
		c.Steps = append(c.Steps, StepMove{OperationID: op.ID, From: []StepState{StepPending, StepPublished}, To: to})
	}
	return published
}

// FailDeployment fails the deployment's desired revision (deadline, drain
// timeout, an operation cancelled under it): the deployment moves to failed
// unless it is failed or settled in a way failed cannot follow, and the
// desired revision's outcome fails if it was pending.
func (c *Change) FailDeployment(cause, reason, operationID string) error {
	if c.After.State == StateFailed || !CanTransition(c.After.State, StateFailed) {
		return nil
	}
	if err := c.move(StateFailed, cause, reason, operationID); err != nil {
		return err
	}
	c.outcome(OutcomeMove{Revision: c.After.Revision, From: []RevisionOutcome{OutcomePending}, To: OutcomeFailed})
	return nil
}

// FailOperation ends op as failed with reason; its unfinished steps fail.
// With failDeployment (a deadline passed) the deployment fails too
// (FailDeployment, cause deadline). rollingBack says a follow-up rollback
// was queued.
func (c *Change) FailOperation(op *Operation, reason string, failDeployment, rollingBack bool) error {
	step := 0
	for _, st := range op.Steps {
		if st.State != StepInstalled && step == 0 {
			step = st.N
		}
	}
	if err := c.opMove(op, OperationFailed, reason); err != nil {
		return err
	}
	c.endSteps(op, StepFailed)
	c.event(Ref{Kind: SubjectOperation, ID: op.ID}, OperationFailedBody{Operation: string(op.Kind), Reason: reason, Step: step, RollingBack: rollingBack}, c.opRelated()...)
	if failDeployment {
		return c.FailDeployment(CauseDeadline, reason, op.ID)
	}
	return nil
}

// CancelOperation ends op as cancelled with reason; its unfinished steps
// are cancelled. byOperator says a person cancelled it: then a published
// step the device has not finished leaves nothing to wait for, so the
// deployment fails (cause operator) unless it is settled, so that a person
// (or a new operation) decides instead of it staying in progress. A
// cancellation because the deployment was deleted leaves its state alone.
//
// Returns ECONFLICT (operation-ended) if op already ended.
func (c *Change) CancelOperation(op *Operation, reason string, byOperator bool) error {
	if !op.State.Active() {
		return &Error{Code: ECONFLICT, Type: "operation-ended", Message: "Operation " + op.ID + " already ended (" + string(op.State) + ")."}
	}
	if err := c.opMove(op, OperationCancelled, reason); err != nil {
		return err
	}
	published := c.endSteps(op, StepCancelled)
	c.event(Ref{Kind: SubjectOperation, ID: op.ID}, OperationCancelledBody{Operation: string(op.Kind), Reason: reason}, c.opRelated()...)
	if byOperator && published > 0 && !c.After.State.Settled() {
		msg := fmt.Sprintf("Operation %s was %s before the device finished revision %d.", op.ID, reason, c.After.Revision)
		return c.FailDeployment(CauseOperator, msg, op.ID)
	}
	return nil
}

// RevertAfterDrainTimeout handles a drain that timed out with onTimeout
// abort: the device kept running the installed revision, so a new revision
// repeating it byte for byte is published (history stays append-only) and
// becomes desired and active at once; the abandoned revision fails. target
// is the installed revision to repeat; installedAt the time it became
// installed (the new revision inherits it: the version has run since).
//
// Returns EINTERNAL if the deployment has no installed revision other than
// the desired one.
func (c *Change) RevertAfterDrainTimeout(op *Operation, target NewRevision, reason string) error {
	d := c.After
	if d.InstalledRevision <= 0 || d.InstalledRevision == d.Revision {
		return Errorf(EINTERNAL, "deployment %s: nothing to revert to", d.ID)
	}
	c.outcome(OutcomeMove{Revision: d.Revision, From: []RevisionOutcome{OutcomePending}, To: OutcomeFailed})
	r := target
	r.N, r.CopyOf, r.OperationID, r.Step = d.LastRevision+1, d.InstalledRevision, op.ID, 0
	c.Revision = &r
	c.After.Revision, c.After.LastRevision, c.After.InstalledRevision, c.After.Version = r.N, r.N, r.N, r.Version
	c.Manifest = true
	c.outcome(OutcomeMove{Revision: r.N, To: OutcomeActive})
	c.outcome(OutcomeMove{Revision: r.N, Others: true, From: []RevisionOutcome{OutcomeActive}, To: OutcomeSuperseded})
	if err := c.move(StateInstalled, CauseDeadline, reason, op.ID); err != nil {
		return err
	}
	c.Reason = reason
	c.event(c.After.ref(), RevisionPublishedBody{Revision: r.N, Version: r.Version, Operation: string(r.Kind), OperationID: op.ID}, c.After.related()...)
	return nil
}
