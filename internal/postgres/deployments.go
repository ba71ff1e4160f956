package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
)

const sqlDeploymentColumns = `d.id::text, d.client_id, d.device_id, d.application_id, r.version, r.profile_id, d.state, d.state_reason,
d.state_changed_at, d.revision, d.installed_revision, r.parameters::text, d.desired_since, d.removing, d.newest_adopted, d.reports,
d.generation, r.components, r.operation, r.strategy, d.created_at, d.updated_at`

const sqlDeploymentFrom = ` FROM deployments d JOIN revisions r ON r.deployment_id = d.id AND r.n = d.revision`

// scanDeployment reads sqlDeploymentColumns, then any extra columns into extra.
func scanDeployment(row pgx.Row, extra ...any) (fleet.Deployment, error) {
	var d fleet.Deployment
	var version, state, params, op, strategy string
	var installed *int32
	var since, adopted int64
	dest := append([]any{&d.ID, &d.ClientID, &d.DeviceID, &d.ApplicationID, &version, &d.ProfileID, &state, &d.StateReason,
		&d.StateChangedAt, &d.Revision, &installed, &params, &since, &d.Removing, &adopted, &d.Reports, &d.Generation, &d.Components,
		&op, &strategy, &d.CreatedAt, &d.UpdatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return d, err
	}
	v, err := lifecycle.ParseVersion(version)
	if err != nil {
		return d, fmt.Errorf("stored version %q: %w", version, err)
	}
	d.Version, d.State = v, lifecycle.State(state)
	d.Operation, d.Strategy = lifecycle.OperationKind(op), lifecycle.Strategy(strategy)
	if installed != nil {
		d.InstalledRevision = int(*installed)
	}
	d.DesiredSince, d.NewestAdopted = uint64(since), uint64(adopted)
	return d, json.Unmarshal([]byte(params), &d.Parameters)
}

// aggregate is what a decision needs of d; last is its highest revision
// number.
func aggregate(d fleet.Deployment, last int) lifecycle.Deployment {
	if last < d.Revision {
		last = d.Revision
	}
	return lifecycle.Deployment{ID: d.ID, ClientID: d.ClientID, DeviceID: d.DeviceID, ApplicationID: d.ApplicationID, State: d.State,
		Revision: d.Revision, InstalledRevision: d.InstalledRevision, LastRevision: last, Removing: d.Removing, Version: d.Version.String()}
}

// CreateDeployments implements fleet.Store: in one transaction it reads
// what the decisions need, set-based, in the round trip that begins it
// (the devices and the application versions under share locks, in key
// order; the clients under update locks, with their status and manifest
// version), decides each item (lifecycle.DecideCreate) and applies the
// accepted ones as one batch, whose manifest bump goes with its other
// writes (the clients are locked already: their new versions are known).
// The audit entry of each item's call (NewDeployment.Call) is written in
// that transaction.
func (s *FleetStore) CreateDeployments(ctx context.Context, nds []fleet.NewDeployment, now time.Time) ([]fleet.CreateResult, error) {
	if len(nds) == 0 {
		return nil, nil
	}
	calls := make([]*access.Pending, 0, len(nds))
	for _, nd := range nds {
		if nd.Call != nil {
			calls = append(calls, access.PendingOf(nd.Call))
		}
	}
	var results []fleet.CreateResult
	var ids []string
	first := &pgx.Batch{}
	first.BeginTx(pgx.TxOptions{})
	first.Queue(sqlGenericPlans)
	in := queueCreateInputs(first, nds)
	err := inTx(ctx, batchBegin{s.pool, first}, func(tx pgx.Tx) error {
		results, ids = make([]fleet.CreateResult, len(nds)), ids[:0]
		changes := make([]*lifecycle.Change, len(nds)) // the accepted items
		registered, yanked, digests, status, members := in.registered, in.yanked, in.digests, in.status, in.members
		b := batch{operations: map[string]fleet.Operation{}, pieces: map[[2]string]*margo.BundlePiece{}, copyMin: s.copyMin,
			locked: in.manifests}
		for i, nd := range nds {
			call := ctx
			if nd.Call != nil {
				call = nd.Call
			}
			if rid := members[[3]string{nd.ApplicationID, nd.ClientID, nd.DeviceID}]; rid != "" && rid != nd.RolloutID {
				results[i].Err = fleet.RolloutMemberError("Device "+nd.DeviceID+" of client "+nd.ClientID, rid)
				continue
			}
			device := lifecycle.DeviceMissing
			reg, exists := registered[[2]string{nd.ClientID, nd.DeviceID}]
			switch {
			case reg:
				device = lifecycle.DeviceRegistered
			case exists:
				device = lifecycle.DeviceUnregistered
			}
			y, known := yanked[[2]string{nd.ApplicationID, nd.Version.String()}]
			if reg && !known {
				results[i].Err = notFound("Application %s has no version %s.", nd.ApplicationID, nd.Version)
				continue
			}
			if d := digests[[2]string{nd.ApplicationID, nd.Version.String()}]; known && nd.VersionDigest != "" && d != nd.VersionDigest {
				results[i].Err = fleet.VersionChanged(nd.ApplicationID, nd.Version.String()) // rendered from other content
				continue
			}
			op := nd.Install
			op.DeploymentID = nd.ID
			// The install's timeout counts from this decision, not from when
			// the call prepared it: time spent queued for a batch is not the
			// device's.
			op.Deadline = now.Add(op.StepTimeout)
			c, err := lifecycle.DecideCreate(lifecycle.CreateInput{
				Deployment: lifecycle.Deployment{ID: nd.ID, ClientID: nd.ClientID, DeviceID: nd.DeviceID, ApplicationID: nd.ApplicationID},
				Revision: lifecycle.NewRevision{Version: nd.Version.String(), ProfileID: nd.ProfileID, Parameters: nd.Parameters,
					Components: nd.Components, YAML: nd.YAML, Digest: nd.Digest},
				Device: device, Yanked: y, ClientRetired: status[nd.ClientID] != string(fleet.ClientAccepted),
				OperationID: op.ID, Deadline: op.Deadline,
			}, now, fleet.ActorOf(call))
			if c := lifecycle.ErrorCode(err); c != "" && c != lifecycle.EINTERNAL && c != lifecycle.EUNAVAILABLE {
				results[i].Err = err // the domain refuses this item; the others go on
				continue
			}
			if err != nil {
				return err
			}
			b.changes, b.operations[op.ID] = append(b.changes, c), op
			changes[i] = c
			if nd.Piece != nil {
				b.pieces[[2]string{nd.ID, revisionDigest(c.Revision)}] = nd.Piece
			}
			if nd.Call != nil {
				b.audits = append(b.audits, callAudit{pending: access.PendingOf(nd.Call), created: true})
			}
			ids = append(ids, nd.ID)
		}
		// The next bundle of each small client, from its current pieces
		// (read under the lock) and the created ones: recorded by the bump.
		created, pieceless := map[string][]idPiece{}, map[string]bool{}
		for i, nd := range nds {
			if changes[i] == nil || results[i].Err != nil {
				continue
			}
			if nd.Piece == nil {
				pieceless[nd.ClientID] = true
				continue
			}
			created[nd.ClientID] = append(created[nd.ClientID], idPiece{id: nd.ID, piece: *nd.Piece})
		}
		for c := range pieceless {
			delete(created, c)
		}
		var err error
		if b.bundles, err = creationBundles(in.pieces, created); err != nil {
			return err
		}
		var versions map[string]uint64
		b.published = func(v map[string]uint64) { versions = v }
		if err := apply(ctx, tx, b); err != nil || len(ids) == 0 {
			return err
		}
		// The created deployments as a read would show them, from the rows
		// apply wrote: no statement reads them back (a read of rows just
		// inserted cost a round trip, and its cached plan, made while the
		// tables were small, could scan them whole).
		for i, nd := range nds {
			if c := changes[i]; c != nil && results[i].Err == nil {
				d, err := createdDeployment(c, versions[nd.ClientID])
				if err != nil {
					return err
				}
				results[i].Deployment = d
			}
		}
		return nil
	}, calls...)
	if err != nil {
		return nil, translate(err)
	}
	return results, nil
}

// createdDeployment is the deployment creation c wrote (its deployment and
// revision rows, the manifest version since) as a read of those rows
// (scanDeployment) shows it: times to the microsecond in the zone pgx reads
// them in, the parameters as the stored JSON decodes, no installed
// revision, generation 1, nothing reported.
func createdDeployment(c *lifecycle.Change, since uint64) (fleet.Deployment, error) {
	r, d := c.Revision, c.After
	if r == nil || !c.Create {
		return fleet.Deployment{}, fmt.Errorf("deployment %s: not a creation", d.ID)
	}
	v, err := lifecycle.ParseVersion(r.Version)
	if err != nil {
		return fleet.Deployment{}, fmt.Errorf("version %q: %w", r.Version, err)
	}
	params, err := json.Marshal(r.Parameters)
	if err != nil {
		return fleet.Deployment{}, err
	}
	out := fleet.Deployment{ID: d.ID, ClientID: d.ClientID, DeviceID: d.DeviceID, ApplicationID: d.ApplicationID, Version: v, ProfileID: r.ProfileID,
		State: d.State, StateReason: c.Reason, Revision: d.Revision, DesiredSince: since,
		Generation: 1, Operation: r.Kind, Strategy: r.Strategy, Components: append([]string{}, r.Components...)}
	at := c.At.Truncate(time.Microsecond).Local()
	out.StateChangedAt, out.CreatedAt, out.UpdatedAt = at, at, at
	return out, json.Unmarshal(params, &out.Parameters)
}

// sqlGenericPlans makes every statement of the creation transaction (its
// reads, apply's pipeline, the audit rows and the events) run its generic
// plan. They take arrays, whose custom plans the planner judges cheaper than
// the generic one, so it planned them again at every execution: measured on
// serial batches of 8 creations through Service.CreateDeployments (a
// scratch test, idle machine, PostgreSQL 15), 0.86 ms of PostgreSQL CPU per
// creation with custom plans, 0.65 ms with generic ones, and 8.5 against
// 6.8 ms a batch. Each is a lookup by key or a set-based write (no partial
// index whose condition names a parameter), so its generic plan is one of
// index lookups, also for a batch of 10,000 (BenchmarkCreateBatch10000:
// 3.05 s in the harness, 3.39 s before).
const sqlGenericPlans = `SET LOCAL plan_cache_mode = force_generic_plan`

// createInputs is what deciding a batch of creations needs, read by the
// statements queueCreateInputs queues (filled once they ran): whether each
// device is registered, each version yanked and its digest, each client's
// status and current manifest version, and the pending install rollout
// members on the devices. A device, version or client missing from the
// maps does not exist.
type createInputs struct {
	registered, yanked map[[2]string]bool
	digests            map[[2]string]string
	status             map[string]string
	manifests          map[string]uint64
	members            map[[3]string]string
	// pieces are the current manifests of the small clients.
	pieces *currentPieces
}

// queueCreateInputs queues on q the reads of what deciding the creations
// nds needs (createInputs), locking in the order every writer takes: the
// devices and the versions FOR SHARE, in key order, so that concurrent
// batches do not deadlock, then the clients FOR UPDATE in id order (their
// manifests are bumped by the batch; a statement after the lock sees what
// committed before it was granted).
func queueCreateInputs(q *pgx.Batch, nds []fleet.NewDeployment) *createInputs {
	var devClients, devIDs, apps, versions, clients []string
	seenDev, seenVer, seenClient := map[[2]string]bool{}, map[[2]string]bool{}, map[string]bool{}
	for _, nd := range nds {
		if k := [2]string{nd.ClientID, nd.DeviceID}; !seenDev[k] {
			seenDev[k] = true
			devClients, devIDs = append(devClients, nd.ClientID), append(devIDs, nd.DeviceID)
		}
		if k := [2]string{nd.ApplicationID, nd.Version.String()}; !seenVer[k] {
			seenVer[k] = true
			apps, versions = append(apps, k[0]), append(versions, k[1])
		}
		if !seenClient[nd.ClientID] {
			seenClient[nd.ClientID] = true
			clients = append(clients, nd.ClientID)
		}
	}
	in := &createInputs{registered: map[[2]string]bool{}, yanked: map[[2]string]bool{}, digests: map[[2]string]string{},
		status: map[string]string{}, manifests: map[string]uint64{}, members: map[[3]string]string{}}
	var mApps, mClients, mDevices []string
	for _, nd := range nds {
		mApps, mClients, mDevices = append(mApps, nd.ApplicationID), append(mClients, nd.ClientID), append(mDevices, nd.DeviceID)
	}
	// Pending members of active install rollouts on these devices (a
	// creation there is refused unless it is that rollout's).
	q.Queue(`SELECT m.application_id, m.client_id, m.device_id, m.rollout_id::text FROM rollout_members m
WHERE m.active AND m.install AND m.status = 'pending' AND (m.application_id, m.client_id, m.device_id) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))`,
		mApps, mClients, mDevices).Query(func(rows pgx.Rows) error {
		var a, c, d, r string
		_, err := pgx.ForEachRow(rows, []any{&a, &c, &d, &r}, func() error { in.members[[3]string{a, c, d}] = r; return nil })
		return err
	})
	q.Queue(`SELECT client_id, id, registered FROM devices WHERE (client_id, id) IN (SELECT * FROM unnest($1::text[], $2::text[]))
ORDER BY client_id, id FOR SHARE`, devClients, devIDs).Query(func(rows pgx.Rows) error {
		var c, d string
		var r bool
		_, err := pgx.ForEachRow(rows, []any{&c, &d, &r}, func() error { in.registered[[2]string{c, d}] = r; return nil })
		return err
	})
	q.Queue(`SELECT application_id, version, yanked, digest FROM application_versions
WHERE (application_id, version) IN (SELECT * FROM unnest($1::text[], $2::text[])) ORDER BY application_id, version FOR SHARE`, apps, versions).
		Query(func(rows pgx.Rows) error {
			var a, v, d string
			var y bool
			_, err := pgx.ForEachRow(rows, []any{&a, &v, &y, &d}, func() error {
				in.yanked[[2]string{a, v}], in.digests[[2]string{a, v}] = y, d
				return nil
			})
			return err
		})
	q.Queue(sqlLockClientVersions, clients).Query(func(rows pgx.Rows) error {
		var id, st string
		var v int64
		_, err := pgx.ForEachRow(rows, []any{&id, &st, &v}, func() error { in.status[id], in.manifests[id] = st, uint64(v); return nil })
		return err
	})
	in.pieces = queueCurrentPieces(q, clients)
	return in
}

// RemoveDeployment implements fleet.Store. It locks the deployment's
// active operation (if any) before the deployment, the order the scheduler
// and a cancellation take, and decides with lifecycle.DecideRemove, which
// cancels that operation and starts op.
func (s *FleetStore) RemoveDeployment(ctx context.Context, id string, op fleet.Operation, check func(fleet.Deployment) error, now time.Time) (fleet.Deployment, error) {
	if !validUUID(id) {
		return fleet.Deployment{}, notFound("There is no deployment %s.", id)
	}
	var err error
	for range 3 { // an operation created between the two reads of the active one: read again
		err = inTx(ctx, s.pool, func(tx pgx.Tx) error {
			active, err := activeOperation(ctx, tx, id)
			if err != nil {
				return err
			}
			var lockedActive *fleet.Operation
			if active != "" {
				o, err := scanOperation(tx.QueryRow(ctx, `SELECT `+sqlOperationColumns+` FROM operations WHERE id = $1 AND state IN ('queued', 'running') FOR UPDATE`, active))
				if err != nil && !errors.Is(err, pgx.ErrNoRows) {
					return err
				}
				if err == nil {
					if err := loadSteps(ctx, tx, &o); err != nil {
						return err
					}
					lockedActive = &o
				}
			}
			d, last, err := lockDeployment(ctx, tx, id, "")
			if err != nil {
				return err
			}
			if cur, err := activeOperation(ctx, tx, id); err != nil {
				return err
			} else if lockedActive == nil && cur != "" || lockedActive != nil && cur != lockedActive.ID {
				return errActiveChanged
			}
			if err := check(d); err != nil {
				return err
			}
			in := lifecycle.RemoveInput{Deployment: aggregate(d, last), OperationID: op.ID, Deadline: op.Deadline}
			if lockedActive != nil {
				in.Active = opAggregate(*lockedActive)
			}
			c, err := lifecycle.DecideRemove(in, now, fleet.ActorOf(ctx))
			if err != nil || c.Empty() {
				return err
			}
			rm := op
			rm.DeploymentID, rm.FromVersion, rm.ToVersion, rm.Parameters, rm.ProfileID = d.ID, d.Version, d.Version, d.Parameters, d.ProfileID
			return apply(ctx, tx, batch{changes: []*lifecycle.Change{c}, operations: map[string]fleet.Operation{rm.ID: rm}})
		})
		if !errors.Is(err, errActiveChanged) {
			break
		}
	}
	if err != nil {
		return fleet.Deployment{}, translate(err)
	}
	return s.Deployment(ctx, id)
}

// errActiveChanged says a deployment's active operation changed between
// its read and the deployment's lock.
var errActiveChanged = errors.New("the deployment's active operation changed while it was being locked")

// activeOperation returns the id of the deployment's queued or running
// operation, "" when there is none.
func activeOperation(ctx context.Context, q reader, deploymentID string) (string, error) {
	var id string
	err := q.QueryRow(ctx, `SELECT id::text FROM operations WHERE deployment_id = $1 AND state IN ('queued', 'running')`, deploymentID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, err
}

// lockDeployment reads a deployment FOR UPDATE, with its highest revision
// number; with clientID it must be that client's.
func lockDeployment(ctx context.Context, tx pgx.Tx, id, clientID string) (fleet.Deployment, int, error) {
	if !validUUID(id) {
		return fleet.Deployment{}, 0, notFound("There is no deployment %s.", id)
	}
	// Lock first, then read in a second statement: a locking read that had
	// to wait re-reads only the locked row, not the rows it joined (the
	// desired revision), which a fresh statement sees as committed.
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM deployments WHERE id = $1 AND ($2 = '' OR client_id = $2) FOR UPDATE`, id, clientID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fleet.Deployment{}, 0, notFound("There is no deployment %s.", id)
	}
	if err != nil {
		return fleet.Deployment{}, 0, err
	}
	var last int
	d, err := scanDeployment(tx.QueryRow(ctx, `SELECT `+sqlDeploymentColumns+`, (SELECT max(n) FROM revisions WHERE deployment_id = d.id)`+
		sqlDeploymentFrom+` WHERE d.id = $1`, id), &last)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, 0, notFound("There is no deployment %s.", id)
	}
	return d, last, err
}

// retentionEvery is how often (in reports) the retention delete runs once a
// deployment has more reports than kept: at most retention+retentionEvery-1
// reports exist per deployment, and most reports cost no delete.
const retentionEvery = 16

// maxReportCache bounds the deployments whose last report state a store
// remembers.
const maxReportCache = 100_000

// reportCache remembers, per deployment, the row as this process last wrote
// it in RecordReport, so that the next report of that deployment needs no
// read. It is only a guess: the write is guarded by the generation.
type reportCache struct {
	mu sync.Mutex
	m  map[string]fleet.Deployment
}

func (c *reportCache) get(id string) (fleet.Deployment, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[id]
	return d, ok
}

func (c *reportCache) put(d fleet.Deployment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxReportCache {
		c.m = map[string]fleet.Deployment{}
	}
	c.m[d.ID] = d
}

func (c *reportCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

// RecordReport implements fleet.Store. It is the status-ingestion hot path,
// written as optimistic concurrency instead of a locking transaction: one
// read (deployment, desired revision, the client's manifest version), the
// decision, then one statement whose data-modifying parts all hang on the
// deployment's UPDATE guarded by the generation read. If anything changed
// the deployment meanwhile, the statement changes nothing and the report is
// decided again on fresh data. Two round trips, no explicit transaction.
func (s *FleetStore) RecordReport(ctx context.Context, clientID string, r *margo.StatusReport, decide func(fleet.Deployment) (lifecycle.Decision, error), now time.Time) (bool, error) {
	if !validUUID(r.DeploymentID) {
		return false, notFound("There is no deployment %s.", r.DeploymentID)
	}
	for attempt := range optimisticAttempts {
		w, applied, first, err := s.recordOnce(ctx, s.pool, false, attempt == 0, clientID, r, decide, now)
		if err != nil {
			s.reports.drop(r.DeploymentID) // whether a failed write happened is unknown
			return false, err
		}
		if applied {
			s.reports.put(w)
			return first, nil
		}
		// The deployment changed since it was read: decide again on fresh data.
		s.reports.drop(r.DeploymentID)
	}
	// Under contention (many reports of one deployment at once), stop
	// guessing: lock the row, decide and write.
	var first bool
	var w fleet.Deployment
	err := beginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		written, applied, f, err := s.recordOnce(ctx, tx, true, false, clientID, r, decide, now)
		if err == nil && !applied {
			err = fmt.Errorf("deployment %s changed under its lock", r.DeploymentID)
		}
		w, first = written, f
		return err
	})
	if err != nil {
		s.reports.drop(r.DeploymentID)
		return false, translate(err)
	}
	s.reports.put(w) // only once committed
	return first, nil
}

// RecordReports implements fleet.Store: the group commit of status
// reports. One report alone goes the optimistic way of RecordReport (no
// explicit transaction). Several are stored in at most two steps, each a
// constant number of round trips:
//
//   - The reports whose deployment this process wrote last (the row
//     RecordReport remembers: the steady state of a fleet reporting) and
//     whose decision moves no state are written by ONE statement, guarded
//     by each row's generation, outside any explicit transaction: one
//     round trip and one commit for all of them (recordGuarded).
//   - The others (a first report, a state move, a row changed elsewhere
//     meanwhile: its guard failed) in one transaction that locks their
//     deployments, reads them, decides and writes them set-based
//     (recordLocked). Should that transaction fail, its reports are
//     stored one by one, since the first step may have committed.
//
// The rows written are remembered for the next reports once committed.
func (s *FleetStore) RecordReports(ctx context.Context, items []fleet.ReportItem, now time.Time) ([]fleet.ReportResult, error) {
	if len(items) == 1 {
		it := items[0]
		first, err := s.RecordReport(ctx, it.ClientID, it.Report, it.Decide, now)
		if err != nil && !refusal(err) {
			return nil, err
		}
		return []fleet.ReportResult{{First: first, Err: err}}, nil
	}
	res := make([]fleet.ReportResult, len(items))
	seen := make(map[string]bool, len(items))
	var ws []reportWrite
	var at, rest []int // the items of ws; the items for recordLocked
	for i, it := range items {
		r := it.Report
		if !validUUID(r.DeploymentID) {
			res[i].Err = notFound("There is no deployment %s.", r.DeploymentID)
			continue
		}
		if seen[r.DeploymentID] {
			return nil, fmt.Errorf("record reports: deployment %s twice in one batch", r.DeploymentID)
		}
		seen[r.DeploymentID] = true
		d, ok := s.reports.get(r.DeploymentID)
		if !ok || d.ClientID != it.ClientID || r.AdoptedManifestVersion > d.Published {
			rest = append(rest, i)
			continue
		}
		w, err := s.decideReport(it, d, now)
		if err != nil {
			res[i].Err = err // a refused report changes nothing
			continue
		}
		if len(w.c.Moves) > 0 || len(w.c.Outcomes) > 0 {
			rest = append(rest, i) // decided again on the locked row
			continue
		}
		ws, at = append(ws, w), append(at, i)
	}
	if len(ws) > 0 {
		// In the order of the ids: two processes' batches lock shared rows
		// in the same order (no deadlock).
		order := make([]int, len(ws))
		for k := range order {
			order[k] = k
		}
		slices.SortFunc(order, func(a, b int) int { return strings.Compare(ws[a].d.ID, ws[b].d.ID) })
		sws, sat := make([]reportWrite, len(ws)), make([]int, len(ws))
		for k, o := range order {
			sws[k], sat[k] = ws[o], at[o]
		}
		ws, at = sws, sat
		applied, err := recordGuarded(ctx, s.pool, ws)
		if err != nil {
			for _, w := range ws {
				s.reports.drop(w.d.ID)
			}
			if !uncommitted(err) {
				// The statement may have committed: storing these reports
				// again could store them twice. Each gets the error (503),
				// as a single report's ambiguous commit does.
				for _, i := range at {
					res[i].Err = translate(err)
				}
				ws = nil
			} else {
				return nil, translate(err) // none stored: the batcher tries them one by one
			}
		}
		for k, w := range ws {
			if !applied[w.d.ID] { // changed since this process wrote it
				s.reports.drop(w.d.ID)
				rest = append(rest, at[k])
				continue
			}
			res[at[k]].First = w.d.Reports == 0
			s.reports.put(written(w))
		}
	}
	if len(rest) == 0 {
		return res, nil
	}
	slices.Sort(rest) // arrival order
	if err := s.recordLocked(ctx, items, rest, res, now); err != nil {
		for _, i := range rest {
			if !uncommitted(err) {
				res[i].Err = translate(err) // perhaps committed: not stored again
				continue
			}
			// Each on its own, with a time of its own (the batch's may be
			// what ran out): the guarded step may have committed.
			it := items[i]
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportFallbackTimeout)
			res[i].First, res[i].Err = s.RecordReport(rctx, it.ClientID, it.Report, it.Decide, now)
			cancel()
		}
	}
	return res, nil
}

// reportFallbackTimeout bounds each report stored on its own after its
// batch's transaction failed.
const reportFallbackTimeout = 30 * time.Second

// uncommitted reports whether err, the failure of recordGuarded or of a
// transaction, says that nothing was committed: it is not a commit of
// unknown outcome (atCommit).
func uncommitted(err error) bool { return !maybeCommitted(err) }

// decideReport decides one report of a batch on d (the deployment as read
// or remembered) and returns its write. Returns decide's refusal, or the
// domain's error.
func (s *FleetStore) decideReport(it fleet.ReportItem, d fleet.Deployment, now time.Time) (reportWrite, error) {
	dec, err := it.Decide(d)
	if err != nil {
		return reportWrite{}, err
	}
	c, err := lifecycle.DecideReport(aggregate(d, 0), dec, now, it.ClientID)
	if err != nil {
		return reportWrite{}, err
	}
	keep := 0
	if n := d.Reports + 1; n > int64(s.retention) && n%retentionEvery == 0 {
		keep = s.retention
	}
	return reportWrite{c: c, d: d, r: it.Report, stale: dec.Stale, keep: keep}, nil
}

// written returns the deployment row as w leaves it (what RecordReport
// remembers).
func written(w reportWrite) fleet.Deployment {
	d := w.d
	d.Generation, d.Reports, d.NewestAdopted = d.Generation+1, d.Reports+1, max(d.NewestAdopted, w.r.AdoptedManifestVersion)
	d.State, d.InstalledRevision = w.c.After.State, w.c.After.InstalledRevision
	return d
}

// recordLocked stores the reports items[idx] in one transaction: it locks
// and reads their deployments (lockReported), decides each (a refusal is
// its error in res) and writes the others set-based (queueReports). It
// fills res[idx] and remembers the rows written once committed. Returns an
// error, and stores nothing, when the database fails.
func (s *FleetStore) recordLocked(ctx context.Context, items []fleet.ReportItem, idx []int, res []fleet.ReportResult, now time.Time) error {
	ids := make([]string, 0, len(idx))
	for _, i := range idx {
		ids = append(ids, items[i].Report.DeploymentID)
	}
	slices.Sort(ids)
	var ws []reportWrite
	err := beginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		ws = ws[:0]
		ds, err := lockReported(ctx, tx, ids)
		if err != nil {
			return err
		}
		for _, i := range idx {
			it := items[i]
			res[i] = fleet.ReportResult{}
			d, ok := ds[it.Report.DeploymentID]
			if !ok || d.ClientID != it.ClientID {
				res[i].Err = notFound("There is no deployment %s.", it.Report.DeploymentID)
				continue
			}
			w, err := s.decideReport(it, d, now)
			if err != nil {
				res[i].Err = err // a refused report changes nothing
				continue
			}
			res[i].First = d.Reports == 0
			ws = append(ws, w)
		}
		if len(ws) == 0 {
			return nil
		}
		q := &pgx.Batch{}
		if err := queueReports(q, ws); err != nil {
			return err
		}
		return tx.SendBatch(ctx, q).Close()
	})
	if err != nil {
		for _, id := range ids {
			s.reports.drop(id) // whether a failed commit happened is unknown
		}
		return translate(err)
	}
	for _, w := range ws {
		s.reports.put(written(w)) // only once committed
	}
	return nil
}

// refusal reports whether err is the domain's refusal of one report (it
// changes nothing and concerns no other report) rather than a failure of
// the database.
func refusal(err error) bool {
	switch lifecycle.ErrorCode(err) {
	case lifecycle.ENOTFOUND, lifecycle.EINVALID, lifecycle.ECONFLICT:
		return true
	}
	return false
}

// lockReported locks the deployments ids (sorted: the lock order) FOR
// UPDATE and reads them, each with its client's manifest version
// (Published), in one round trip. The ids of no deployment are left out.
func lockReported(ctx context.Context, tx pgx.Tx, ids []string) (map[string]fleet.Deployment, error) {
	ds := make(map[string]fleet.Deployment, len(ids))
	if len(ids) == 0 {
		return ds, nil
	}
	b := &pgx.Batch{}
	// Lock, then read in a second statement (see lockDeployment).
	b.Queue(`SELECT 1 FROM deployments WHERE id = ANY($1::text[]::uuid[]) ORDER BY id FOR UPDATE`, ids)
	b.Queue(`SELECT `+sqlDeploymentColumns+`, c.manifest_version`+sqlDeploymentFrom+`
JOIN clients c ON c.id = d.client_id WHERE d.id = ANY($1::text[]::uuid[])`, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var published int64
			d, err := scanDeployment(rows, &published)
			if err != nil {
				return err
			}
			d.Published = uint64(published)
			d.Parameters = nil // not needed to decide; keeps the cache small
			ds[d.ID] = d
		}
		return rows.Err()
	})
	return ds, tx.SendBatch(ctx, b).Close()
}

// optimisticAttempts is how often RecordReport tries without a lock before
// it takes one.
const optimisticAttempts = 3

// recordOnce reads (or, with cached, may reuse what this process last
// wrote), decides and writes one report, and returns the row as written;
// applied is false when the deployment changed since it was read. With
// locked, the row is locked first. The caller remembers the written row
// only once it is committed.
func (s *FleetStore) recordOnce(ctx context.Context, q querier, locked, cached bool, clientID string, r *margo.StatusReport,
	decide func(fleet.Deployment) (lifecycle.Decision, error), now time.Time) (stored fleet.Deployment, applied, first bool, err error) {
	// What this process last wrote for the deployment saves the read; the
	// generation guard below catches every change made elsewhere.
	d, ok := s.reports.get(r.DeploymentID)
	if !ok || !cached || d.ClientID != clientID || r.AdoptedManifestVersion > d.Published {
		if locked { // lock, then read in a fresh statement (see lockDeployment)
			var one int
			err := q.QueryRow(ctx, `SELECT 1 FROM deployments WHERE id = $1 AND client_id = $2 FOR UPDATE`, r.DeploymentID, clientID).Scan(&one)
			if errors.Is(err, pgx.ErrNoRows) {
				return d, false, false, notFound("There is no deployment %s.", r.DeploymentID)
			}
			if err != nil {
				return d, false, false, translate(err)
			}
		}
		var published int64
		d, err = scanDeployment(q.QueryRow(ctx, `SELECT `+sqlDeploymentColumns+`, c.manifest_version`+sqlDeploymentFrom+`
JOIN clients c ON c.id = d.client_id WHERE d.id = $1 AND d.client_id = $2`, r.DeploymentID, clientID), &published)
		if errors.Is(err, pgx.ErrNoRows) {
			return d, false, false, notFound("There is no deployment %s.", r.DeploymentID)
		}
		if err != nil {
			return d, false, false, translate(err)
		}
		d.Published = uint64(published)
		d.Parameters = nil // not needed to decide; keeps the cache small
	}
	w, err := s.decideReport(fleet.ReportItem{ClientID: clientID, Report: r, Decide: decide}, d, now)
	if err != nil {
		return d, false, false, err // a refused report changes nothing
	}
	query, args, nev, err := reportStatement(w.c, w.d, w.r, w.stale, w.keep)
	if err != nil {
		return d, false, false, err
	}
	var n, inserted int
	if err := q.QueryRow(ctx, query, args...).Scan(&n, &inserted); err != nil {
		if !locked { // the statement commits by itself
			err = atCommit(err)
		}
		return d, false, false, translate(err)
	}
	if n != 1 {
		return d, false, false, nil
	}
	if inserted != nev {
		return d, false, false, errEventBounds(inserted, nev)
	}
	return written(w), true, d.Reports == 0, nil
}

// Deployment implements fleet.Store.
func (s *FleetStore) Deployment(ctx context.Context, id string) (fleet.Deployment, error) {
	if !validUUID(id) {
		return fleet.Deployment{}, notFound("There is no deployment %s.", id)
	}
	d, err := scanDeployment(s.pool.QueryRow(ctx, `SELECT `+sqlDeploymentColumns+sqlDeploymentFrom+` WHERE d.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return d, notFound("There is no deployment %s.", id)
	}
	return d, translate(err)
}

// DeploymentsByID implements fleet.Store: one query.
func (s *FleetStore) DeploymentsByID(ctx context.Context, ids []string) (map[string]fleet.Deployment, map[string]string, error) {
	valid := validUUIDs(ids)
	deps, active := make(map[string]fleet.Deployment, len(valid)), map[string]string{}
	if len(valid) == 0 {
		return deps, active, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sqlDeploymentColumns+`,
  (SELECT o.id::text FROM operations o WHERE o.deployment_id = d.id AND o.state IN ('queued', 'running') LIMIT 1)`+
		sqlDeploymentFrom+` WHERE d.id = ANY($1::text[]::uuid[])`, valid)
	if err != nil {
		return nil, nil, translate(err)
	}
	defer rows.Close()
	for rows.Next() {
		var op *string
		d, err := scanDeployment(rows, &op)
		if err != nil {
			return nil, nil, translate(err)
		}
		deps[d.ID] = d
		if op != nil {
			active[d.ID] = *op
		}
	}
	return deps, active, translate(rows.Err())
}

// Deployments implements fleet.Store.
func (s *FleetStore) Deployments(ctx context.Context, f fleet.DeploymentFilter, after string, limit int) ([]fleet.Deployment, error) {
	var w where
	if f.ApplicationID != "" {
		w.add("d.application_id = $?", f.ApplicationID)
	}
	if f.Version != "" {
		w.add("r.version = $?", f.Version)
	}
	if f.ClientID != "" {
		w.add("d.client_id = $?", f.ClientID)
	}
	if f.DeviceID != "" {
		w.add("d.device_id = $?", f.DeviceID)
	}
	if f.State != "" {
		w.add("d.state = $?", string(f.State))
	}
	if err := w.beforeCursor(after, "d.created_at", "d.id"); err != nil {
		return nil, err
	}
	from := sqlDeploymentFrom
	if len(f.Selector) > 0 {
		from += ` JOIN devices dev ON dev.client_id = d.client_id AND dev.id = d.device_id`
		selectorSQL(f.Selector, "dev.labels", &w)
	}
	q := `SELECT ` + sqlDeploymentColumns + from + ` WHERE ` + w.sql() + ` ORDER BY d.created_at DESC, d.id DESC LIMIT ` + w.limit(limit)
	rows, err := s.pool.Query(ctx, q, w.args...)
	if err != nil {
		return nil, translate(err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fleet.Deployment, error) { return scanDeployment(r) })
	return ds, translate(err)
}

// sqlRevisionColumns are read FROM sqlRevisionFrom: a revision's YAML is
// its document's.
const sqlRevisionColumns = `r.deployment_id::text, r.n, r.application_id, r.version, r.profile_id, r.parameters::text, r.operation, r.outcome,
doc.yaml, r.digest, r.manifest_version, r.created_at, r.components, r.forced, r.force_reason, r.strategy, r.installed_at`

const sqlRevisionFrom = ` FROM revisions r JOIN documents doc ON doc.deployment_id = r.deployment_id AND doc.digest = r.digest`

func scanRevision(row pgx.Row) (fleet.Revision, error) {
	var r fleet.Revision
	var version, params, op, strategy string
	var mv int64
	var installed *time.Time
	if err := row.Scan(&r.DeploymentID, &r.N, &r.ApplicationID, &version, &r.ProfileID, &params, &op, &r.Outcome, &r.YAML, &r.Digest, &mv,
		&r.CreatedAt, &r.Components, &r.Forced, &r.ForceReason, &strategy, &installed); err != nil {
		return r, err
	}
	r.Strategy = lifecycle.Strategy(strategy)
	if installed != nil {
		r.InstalledAt = *installed
	}
	v, err := lifecycle.ParseVersion(version)
	if err != nil {
		return r, err
	}
	r.Version, r.Operation, r.ManifestVersion = v, lifecycle.OperationKind(op), uint64(mv)
	return r, json.Unmarshal([]byte(params), &r.Parameters)
}

// Revisions implements fleet.Store.
func (s *FleetStore) Revisions(ctx context.Context, id string, before, limit int) ([]fleet.Revision, error) {
	if before <= 0 {
		before = 1<<31 - 1
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sqlRevisionColumns+sqlRevisionFrom+` WHERE r.deployment_id = $1 AND r.n < $2 ORDER BY r.n DESC LIMIT $3`, id, before, limit)
	if err != nil {
		return nil, translate(err)
	}
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fleet.Revision, error) { return scanRevision(r) })
	return rs, translate(err)
}

// Revision implements fleet.Store.
func (s *FleetStore) Revision(ctx context.Context, id string, n int) (fleet.Revision, error) {
	if !validUUID(id) {
		return fleet.Revision{}, notFound("There is no deployment %s.", id)
	}
	r, err := scanRevision(s.pool.QueryRow(ctx, `SELECT `+sqlRevisionColumns+sqlRevisionFrom+` WHERE r.deployment_id = $1 AND r.n = $2`, id, n))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, notFound("Deployment %s has no revision %d.", id, n)
	}
	return r, translate(err)
}

// History implements fleet.Store.
func (s *FleetStore) History(ctx context.Context, id string, after int64, limit int) ([]fleet.Transition, []int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, at, coalesce(from_state, ''), to_state, cause, coalesce(revision, 0), reason FROM deployment_history
WHERE deployment_id = $1 AND id > $2 ORDER BY id LIMIT $3`, id, after, limit)
	if err != nil {
		return nil, nil, translate(err)
	}
	defer rows.Close()
	var ts []fleet.Transition
	var ids []int64
	for rows.Next() {
		var t fleet.Transition
		var hid int64
		var from, to string
		if err := rows.Scan(&hid, &t.At, &from, &to, &t.Cause, &t.Revision, &t.Reason); err != nil {
			return nil, nil, translate(err)
		}
		t.From, t.To = lifecycle.State(from), lifecycle.State(to)
		ts, ids = append(ts, t), append(ids, hid)
	}
	return ts, ids, translate(rows.Err())
}

// LatestReport implements fleet.Store.
func (s *FleetStore) LatestReport(ctx context.Context, id string) (fleet.StoredReport, error) {
	var r fleet.StoredReport
	var adopted int64
	var js string
	err := s.pool.QueryRow(ctx, `SELECT received_at, adopted_manifest_version, state, stale, report::text FROM status_reports
WHERE deployment_id = $1 ORDER BY id DESC LIMIT 1`, id).Scan(&r.ReceivedAt, &adopted, &r.State, &r.Stale, &js)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, notFound("Deployment %s has no status report.", id)
	}
	r.Adopted, r.JSON = uint64(adopted), json.RawMessage(js)
	return r, translate(err)
}

// DeploymentYAML implements fleet.Store.
func (s *FleetStore) DeploymentYAML(ctx context.Context, clientID, id, digest string) ([]byte, error) {
	if !validUUID(id) {
		return nil, notFound("No deployment %s with digest %s.", id, digest)
	}
	var yaml []byte
	err := s.pool.QueryRow(ctx, `SELECT doc.yaml FROM documents doc JOIN deployments d ON d.id = doc.deployment_id
WHERE doc.deployment_id = $1 AND d.client_id = $2 AND doc.digest = $3`, id, clientID, digest).Scan(&yaml)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("No deployment %s with digest %s.", id, digest)
	}
	return yaml, translate(err)
}

// validUUID reports whether s is a UUID in its canonical text form, so that
// a malformed id is "not found" rather than a database error.
func validUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// validUUIDs returns the ids of ids that are UUIDs (the others name no row).
func validUUIDs(ids []string) []string {
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if validUUID(id) {
			valid = append(valid, id)
		}
	}
	return valid
}
