package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
)

// SchedulerChannel is the LISTEN/NOTIFY channel that wakes schedulers when
// an operation is created or a report may let one advance.
const SchedulerChannel = "wfm_operations"

const sqlOperationColumns = `id::text, deployment_id::text, type, state, reason, from_version, to_version, parameters::text, profile_id,
strategy, drain::text, on_failure, (extract(epoch FROM step_timeout) * 1000)::bigint, forced, force_reason, requested_by, base_revision,
restore_revision, follow_up::text, deadline, created_at, updated_at, finished_at`

func scanOperation(row pgx.Row) (fleet.Operation, error) {
	var o fleet.Operation
	var typ, from, to, params, strategy string
	var drain, followUp *string
	var stepSecs int64
	var restore *int32
	var finished *time.Time
	if err := row.Scan(&o.ID, &o.DeploymentID, &typ, &o.State, &o.Reason, &from, &to, &params, &o.ProfileID, &strategy, &drain,
		&o.OnFailure, &stepSecs, &o.Forced, &o.ForceReason, &o.RequestedBy, &o.BaseRevision, &restore, &followUp,
		&o.Deadline, &o.CreatedAt, &o.UpdatedAt, &finished); err != nil {
		return o, err
	}
	var err error
	if o.FromVersion, err = lifecycle.ParseVersion(from); err != nil {
		return o, err
	}
	if o.ToVersion, err = lifecycle.ParseVersion(to); err != nil {
		return o, err
	}
	o.Type, o.Strategy, o.StepTimeout = lifecycle.OperationKind(typ), lifecycle.Strategy(strategy), time.Duration(stepSecs)*time.Millisecond
	if drain != nil {
		var d drainJSON
		if err := json.Unmarshal([]byte(*drain), &d); err != nil {
			return o, err
		}
		o.Drain = d.policy()
	}
	if restore != nil {
		o.RestoreRevision = int(*restore)
	}
	if followUp != nil {
		o.FollowUp = *followUp
	}
	if finished != nil {
		o.FinishedAt = *finished
	}
	return o, json.Unmarshal([]byte(params), &o.Parameters)
}

type drainJSON struct {
	Required  bool   `json:"required"`
	Timeout   string `json:"timeout"`
	OnTimeout string `json:"onTimeout"`
}

func (d drainJSON) policy() *lifecycle.DrainPolicy {
	t, _ := time.ParseDuration(d.Timeout)
	return &lifecycle.DrainPolicy{Required: d.Required, Timeout: t, OnTimeout: lifecycle.OnTimeout(d.OnTimeout)}
}

func drainValue(d *lifecycle.DrainPolicy) *string {
	if d == nil {
		return nil
	}
	b, _ := json.Marshal(drainJSON{Required: d.Required, Timeout: d.EffectiveTimeout().String(), OnTimeout: string(d.EffectiveOnTimeout())})
	s := string(b)
	return &s
}

func loadSteps(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, o *fleet.Operation) error {
	rows, err := q.Query(ctx, `SELECT n, version, revision, state, published_at, finished_at FROM operation_steps WHERE operation_id = $1 ORDER BY n`, o.ID)
	if err != nil {
		return err
	}
	steps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fleet.Step, error) {
		var s fleet.Step
		var version string
		var rev *int32
		var pub, fin *time.Time
		if err := r.Scan(&s.N, &version, &rev, &s.State, &pub, &fin); err != nil {
			return s, err
		}
		v, err := lifecycle.ParseVersion(version)
		if err != nil {
			return s, err
		}
		s.Version = v
		if rev != nil {
			s.Revision = int(*rev)
		}
		if pub != nil {
			s.PublishedAt = *pub
		}
		if fin != nil {
			s.FinishedAt = *fin
		}
		return s, nil
	})
	o.Steps = steps
	return err
}

// CreateOperation implements fleet.Store.
func (s *FleetStore) CreateOperation(ctx context.Context, op fleet.Operation, check func(fleet.Deployment) error, now time.Time) (fleet.Operation, error) {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		d, err := lockDeployment(ctx, tx, op.DeploymentID, "")
		if err != nil {
			return err
		}
		var active string
		err = tx.QueryRow(ctx, `SELECT id::text FROM operations WHERE deployment_id = $1 AND state IN ('queued', 'running')`, d.ID).Scan(&active)
		if err == nil {
			return operationInProgress(d.ID, active)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err := check(d); err != nil {
			return err
		}
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
VALUES ($1, $2, $3, 'queued', $4, $5, $6::jsonb, $7, $8, $9::jsonb, $10, make_interval(secs => $11), $12, $13, $14, $15, $16, $17, $18, $18)`,
			op.ID, d.ID, string(op.Type), op.FromVersion.String(), op.ToVersion.String(), string(params), op.ProfileID, string(op.Strategy),
			drainValue(op.Drain), op.OnFailure, op.StepTimeout.Seconds(), op.Forced, op.ForceReason, op.RequestedBy, d.Revision, restore, op.Deadline, now)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" { // a concurrent request won the one-active-operation index
			return operationInProgress(d.ID, "")
		}
		if err != nil {
			return err
		}
		for _, st := range op.Steps {
			if _, err := tx.Exec(ctx, `INSERT INTO operation_steps (operation_id, n, version, state) VALUES ($1, $2, $3, 'pending')`, op.ID, st.N, st.Version.String()); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify('`+SchedulerChannel+`', $1)`, op.ID)
		return err
	})
	if err != nil {
		return fleet.Operation{}, translate(err)
	}
	return s.Operation(ctx, op.ID)
}

func operationInProgress(deploymentID, active string) error {
	msg := "Deployment " + deploymentID + " already has an operation in progress"
	extra := map[string]any{"deploymentId": deploymentID}
	if active != "" {
		msg += ": " + active + " (GET /mgmt/v1/operations/" + active + "; cancel it or wait for it to end)"
		extra["activeOperation"] = active
	}
	return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "operation-in-progress", Message: msg + ".", Extra: extra}
}

// Operation implements fleet.Store.
func (s *FleetStore) Operation(ctx context.Context, id string) (fleet.Operation, error) {
	if !validUUID(id) {
		return fleet.Operation{}, notFound("There is no operation %s.", id)
	}
	o, err := scanOperation(s.pool.QueryRow(ctx, `SELECT `+sqlOperationColumns+` FROM operations WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return o, notFound("There is no operation %s.", id)
	}
	if err != nil {
		return o, translate(err)
	}
	return o, translate(loadSteps(ctx, s.pool, &o))
}

// Operations implements fleet.Store.
func (s *FleetStore) Operations(ctx context.Context, f fleet.OperationFilter, after string, limit int) ([]fleet.Operation, error) {
	var w where
	if f.DeploymentID != "" {
		if !validUUID(f.DeploymentID) {
			return nil, nil
		}
		w.add("deployment_id = $?::uuid", f.DeploymentID)
	}
	if f.State != "" {
		w.add("state = $?", f.State)
	}
	if err := w.beforeCursor(after, "created_at", "id"); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sqlOperationColumns+` FROM operations WHERE `+w.sql()+
		` ORDER BY created_at DESC, id DESC LIMIT `+w.limit(limit), w.args...)
	if err != nil {
		return nil, translate(err)
	}
	ops, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fleet.Operation, error) { return scanOperation(r) })
	if err != nil {
		return nil, translate(err)
	}
	for i := range ops {
		if err := loadSteps(ctx, s.pool, &ops[i]); err != nil {
			return nil, translate(err)
		}
	}
	return ops, nil
}

// CancelOperation implements fleet.Store.
func (s *FleetStore) CancelOperation(ctx context.Context, id string, reason string, now time.Time) (fleet.Operation, error) {
	if !validUUID(id) {
		return fleet.Operation{}, notFound("There is no operation %s.", id)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var state lifecycle.OperationState
		var depID string
		err := tx.QueryRow(ctx, `SELECT state, deployment_id::text FROM operations WHERE id = $1 FOR UPDATE`, id).Scan(&state, &depID)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("There is no operation %s.", id)
		}
		if err != nil {
			return err
		}
		if !state.Active() {
			return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "operation-ended", Message: "Operation " + id + " already ended (" + string(state) + ")."}
		}
		// A published step the device has not finished leaves nothing to wait
		// for once the operation ends: the deployment fails, so that a person
		// (or a new operation) decides, instead of staying in progress.
		var published bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM operation_steps WHERE operation_id = $1 AND state = 'published')`, id).Scan(&published); err != nil {
			return err
		}
		d, err := lockDeployment(ctx, tx, depID, "")
		if err != nil {
			return err
		}
		if published && !d.State.Settled() && lifecycle.CanTransition(d.State, lifecycle.StateFailed) {
			msg := "Operation " + id + " was " + reason + " before the device finished revision " + strconv.Itoa(d.Revision) + "."
			if _, err := tx.Exec(ctx, `UPDATE deployments SET state = 'failed', state_reason = $2, state_changed_at = $3, updated_at = $3,
generation = generation + 1 WHERE id = $1`, d.ID, msg, now); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE revisions SET outcome = 'failed' WHERE deployment_id = $1 AND n = $2 AND outcome = 'pending'`, d.ID, d.Revision); err != nil {
				return err
			}
			if err := appendHistory(ctx, tx, d.ID, d.State, lifecycle.StateFailed, fleet.CauseOperator, d.Revision, msg, now); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE operations SET state = 'cancelled', reason = $2, updated_at = $3, finished_at = $3 WHERE id = $1`, id, reason, now); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE operation_steps SET state = 'cancelled', finished_at = $2 WHERE operation_id = $1 AND state IN ('pending', 'published')`, id, now)
		return err
	})
	if err != nil {
		return fleet.Operation{}, translate(err)
	}
	return s.Operation(ctx, id)
}

// ActiveOperation implements fleet.Store.
func (s *FleetStore) ActiveOperation(ctx context.Context, deploymentID string) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `SELECT id::text FROM operations WHERE deployment_id = $1 AND state IN ('queued', 'running')`, deploymentID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, translate(err)
}

// ActiveOperations implements fleet.Store.
func (s *FleetStore) ActiveOperations(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id::text FROM operations WHERE state IN ('queued', 'running') ORDER BY deadline LIMIT $1`, limit)
	if err != nil {
		return nil, translate(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, translate(err)
}

// AdvanceOperation implements fleet.Store. It claims the operation with
// FOR UPDATE SKIP LOCKED, so that several schedulers (server processes)
// never work on one operation at once: a held one is skipped (visited false).
func (s *FleetStore) AdvanceOperation(ctx context.Context, id string, decide func(fleet.Visit) (fleet.Advance, error), now time.Time) (bool, error) {
	visited := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		op, err := scanOperation(tx.QueryRow(ctx, `SELECT `+sqlOperationColumns+` FROM operations WHERE id = $1 AND state IN ('queued', 'running') FOR UPDATE SKIP LOCKED`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // ended, or another scheduler holds it
		}
		if err != nil {
			return err
		}
		visited = true
		if err := loadSteps(ctx, tx, &op); err != nil {
			return err
		}
		d, err := lockDeployment(ctx, tx, op.DeploymentID, "")
		if err != nil {
			return err
		}
		v := fleet.Visit{Op: op, Deployment: d, Revisions: map[int]fleet.Revision{}}
		if err := tx.QueryRow(ctx, `SELECT max(n) FROM revisions WHERE deployment_id = $1`, d.ID).Scan(&v.LastRevision); err != nil {
			return err
		}
		for _, n := range []int{op.BaseRevision, d.Revision, op.RestoreRevision, d.InstalledRevision} {
			if n <= 0 {
				continue
			}
			if _, ok := v.Revisions[n]; ok {
				continue
			}
			r, err := scanRevision(tx.QueryRow(ctx, `SELECT `+sqlRevisionColumns+` FROM revisions WHERE deployment_id = $1 AND n = $2`, d.ID, n))
			if err != nil {
				return err
			}
			v.Revisions[n] = r
		}
		var phase *string
		err = tx.QueryRow(ctx, `SELECT report->'x-wfm-extensions'->>'phase' FROM status_reports WHERE deployment_id = $1 ORDER BY id DESC LIMIT 1`, d.ID).Scan(&phase)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if phase != nil {
			v.LastPhase = *phase
		}
		adv, err := decide(v)
		if err != nil {
			return err
		}
		return s.apply(ctx, tx, v, adv, now)
	})
	return visited, translate(err)
}

// apply writes one scheduler decision.
func (s *FleetStore) apply(ctx context.Context, tx pgx.Tx, v fleet.Visit, a fleet.Advance, now time.Time) error {
	op, d := v.Op, v.Deployment
	if a.StepInstalled > 0 {
		if _, err := tx.Exec(ctx, `UPDATE operation_steps SET state = 'installed', finished_at = $3 WHERE operation_id = $1 AND n = $2`, op.ID, a.StepInstalled, now); err != nil {
			return err
		}
	}
	state := op.State
	if a.Publish != nil {
		if err := s.publishRevision(ctx, tx, op, d, *a.Publish, now); err != nil {
			return err
		}
		state = lifecycle.OperationRunning
	}
	if a.RevertTo > 0 {
		if err := revert(ctx, tx, d, a.RevertTo, a.Reason, now); err != nil {
			return err
		}
	}
	if a.FailDeployment && d.State != lifecycle.StateFailed && lifecycle.CanTransition(d.State, lifecycle.StateFailed) {
		if _, err := tx.Exec(ctx, `UPDATE deployments SET state = 'failed', state_reason = $2, state_changed_at = $3, updated_at = $3,
generation = generation + 1 WHERE id = $1`, d.ID, a.Reason, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE revisions SET outcome = 'failed' WHERE deployment_id = $1 AND n = $2 AND outcome = 'pending'`, d.ID, d.Revision); err != nil {
			return err
		}
		if err := appendHistory(ctx, tx, d.ID, d.State, lifecycle.StateFailed, fleet.CauseDeadline, d.Revision, a.Reason, now); err != nil {
			return err
		}
	}
	followUp := op.FollowUp
	if a.FollowUp != nil {
		f := *a.FollowUp
		params, err := json.Marshal(f.Parameters)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE operations SET state = $2, reason = $3, updated_at = $4, finished_at = $4 WHERE id = $1`,
			op.ID, a.Finish, a.Reason, now); err != nil { // end this one first: one active operation per deployment
			return err
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO operations (id, deployment_id, type, state, from_version, to_version, parameters, profile_id, strategy, drain, on_failure,
    step_timeout, forced, force_reason, requested_by, base_revision, restore_revision, deadline, created_at, updated_at)
VALUES ($1, $2, $3, 'queued', $4, $5, $6::jsonb, $7, $8, NULL, 'halt', make_interval(secs => $9), false, '', $10, $11, $12, $13, $14, $14)`,
			f.ID, d.ID, string(f.Type), f.FromVersion.String(), f.ToVersion.String(), string(params), f.ProfileID, string(f.Strategy),
			f.StepTimeout.Seconds(), f.RequestedBy, d.Revision, f.RestoreRevision, f.Deadline, now); err != nil {
			return err
		}
		for _, st := range f.Steps {
			if _, err := tx.Exec(ctx, `INSERT INTO operation_steps (operation_id, n, version, state) VALUES ($1, $2, $3, 'pending')`, f.ID, st.N, st.Version.String()); err != nil {
				return err
			}
		}
		followUp = f.ID
	}
	if a.Finish != "" {
		// The steps end with the operation. A succeeded one has every step
		// installed already (decide); failing its other steps first would
		// take failed -> installed, which the step life cycle refuses.
		if a.Finish == lifecycle.OperationSucceeded {
			if _, err := tx.Exec(ctx, `UPDATE operation_steps SET state = 'installed', finished_at = coalesce(finished_at, $2) WHERE operation_id = $1`, op.ID, now); err != nil {
				return err
			}
		} else if _, err := tx.Exec(ctx, `UPDATE operation_steps SET state = CASE WHEN $2 = 'cancelled' THEN 'cancelled' ELSE 'failed' END, finished_at = $3
WHERE operation_id = $1 AND state IN ('pending', 'published')`, op.ID, a.Finish, now); err != nil {
			return err
		}
		state = a.Finish
	}
	deadline := op.Deadline
	if !a.Deadline.IsZero() {
		deadline = a.Deadline
	}
	var finished *time.Time
	if state.Terminal() {
		finished = &now
	}
	var fu *string
	if followUp != "" {
		fu = &followUp
	}
	if a.FollowUp != nil {
		_, err := tx.Exec(ctx, `UPDATE operations SET follow_up = $2::uuid WHERE id = $1`, op.ID, fu)
		if err == nil {
			_, err = tx.Exec(ctx, `SELECT pg_notify('`+SchedulerChannel+`', $1)`, a.FollowUp.ID)
		}
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE operations SET state = $2, reason = CASE WHEN $3 = '' THEN reason ELSE $3 END, deadline = $4, updated_at = $5,
finished_at = $6, follow_up = $7::uuid WHERE id = $1`, op.ID, state, a.Reason, deadline, now, finished, fu)
	return err
}

// publishRevision stores a step's revision, makes it desired and publishes
// the client's manifest.
func (s *FleetStore) publishRevision(ctx context.Context, tx pgx.Tx, op fleet.Operation, d fleet.Deployment, p fleet.Publication, now time.Time) error {
	next, err := lifecycle.Publish(d.State, p.Kind)
	if err != nil {
		return err
	}
	v, err := bumpManifest(ctx, tx, d.ClientID)
	if err != nil {
		return err
	}
	n := p.Revision
	params, err := json.Marshal(p.Parameters)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `
INSERT INTO revisions (deployment_id, n, application_id, version, profile_id, parameters, operation, outcome, components, yaml, digest,
    manifest_version, created_at, operation_id, forced, force_reason, strategy)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, 'pending', $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
		d.ID, n, d.ApplicationID, p.Version.String(), p.ProfileID, string(params), string(p.Kind), p.Components, p.YAML, margo.Digest(p.YAML),
		int64(v), now, op.ID, p.Forced, p.ForceReason, string(p.Strategy)); err != nil {
		return err
	}
	// A revision published but never installed is superseded by the next.
	if _, err := tx.Exec(ctx, `UPDATE revisions SET outcome = 'superseded' WHERE deployment_id = $1 AND n < $2 AND outcome = 'pending'`, d.ID, n); err != nil {
		return err
	}
	reason := fmt.Sprintf("%s to %s published as revision %d (operation %s, step %d).", p.Kind, p.Version, n, op.ID, p.Step)
	if _, err := tx.Exec(ctx, `UPDATE deployments SET revision = $2, desired_since = $3, state = $4, state_reason = $5, state_changed_at = $6,
updated_at = $6, generation = generation + 1 WHERE id = $1`, d.ID, n, int64(v), string(next), reason, now); err != nil {
		return err
	}
	if next != d.State {
		if err := appendHistory(ctx, tx, d.ID, d.State, next, fleet.CauseOperation, n, reason, now); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE operation_steps SET state = 'published', revision = $3, published_at = $4 WHERE operation_id = $1 AND n = $2`,
		op.ID, p.Step, n, now); err != nil {
		return err
	}
	return renderManifest(ctx, tx, d.ClientID, v, now)
}

// revert makes an earlier revision desired again (the device kept running
// it) and publishes the manifest.
func revert(ctx context.Context, tx pgx.Tx, d fleet.Deployment, to int, reason string, now time.Time) error {
	v, err := bumpManifest(ctx, tx, d.ClientID)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE revisions SET outcome = 'failed' WHERE deployment_id = $1 AND n = $2`, d.ID, d.Revision); err != nil {
		return err
	}
	next := lifecycle.StateInstalled
	if d.InstalledRevision != to {
		next = lifecycle.StatePending
	}
	if next != d.State && !lifecycle.CanTransition(d.State, next) {
		return fmt.Errorf("revert of deployment %s: %s -> %s is not a transition", d.ID, d.State, next)
	}
	if _, err := tx.Exec(ctx, `UPDATE deployments SET revision = $2, desired_since = $3, state = $4, state_reason = $5, state_changed_at = $6,
updated_at = $6, generation = generation + 1 WHERE id = $1`, d.ID, to, int64(v), string(next), reason, now); err != nil {
		return err
	}
	if next != d.State {
		if err := appendHistory(ctx, tx, d.ID, d.State, next, fleet.CauseDeadline, to, reason, now); err != nil {
			return err
		}
	}
	return renderManifest(ctx, tx, d.ClientID, v, now)
}
