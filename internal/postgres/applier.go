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
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// followUp links an operation to the one queued after it (onFailure
	// rollback): [operation, follow-up].
	followUp [2]string
	// deadlineOf is the operation whose deadline a change's Deadline sets.
	deadlineOf string
}

// apply writes b in tx: for every client whose manifest changes, one new
// manifest version (clients in id order, the lock order); per change the
// deployment row (guarded by its state as read), its revision, history,
// outcome moves, operations and steps; the manifests; and every change's
// events. The caller holds the deployments' row locks and commits.
//
// Returns an error if a guard fails (the row changed under the decision:
// the caller must roll back) or the database fails.
func apply(ctx context.Context, tx pgx.Tx, b batch) error {
	var clients []string
	for _, c := range b.changes {
		if c.Manifest && !slices.Contains(clients, c.After.ClientID) {
			clients = append(clients, c.After.ClientID)
		}
	}
	slices.Sort(clients)
	versions, err := bumpManifests(ctx, tx, clients, b.changes[0].At)
	if err != nil {
		return err
	}
	var events []lifecycle.Event
	notify := []string{}
	for _, c := range b.changes {
		v := versions[c.After.ClientID]
		if err := applyOne(ctx, tx, c, v, b); err != nil {
			return err
		}
		for _, m := range c.Operations {
			if m.From == "" {
				notify = append(notify, m.ID)
			}
		}
		if !c.Manifest {
			v = 0
		}
		evs, err := c.Events(v)
		if err != nil {
			return err
		}
		events = append(events, evs...)
	}
	if b.followUp[0] != "" {
		if _, err := tx.Exec(ctx, `UPDATE operations SET follow_up = $2::uuid WHERE id = $1`, b.followUp[0], b.followUp[1]); err != nil {
			return err
		}
	}
	if err := publish(ctx, tx, versions, b.changes, b.changes[0].At); err != nil {
		return err
	}
	for _, id := range notify {
		if _, err := tx.Exec(ctx, `SELECT pg_notify('`+SchedulerChannel+`', $1)`, id); err != nil {
			return err
		}
	}
	if err := auditBatch(ctx, tx, b); err != nil { // the management call's audit row, in the change's transaction
		return err
	}
	return AppendEvents(ctx, tx, events)
}

func applyOne(ctx context.Context, tx pgx.Tx, c *lifecycle.Change, v uint64, b batch) error {
	d, now := c.After, c.At
	if d.ID == "" {
		return nil // a change of no deployment (an unregistration without any): manifest and events only
	}
	if c.Create {
		if _, err := tx.Exec(ctx, `
INSERT INTO deployments (id, client_id, device_id, application_id, state, state_reason, state_changed_at, revision, desired_since, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $7, $7)`,
			d.ID, d.ClientID, d.DeviceID, d.ApplicationID, string(d.State), c.Reason, now, d.Revision, int64(v)); err != nil {
			return err
		}
	}
	// Operations before the revision, which may name one created here; in
	// order, so that an operation ends before its successor is inserted.
	for _, m := range c.Operations {
		if m.From == "" {
			op, ok := b.operations[m.ID]
			if !ok {
				return fmt.Errorf("operation %s is created without its row", m.ID)
			}
			if err := insertOperation(ctx, tx, op, m.To, c.Before.Revision, now); err != nil {
				return err
			}
			continue
		}
		var finished *time.Time
		if m.To.Terminal() {
			finished = &now
		}
		tag, err := tx.Exec(ctx, `UPDATE operations SET state = $2, reason = CASE WHEN $3 = '' THEN reason ELSE $3 END, updated_at = $4,
finished_at = $5 WHERE id = $1 AND state = $6`, m.ID, string(m.To), m.Reason, now, finished, string(m.From))
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("operation %s is no longer %s", m.ID, m.From)
		}
	}
	if c.Revision != nil {
		if err := insertRevision(ctx, tx, d, *c.Revision, v, now); err != nil {
			return err
		}
	}
	if !c.Create && c.DeploymentChanged() {
		var installed *int
		if d.InstalledRevision > 0 {
			installed = &d.InstalledRevision
		}
		tag, err := tx.Exec(ctx, `UPDATE deployments SET state = $2, state_reason = CASE WHEN $3 = '' THEN state_reason ELSE $3 END,
state_changed_at = CASE WHEN $4 THEN $5 ELSE state_changed_at END, revision = $6, installed_revision = $7, removing = $8,
desired_since = CASE WHEN $9 > 0 THEN $9 ELSE desired_since END, updated_at = $5, generation = generation + 1
WHERE id = $1 AND state = $10`,
			d.ID, string(d.State), c.Reason, len(c.Moves) > 0, now, d.Revision, installed, d.Removing, int64(v), string(c.Before.State))
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("deployment %s is no longer %s: it changed under its decision", d.ID, c.Before.State)
		}
	}
	for _, m := range c.Moves {
		var from *string
		if m.From != "" {
			s := string(m.From)
			from = &s
		}
		if _, err := tx.Exec(ctx, `INSERT INTO deployment_history (deployment_id, at, from_state, to_state, cause, revision, reason) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			d.ID, now, from, string(m.To), m.Cause, m.Revision, m.Reason); err != nil {
			return err
		}
	}
	for _, m := range c.Outcomes {
		if _, err := tx.Exec(ctx, `UPDATE revisions SET outcome = $3,
    installed_at = CASE WHEN $3::text = $6::text THEN coalesce(installed_at, $5) ELSE installed_at END
WHERE deployment_id = $1 AND (n = $2) <> $4 AND (cardinality($7::text[]) = 0 OR outcome = ANY($7)) AND outcome <> $3`,
			d.ID, m.Revision, string(m.To), m.Others, now, string(lifecycle.OutcomeActive), outcomeStrings(m.From)); err != nil {
			return err
		}
	}
	for _, m := range c.Steps {
		var rev *int
		if m.Revision > 0 {
			rev = &m.Revision
		}
		if _, err := tx.Exec(ctx, `UPDATE operation_steps SET state = $3, revision = coalesce($4, revision),
    published_at = CASE WHEN $3::text = $6::text THEN $5 ELSE published_at END,
    finished_at = CASE WHEN $7 THEN coalesce(finished_at, $5) ELSE finished_at END
WHERE operation_id = $1 AND ($2 = 0 OR n = $2) AND state = ANY($8)`,
			m.OperationID, m.N, string(m.To), rev, now, string(lifecycle.StepPublished), m.To.Terminal(), stepStrings(m.From)); err != nil {
			return err
		}
	}
	if !c.Deadline.IsZero() && b.deadlineOf != "" {
		if _, err := tx.Exec(ctx, `UPDATE operations SET deadline = $2, updated_at = $3 WHERE id = $1`, b.deadlineOf, c.Deadline, now); err != nil {
			return err
		}
	}
	return nil
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

// insertRevision stores a new revision, pending: its content as the change
// says, or copied from revision CopyOf (a revert repeats it byte for byte,
// and keeps when it became installed).
func insertRevision(ctx context.Context, tx pgx.Tx, d lifecycle.Deployment, r lifecycle.NewRevision, v uint64, now time.Time) error {
	var opID *string
	if r.OperationID != "" {
		opID = &r.OperationID
	}
	pending := string(lifecycle.InitialOutcome)
	if r.CopyOf > 0 {
		tag, err := tx.Exec(ctx, `
INSERT INTO revisions (deployment_id, n, application_id, version, profile_id, parameters, operation, outcome, components, digest,
    manifest_version, created_at, operation_id, forced, force_reason, strategy, installed_at)
SELECT deployment_id, $2, application_id, version, profile_id, parameters, operation, $3, components, digest,
    $4, $5, $6, forced, force_reason, strategy, installed_at
FROM revisions WHERE deployment_id = $1 AND n = $7`, d.ID, r.N, pending, int64(v), now, opID, r.CopyOf)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("deployment %s has no revision %d to repeat", d.ID, r.CopyOf)
		}
		return err
	}
	params, err := json.Marshal(r.Parameters)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `
INSERT INTO revisions (deployment_id, n, application_id, version, profile_id, parameters, operation, outcome, components, digest,
    manifest_version, created_at, operation_id, forced, force_reason, strategy)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
		d.ID, r.N, d.ApplicationID, r.Version, r.ProfileID, string(params), string(r.Kind), pending, r.Components, margo.Digest(r.YAML),
		int64(v), now, opID, r.Forced, r.ForceReason, string(r.Strategy))
	return err
}

// insertOperation stores a new operation in state (queued) with its steps
// pending; base is the deployment's desired revision.
func insertOperation(ctx context.Context, tx pgx.Tx, op fleet.Operation, state lifecycle.OperationState, base int, now time.Time) error {
	params, err := json.Marshal(op.Parameters)
	if err != nil {
		return err
	}
	var restore *int
	if op.RestoreRevision > 0 {
		restore = &op.RestoreRevision
	}
	_, err = tx.Exec(ctx, `
INSERT INTO operations (id, deployment_id, type, state, from_version, to_version, parameters, profile_id, strategy, drain, on_failure,
    step_timeout, forced, force_reason, requested_by, base_revision, restore_revision, deadline, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10::jsonb, $11, make_interval(secs => $12), $13, $14, $15, $16, $17, $18, $19, $19)`,
		op.ID, op.DeploymentID, string(op.Type), string(state), op.FromVersion.String(), op.ToVersion.String(), string(params), op.ProfileID,
		string(op.Strategy), drainValue(op.Drain), op.OnFailure, op.StepTimeout.Seconds(), op.Forced, op.ForceReason, op.RequestedBy, base,
		restore, op.Deadline, now)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" { // a concurrent request won the one-active-operation index
		return operationInProgress(op.DeploymentID, "")
	}
	if err != nil {
		return err
	}
	for _, st := range op.Steps {
		if _, err := tx.Exec(ctx, `INSERT INTO operation_steps (operation_id, n, version, state) VALUES ($1, $2, $3, $4)`,
			op.ID, st.N, st.Version.String(), string(lifecycle.StepPending)); err != nil {
			return err
		}
	}
	return nil
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
	if len(c.Moves) > 1 || c.Revision != nil || c.Manifest || len(c.Operations) > 0 || len(c.Steps) > 0 {
		return "", nil, 0, fmt.Errorf("deployment %s: a report's change only moves the state and outcomes", d.ID)
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
