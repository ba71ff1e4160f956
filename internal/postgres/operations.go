package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/sync/errgroup"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// SchedulerChannel is the LISTEN/NOTIFY channel that wakes schedulers when
// a batch of changes leaves a new operation queued (once per batch; the
// payload names one of them and is only informational).
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

// sqlOperationSteps reads an operation's steps in order.
const sqlOperationSteps = `SELECT n, version, revision, state, published_at, finished_at FROM operation_steps WHERE operation_id = $1 ORDER BY n`

func loadSteps(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, o *fleet.Operation) error {
	rows, err := q.Query(ctx, sqlOperationSteps, o.ID)
	if err != nil {
		return err
	}
	o.Steps, err = collectSteps(rows)
	return err
}

// collectSteps reads the rows of sqlOperationSteps.
func collectSteps(rows pgx.Rows) ([]fleet.Step, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (fleet.Step, error) { return scanStep(r) })
}

// readSnapshot runs read in a read-only REPEATABLE READ transaction: an
// operation and its steps, read by several statements, are seen as of one
// instant (at READ COMMITTED a scheduler settling an operation between
// two of them showed it running with its last step installed).
func readSnapshot(ctx context.Context, pool *pgxpool.Pool, read func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, read)
}

// OperationsByID implements fleet.Store: two queries, in one snapshot
// (readSnapshot), whatever the number of ids.
func (s *FleetStore) OperationsByID(ctx context.Context, ids []string) (map[string]fleet.Operation, error) {
	var out map[string]fleet.Operation
	err := readSnapshot(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = operationsByID(ctx, tx, ids, "")
		return err
	})
	return out, translate(err)
}

// operationsByID reads the operations with these ids with their steps, in
// two statements; lock, when not "", is appended to the first (a filter
// and locking clause).
func operationsByID(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, ids []string, lock string) (map[string]fleet.Operation, error) {
	out := make(map[string]fleet.Operation, len(ids))
	valid := validUUIDs(ids)
	if len(valid) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT `+sqlOperationColumns+` FROM operations WHERE id = ANY($1::text[]::uuid[]) `+lock, valid)
	if err != nil {
		return nil, err
	}
	ops, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fleet.Operation, error) { return scanOperation(r) })
	if err != nil {
		return nil, err
	}
	for _, o := range ops {
		out[o.ID] = o
	}
	rows, err = q.Query(ctx, `SELECT operation_id::text, n, version, revision, state, published_at, finished_at FROM operation_steps
WHERE operation_id = ANY($1::text[]::uuid[]) ORDER BY operation_id, n`, valid)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		st, err := scanStep(skipRow{row: rows, lead: []any{&id}})
		if err != nil {
			return nil, err
		}
		if o, ok := out[id]; ok {
			o.Steps = append(o.Steps, st)
			out[id] = o
		}
	}
	return out, rows.Err()
}

// scanStep scans an operation step (n, version, revision, state,
// published_at, finished_at).
func scanStep(r pgx.Row) (fleet.Step, error) {
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
}

// CreateOperation implements fleet.Store.
func (s *FleetStore) CreateOperation(ctx context.Context, op fleet.Operation, check func(fleet.Deployment, fleet.RolloutHold) error, now time.Time) (fleet.Operation, error) {
	var errs []error
	var skipped []bool
	var err error
	for attempt := 0; ; attempt++ {
		errs, skipped, err = s.createOperations(ctx, []fleet.Operation{op}, check, now)
		if err != nil || !skipped[0] || attempt == lockedActiveTries-1 {
			break
		}
		// The active operation was locked by a scheduler settling it (a
		// transaction of milliseconds): look again rather than answer 409.
		select {
		case <-ctx.Done():
			return fleet.Operation{}, ctx.Err()
		case <-time.After(lockedActiveWait):
		}
	}
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		return fleet.Operation{}, err
	}
	return s.Operation(ctx, op.ID)
}

// CreateOperations implements fleet.Store: CreateOperation for many
// deployments (distinct), in one transaction. The deployments are locked
// in the order of their ids (and the manifests' clients, by apply, in
// theirs), and read, with their active operations and rollout holds,
// set-based. An operation refused (by check, or because its deployment has
// another in progress or is gone) gets its error at its index and is not
// created; the others are. The error is for the whole: nothing was created.
func (s *FleetStore) CreateOperations(ctx context.Context, ops []fleet.Operation, check func(fleet.Deployment, fleet.RolloutHold) error, now time.Time) ([]error, error) {
	errs, _, err := s.createOperations(ctx, ops, check, now)
	return errs, err
}

// How CreateOperation looks again when the deployment's active operation
// was locked by another transaction (a scheduler settling it): a single
// call (an upgrade right after the install's report) is not refused for
// the moment of that settlement.
const (
	lockedActiveTries = 4
	lockedActiveWait  = 25 * time.Millisecond
)

// createOperations is CreateOperations; skipped[i] says whether ops[i]
// was refused as in progress because its deployment's active operation
// was locked by another transaction (not waited for).
func (s *FleetStore) createOperations(ctx context.Context, ops []fleet.Operation, check func(fleet.Deployment, fleet.RolloutHold) error, now time.Time) ([]error, []bool, error) {
	skipped := make([]bool, len(ops))
	errs := make([]error, len(ops))
	ids := make([]string, 0, len(ops))
	seen := make(map[string]bool, len(ops))
	for i, op := range ops {
		switch {
		case !validUUID(op.DeploymentID):
			errs[i] = notFound("There is no deployment %s.", op.DeploymentID)
		case seen[op.DeploymentID]:
			return nil, nil, fmt.Errorf("create operations: deployment %s twice in one batch", op.DeploymentID)
		default:
			seen[op.DeploymentID] = true
			ids = append(ids, op.DeploymentID)
		}
	}
	if len(ids) == 0 {
		return errs, skipped, nil
	}
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		clear(errs)
		// Lock first, then read (as lockDeployment does).
		if _, err := tx.Exec(ctx, `SELECT 1 FROM deployments WHERE id = ANY($1::text[]::uuid[]) ORDER BY id FOR UPDATE`, ids); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+sqlDeploymentColumns+`, (SELECT max(n) FROM revisions WHERE deployment_id = d.id)`+
			sqlDeploymentFrom+` WHERE d.id = ANY($1::text[]::uuid[])`, ids)
		if err != nil {
			return err
		}
		type locked struct {
			d    fleet.Deployment
			last int
		}
		deps := make(map[string]locked, len(ids))
		for rows.Next() {
			var l locked
			if l.d, err = scanDeployment(rows, &l.last); err != nil {
				rows.Close()
				return err
			}
			deps[l.d.ID] = l
		}
		if err := rows.Err(); err != nil {
			return err
		}
		active := map[string]string{} // deployment -> its active operation
		rows, err = tx.Query(ctx, `SELECT deployment_id::text, id::text FROM operations WHERE deployment_id = ANY($1::text[]::uuid[]) AND state IN ('queued', 'running')`, ids)
		if err != nil {
			return err
		}
		for rows.Next() {
			var d, o string
			if err := rows.Scan(&d, &o); err != nil {
				rows.Close()
				return err
			}
			active[d] = o
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// The active operations, locked after their deployments against the
		// usual order, so never waited for (see CreateOperation).
		var settle map[string]fleet.Operation
		if len(active) > 0 {
			aids := make([]string, 0, len(active))
			for _, o := range active {
				aids = append(aids, o)
			}
			if settle, err = operationsByID(ctx, tx, aids, `AND state IN ('queued', 'running') FOR UPDATE SKIP LOCKED`); err != nil {
				return err
			}
		}
		opOf := make(map[string]string, len(ops))
		for _, op := range ops {
			opOf[op.DeploymentID] = op.ID
		}
		opIDs := make([]string, len(ids))
		for i, id := range ids {
			opIDs[i] = opOf[id]
		}
		holds, err := rolloutHolds(ctx, tx, ids, opIDs)
		if err != nil {
			return err
		}
		b := batch{operations: map[string]fleet.Operation{}}
		for i, op := range ops {
			if errs[i] != nil || !validUUID(op.DeploymentID) {
				if errs[i] == nil {
					errs[i] = notFound("There is no deployment %s.", op.DeploymentID)
				}
				continue
			}
			l, ok := deps[op.DeploymentID]
			if !ok {
				errs[i] = notFound("There is no deployment %s.", op.DeploymentID)
				continue
			}
			actor := op.RequestedBy
			if actor == "" {
				actor = fleet.ActorOf(ctx)
			}
			c := lifecycle.NewChange(aggregate(l.d, l.last), now, actor)
			if a := active[l.d.ID]; a != "" {
				o, ok := settle[a]
				if !ok {
					errs[i], skipped[i] = operationInProgress(l.d.ID, a), true
					continue
				}
				agg := opAggregate(o)
				if !agg.Reached(c.Before) {
					errs[i] = operationInProgress(l.d.ID, a)
					continue
				}
				if err := c.SettleOperation(agg); err != nil {
					return err
				}
			}
			if err := check(l.d, holds[l.d.ID]); err != nil {
				errs[i] = err
				continue
			}
			op.DeploymentID = l.d.ID
			c.CreateOperation(lifecycle.Operation{ID: op.ID, Kind: op.Type}, createdBody(op))
			b.changes = append(b.changes, c)
			b.operations[op.ID] = op
		}
		if len(b.changes) == 0 {
			return nil
		}
		return apply(ctx, tx, b)
	})
	if err != nil {
		return nil, nil, translate(err)
	}
	for i := range errs {
		errs[i] = translate(errs[i])
	}
	return errs, skipped, nil
}

func createdBody(op fleet.Operation) lifecycle.OperationCreatedBody {
	b := lifecycle.OperationCreatedBody{Operation: string(op.Type), ToVersion: op.ToVersion.String(), Steps: len(op.Steps),
		Forced: op.Forced, Deadline: op.Deadline}
	if op.Type != lifecycle.OperationInstall {
		b.FromVersion = op.FromVersion.String()
	}
	return b
}

// opAggregate is what a decision needs of o.
func opAggregate(o fleet.Operation) *lifecycle.Operation {
	a := &lifecycle.Operation{ID: o.ID, Kind: o.Type, State: o.State}
	for _, st := range o.Steps {
		a.Steps = append(a.Steps, lifecycle.Step{N: st.N, State: st.State, Revision: st.Revision, Version: st.Version.String()})
	}
	return a
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
	// The operation and its steps are read in one snapshot, as readSnapshot
	// does, but with the BEGIN travelling with both reads (one round trip
	// less, on the path of every lifecycle call's check). Read at READ
	// COMMITTED, an upgrade right after the install's report was refused as
	// in progress: the install showed running with its step installed
	// (the TypeScript SDK's test, 1 run in 15 on a loaded machine).
	var o fleet.Operation
	found := false
	first := &pgx.Batch{}
	first.BeginTx(pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	first.Queue(`SELECT `+sqlOperationColumns+` FROM operations WHERE id = $1`, id).QueryRow(func(row pgx.Row) error {
		var err error
		o, err = scanOperation(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	var steps []fleet.Step
	first.Queue(sqlOperationSteps, id).Query(func(rows pgx.Rows) error {
		var err error
		steps, err = collectSteps(rows)
		return err
	})
	tx, err := batchBegin{s.pool, first}.Begin(ctx)
	if err != nil {
		return fleet.Operation{}, translate(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fleet.Operation{}, translate(err)
	}
	if !found {
		return fleet.Operation{}, notFound("There is no operation %s.", id)
	}
	o.Steps = steps
	return o, nil
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
	var ops []fleet.Operation
	err := readSnapshot(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+sqlOperationColumns+` FROM operations WHERE `+w.sql()+
			` ORDER BY created_at DESC, id DESC LIMIT `+w.limit(limit), w.args...)
		if err != nil {
			return err
		}
		if ops, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fleet.Operation, error) { return scanOperation(r) }); err != nil {
			return err
		}
		for i := range ops {
			if err := loadSteps(ctx, tx, &ops[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, translate(err)
	}
	return ops, nil
}

// CancelOperation implements fleet.Store.
func (s *FleetStore) CancelOperation(ctx context.Context, id string, reason string, now time.Time) (fleet.Operation, error) {
	if !validUUID(id) {
		return fleet.Operation{}, notFound("There is no operation %s.", id)
	}
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		op, err := scanOperation(tx.QueryRow(ctx, `SELECT `+sqlOperationColumns+` FROM operations WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("There is no operation %s.", id)
		}
		if err != nil {
			return err
		}
		if err := loadSteps(ctx, tx, &op); err != nil {
			return err
		}
		d, last, err := lockDeployment(ctx, tx, op.DeploymentID, "")
		if err != nil {
			return err
		}
		c := lifecycle.NewChange(aggregate(d, last), now, fleet.ActorOf(ctx))
		if err := c.CancelOperation(opAggregate(op), reason, true); err != nil {
			return err
		}
		return apply(ctx, tx, batch{changes: []*lifecycle.Change{c}})
	})
	if err != nil {
		return fleet.Operation{}, translate(err)
	}
	return s.Operation(ctx, id)
}

// ActiveOperation implements fleet.Store.
func (s *FleetStore) ActiveOperation(ctx context.Context, deploymentID string) (string, error) {
	id, err := activeOperation(ctx, s.pool, deploymentID)
	return id, translate(err)
}

// ActiveOperations implements fleet.Store: the queued and running
// operations that are due at now, in one query. An operation is due when it
// is queued, was never visited, its deployment's generation differs from
// the one its last visit saw (something changed: a report, a removal, any
// change), or the recheck instant its last visit recorded passed (its
// deadline, a drain timeout, or the scheduler's safety-net bound). The
// listing reads the partial index operations_due and the deployments'
// primary key.
func (s *FleetStore) ActiveOperations(ctx context.Context, limit int, now time.Time) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT o.id::text FROM operations o JOIN deployments d ON d.id = o.deployment_id
WHERE `+sqlOperationDue("$2")+` ORDER BY o.deadline LIMIT $1`, limit, now)
	if err != nil {
		return nil, translate(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, translate(err)
}

// sqlOperationDue is the condition on an operation o, joined to its
// deployment d, of being due for a scheduler's visit at the instant now (a
// parameter): active, and queued, never visited, its deployment changed
// since its last visit, or the recheck instant of that visit passed. The
// scheduler (ActiveOperations) and its metrics (sqlMetricsSnapshot) share
// it.
func sqlOperationDue(now string) string {
	return `o.state IN ('queued', 'running')
  AND (o.state = 'queued' OR o.visited_generation IS DISTINCT FROM d.generation OR o.recheck_at IS NULL OR o.recheck_at < ` + now + `)`
}

// sqlRolloutDue is the condition on a rollout of being due for the rollout
// driver's visit at the instant now (a parameter): not ended (or ended and
// settling), and its recheck instant, if any, passed. ClaimRollouts and the
// metrics share it.
func sqlRolloutDue(now string) string {
	return `(state IN ('running', 'paused', 'aborting') OR settling) AND (recheck_at IS NULL OR recheck_at <= ` + now + `)`
}

// reader is what reading a visit needs: the pool or a transaction.
type reader interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// readVisit reads what the scheduler decides on for operation id: the
// operation (if still active), its steps, its deployment, the revisions the
// decision may need and the newest reported drain phase. With lock (in a
// transaction) the operation is claimed FOR UPDATE SKIP LOCKED and the
// deployment locked; ok is false when the operation ended or another
// scheduler holds it.
//
// The statements go in one round trip (a pipeline): the scheduler visits
// thousands of operations in flight, and a visit reads twice (to decide,
// then under lock), so round trips, not the statements' work, were most of
// its time. Each statement finds the operation's deployment by the
// operation's id. Locked, they run in order: the operation is claimed, its
// deployment locked (only if the claim succeeded: the inner SKIP LOCKED
// finds the row this transaction already holds, and nothing when another
// holds it), and the reads that follow are fresh statements that see what
// committed before the lock was granted.
func readVisit(ctx context.Context, q reader, tx pgx.Tx, id string) (fleet.Visit, bool, error) {
	if !validUUID(id) {
		return fleet.Visit{}, false, nil
	}
	b := &pgx.Batch{}
	finish := queueVisit(b, id, tx != nil)
	var sender batchSender
	if tx != nil {
		sender = tx
	} else if p, isPool := q.(batchSender); isPool {
		sender = p
	} else {
		return fleet.Visit{}, false, fmt.Errorf("read visit: %T cannot send a batch", q)
	}
	if err := sender.SendBatch(ctx, b).Close(); err != nil {
		return fleet.Visit{}, false, err
	}
	return finish()
}

// queueVisit queues in b the statements of readVisit for operation id (a
// valid UUID), locking when lock (in a transaction); once b was sent,
// finish returns what readVisit returns. Several visits queued in one
// batch are read in one round trip, in the order they were queued.
func queueVisit(b *pgx.Batch, id string, lock bool) (finish func() (fleet.Visit, bool, error)) {
	var v fleet.Visit
	const active = `state IN ('queued', 'running')`
	const deployment = `(SELECT deployment_id FROM operations WHERE id = $1)`
	lockSQL := ""
	if lock {
		lockSQL = " FOR UPDATE SKIP LOCKED"
	}
	var (
		op     fleet.Operation
		found  bool
		d      fleet.Deployment
		dFound bool
		phase  *string
	)
	b.Queue(`SELECT `+sqlOperationColumns+` FROM operations WHERE id = $1 AND `+active+lockSQL, id).QueryRow(func(row pgx.Row) error {
		o, err := scanOperation(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // ended, or another scheduler holds it
		}
		op, found = o, err == nil
		return err
	})
	if lock {
		b.Queue(`SELECT 1 FROM deployments WHERE id = (SELECT deployment_id FROM operations WHERE id = $1 AND `+active+lockSQL+`) FOR UPDATE`, id).
			Query(func(rows pgx.Rows) error { // zero or one row
				for rows.Next() {
				}
				return rows.Err()
			})
	}
	b.Queue(`SELECT n, version, revision, state, published_at, finished_at FROM operation_steps WHERE operation_id = $1 ORDER BY n`, id).
		Query(func(rows pgx.Rows) error {
			steps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fleet.Step, error) { return scanStep(r) })
			op.Steps = steps
			return err
		})
	b.Queue(`SELECT `+sqlDeploymentColumns+`, (SELECT max(n) FROM revisions WHERE deployment_id = d.id)`+sqlDeploymentFrom+
		` WHERE d.id = `+deployment, id).QueryRow(func(row pgx.Row) error {
		var err error
		d, err = scanDeployment(row, &v.LastRevision)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		dFound = err == nil
		return err
	})
	v.Revisions = map[int]fleet.Revision{}
	b.Queue(`SELECT `+sqlRevisionColumns+sqlRevisionFrom+`
JOIN operations o ON o.id = $1 JOIN deployments dd ON dd.id = o.deployment_id
WHERE r.deployment_id = o.deployment_id AND r.n IN (o.base_revision, dd.revision, o.restore_revision, dd.installed_revision)`, id).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				r, err := scanRevision(rows)
				if err != nil {
					return err
				}
				v.Revisions[r.N] = r
			}
			return rows.Err()
		})
	b.Queue(`SELECT report->'x-wfm-extensions'->>'phase' FROM status_reports WHERE deployment_id = `+deployment+` ORDER BY id DESC LIMIT 1`, id).
		QueryRow(func(row pgx.Row) error {
			err := row.Scan(&phase)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		})
	return func() (fleet.Visit, bool, error) {
		if !found {
			return v, false, nil
		}
		if !dFound {
			return v, false, notFound("There is no deployment %s.", op.DeploymentID)
		}
		for _, n := range []int{op.BaseRevision, d.Revision, op.RestoreRevision, d.InstalledRevision} {
			if _, ok := v.Revisions[n]; n > 0 && !ok {
				if !lock {
					// The unlocked read's statements each take their snapshot:
					// the deployment moved between two of them. A collision:
					// the next pass reads it again.
					return v, false, &lifecycle.Error{Code: lifecycle.EUNAVAILABLE, Type: "retry",
						Message: fmt.Sprintf("operation %s: deployment %s changed while its visit was read", id, d.ID)}
				}
				return v, false, fmt.Errorf("operation %s: revision %d of deployment %s not found", id, n, d.ID)
			}
		}
		v.Op, v.Deployment = op, d
		if phase != nil {
			v.LastPhase = *phase
		}
		return v, true, nil
	}
}

// sameVisit reports whether nothing a decision looks at changed between two
// reads of a visit.
func sameVisit(a, b fleet.Visit) bool {
	if a.Op.State != b.Op.State || !a.Op.UpdatedAt.Equal(b.Op.UpdatedAt) || !a.Op.Deadline.Equal(b.Op.Deadline) ||
		a.Deployment.Generation != b.Deployment.Generation || a.LastRevision != b.LastRevision || a.LastPhase != b.LastPhase ||
		len(a.Op.Steps) != len(b.Op.Steps) {
		return false
	}
	for i := range a.Op.Steps {
		if a.Op.Steps[i].State != b.Op.Steps[i].State || a.Op.Steps[i].Revision != b.Op.Steps[i].Revision {
			return false
		}
	}
	return true
}

// Visits (AdvanceOperations): a visit is read and decided before any lock
// is taken (decide reads the catalog and devices on other connections);
// then the operation is claimed with FOR UPDATE SKIP LOCKED, so that several
// schedulers (server processes) never work on one operation at once (a held
// one is skipped), its deployment locked, the visit read again and the
// decision applied only if nothing it looked at changed meanwhile
// (otherwise the next pass decides again). A decision to do nothing takes
// no lock at all.

// pendingVisit is a visit decided on, whose decision changes something.
type pendingVisit struct {
	i   int // its place in AdvanceOperations' ids
	id  string
	v   fleet.Visit
	adv fleet.Advance
}

// decideVisit reads the visit of operation id holding no lock and calls
// decide. A decision to do nothing is recorded at once (nil: the visit is
// done, with its result); one that changes something is returned, to be
// applied under lock.
func (s *FleetStore) decideVisit(ctx context.Context, id string, decide func(fleet.Visit) (fleet.Advance, error)) (*pendingVisit, fleet.VisitResult) {
	v, ok, err := readVisit(ctx, s.pool, nil, id)
	if err != nil || !ok {
		return nil, fleet.VisitResult{Err: translate(err)}
	}
	adv, err := decide(v)
	if err != nil {
		return nil, fleet.VisitResult{Visited: true, Err: translate(err)}
	}
	if adv.Nothing() {
		// Nothing to do (the usual visit of an operation waiting for its
		// device, such as every fresh install): no claim, no transaction;
		// one statement records what the visit saw, so that the operation
		// is not visited again before it is due. A change since the read
		// (the row's updated_at) skips it: the operation stays due.
		return nil, fleet.VisitResult{Visited: true, Err: translate(recordVisit(ctx, s.pool, id, v.Deployment.Generation, adv.Recheck, &v.Op.UpdatedAt))}
	}
	return &pendingVisit{id: id, v: v, adv: adv}, fleet.VisitResult{}
}

// applyVisit applies one decided visit in a transaction of its own.
func (s *FleetStore) applyVisit(ctx context.Context, p pendingVisit, now time.Time) fleet.VisitResult {
	var r lockedVisit
	err := beginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var b batch
		var err error
		if r, b, err = lockVisit(ctx, tx, p, now); err != nil {
			return err
		}
		if r.Err != nil {
			return r.Err
		}
		if !r.record {
			return nil
		}
		if err := apply(ctx, tx, b); err != nil {
			return err
		}
		// Due again at the next pass, which decides on the new state and
		// records its recheck instant.
		return recordVisit(ctx, tx, p.id, r.generation, now, nil)
	})
	return fleet.VisitResult{Visited: r.Visited, Err: translate(err)}
}

// lockedVisit is what lockVisit found: the visit's result so far and the
// deployment generation to record.
type lockedVisit struct {
	fleet.VisitResult
	generation int64
	// record: the visit is recorded (it was visited and its decision
	// still held).
	record bool
}

// lockVisit claims p's operation in tx and locks its deployment, reads the
// visit again and, when nothing p's decision looked at changed, turns the
// decision into the batch to apply (no changes when it changes no row).
// A visit not claimed (ended, or held by another scheduler) is not
// visited; one that changed is visited, with nothing to apply (the next
// pass decides again). err is the transaction's failure.
func lockVisit(ctx context.Context, tx pgx.Tx, p pendingVisit, now time.Time) (lockedVisit, batch, error) {
	locked, ok, err := readVisit(ctx, nil, tx, p.id)
	return lockedDecision(p, locked, ok, err, now)
}

// lockedDecision is lockVisit once the visit was read under lock (locked,
// ok, err: what readVisit returned).
func lockedDecision(p pendingVisit, locked fleet.Visit, ok bool, err error, now time.Time) (lockedVisit, batch, error) {
	var r lockedVisit
	if err != nil || !ok {
		return r, batch{}, err
	}
	r.Visited, r.generation = true, locked.Deployment.Generation
	if !sameVisit(p.v, locked) {
		return r, batch{}, nil // changed since it was decided: the next pass decides again
	}
	b, err := advanceBatch(locked, p.adv, now)
	if err != nil {
		r.Err = err
		return r, batch{}, nil
	}
	r.record = true
	if b.changes[0].Empty() {
		return r, batch{}, nil
	}
	return r, b, nil
}

// visitChunk bounds the visits AdvanceOperations applies in one
// transaction.
const visitChunk = 64

// AdvanceOperations implements fleet.Store: each operation is read and
// decided on alone (see "Visits" above), up to o.Concurrency at once; the
// decisions that change something are applied together as they come, up
// to visitChunk per transaction in the order of their deployments' ids
// (the order every multi-deployment transaction locks them in), so that a
// pass over thousands of finished installs costs tens of commits, not
// thousands. Within a chunk each visit is claimed, read again and checked
// as alone; a chunk whose transaction fails as a whole (a guard, a
// collision) is applied again one visit per transaction, so that one
// visit cannot hold back the others.
func (s *FleetStore) AdvanceOperations(ctx context.Context, ids []string, decide func(fleet.Visit) (fleet.Advance, error), now time.Time, o fleet.AdvanceOptions) []fleet.VisitResult {
	res := make([]fleet.VisitResult, len(ids))
	within := func(ctx context.Context) (context.Context, context.CancelFunc) {
		if o.Timeout > 0 {
			return context.WithTimeout(ctx, o.Timeout)
		}
		return context.WithCancel(ctx)
	}
	// The decisions go to one applier as they are made: it applies what
	// arrived while it applied the previous chunk (up to visitChunk), so
	// that a decision waits for its transaction no longer than one chunk,
	// and the busier the pass, the larger its chunks.
	decided := make(chan pendingVisit, visitChunk)
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		for p := range decided {
			chunk := []pendingVisit{p}
		more:
			for len(chunk) < visitChunk {
				select {
				case q, ok := <-decided:
					if !ok {
						break more
					}
					chunk = append(chunk, q)
				default:
					break more
				}
			}
			s.applyChunk(ctx, chunk, now, res, within)
		}
	}()
	var g errgroup.Group
	g.SetLimit(max(1, o.Concurrency))
	for i, id := range ids {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			vctx, cancel := within(ctx)
			defer cancel()
			p, r := s.decideVisit(vctx, id, decide)
			if p == nil {
				res[i] = r
				return nil
			}
			p.i = i
			decided <- *p
			return nil
		})
	}
	_ = g.Wait()
	close(decided)
	<-applied
	return res
}

// applyChunk applies chunk's visits in one transaction, in the order of
// their deployments' ids, writing their results into res; when the
// transaction fails as a whole, each visit is applied again in a
// transaction of its own.
func (s *FleetStore) applyChunk(ctx context.Context, chunk []pendingVisit, now time.Time, res []fleet.VisitResult, within func(context.Context) (context.Context, context.CancelFunc)) {
	if ctx.Err() != nil {
		for _, p := range chunk {
			res[p.i] = fleet.VisitResult{Visited: true, Err: ctx.Err()}
		}
		return
	}
	slices.SortFunc(chunk, func(a, b pendingVisit) int { return strings.Compare(a.v.Deployment.ID, b.v.Deployment.ID) })
	cctx, cancel := within(ctx)
	err := s.applyVisits(cctx, chunk, now, res)
	cancel()
	if err == nil {
		return
	}
	if len(chunk) == 1 {
		res[chunk[0].i] = fleet.VisitResult{Visited: true, Err: translate(err)}
		return
	}
	for _, p := range chunk {
		vctx, cancel := within(ctx)
		res[p.i] = s.applyVisit(vctx, p, now)
		cancel()
	}
}

// applyVisits applies the visits of chunk in one transaction, writing
// their results into res; an error is the transaction's, with nothing
// applied and res untouched.
func (s *FleetStore) applyVisits(ctx context.Context, chunk []pendingVisit, now time.Time, res []fleet.VisitResult) error {
	out := make([]lockedVisit, len(chunk))
	err := beginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var all batch
		var ids []string
		var gens []int64
		// Every visit of the chunk claimed and read in one round trip.
		reads := &pgx.Batch{}
		finish := make([]func() (fleet.Visit, bool, error), len(chunk))
		for j, p := range chunk {
			finish[j] = queueVisit(reads, p.id, true)
		}
		if err := tx.SendBatch(ctx, reads).Close(); err != nil {
			return err
		}
		for j, p := range chunk {
			locked, ok, err := finish[j]()
			r, b, err := lockedDecision(p, locked, ok, err, now)
			if err != nil {
				return err
			}
			out[j] = r
			if r.record {
				all.add(b)
				ids, gens = append(ids, p.id), append(gens, r.generation)
			}
		}
		if err := apply(ctx, tx, all); err != nil {
			return err
		}
		// Due again at the next pass (recordVisit, for all of them).
		_, err := tx.Exec(ctx, `UPDATE operations o SET visited_generation = x.gen, recheck_at = $3
FROM unnest($1::text[]::uuid[], $2::bigint[]) AS x(id, gen) WHERE o.id = x.id`, ids, gens, now)
		return err
	})
	if err != nil {
		return err
	}
	for j, p := range chunk {
		res[p.i] = fleet.VisitResult{Visited: out[j].Visited, Err: translate(out[j].Err)}
	}
	return nil
}

// advanceBatch turns one scheduler decision into the change of the
// operation's deployment, through the lifecycle's decisions.
func advanceBatch(v fleet.Visit, a fleet.Advance, now time.Time) (batch, error) {
	op, d := v.Op, v.Deployment
	c := lifecycle.NewChange(aggregate(d, v.LastRevision), now, lifecycle.ActorScheduler)
	o := opAggregate(op)
	b := batch{changes: []*lifecycle.Change{c}, deadlineOf: map[*lifecycle.Change]string{c: op.ID}}
	if a.StepInstalled > 0 {
		if err := c.InstallStep(o, a.StepInstalled); err != nil {
			return b, err
		}
	}
	if p := a.Publish; p != nil {
		if err := c.PublishStep(o, p.Step, lifecycle.NewRevision{Version: p.Version.String(), ProfileID: p.ProfileID, Parameters: p.Parameters,
			Kind: p.Kind, Components: p.Components, YAML: p.YAML, Strategy: p.Strategy, Forced: p.Forced, ForceReason: p.ForceReason}); err != nil {
			return b, err
		}
		if c.Revision.N != p.Revision {
			return b, fmt.Errorf("operation %s: rendered revision %d, publishing %d", op.ID, p.Revision, c.Revision.N)
		}
	}
	if a.RevertTo > 0 {
		target, ok := v.Revisions[a.RevertTo]
		if !ok || a.RevertTo != d.InstalledRevision {
			return b, fmt.Errorf("operation %s: revert to revision %d, which is not the installed one", op.ID, a.RevertTo)
		}
		if err := c.RevertAfterDrainTimeout(o, lifecycle.NewRevision{Version: target.Version.String(), Kind: target.Operation}, a.Reason); err != nil {
			return b, err
		}
	}
	var err error
	switch a.Finish {
	case lifecycle.OperationSucceeded:
		err = c.SucceedOperation(o, op.ToVersion.String())
	case lifecycle.OperationFailed:
		err = c.FailOperation(o, a.Reason, a.FailDeployment, a.FollowUp != nil)
	case lifecycle.OperationCancelled:
		err = c.CancelOperation(o, a.Reason, false)
	case "":
		if a.FailDeployment {
			err = c.FailDeployment(lifecycle.CauseDeadline, a.Reason, op.ID)
		}
	default:
		err = fmt.Errorf("operation %s: unknown end %q", op.ID, a.Finish)
	}
	if err != nil {
		return b, err
	}
	if f := a.FollowUp; f != nil {
		f.DeploymentID = d.ID
		c.CreateOperation(lifecycle.Operation{ID: f.ID, Kind: f.Type}, createdBody(*f))
		b.operations = map[string]fleet.Operation{f.ID: *f}
		b.followUps = [][2]string{{op.ID, f.ID}}
	}
	if !a.Deadline.IsZero() && !a.Deadline.Equal(op.Deadline) {
		c.Deadline = a.Deadline
	}
	return b, nil
}
