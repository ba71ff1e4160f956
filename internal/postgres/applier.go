package postgres

// The applier: the one place that writes deployment, history, revision,
// operation and operation-step rows. Every write of the deployment
// aggregate is decided in internal/lifecycle as a lifecycle.Change; the
// store loads what the decision needs, calls it, and hands the change to
// apply, which writes it in the caller's transaction (under the
// deployment's row lock) together with its events. The status-report hot
// path renders its change into one optimistic statement (reportStatement),
// also here. No state, outcome or step literal appears in this file: every
// value written comes from the change. Checked by one grep (see
// docs/architecture.md, "The write path"):
//
//	grep -nE "(INSERT INTO|UPDATE) +(deployments|deployment_history|revisions|operations|operation_steps)\b" internal/postgres/*.go
//
// lists only lines of this file.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
)

// batch is what apply writes: changes of one or many deployments, and the
// rows of operations they create (an OperationMove from "" names one).
type batch struct {
	changes []*lifecycle.Change
	// operations holds the operations the changes create, by id.
	operations map[string]fleet.Operation
	// followUps link operations to the ones queued after them (onFailure
	// rollback): [operation, follow-up].
	followUps [][2]string
	// deadlineOf is, by change, the operation whose deadline the change's
	// Deadline sets.
	deadlineOf map[*lifecycle.Change]string
	// audits are the audit entries of the management calls whose changes
	// the batch writes (a batch of coalesced creations: one per call); nil
	// means the one call ctx carries, if any (auditChange).
	audits []callAudit
	// pieces are bundle pieces of new revisions' documents computed
	// before the transaction (NewDeployment.Piece), by deployment id and
	// document digest; publish computes the others.
	pieces map[[2]string]*margo.BundlePiece
	// locked, when not nil, holds the manifest versions of clients the
	// transaction locked already (sqlLockClientVersions): apply bumps them
	// with its other writes (bumpLocked) rather than in a round trip of
	// their own (bumpManifests).
	locked map[string]uint64
	// bundles, with locked, holds the bundles of clients' next manifest
	// versions computed before apply (creationBundles): the bump records
	// them, and nothing reads those clients' pieces again.
	bundles map[string]bundleSum
	// published, when not nil, is called with the clients' new manifest
	// versions once apply has bumped them.
	published func(versions map[string]uint64)
	// copyMin, when not 0, replaces copyRowsMin (tests).
	copyMin int
}

// copyAt is the number of rows of one table from which a round's inserts
// are written with COPY.
func (b batch) copyAt() int {
	if b.copyMin > 0 {
		return b.copyMin
	}
	return copyRowsMin
}

// add appends o's changes, and what goes with them, to b (batches of
// different deployments, written by one apply).
func (b *batch) add(o batch) {
	b.changes = append(b.changes, o.changes...)
	if len(o.operations) > 0 && b.operations == nil {
		b.operations = map[string]fleet.Operation{}
	}
	maps.Copy(b.operations, o.operations)
	b.followUps = append(b.followUps, o.followUps...)
	if len(o.deadlineOf) > 0 && b.deadlineOf == nil {
		b.deadlineOf = map[*lifecycle.Change]string{}
	}
	maps.Copy(b.deadlineOf, o.deadlineOf)
}

// callAudit is the audit entry of one call in a batch, and whether its
// change created the call's resource.
type callAudit struct {
	pending *access.Pending
	created bool
}

// apply writes b in tx: for every client whose manifest changes, one new
// manifest version (clients in id order, the lock order); per change the
// deployment row (guarded by its state as read), its revision, history,
// outcome moves, operations and steps; the manifests; and every change's
// events. The caller holds the deployments' row locks and commits.
//
// Its cost is a constant number of round trips per batch, not per change:
// the manifest versions (bumpManifests; or, for clients the transaction
// locked already, b.locked, queued first in the pipeline: bumpLocked);
// then every row of every change in
// one pipeline (pgx.Batch), rows of one table and kind written by one
// set-based statement (unnest arrays), in the order a change needs them
// (see phases; a round's inserts of copyRowsMin rows or more of one table
// as one COPY at their place in that order: pipeline), and the events (from
// copyEventsMin of them, one COPY after the pipeline); then the manifests
// (publish).
//
// Returns an error if a guard fails (the row changed under the decision:
// the caller must roll back) or the database fails.
func apply(ctx context.Context, tx pgx.Tx, b batch) error {
	if len(b.changes) == 0 {
		return nil
	}
	at := b.changes[0].At
	var clients []string
	for _, c := range b.changes {
		if c.Manifest && !slices.Contains(clients, c.After.ClientID) {
			clients = append(clients, c.After.ClientID)
		}
	}
	slices.Sort(clients)
	versions := map[string]uint64{}
	p := &pipeline{}
	if len(clients) > 0 {
		var err error
		if b.locked != nil {
			versions, err = bumpLocked(p, clients, b.locked, b.bundles, at)
		} else {
			versions, err = bumpManifests(ctx, tx, clients, at)
		}
		if err != nil {
			return err
		}
	}
	if b.published != nil {
		b.published(versions)
	}
	// The events (JSON bodies: CPU only) are built while the rounds are
	// queued, on another core; both only read the changes.
	built := make(chan batchEventsResult, 1)
	go func() {
		evs, err := batchEvents(b.changes, versions)
		built <- batchEventsResult{evs, err}
	}()
	var err error
	for _, round := range rounds(b.changes) {
		if err = queueRound(p, round, versions, b); err != nil {
			break
		}
	}
	ev := <-built
	if err != nil {
		return err
	}
	if ev.err != nil {
		return ev.err
	}
	events := ev.events
	newOp := ""
	q := p.q()
	for _, c := range b.changes {
		if id := queuedOperation(c); id != "" {
			newOp = id
			break
		}
	}
	for _, f := range b.followUps {
		queueExec(q, -1, nil, `UPDATE operations SET follow_up = $2::uuid WHERE id = $1`, f[0], f[1])
	}
	if newOp != "" {
		// One wake-up per batch that leaves a new operation queued, however
		// many: the payload names one of them (listeners only need the
		// nudge). An operation started at once (an install, whose step the
		// creation publishes) has nothing for a scheduler to do until a
		// report or its deadline: no wake-up.
		q.Queue(`SELECT pg_notify('`+SchedulerChannel+`', $1)`, newOp)
	}
	if err := auditBatch(ctx, queued{q}, b); err != nil { // the management calls' audit rows, in the change's transaction
		return err
	}
	var xid, next int64 // for copyEvents: read in the pipeline, after every other write
	if len(events) >= copyEventsMin {
		q.Queue(sqlNextEvent).QueryRow(func(row pgx.Row) error { return row.Scan(&xid, &next) })
	} else if len(events) > 0 {
		if err := queueAppendEvents(q, events); err != nil {
			return err
		}
	}
	// Documents of new revisions, manifest entries, the pieces of small
	// bundles, notifications: after the revision rows (publish.go).
	known := b.bundles
	if b.locked == nil {
		known = nil // bumped by bumpManifests, which records none
	}
	small, err := queuePublish(p, versions, b.changes, b.pieces, at, b.copyAt(), known)
	if err != nil {
		return err
	}
	if err := p.run(ctx, tx); err != nil {
		return err
	}
	if len(events) >= copyEventsMin {
		if err := copyEvents(ctx, tx, xid, next, events); err != nil {
			return err
		}
	}
	return recordSmallBundles(ctx, tx, small)
}

// batchEventsResult is what batchEvents returns.
type batchEventsResult struct {
	events []lifecycle.Event
	err    error
}

// batchEvents returns the events of changes, in order; a change of a
// manifest names its client's new version (versions).
func batchEvents(changes []*lifecycle.Change, versions map[string]uint64) ([]lifecycle.Event, error) {
	var events []lifecycle.Event
	for _, c := range changes {
		v := uint64(0)
		if c.Manifest {
			v = versions[c.After.ClientID]
		}
		evs, err := c.Events(v)
		if err != nil {
			return nil, err
		}
		events = append(events, evs...)
	}
	return events, nil
}

// queuedOperation returns the id of an operation c creates and leaves
// queued, "" if there is none.
func queuedOperation(c *lifecycle.Change) string {
	last := map[string]lifecycle.OperationState{}
	var created []string
	for _, m := range c.Operations {
		if m.From == "" {
			created = append(created, m.ID)
		}
		last[m.ID] = m.To
	}
	for _, id := range created {
		if last[id] == lifecycle.OperationQueued {
			return id
		}
	}
	return ""
}

// rounds splits changes, in order, into rounds in which each deployment
// appears at most once, so that one set-based statement never meets one
// row twice. A batch's changes are usually of distinct deployments: one
// round.
func rounds(changes []*lifecycle.Change) [][]*lifecycle.Change {
	var out [][]*lifecycle.Change
	var seen []map[string]bool
	for _, c := range changes {
		i := 0 // after the last round that holds a change of the same deployment
		for j := len(out) - 1; j >= 0 && c.After.ID != ""; j-- {
			if seen[j][c.After.ID] {
				i = j + 1
				break
			}
		}
		if i == len(out) {
			out, seen = append(out, nil), append(seen, map[string]bool{})
		}
		out[i], seen[i][c.After.ID] = append(out[i], c), true
	}
	return out
}

// queued appends the statements given to Exec to a pipeline (for
// appendAudit).
type queued struct{ q *pgx.Batch }

func (b queued) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	b.q.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

// queueExec queues a statement that must touch exactly want rows (want < 0:
// any number), else the batch fails with errGuard.
func queueExec(q *pgx.Batch, want int, errGuard error, sql string, args ...any) {
	q.Queue(sql, args...).Exec(func(tag pgconn.CommandTag) error {
		if want >= 0 && tag.RowsAffected() != int64(want) {
			return errGuard
		}
		return nil
	})
}

// queueGuarded queues a guarded UPDATE … RETURNING id of the rows ids: if
// one of them was not updated (its guard failed), the batch fails with
// what(id).
func queueGuarded(q *pgx.Batch, ids []string, what func(i int) error, sql string, args ...any) {
	q.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		got := map[string]bool{}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			got[id] = true
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for i, id := range ids {
			if !got[id] {
				return what(i)
			}
		}
		return nil
	})
}

// The phases of a round, in the order one change needs its rows written
// (the order applyOne used to write them one by one): the new deployment
// rows; the operation moves, in order (the n-th move of every change
// together: an operation is created or moved before the revision that may
// name it, and one ends before its successor is inserted, for the
// one-active-operation index); the revisions; the deployment updates
// (guarded by the state the decision saw); the history rows; the outcome
// moves and step moves, in order; the deadlines. Changes of one round are
// of distinct deployments, so rows of different changes never meet.
const (
	sqlInsertDeployments = `
INSERT INTO deployments (id, client_id, device_id, application_id, state, state_reason, state_changed_at, revision, desired_since, created_at, updated_at)
SELECT v.id, v.client_id, v.device_id, v.application_id, v.state, v.reason, v.at, v.revision, v.since, v.at, v.at
FROM unnest($1::text[]::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[], $8::int[], $9::bigint[])
    AS v(id, client_id, device_id, application_id, state, reason, at, revision, since)`

	sqlInsertOperations = `
INSERT INTO operations (id, deployment_id, type, state, from_version, to_version, parameters, profile_id, strategy, drain, on_failure,
    step_timeout, forced, force_reason, requested_by, base_revision, restore_revision, deadline, created_at, updated_at, reason, finished_at,
    visited_generation, recheck_at)
SELECT v.id, v.deployment_id, v.type, v.state, v.from_version, v.to_version, v.parameters::jsonb, v.profile_id, v.strategy,
    NULLIF(v.drain, '')::jsonb, v.on_failure, make_interval(secs => v.step_secs), v.forced, v.force_reason, v.requested_by, v.base,
    NULLIF(v.restore, 0), v.deadline, v.at, v.at, v.reason, v.finished, NULLIF(v.visited, 0), v.recheck
FROM unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
    $11::text[], $12::float8[], $13::bool[], $14::text[], $15::text[], $16::int[], $17::int[], $18::timestamptz[], $19::timestamptz[],
    $20::text[], $21::timestamptz[], $22::bigint[], $23::timestamptz[])
    AS v(id, deployment_id, type, state, from_version, to_version, parameters, profile_id, strategy, drain, on_failure, step_secs, forced,
        force_reason, requested_by, base, restore, deadline, at, reason, finished, visited, recheck)`

	sqlInsertSteps = `
INSERT INTO operation_steps (operation_id, n, version, state, revision, published_at, finished_at)
SELECT v.operation_id, v.n, v.version, v.state, NULLIF(v.revision, 0), v.published_at, v.finished_at
FROM unnest($1::text[]::uuid[], $2::int[], $3::text[], $4::text[], $5::int[], $6::timestamptz[], $7::timestamptz[])
    AS v(operation_id, n, version, state, revision, published_at, finished_at)`

	sqlMoveOperations = `
UPDATE operations o SET state = v.state_to, reason = CASE WHEN v.reason = '' THEN o.reason ELSE v.reason END, updated_at = v.at,
    finished_at = v.finished
FROM unnest($1::text[]::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::text[]) AS v(id, state_to, reason, at, finished, state_from)
WHERE o.id = v.id AND o.state = v.state_from
RETURNING o.id::text`

	sqlInsertRevisions = `
INSERT INTO revisions (deployment_id, n, application_id, version, profile_id, parameters, operation, outcome, components, digest,
    manifest_version, created_at, operation_id, forced, force_reason, strategy, installed_at)
SELECT v.deployment_id, v.n, v.application_id, v.version, v.profile_id, v.parameters::jsonb, v.operation, v.outcome,
    ARRAY(SELECT jsonb_array_elements_text(v.components::jsonb)), v.digest, v.mv, v.at, NULLIF(v.operation_id, '')::uuid,
    v.forced, v.force_reason, v.strategy, v.installed_at
FROM unnest($1::text[]::uuid[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
    $10::text[], $11::bigint[], $12::timestamptz[], $13::text[], $14::bool[], $15::text[], $16::text[], $17::timestamptz[])
    AS v(deployment_id, n, application_id, version, profile_id, parameters, operation, outcome, components, digest, mv, at,
        operation_id, forced, force_reason, strategy, installed_at)`

	sqlCopyRevision = `
INSERT INTO revisions (deployment_id, n, application_id, version, profile_id, parameters, operation, outcome, components, digest,
    manifest_version, created_at, operation_id, forced, force_reason, strategy, installed_at)
SELECT deployment_id, $2, application_id, version, profile_id, parameters, operation, $3, components, digest,
    $4, $5, $6, forced, force_reason, strategy, installed_at
FROM revisions WHERE deployment_id = $1 AND n = $7`

	sqlUpdateDeployments = `
UPDATE deployments d SET state = v.state, state_reason = CASE WHEN v.reason = '' THEN d.state_reason ELSE v.reason END,
    state_changed_at = CASE WHEN v.moved THEN v.at ELSE d.state_changed_at END, revision = v.revision,
    installed_revision = NULLIF(v.installed, 0), removing = v.removing,
    removed_at = CASE WHEN v.removing AND NOT d.removing THEN v.at ELSE d.removed_at END,
    desired_since = CASE WHEN v.since > 0 THEN v.since ELSE d.desired_since END, updated_at = v.at, generation = d.generation + 1
FROM unnest($1::text[]::uuid[], $2::text[], $3::text[], $4::bool[], $5::timestamptz[], $6::int[], $7::int[], $8::bool[], $9::bigint[], $10::text[])
    AS v(id, state, reason, moved, at, revision, installed, removing, since, state_before)
WHERE d.id = v.id AND d.state = v.state_before
RETURNING d.id::text`

	sqlInsertHistory = `
INSERT INTO deployment_history (deployment_id, at, from_state, to_state, cause, revision, reason)
SELECT v.deployment_id, v.at, NULLIF(v.from_state, ''), v.to_state, v.cause, v.revision, v.reason
FROM unnest($1::text[]::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::int[], $7::text[]) WITH ORDINALITY
    AS v(deployment_id, at, from_state, to_state, cause, revision, reason, ord)
ORDER BY v.ord`

	// Outcome and step moves select rows by a set of states, passed as one
	// comma-separated string per move (unnest flattens arrays of arrays).
	// Their rows are found by the first column of a two-column key alone.
	// Up to keyedMovesMax moves, the statement also says "= ANY" on that
	// column (moveStatement), which keeps its plan an index lookup when the
	// table has no statistics yet (filled in bulk moments before, as a
	// fleet's installs are): joined to unnest alone, the planner then hashed
	// the whole table (8-23 ms a batch of 64 reports at 20,000 revisions,
	// 3.4-6 ms with the "= ANY"). The "= ANY" is evaluated in the index
	// condition once per move, so its cost grows with the square of the
	// moves: at 128 moves the two forms cost the same (11 ms), at 256 the
	// "= ANY" costs twice as much and at 1,000 eight times (measured by
	// review on PostgreSQL 15, generic plans, no statistics); from there a
	// hash of the table is the better plan anyway.
	sqlMoveOutcomes = `
UPDATE revisions r SET outcome = v.outcome_to,
    installed_at = CASE WHEN v.outcome_to = $7 THEN coalesce(r.installed_at, v.at) ELSE r.installed_at END
FROM unnest($1::text[]::uuid[], $2::int[], $3::text[], $4::bool[], $5::timestamptz[], $6::text[]) AS v(deployment_id, n, outcome_to, others, at, outcome_from)
WHERE r.deployment_id = v.deployment_id AND (r.n = v.n) <> v.others
    AND (v.outcome_from = '' OR r.outcome = ANY(string_to_array(v.outcome_from, ','))) AND r.outcome <> v.outcome_to`

	sqlMoveSteps = `
UPDATE operation_steps s SET state = v.state_to, revision = coalesce(NULLIF(v.revision, 0), s.revision),
    published_at = CASE WHEN v.state_to = $7 THEN v.at ELSE s.published_at END,
    finished_at = CASE WHEN v.terminal THEN coalesce(s.finished_at, v.at) ELSE s.finished_at END
FROM unnest($1::text[]::uuid[], $2::int[], $3::text[], $4::int[], $5::timestamptz[], $6::bool[], $8::text[]) AS v(operation_id, n, state_to, revision, at, terminal, state_from)
WHERE s.operation_id = v.operation_id AND (v.n = 0 OR s.n = v.n) AND s.state = ANY(string_to_array(v.state_from, ','))`
)

// keyedMovesMax is the largest number of moves whose statement also
// selects its rows with "= ANY" on the key's first column (see
// sqlMoveOutcomes).
const keyedMovesMax = 64

// The move statements with "= ANY" on the key's first column ($1 holds
// the keys of the moves).
var (
	sqlMoveOutcomesKeyed = keyedMove(sqlMoveOutcomes, "r.deployment_id")
	sqlMoveStepsKeyed    = keyedMove(sqlMoveSteps, "s.operation_id")
)

// keyedMove returns the move statement sql with "key = ANY($1)" first in
// its WHERE.
func keyedMove(sql, key string) string {
	w := "WHERE " + key + " = "
	if !strings.Contains(sql, w) {
		panic("keyedMove: no " + w) // a bug in the statements above
	}
	return strings.Replace(sql, w, "WHERE "+key+" = ANY($1::text[]::uuid[]) AND "+key+" = ", 1)
}

// moveStatement returns keyed for up to keyedMovesMax moves, else plain.
func moveStatement(plain, keyed string, n int) string {
	if n > keyedMovesMax {
		return plain
	}
	return keyed
}

// queueRound queues the statements of one round (see the phases above).
func queueRound(p *pipeline, round []*lifecycle.Change, versions map[string]uint64, b batch) error {
	version := func(c *lifecycle.Change) int64 {
		if !c.Manifest {
			return 0
		}
		return int64(versions[c.After.ClientID])
	}
	var live []*lifecycle.Change // changes of a deployment
	for _, c := range round {
		if c.After.ID != "" {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return nil // changes of no deployment (an unregistration without any): manifest and events only
	}
	folds := make(map[*lifecycle.Change]*fold, len(live))
	for _, c := range live {
		f, err := foldChange(c, b)
		if err != nil {
			return err
		}
		folds[c] = f
	}

	// New deployments.
	{
		var a cols
		for _, c := range live {
			if !c.Create {
				continue
			}
			d := c.After
			a.add(d.ID, d.ClientID, d.DeviceID, d.ApplicationID, string(d.State), c.Reason, c.At, int32(d.Revision), version(c))
		}
		if a.n >= b.copyAt() {
			p.copy("deployments", []string{"id", "client_id", "device_id", "application_id", "state", "state_reason", "state_changed_at", "revision",
				"desired_since", "created_at", "updated_at"}, rowsOf(a, func(v []any) []any {
				return []any{asUUID(v[0]), v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[6], v[6]}
			}), copyCount("deployments", a.n))
		} else if a.n > 0 {
			queueExec(p.q(), a.n, fmt.Errorf("%d deployments inserted as %d rows", a.n, a.n), sqlInsertDeployments, a.args()...)
		}
	}

	// Operation moves, the n-th of every change together.
	for i := 0; ; i++ {
		var ins, steps, mv cols
		var insDeployments, mvIDs []string
		var mvWhat []lifecycle.OperationMove
		more := false
		for _, c := range live {
			if i >= len(c.Operations) {
				continue
			}
			more = true
			m, now, f := c.Operations[i], c.At, folds[c]
			if m.From != "" && f.ops[m.ID] != nil {
				continue // a move of an operation this change creates: written with its row
			}
			if m.From == "" {
				op, ok := b.operations[m.ID]
				if !ok {
					return fmt.Errorf("operation %s is created without its row", m.ID)
				}
				params, err := json.Marshal(op.Parameters)
				if err != nil {
					return err
				}
				drain := ""
				if s := drainValue(op.Drain); s != nil {
					drain = *s
				}
				fo := f.ops[m.ID]
				visited, recheck := createdVisit(c, fo.state, op.Deadline, now)
				ins.add(op.ID, op.DeploymentID, string(op.Type), string(fo.state), op.FromVersion.String(), op.ToVersion.String(), string(params),
					op.ProfileID, string(op.Strategy), drain, op.OnFailure, op.StepTimeout.Seconds(), op.Forced, op.ForceReason, op.RequestedBy,
					int32(c.Before.Revision), int32(op.RestoreRevision), op.Deadline, now, fo.reason, fo.finished, visited, recheck)
				insDeployments = append(insDeployments, op.DeploymentID)
				for _, st := range fo.steps {
					steps.add(op.ID, int32(st.n), st.version, string(st.state), int32(st.revision), st.published, st.finished)
				}
				continue
			}
			var finished *time.Time
			if m.To.Terminal() {
				finished = &now
			}
			mv.add(m.ID, string(m.To), m.Reason, now, finished, string(m.From))
			mvIDs, mvWhat = append(mvIDs, m.ID), append(mvWhat, m)
		}
		if !more {
			break
		}
		if ins.n >= b.copyAt() {
			deployments := insDeployments
			count := copyCount("operations", ins.n)
			p.copy("operations", []string{"id", "deployment_id", "type", "state", "from_version", "to_version", "parameters", "profile_id", "strategy",
				"drain", "on_failure", "step_timeout", "forced", "force_reason", "requested_by", "base_revision", "restore_revision", "deadline",
				"created_at", "updated_at", "reason", "finished_at", "visited_generation", "recheck_at"}, rowsOf(ins, func(v []any) []any {
				return []any{asUUID(v[0]), asUUID(v[1]), v[2], v[3], v[4], v[5], v[6], v[7], v[8], nullIf(v[9].(string)), v[10], secondsInterval(v[11].(float64)),
					v[12], v[13], v[14], v[15], nullIf(v[16].(int32)), v[17], v[18], v[18], v[19], v[20], nullIf(v[21].(int64)), v[22]}
			}), func(n int64, err error) error { return count(n, errOperationUnique(err, deployments)) })
		} else if ins.n > 0 {
			deployments := insDeployments
			p.q().Queue(sqlInsertOperations, ins.args()...).Fn = func(br pgx.BatchResults) error {
				_, err := br.Exec()
				return errOperationUnique(err, deployments)
			}
		}
		if steps.n >= b.copyAt() {
			p.copy("operation_steps", []string{"operation_id", "n", "version", "state", "revision", "published_at", "finished_at"},
				rowsOf(steps, func(v []any) []any { return []any{asUUID(v[0]), v[1], v[2], v[3], nullIf(v[4].(int32)), v[5], v[6]} }),
				copyCount("operation_steps", steps.n))
		} else if steps.n > 0 {
			queueExec(p.q(), -1, nil, sqlInsertSteps, steps.args()...)
		}
		if mv.n > 0 {
			queueGuarded(p.q(), mvIDs, func(i int) error {
				return fmt.Errorf("operation %s is no longer %s", mvWhat[i].ID, mvWhat[i].From)
			}, sqlMoveOperations, mv.args()...)
		}
	}

	// Revisions.
	{
		var a cols
		components := map[string][]string{} // by deployment, for COPY
		for _, c := range live {
			if c.Revision == nil {
				continue
			}
			d, r, f := c.After, *c.Revision, folds[c]
			pending := string(lifecycle.InitialOutcome)
			if r.CopyOf > 0 { // a revert repeats a revision byte for byte: copied by the database
				var opID *string
				if r.OperationID != "" {
					opID = &r.OperationID
				}
				queueExec(p.q(), 1, fmt.Errorf("deployment %s has no revision %d to repeat", d.ID, r.CopyOf),
					sqlCopyRevision, d.ID, r.N, pending, version(c), c.At, opID, r.CopyOf)
				continue
			}
			params, err := json.Marshal(r.Parameters)
			if err != nil {
				return err
			}
			comps, err := json.Marshal(append([]string{}, r.Components...))
			if err != nil {
				return err
			}
			outcome, installed := lifecycle.InitialOutcome, (*time.Time)(nil)
			if f.outcomes {
				outcome, installed = f.outcome, f.installed
			}
			components[d.ID] = append([]string{}, r.Components...)
			a.add(d.ID, int32(r.N), d.ApplicationID, r.Version, r.ProfileID, string(params), string(r.Kind), string(outcome), string(comps),
				revisionDigest(&r), version(c), c.At, r.OperationID, r.Forced, r.ForceReason, string(r.Strategy), installed)
		}
		if a.n >= b.copyAt() {
			p.copy("revisions", []string{"deployment_id", "n", "application_id", "version", "profile_id", "parameters", "operation", "outcome",
				"components", "digest", "manifest_version", "created_at", "operation_id", "forced", "force_reason", "strategy", "installed_at"},
				rowsOf(a, func(v []any) []any {
					return []any{asUUID(v[0]), v[1], v[2], v[3], v[4], v[5], v[6], v[7], components[v[0].(string)], v[9], v[10], v[11], asUUID(nullIf(v[12].(string))),
						v[13], v[14], v[15], v[16]}
				}), copyCount("revisions", a.n))
		} else if a.n > 0 {
			queueExec(p.q(), a.n, fmt.Errorf("%d revisions inserted as other rows", a.n), sqlInsertRevisions, a.args()...)
		}
	}

	// Deployment updates, guarded by the state the decision saw.
	{
		var a cols
		var ids []string
		var before []lifecycle.State
		for _, c := range live {
			if c.Create || !c.DeploymentChanged() {
				continue
			}
			d := c.After
			a.add(d.ID, string(d.State), c.Reason, len(c.Moves) > 0, c.At, int32(d.Revision), int32(d.InstalledRevision), d.Removing,
				version(c), string(c.Before.State))
			ids, before = append(ids, d.ID), append(before, c.Before.State)
		}
		if a.n > 0 {
			queueGuarded(p.q(), ids, func(i int) error {
				return fmt.Errorf("deployment %s is no longer %s: it changed under its decision", ids[i], before[i])
			}, sqlUpdateDeployments, a.args()...)
		}
	}

	// History rows, in order.
	{
		var a cols
		for _, c := range live {
			for _, m := range c.Moves {
				a.add(c.After.ID, c.At, string(m.From), string(m.To), m.Cause, int32(m.Revision), m.Reason)
			}
		}
		if a.n >= b.copyAt() {
			p.copy("deployment_history", []string{"deployment_id", "at", "from_state", "to_state", "cause", "revision", "reason"},
				rowsOf(a, func(v []any) []any { return []any{asUUID(v[0]), v[1], nullIf(v[2].(string)), v[3], v[4], v[5], v[6]} }),
				copyCount("deployment_history", a.n))
		} else if a.n > 0 {
			queueExec(p.q(), a.n, fmt.Errorf("%d history rows inserted as other rows", a.n), sqlInsertHistory, a.args()...)
		}
	}

	// Outcome moves, the n-th of every change together.
	for i := 0; ; i++ {
		var a cols
		more := false
		for _, c := range live {
			more = more || i < len(c.Outcomes)
			if i < len(c.Outcomes) && !folds[c].outcomes {
				m := c.Outcomes[i]
				a.add(c.After.ID, int32(m.Revision), string(m.To), m.Others, c.At, strings.Join(outcomeStrings(m.From), ","))
			}
		}
		if !more {
			break
		}
		if a.n == 0 {
			continue
		}
		queueExec(p.q(), -1, nil, moveStatement(sqlMoveOutcomes, sqlMoveOutcomesKeyed, a.n), append(a.args(), string(lifecycle.OutcomeActive))...)
	}

	// Step moves, the n-th of every change together.
	for i := 0; ; i++ {
		var a cols
		more := false
		for _, c := range live {
			if i < len(c.Steps) {
				more = true
				m := c.Steps[i]
				if folds[c].ops[m.OperationID] != nil {
					continue // written with the new operation's steps
				}
				a.add(m.OperationID, int32(m.N), string(m.To), int32(m.Revision), c.At, m.To.Terminal(), strings.Join(stepStrings(m.From), ","))
			}
		}
		if !more {
			break
		}
		if a.n == 0 {
			continue
		}
		args := a.args()
		// $7 is the published state; the from-states are $8.
		args = append(args[:6:6], string(lifecycle.StepPublished), args[6])
		queueExec(p.q(), -1, nil, moveStatement(sqlMoveSteps, sqlMoveStepsKeyed, a.n), args...)
	}

	// Deadlines.
	for _, c := range live {
		if id := b.deadlineOf[c]; !c.Deadline.IsZero() && id != "" {
			queueExec(p.q(), -1, nil, `UPDATE operations SET deadline = $2, updated_at = $3 WHERE id = $1`, id, c.Deadline, c.At)
		}
	}
	return nil
}

// fold is what a change writes into rows it creates itself: an operation
// the change creates and then moves (an install is created queued and
// started at once), its steps and their moves, and a new deployment's
// first revision and its outcome moves. Such rows are inserted as the
// change leaves them instead of being inserted and then updated: the same
// rows, without a second write of each (and without the foreign-key checks
// PostgreSQL repeats on every update of a row its own transaction
// inserted). The guards of those moves are checked here, on the rows'
// values in memory.
type fold struct {
	ops       map[string]*foldedOp
	outcomes  bool // the new revision's outcome is folded (a created deployment: no other revision exists)
	outcome   lifecycle.RevisionOutcome
	installed *time.Time
}

type foldedOp struct {
	state    lifecycle.OperationState
	reason   string
	finished *time.Time
	steps    []foldedStep
}

type foldedStep struct {
	n, revision         int
	version             string
	state               lifecycle.StepState
	published, finished *time.Time
}

// foldChange computes c's fold (see fold). Returns an error when a move of
// a row the change creates does not find the row in its from-state (as the
// guard of the UPDATE would), and EINTERNAL when it is not a transition of
// its life cycle (lifecycle's operation, step and revision tables): the
// folded rows are inserted in their final state, past the transition
// triggers of migration 00005 that guard the UPDATEs.
func foldChange(c *lifecycle.Change, b batch) (*fold, error) {
	f := &fold{ops: map[string]*foldedOp{}}
	now := c.At
	for _, m := range c.Operations {
		if m.From == "" {
			op, ok := b.operations[m.ID]
			if !ok {
				return nil, fmt.Errorf("operation %s is created without its row", m.ID)
			}
			fo := &foldedOp{state: m.To}
			for _, st := range op.Steps {
				fo.steps = append(fo.steps, foldedStep{n: st.N, version: st.Version.String(), state: lifecycle.StepPending})
			}
			f.ops[m.ID] = fo
			continue
		}
		fo := f.ops[m.ID]
		if fo == nil {
			continue
		}
		if fo.state != m.From {
			return nil, fmt.Errorf("operation %s is no longer %s", m.ID, m.From)
		}
		if !m.From.CanTransitionTo(m.To) {
			return nil, lifecycle.Errorf(lifecycle.EINTERNAL, "operation %s: %s -> %s is not a transition of the operation life cycle", m.ID, m.From, m.To)
		}
		fo.state = m.To
		if m.Reason != "" {
			fo.reason = m.Reason
		}
		fo.finished = nil
		if m.To.Terminal() {
			fo.finished = &now
		}
	}
	for _, m := range c.Steps {
		fo := f.ops[m.OperationID]
		if fo == nil {
			continue
		}
		for i := range fo.steps {
			st := &fo.steps[i]
			if (m.N != 0 && st.n != m.N) || !slices.Contains(m.From, st.state) {
				continue
			}
			if st.state != m.To && !st.state.CanTransitionTo(m.To) {
				return nil, lifecycle.Errorf(lifecycle.EINTERNAL, "step %d of operation %s: %s -> %s is not a transition of the step life cycle",
					st.n, m.OperationID, st.state, m.To)
			}
			st.state = m.To
			if m.Revision > 0 {
				st.revision = m.Revision
			}
			if m.To == lifecycle.StepPublished {
				st.published = &now
			}
			if m.To.Terminal() && st.finished == nil {
				st.finished = &now
			}
		}
	}
	if c.Create && c.Revision != nil && c.Revision.CopyOf == 0 {
		f.outcomes, f.outcome = true, lifecycle.InitialOutcome
		n := c.Revision.N
		for _, m := range c.Outcomes {
			selected := (n == m.Revision) != m.Others
			if !selected || (len(m.From) > 0 && !slices.Contains(m.From, f.outcome)) || f.outcome == m.To {
				continue
			}
			if !f.outcome.CanTransitionTo(m.To) {
				return nil, lifecycle.Errorf(lifecycle.EINTERNAL, "revision %d of deployment %s: outcome %s -> %s is not a transition of the revision life cycle",
					n, c.After.ID, f.outcome, m.To)
			}
			f.outcome = m.To
			if m.To == lifecycle.OutcomeActive && f.installed == nil {
				f.installed = &now
			}
		}
	}
	return f, nil
}

// cols gathers the rows of a set-based statement column by column: add
// takes one row's values, args returns one slice per column (pgx encodes
// each as an array for unnest).
type cols struct {
	n    int
	cols [][]any
}

func (a *cols) add(vals ...any) {
	if a.cols == nil {
		a.cols = make([][]any, len(vals))
	}
	for i, v := range vals {
		a.cols[i] = append(a.cols[i], v)
	}
	a.n++
}

func (a *cols) args() []any {
	out := make([]any, len(a.cols))
	for i, c := range a.cols {
		out[i] = typed(c)
	}
	return out
}

// typed turns a column of values of one Go type into a slice of that type,
// which pgx encodes as a PostgreSQL array.
func typed(c []any) any {
	switch c[0].(type) {
	case string:
		return column[string](c)
	case int32:
		return column[int32](c)
	case int64:
		return column[int64](c)
	case float64:
		return column[float64](c)
	case bool:
		return column[bool](c)
	case time.Time:
		return column[time.Time](c)
	case *time.Time:
		return column[*time.Time](c)
	case []byte:
		return column[[]byte](c)
	}
	panic(fmt.Sprintf("applier: no array type for %T", c[0]))
}

func column[T any](c []any) []T {
	out := make([]T, len(c))
	for i, v := range c {
		out[i] = v.(T)
	}
	return out
}

func outcomeStrings(os []lifecycle.RevisionOutcome) []string {
	out := make([]string, len(os))
	for i, o := range os {
		out[i] = string(o)
	}
	return out
}

func stepStrings(ss []lifecycle.StepState) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// reportStatement renders the status-report hot path's change into one
// statement, for optimistic concurrency: every data-modifying part hangs on
// the deployment's UPDATE (u) guarded by the generation read (d), so that
// nothing is written if anything changed the deployment since. It stores
// the report (stale as decided), and, when the change moves the state, the
// new state, the history row, the outcome moves and the events (nev of
// them), inserted as AppendEvents does. With keep > 0 it also deletes the
// deployment's reports but the newest keep. The statement answers the
// number of deployments updated (0 or 1) and of events inserted.
func reportStatement(c *lifecycle.Change, d fleet.Deployment, r *margo.StatusReport, stale bool, keep int) (query string, args []any, nev int, err error) {
	adopted := max(d.NewestAdopted, r.AdoptedManifestVersion)
	args = []any{d.ID, int64(adopted), c.At, d.Generation, int64(r.AdoptedManifestVersion), string(r.State), stale, string(r.JSON)}
	set := `newest_adopted = $2, reports = reports + 1, updated_at = $3, generation = generation + 1`
	var ctes []string
	param := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if err := reportShape(c, d.ID); err != nil {
		return "", nil, 0, err
	}
	for _, m := range c.Moves {
		to := param(string(m.To))
		set += `, state = ` + to + `, state_reason = ` + param(m.Reason) + `, state_changed_at = $3`
		if c.After.InstalledRevision != c.Before.InstalledRevision {
			set += `, installed_revision = ` + param(c.After.InstalledRevision)
		}
		ctes = append(ctes, `hist AS (INSERT INTO deployment_history (deployment_id, at, from_state, to_state, cause, revision, reason)
    SELECT id, $3, `+param(string(m.From))+`, `+to+`, `+param(m.Cause)+`, `+param(m.Revision)+`, `+param(m.Reason)+` FROM u)`)
	}
	for i, m := range c.Outcomes {
		ctes = append(ctes, fmt.Sprintf(`rev%d AS (UPDATE revisions SET outcome = %[2]s,
    installed_at = CASE WHEN %[2]s::text = %[3]s::text THEN coalesce(installed_at, $3) ELSE installed_at END
    WHERE deployment_id = $1 AND (n = %[4]s::int) <> %[5]s::boolean AND (cardinality(%[6]s::text[]) = 0 OR outcome = ANY(%[6]s)) AND outcome <> %[2]s
    AND EXISTS (SELECT 1 FROM u))`, i, param(string(m.To)), param(string(lifecycle.OutcomeActive)), param(m.Revision), param(m.Others),
			param(outcomeStrings(m.From))))
	}
	if keep > 0 {
		// The delete does not see the report this statement inserts:
		// keep keep-1 older ones besides it.
		ctes = append(ctes, `ret AS (DELETE FROM status_reports WHERE deployment_id = $1 AND EXISTS (SELECT 1 FROM u) AND id <= (
    SELECT id FROM status_reports WHERE deployment_id = $1 ORDER BY id DESC OFFSET `+param(keep-1)+` LIMIT 1))`)
	}
	count := "0"
	if evs, err := c.Events(0); err != nil {
		return "", nil, 0, err
	} else if len(evs) > 0 {
		ea, err := eventArgs(evs)
		if err != nil {
			return "", nil, 0, err
		}
		ctes = append(ctes, sqlInsertEvents(len(args)+1, "EXISTS (SELECT 1 FROM u)"))
		args = append(args, ea...)
		count, nev = "(SELECT count(*) FROM ev)", len(evs)
	}
	query = `WITH u AS (UPDATE deployments SET ` + set + ` WHERE id = $1 AND generation = $4 RETURNING id),
ins AS (INSERT INTO status_reports (deployment_id, received_at, adopted_manifest_version, state, stale, report)
    SELECT id, $3, $5, $6, $7, $8::json FROM u)`
	for _, c := range ctes {
		query += ",\n" + c
	}
	query += "\nSELECT (SELECT count(*) FROM u), " + count
	return query, args, nev, nil
}

// createdVisit is what a scheduler visit of an operation created by change
// c in state would record, when it is known without one: an install that
// its creation started (published with the new deployment, generation 1)
// waits for the device; until a report changes the deployment or its
// deadline passes, lifecycle.DecideVisit decides nothing (its Recheck is the
// deadline), so the operation is recorded as visited at generation 1 with
// that recheck, capped by the scheduler's safety net (fleet.RevisitBound).
// Any other operation is left unvisited (0, nil): due at the next pass. A
// later change of the deployment in the same batch bumps its generation,
// which makes the operation due again.
func createdVisit(c *lifecycle.Change, state lifecycle.OperationState, deadline, now time.Time) (int64, *time.Time) {
	if !c.Create || state != lifecycle.OperationRunning {
		return 0, nil
	}
	recheck := now.Add(fleet.RevisitBound)
	if deadline.Before(recheck) {
		recheck = deadline
	}
	return 1, &recheck
}

// recordVisit writes what a scheduler visit of operation id saw: the
// deployment generation and the instant after which it is due again (see
// ActiveOperations). With unchanged set, only while the operation row is as
// the visit read it (a visit that decided nothing, outside any
// transaction); without, unconditionally (in a visit's transaction).
func recordVisit(ctx context.Context, db execer, id string, generation int64, recheck time.Time, unchanged *time.Time) error {
	_, err := db.Exec(ctx, `UPDATE operations SET visited_generation = $2, recheck_at = $3 WHERE id = $1 AND ($4::timestamptz IS NULL OR updated_at = $4)`,
		id, generation, recheck, unchanged)
	return err
}

// reportWrite is one status report of a batch (RecordReports), as
// queueReports writes it: the report's change (at most one state move and
// its outcome moves), the deployment as read under its lock, the report,
// whether it is stale, and keep (> 0: prune the deployment's reports to
// the newest keep).
type reportWrite struct {
	c     *lifecycle.Change
	d     fleet.Deployment
	r     *margo.StatusReport
	stale bool
	keep  int
}

const (
	// sqlRecordReports writes the reports of a batch, one per deployment
	// (their rows locked): each deployment row (newest adopted, report
	// count, generation and, for a report that moves the state, the state,
	// its reason and instant, the installed revision: to_state '' and
	// installed -1 leave them) and each report row. It answers the number of
	// deployments updated.
	sqlRecordReports = `
WITH v AS (
    SELECT * FROM unnest($1::text[]::uuid[], $2::bigint[], $3::timestamptz[], $4::bigint[], $5::text[], $6::bool[], $7::text[], $8::text[], $9::text[],
        $10::int[]) WITH ORDINALITY AS v(id, newest, at, adopted, reported, stale, report, to_state, reason, installed, ord)
),
u AS (
    UPDATE deployments d SET newest_adopted = v.newest, reports = d.reports + 1, updated_at = v.at, generation = d.generation + 1,
        state = CASE WHEN v.to_state = '' THEN d.state ELSE v.to_state END,
        state_reason = CASE WHEN v.to_state = '' THEN d.state_reason ELSE v.reason END,
        state_changed_at = CASE WHEN v.to_state = '' THEN d.state_changed_at ELSE v.at END,
        installed_revision = CASE WHEN v.installed < 0 THEN d.installed_revision ELSE v.installed END
    FROM v WHERE d.id = v.id
    RETURNING d.id
),
ins AS (
    INSERT INTO status_reports (deployment_id, received_at, adopted_manifest_version, state, stale, report)
    SELECT v.id, v.at, v.adopted, v.reported, v.stale, v.report::json FROM v ORDER BY v.ord
)
SELECT count(*) FROM u`
)

// sqlPruneReports deletes the reports of deployments $1 but the newest
// $2 of each (the status-report retention).
var sqlPruneReports = `
DELETE FROM status_reports s USING ` + sqlOldReports("$1", "$2") + `
WHERE s.deployment_id = old.deployment_id AND s.id = old.id`

// sqlOldReports is the reports of the deployments ids (a uuid[]
// parameter) but the newest keep of each, as the relation old(deployment_id,
// id): what the status-report retention deletes.
func sqlOldReports(ids, keep string) string {
	return `(SELECT deployment_id, id FROM (
    SELECT deployment_id, id, row_number() OVER (PARTITION BY deployment_id ORDER BY id DESC) AS rn
    FROM status_reports WHERE deployment_id = ANY(` + ids + `::uuid[])
) x WHERE x.rn > ` + keep + `) old`
}

// reportShape refuses a change of deployment id that does more than a
// report may: move the state once and the revisions' outcomes (a caller's
// bug).
func reportShape(c *lifecycle.Change, id string) error {
	if len(c.Moves) > 1 || c.Revision != nil || c.Manifest || len(c.Operations) > 0 || len(c.Steps) > 0 {
		return fmt.Errorf("deployment %s: a report's change only moves the state and outcomes", id)
	}
	return nil
}

// queueReports queues on q the writes of a batch of status reports of
// distinct deployments, whose rows the caller holds locked: the deployment
// and report rows in one set-based statement (sqlRecordReports), the
// history rows of the state moves, the outcome moves (the n-th of every
// report together), the retention deletes and every report's events. The
// statements run in q's order, in the caller's transaction.
//
// Returns an error if a report's change does more than move the state and
// outcomes (the caller's bug); the statements fail the batch if a
// deployment row was not updated or the events break their bounds.
func queueReports(q *pgx.Batch, ws []reportWrite) error {
	var rows, hist cols
	var prune []string
	keep := 0
	var events []lifecycle.Event
	for _, w := range ws {
		c, d, r := w.c, w.d, w.r
		if err := reportShape(c, d.ID); err != nil {
			return err
		}
		to, reason, installed := "", "", int32(-1)
		for _, m := range c.Moves {
			to, reason = string(m.To), m.Reason
			if c.After.InstalledRevision != c.Before.InstalledRevision {
				installed = int32(c.After.InstalledRevision)
			}
			hist.add(d.ID, c.At, string(m.From), string(m.To), m.Cause, int32(m.Revision), m.Reason)
		}
		rows.add(d.ID, int64(max(d.NewestAdopted, r.AdoptedManifestVersion)), c.At, int64(r.AdoptedManifestVersion), string(r.State), w.stale,
			string(r.JSON), to, reason, installed)
		if w.keep > 0 {
			prune, keep = append(prune, d.ID), w.keep
		}
		evs, err := c.Events(0)
		if err != nil {
			return err
		}
		events = append(events, evs...)
	}
	n := rows.n
	q.Queue(sqlRecordReports, rows.args()...).QueryRow(func(row pgx.Row) error {
		var updated int
		if err := row.Scan(&updated); err != nil {
			return err
		}
		if updated != n {
			return fmt.Errorf("%d of %d deployments updated by their reports", updated, n)
		}
		return nil
	})
	if hist.n > 0 {
		queueExec(q, hist.n, fmt.Errorf("%d history rows inserted as other rows", hist.n), sqlInsertHistory, hist.args()...)
	}
	for i := 0; ; i++ {
		var a cols
		for _, w := range ws {
			if i < len(w.c.Outcomes) {
				m := w.c.Outcomes[i]
				a.add(w.d.ID, int32(m.Revision), string(m.To), m.Others, w.c.At, strings.Join(outcomeStrings(m.From), ","))
			}
		}
		if a.n == 0 {
			break
		}
		queueExec(q, -1, nil, moveStatement(sqlMoveOutcomes, sqlMoveOutcomesKeyed, a.n), append(a.args(), string(lifecycle.OutcomeActive))...)
	}
	if len(prune) > 0 {
		queueExec(q, -1, nil, sqlPruneReports, prune, keep)
	}
	if len(events) > 0 {
		if err := queueAppendEvents(q, events); err != nil {
			return err
		}
	}
	return nil
}

// sqlRecordReportsGuarded is sqlRecordReports for reports that move no
// state, each guarded by the generation its decision saw, as one
// statement outside any explicit transaction (optimistic, as
// reportStatement): a deployment changed since is not updated, and
// neither its report stored nor its reports pruned. Deployments $9 keep
// their newest $10 older reports besides the one stored (the delete does
// not see it). It answers the ids of the deployments updated.
var sqlRecordReportsGuarded = `
WITH v AS (
    SELECT * FROM unnest($1::text[]::uuid[], $2::bigint[], $3::timestamptz[], $4::bigint[], $5::text[], $6::bool[], $7::text[], $8::bigint[])
        WITH ORDINALITY AS v(id, newest, at, adopted, reported, stale, report, generation, ord)
),
u AS (
    UPDATE deployments d SET newest_adopted = v.newest, reports = d.reports + 1, updated_at = v.at, generation = d.generation + 1
    FROM v WHERE d.id = v.id AND d.generation = v.generation
    RETURNING d.id
),
ins AS (
    INSERT INTO status_reports (deployment_id, received_at, adopted_manifest_version, state, stale, report)
    SELECT v.id, v.at, v.adopted, v.reported, v.stale, v.report::json FROM v JOIN u ON u.id = v.id ORDER BY v.ord
),
ret AS (
    DELETE FROM status_reports s USING ` + sqlOldReports("$9", "$10") + `
    WHERE s.deployment_id = old.deployment_id AND s.id = old.id AND s.deployment_id IN (SELECT id FROM u)
)
SELECT id::text FROM u`

// recordGuarded writes, in one statement (sqlRecordReportsGuarded), reports
// whose changes move no state, each guarded by the generation of the row
// its decision saw, and returns the ids of the deployments updated: the
// others changed meanwhile and wrote nothing. The statement runs in a
// transaction of its own whose BEGIN, generic-plan setting
// (sqlGenericPlans) and COMMIT travel with it, one round trip. Left to
// choose, PostgreSQL plans the statement anew for its first executions on
// a connection and, when it judges a custom plan for the arrays at hand
// cheaper than the generic one, for every later execution too: under
// wfm-bench -only status, planning was 43% of the backends' CPU (perf).
func recordGuarded(ctx context.Context, db batchSender, ws []reportWrite) (map[string]bool, error) {
	var a cols
	prune, keep := []string{}, 0
	for _, w := range ws {
		c, d, r := w.c, w.d, w.r
		if len(c.Moves) > 0 || len(c.Outcomes) > 0 || c.Revision != nil || c.Manifest || len(c.Operations) > 0 || len(c.Steps) > 0 {
			return nil, fmt.Errorf("deployment %s: a guarded report's change moves nothing", d.ID)
		}
		a.add(d.ID, int64(max(d.NewestAdopted, r.AdoptedManifestVersion)), c.At, int64(r.AdoptedManifestVersion), string(r.State), w.stale,
			string(r.JSON), d.Generation)
		if w.keep > 0 {
			prune, keep = append(prune, d.ID), w.keep-1
		}
	}
	var ids []string
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(sqlGenericPlans)
	b.Queue(sqlRecordReportsGuarded, append(a.args(), prune, keep)...).Query(func(rows pgx.Rows) error {
		var err error
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	b.Queue("COMMIT")
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, atCommit(err) // the COMMIT travels with the statement
	}
	applied := make(map[string]bool, len(ids))
	for _, id := range ids {
		applied[id] = true
	}
	return applied, nil
}

// batchSender sends a pgx.Batch: a pool or a connection.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// queueAppendEvents queues the insert of events (sqlAppendEvents) in q,
// checking that every one was appended.
func queueAppendEvents(q *pgx.Batch, events []lifecycle.Event) error {
	args, err := eventArgs(events)
	if err != nil {
		return err
	}
	q.Queue(sqlAppendEvents, args...).Query(func(rows pgx.Rows) error {
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("append events: %w", err)
		}
		if n != len(events) {
			return errEventBounds(n, len(events))
		}
		return nil
	})
	return nil
}
