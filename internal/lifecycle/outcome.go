package lifecycle

import "slices"

// RevisionOutcome is what became of one revision of a deployment (design
// section 3): pending until the device runs it or something replaces it.
type RevisionOutcome string

// The revision outcomes.
const (
	OutcomePending    RevisionOutcome = "pending"    // published, not yet installed
	OutcomeActive     RevisionOutcome = "active"     // the device runs it: the deployment's installed revision
	OutcomeSuperseded RevisionOutcome = "superseded" // replaced by a newer revision; final
	OutcomeFailed     RevisionOutcome = "failed"     // the device failed it, or its operation ended before it was installed
)

// InitialOutcome is the outcome a revision is stored with when it is
// published.
const InitialOutcome = OutcomePending

var allOutcomes = []RevisionOutcome{OutcomePending, OutcomeActive, OutcomeSuperseded, OutcomeFailed}

// AllOutcomes returns every revision outcome, in life-cycle order (the order
// of the revisions.outcome CHECK). The result is a copy.
func AllOutcomes() []RevisionOutcome { return slices.Clone(allOutcomes) }

// Valid reports whether o is one of the declared outcomes.
func (o RevisionOutcome) Valid() bool { return slices.Contains(allOutcomes, o) }

// Terminal reports whether nothing can follow o (only superseded: history
// is append-only, a rollback publishes a new revision instead of reviving an
// old one).
func (o RevisionOutcome) Terminal() bool { return o.Valid() && len(outcomeTransitions[o]) == 0 }

// CanTransitionTo reports whether the revision life cycle allows a move from
// o to to. It is false for a no-op and for unknown outcomes.
func (o RevisionOutcome) CanTransitionTo(to RevisionOutcome) bool {
	return outcomeTransitions.can(o, to)
}

// outcomeTransitions is the revision life cycle. The database mirrors it by
// a trigger on revisions.outcome (OutcomeTransitionsSQL).
//
// Who takes each edge:
//   - pending → active: the device reports the revision installed (report;
//     the deployment moves to installed).
//   - pending → superseded: a newer revision is published before this one
//     was installed (operation, publishing the next step or operation).
//   - pending → failed: the device reports failure (report), the operation's
//     deadline passes (deadline), an operator cancels the operation while
//     the revision is published (operator), or a drain that times out with
//     onTimeout abort makes the installed revision desired again (deadline).
//   - active → superseded: a newer revision is reported installed (report).
//   - failed → active: the device recovers, or finishes after a deadline
//     failed the operation, and reports the revision installed (report; the
//     deployment's failed → installed).
//   - superseded: final.
//
// An active revision never fails: a device that fails after running the
// revision fails the deployment, and the revision stays the last one that
// ran (the rollback target).
var outcomeTransitions = table[RevisionOutcome]{
	OutcomePending:    {OutcomeActive, OutcomeSuperseded, OutcomeFailed},
	OutcomeActive:     {OutcomeSuperseded},
	OutcomeSuperseded: nil,
	OutcomeFailed:     {OutcomeActive},
}

// OutcomeTransitions returns every allowed (from, to) pair of the revision
// life cycle, sorted by from and then to.
func OutcomeTransitions() [][2]RevisionOutcome { return outcomeTransitions.pairs() }

// OutcomeTransitionsSQL returns the revision life cycle as the SQL boolean
// expression the revisions.outcome trigger tests:
//
//	(OLD.outcome, NEW.outcome) IN (('active','superseded'), …)
func OutcomeTransitionsSQL() string { return outcomeTransitions.sql("OLD.outcome", "NEW.outcome") }

// OutcomesSQL returns the outcomes as a SQL list for the revisions.outcome
// CHECK: ('pending', 'active', 'superseded', 'failed').
func OutcomesSQL() string { return valuesSQL(allOutcomes) }
