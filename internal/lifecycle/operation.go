package lifecycle

import "slices"

// OperationState is the state of an operation (design section 3): one
// requested change of one deployment, run by the scheduler step by step.
type OperationState string

// The operation states.
const (
	OperationQueued    OperationState = "queued"    // created, no step published yet
	OperationRunning   OperationState = "running"   // a step is published
	OperationSucceeded OperationState = "succeeded" // every step installed; final
	OperationFailed    OperationState = "failed"    // ended by a failure or a deadline; final
	OperationCancelled OperationState = "cancelled" // ended by an operator or by the deployment's removal; final
)

var allOperationStates = []OperationState{
	OperationQueued, OperationRunning, OperationSucceeded, OperationFailed, OperationCancelled,
}

// AllOperationStates returns every operation state, in life-cycle order
// (the order of the operations.state CHECK). The result is a copy.
func AllOperationStates() []OperationState { return slices.Clone(allOperationStates) }

// Valid reports whether s is one of the declared operation states.
func (s OperationState) Valid() bool { return slices.Contains(allOperationStates, s) }

// Terminal reports whether the operation has ended: succeeded, failed or
// cancelled.
func (s OperationState) Terminal() bool {
	return s.Valid() && len(operationTransitions[s]) == 0
}

// Active reports whether the operation has not ended (queued or running): a
// deployment has at most one active operation.
func (s OperationState) Active() bool { return s.Valid() && !s.Terminal() }

// CanTransitionTo reports whether the operation life cycle allows a move
// from s to to. It is false for a no-op and for unknown states.
func (s OperationState) CanTransitionTo(to OperationState) bool {
	return operationTransitions.can(s, to)
}

// operationTransitions is the operation life cycle. The database mirrors it
// by a trigger on operations.state (OperationTransitionsSQL). Every edge is
// taken by the scheduler's visit unless said otherwise.
//
//   - queued → running: the first step's revision is published.
//   - queued → failed: the operation could not start before its deadline, or
//     its first step cannot be published (the version was yanked, no
//     profile fits).
//   - queued → cancelled: an operator cancels it, or the deployment was
//     deleted.
//   - running → succeeded: the device installed the last step's revision.
//   - running → failed: the device failed, the deadline or drain timeout
//     passed, the deployment's desired revision changed under it, or a later
//     step cannot be published.
//   - running → cancelled: an operator cancels it, or the deployment was
//     deleted.
//   - succeeded, failed, cancelled: final (onFailure rollback creates a new
//     operation).
//
// There is no queued → succeeded: an operation has at least one step, and
// a step is installed only after it was published (running).
var operationTransitions = table[OperationState]{
	OperationQueued:    {OperationRunning, OperationFailed, OperationCancelled},
	OperationRunning:   {OperationSucceeded, OperationFailed, OperationCancelled},
	OperationSucceeded: nil,
	OperationFailed:    nil,
	OperationCancelled: nil,
}

// OperationTransitions returns every allowed (from, to) pair of the
// operation life cycle, sorted by from and then to.
func OperationTransitions() [][2]OperationState { return operationTransitions.pairs() }

// OperationTransitionsSQL returns the operation life cycle as the SQL
// boolean expression the operations.state trigger tests:
//
//	(OLD.state, NEW.state) IN (('queued','cancelled'), …)
func OperationTransitionsSQL() string { return operationTransitions.sql("OLD.state", "NEW.state") }

// OperationStatesSQL returns the operation states as a SQL list for the
// operations.state CHECK: ('queued', 'running', …).
func OperationStatesSQL() string { return valuesSQL(allOperationStates) }

// StepState is the state of one step of an operation: one revision the
// operation publishes (an upgrade along a path has one step per hop).
type StepState string

// The step states.
const (
	StepPending   StepState = "pending"   // not published yet
	StepPublished StepState = "published" // its revision is desired; the device applies it
	StepInstalled StepState = "installed" // the device runs its revision; final
	StepFailed    StepState = "failed"    // the operation failed before the step was installed; final
	StepCancelled StepState = "cancelled" // the operation was cancelled before the step was installed; final
)

var allStepStates = []StepState{StepPending, StepPublished, StepInstalled, StepFailed, StepCancelled}

// AllStepStates returns every step state, in life-cycle order (the order of
// the operation_steps.state CHECK). The result is a copy.
func AllStepStates() []StepState { return slices.Clone(allStepStates) }

// Valid reports whether s is one of the declared step states.
func (s StepState) Valid() bool { return slices.Contains(allStepStates, s) }

// Terminal reports whether nothing can follow s: installed, failed or
// cancelled.
func (s StepState) Terminal() bool { return s.Valid() && len(stepTransitions[s]) == 0 }

// CanTransitionTo reports whether the step life cycle allows a move from s
// to to. It is false for a no-op and for unknown states.
func (s StepState) CanTransitionTo(to StepState) bool { return stepTransitions.can(s, to) }

// stepTransitions is the step life cycle. The database mirrors it by a
// trigger on operation_steps.state (StepTransitionsSQL).
//
//   - pending → published: the scheduler publishes the step's revision.
//   - pending, published → failed: the operation failed (scheduler).
//   - pending, published → cancelled: the operation was cancelled (operator,
//     or the scheduler when the deployment was deleted).
//   - published → installed: the device runs the step's revision
//     (scheduler, after the report).
//   - installed, failed, cancelled: final.
//
// There is no pending → installed: a step is installed only once its
// revision was published.
var stepTransitions = table[StepState]{
	StepPending:   {StepPublished, StepFailed, StepCancelled},
	StepPublished: {StepInstalled, StepFailed, StepCancelled},
	StepInstalled: nil,
	StepFailed:    nil,
	StepCancelled: nil,
}

// StepTransitions returns every allowed (from, to) pair of the step life
// cycle, sorted by from and then to.
func StepTransitions() [][2]StepState { return stepTransitions.pairs() }

// StepTransitionsSQL returns the step life cycle as the SQL boolean
// expression the operation_steps.state trigger tests:
//
//	(OLD.state, NEW.state) IN (('pending','cancelled'), …)
func StepTransitionsSQL() string { return stepTransitions.sql("OLD.state", "NEW.state") }

// StepStatesSQL returns the step states as a SQL list for the
// operation_steps.state CHECK: ('pending', 'published', …).
func StepStatesSQL() string { return valuesSQL(allStepStates) }
