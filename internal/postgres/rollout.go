package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// The rollout store (migration 00009): rollouts, their history and their
// members. The rules are the fleet service's and internal/lifecycle's;
// this file reads and writes, set-based.

// sqlLastSeen is the one place that reads when a device was last seen
// (devices.last_seen_at, migration 00010; NULL: never).
const sqlLastSeen = `dev.last_seen_at`

var _ fleet.RolloutStore = (*FleetStore)(nil)

const sqlRolloutColumns = `id::text, application_id, action, request::text, waves::text, state, cause, state_changed_at, current_wave,
threshold_accepted, abort::text, deadline_at, waiting::text, generation, created_by, created_at, updated_at`

func scanRollout(row pgx.Row) (fleet.Rollout, error) {
	var r fleet.Rollout
	var action, request, waves, state, cause string
	var abort, waiting *string
	if err := row.Scan(&r.ID, &r.ApplicationID, &action, &request, &waves, &state, &cause, &r.StateChangedAt, &r.CurrentWave,
		&r.WaveAccepted, &abort, &r.DeadlineAt, &waiting, &r.Generation, &r.CreatedBy, &r.CreatedAt, &r.UpdatedAt); err != nil {
		return r, err
	}
	r.Action, r.State, r.Cause = lifecycle.RolloutAction(action), lifecycle.RolloutState(state), lifecycle.RolloutCause(cause)
	r.CurrentWave++ // stored from 0
	if err := json.Unmarshal([]byte(request), &r.Request); err != nil {
		return r, fmt.Errorf("rollout %s: request: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(waves), &r.Waves); err != nil {
		return r, fmt.Errorf("rollout %s: waves: %w", r.ID, err)
	}
	if abort != nil {
		r.Abort = &fleet.RolloutAbort{}
		if err := json.Unmarshal([]byte(*abort), r.Abort); err != nil {
			return r, fmt.Errorf("rollout %s: abort: %w", r.ID, err)
		}
	}
	if waiting != nil {
		r.Waiting = &fleet.RolloutWaiting{}
		if err := json.Unmarshal([]byte(*waiting), r.Waiting); err != nil {
			return r, fmt.Errorf("rollout %s: waiting: %w", r.ID, err)
		}
	}
	return r, nil
}

// wavesJSON is the stored form of waves: without their counts, which are
// read from the members.
func wavesJSON(ws []fleet.RolloutWave) (string, error) {
	out := make([]fleet.RolloutWave, len(ws))
	for i, w := range ws {
		w.Counts = lifecycle.WaveCounts{}
		out[i] = w
	}
	b, err := json.Marshal(out)
	return string(b), err
}

// readCounts fills r's counts, overall and per wave, from the deltas its
// members' changes appended (migration 00020).
func readCounts(ctx context.Context, q reader, r *fleet.Rollout) error {
	// The deltas the members' triggers append (migration 00020), summed.
	rows, err := q.Query(ctx, `SELECT wave, status, classification, reason, sum(n) FROM rollout_count_deltas
WHERE rollout_id = $1 GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0`, r.ID)
	if err != nil {
		return err
	}
	defer rows.Close()
	r.Counts = fleet.RolloutCounts{ExcludedByReason: map[lifecycle.ExclusionReason]int{}}
	for i := range r.Waves {
		r.Waves[i].Counts = lifecycle.WaveCounts{}
	}
	for rows.Next() {
		var wave, n int
		var status, class, reason string
		if err := rows.Scan(&wave, &status, &class, &reason, &n); err != nil {
			return err
		}
		r.Counts.Total += n
		if class == fleet.ClassEligible {
			r.Counts.Eligible += n
		}
		s := lifecycle.MemberStatus(status)
		if s == lifecycle.MemberExcluded {
			r.Counts.Excluded += n
			r.Counts.ExcludedByReason[lifecycle.ExclusionReason(reason)] += n
		}
		r.Counts.ByStatus.AddN(s, n)
		if wave >= 0 && wave < len(r.Waves) {
			r.Waves[wave].Counts.AddN(s, n)
		}
	}
	return rows.Err()
}

func readHistory(ctx context.Context, q reader, r *fleet.Rollout) error {
	rows, err := q.Query(ctx, `SELECT coalesce(from_state, ''), to_state, cause, at, actor, detail FROM rollout_history WHERE rollout_id = $1 ORDER BY id`, r.ID)
	if err != nil {
		return err
	}
	r.History, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (fleet.RolloutTransition, error) {
		var t fleet.RolloutTransition
		var from, to, cause string
		err := row.Scan(&from, &to, &cause, &t.At, &t.Actor, &t.Detail)
		t.From, t.To, t.Cause = lifecycle.RolloutState(from), lifecycle.RolloutState(to), lifecycle.RolloutCause(cause)
		return t, err
	})
	return err
}

// Rollout implements fleet.RolloutStore.
func (s *FleetStore) Rollout(ctx context.Context, id string) (fleet.Rollout, error) {
	if !validUUID(id) {
		return fleet.Rollout{}, notFound("There is no rollout %s.", id)
	}
	var r fleet.Rollout
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		var err error
		r, err = scanRollout(tx.QueryRow(ctx, `SELECT `+sqlRolloutColumns+` FROM rollouts WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("There is no rollout %s.", id)
		}
		if err != nil {
			return err
		}
		if err := readHistory(ctx, tx, &r); err != nil {
			return err
		}
		return readCounts(ctx, tx, &r)
	})
	return r, translate(err)
}

// Rollouts implements fleet.RolloutStore.
func (s *FleetStore) Rollouts(ctx context.Context, f fleet.RolloutFilter, after string, limit int) ([]fleet.Rollout, error) {
	var w where
	if f.ApplicationID != "" {
		w.add("application_id = $?", f.ApplicationID)
	}
	if f.State != "" {
		w.add("state = $?", string(f.State))
	}
	if err := w.beforeCursor(after, "created_at", "id"); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sqlRolloutColumns+` FROM rollouts WHERE `+w.sql()+` ORDER BY created_at DESC, id DESC LIMIT `+w.limit(limit), w.args...)
	if err != nil {
		return nil, translate(err)
	}
	rs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fleet.Rollout, error) { return scanRollout(row) })
	if err != nil {
		return nil, translate(err)
	}
	for i := range rs {
		if err := readCounts(ctx, s.pool, &rs[i]); err != nil {
			return nil, translate(err)
		}
	}
	return rs, nil
}

// waveStarts are the places at which the waves after the first start
// (lifecycle.WaveStarts of their resolved sizes).
func waveStarts(ws []fleet.RolloutWave) []int {
	sizes := make([]int, len(ws))
	for i, w := range ws {
		sizes[i] = w.ResolvedSize
	}
	return lifecycle.WaveStarts(sizes)
}

// rolloutWaveStarts reads the wave starts of rollout id (ENOTFOUND when
// there is no such rollout).
func rolloutWaveStarts(ctx context.Context, q reader, id string) ([]int, error) {
	var starts []int
	err := q.QueryRow(ctx, `SELECT coalesce(wave_starts, '{}') FROM rollouts WHERE id = $1`, id).Scan(&starts)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("There is no rollout %s.", id)
	}
	return starts, err
}

const sqlMemberColumns = `ord, client_id, device_id, coalesce(deployment_id::text, ''), classification, coalesce(reason, ''), reason_detail,
supplier_reason, plan::text, place, status, coalesce(operation_id::text, ''), from_version, from_revision, profile_id, restore_revision, result,
revert_outcome, revert_to, coalesce(revert_operation::text, ''), revert_detail, revert_forced, updated_at`

// scanMember reads sqlMemberColumns; the member's wave is the one of its
// place among the wave starts (nil: Wave left 0).
func scanMember(row pgx.Row, starts []int) (fleet.RolloutMember, error) {
	var m fleet.RolloutMember
	var reason, status string
	var plan, outcome *string
	var place *int
	var rv fleet.MemberRevert
	if err := row.Scan(&m.Ord, &m.ClientID, &m.DeviceID, &m.DeploymentID, &m.Classification, &reason, &m.ReasonDetail, &m.SupplierReason,
		&plan, &place, &status, &m.OperationID, &m.FromVersion, &m.FromRevision, &m.ProfileID, &m.RestoreRevision, &m.Result,
		&outcome, &rv.ToRevision, &rv.OperationID, &rv.Reason, &rv.Forced, &m.UpdatedAt); err != nil {
		return m, err
	}
	m.Reason, m.Status = lifecycle.ExclusionReason(reason), lifecycle.MemberStatus(status)
	if place != nil && starts != nil {
		m.Wave = lifecycle.WaveAt(starts, *place) + 1
	}
	if plan != nil {
		m.Plan = &lifecycle.MemberPlan{}
		if err := json.Unmarshal([]byte(*plan), m.Plan); err != nil {
			return m, err
		}
	}
	if outcome != nil {
		rv.Outcome = *outcome
		m.Revert = &rv
	}
	return m, nil
}

// RolloutMembers implements fleet.RolloutStore.
func (s *FleetStore) RolloutMembers(ctx context.Context, id string, f fleet.MemberFilter, after, limit int) ([]fleet.RolloutMember, error) {
	if !validUUID(id) {
		return nil, notFound("There is no rollout %s.", id)
	}
	starts, err := rolloutWaveStarts(ctx, s.pool, id)
	if err != nil {
		return nil, translate(err)
	}
	var w where
	w.add("rollout_id = $?::uuid", id)
	w.add("ord > $?", after)
	if f.Wave > 0 {
		lo, hi := wavePlaces(starts, f.Wave-1)
		w.add("place >= $? AND place < $?", lo, hi)
	}
	if f.Status != "" {
		w.add("status = $?", string(f.Status))
	}
	if f.Classification != "" {
		w.add("classification = $?", f.Classification)
	}
	if f.Reason != "" {
		w.add("reason = $?", string(f.Reason))
	}
	if f.DeploymentID != "" {
		if !validUUID(f.DeploymentID) {
			f.DeploymentID = "00000000-0000-0000-0000-000000000000" // matches no member
		}
		w.add("deployment_id = $?::uuid", f.DeploymentID)
	}
	if f.ClientID != "" {
		w.add("client_id = $?", f.ClientID)
	}
	if f.DeviceID != "" {
		w.add("device_id = $?", f.DeviceID)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sqlMemberColumns+` FROM rollout_members WHERE `+w.sql()+` ORDER BY ord LIMIT `+w.limit(limit), w.args...)
	if err != nil {
		return nil, translate(err)
	}
	ms, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fleet.RolloutMember, error) { return scanMember(row, starts) })
	if err != nil {
		return nil, translate(err)
	}
	return ms, nil
}

// wavePlaces returns the places [lo, hi) of wave k (from 0) given its
// rollout's wave starts.
func wavePlaces(starts []int, k int) (lo, hi int) {
	lo, hi = 0, math.MaxInt32
	if k > 0 && k-1 < len(starts) {
		lo = starts[k-1]
	}
	if k < len(starts) {
		hi = starts[k]
	}
	if k > len(starts) {
		lo = hi // no such wave: no member
	}
	return lo, hi
}

// ---- candidates ----

// maxResolving bounds the candidate reads (RolloutCandidates) running at
// once, each on a connection of its own.
const maxResolving = 4

// RolloutCandidates implements fleet.RolloutStore: one query for all the
// candidates (with their active operation and rollout membership; an
// install's with its active rollout), read in one read-only transaction on
// a connection of its own outside the pool (at most maxResolving at once):
// its reader holds it while page runs, which reads with pooled connections
// (and a creation's members are written on another connection of their
// own). The candidates' order is the query's ORDER BY. Its plan joins the
// deployments, their revisions and their devices by hash and sorts the
// result once: at 100,000 deployments that took 0.8-1.0 s where pages of
// 2,000 read by keyset, three index lookups per row, took 2.3-2.7 s
// (measured alternately, one run, loaded machine). JIT is off (it compiled
// the query for 1.4 s) and so are parallel workers (the reader competes
// with the classification for two cores). The revisions (for a rollback)
// are read a page at a time with a pooled connection.
func (s *FleetStore) RolloutCandidates(ctx context.Context, q fleet.CandidateQuery, pageSize int, page func([]fleet.RolloutCandidate) error) error {
	var w where
	w.args = append(w.args, q.ApplicationID) // $1 in the queries below
	w.add("dev.registered")
	if len(q.ClientIDs) > 0 {
		w.add("dev.client_id = ANY($?)", q.ClientIDs)
	}
	if len(q.Devices) > 0 {
		cs, ds := make([]string, len(q.Devices)), make([]string, len(q.Devices))
		for i, k := range q.Devices {
			cs[i], ds[i] = k[0], k[1]
		}
		w.add("(dev.client_id, dev.id) IN (SELECT * FROM unnest($?::text[], $?::text[]))", cs, ds)
	}
	selectorSQL(q.Selector, "dev.labels", &w)
	var sql string
	if q.Install {
		// The device, with the application's live deployment on it if any
		// (the columns of the deployment are NULL otherwise).
		sql = `SELECT dev.client_id, dev.id, dev.fit_key, ` + sqlLastSeen + `, d.id::text,
  (SELECT m.rollout_id::text FROM rollout_members m WHERE m.active AND m.install AND m.application_id = $1
     AND m.client_id = dev.client_id AND m.device_id = dev.id LIMIT 1)
FROM devices dev LEFT JOIN LATERAL (SELECT d.id FROM deployments d WHERE d.client_id = dev.client_id AND d.device_id = dev.id
  AND d.application_id = $1 AND NOT d.removing LIMIT 1) d ON true
WHERE ` + w.sql() + ` ORDER BY dev.client_id COLLATE "C", dev.id COLLATE "C"`
	} else {
		if len(q.Versions) > 0 {
			w.add("r.version = ANY($?)", q.Versions)
		}
		if len(q.States) > 0 {
			ss := make([]string, len(q.States))
			for i, st := range q.States {
				ss[i] = string(st)
			}
			w.add("d.state = ANY($?)", ss)
		}
		w.add("NOT d.removing")
		// The installed revision's version is the desired one's when they
		// are the same revision (a fleet at rest): no second revision read.
		// The devices are joined on their keys compared as bytes (C
		// collation), the order of the candidates.
		// Only the deployment's columns a classification reads: a plan
		// decodes every deployment of the fleet. The active operation and
		// the active membership are joined (at most one each: the unique
		// indexes operations_one_active, rollout_members_active_deployment),
		// hashed once rather than looked up per row (0.47-0.60 s against
		// 0.64-1.01 s at 100,000, alternately in one run).
		sql = `SELECT dev.client_id, dev.id, dev.fit_key, ` + sqlLastSeen + `, d.id::text, r.version, r.profile_id, d.state, d.revision,
  d.installed_revision, r.parameters::text, d.removing,
  CASE WHEN d.installed_revision IS NULL THEN '' WHEN d.installed_revision = d.revision THEN r.version
    ELSE coalesce((SELECT ir.version FROM revisions ir WHERE ir.deployment_id = d.id AND ir.n = d.installed_revision), '') END,
  o.id::text, m.rollout_id::text
` + sqlDeploymentFrom + ` JOIN devices dev ON dev.client_id COLLATE "C" = d.client_id COLLATE "C" AND dev.id COLLATE "C" = d.device_id COLLATE "C"
LEFT JOIN operations o ON o.deployment_id = d.id AND o.state IN ('queued', 'running')
LEFT JOIN rollout_members m ON m.deployment_id = d.id AND m.active
WHERE d.application_id = $1 AND ` + w.sql() + ` ORDER BY d.client_id COLLATE "C", d.device_id COLLATE "C", d.id`
	}
	// The connection is closed when the read ends, however it ends: that
	// ends its transaction and an unread rest of the rows (no drain).
	conn, release, err := s.ownConn(ctx, s.resolving)
	if err != nil {
		return translate(err)
	}
	defer release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return translate(err)
	}
	// No statement timeout: the one statement runs while page runs (ctx
	// bounds it). work_mem: the hash tables and the sort of 100,000
	// candidates (about 15 MB) in memory.
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off; SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL work_mem = '32MB';
SET LOCAL statement_timeout = 0`); err != nil {
		return translate(err)
	}
	rows, err := tx.Query(ctx, sql, w.args...)
	if err != nil {
		return translate(err)
	}
	versions := versionCache{}
	scan := func(row pgx.Rows) (fleet.RolloutCandidate, error) {
		var c fleet.RolloutCandidate
		var seen *time.Time
		var busy, active *string
		if q.Install {
			var dep *string
			if err := row.Scan(&c.ClientID, &c.DeviceID, &c.FitKey, &seen, &dep, &busy); err != nil {
				return c, err
			}
			if dep != nil {
				c.Deployment = &fleet.Deployment{ID: *dep, ClientID: c.ClientID, DeviceID: c.DeviceID, ApplicationID: q.ApplicationID}
			}
		} else {
			var version, installed, state, params string
			var inst *int32
			d := &fleet.Deployment{ApplicationID: q.ApplicationID}
			if err := row.Scan(&c.ClientID, &c.DeviceID, &c.FitKey, &seen, &d.ID, &version, &d.ProfileID, &state, &d.Revision,
				&inst, &params, &d.Removing, &installed, &active, &busy); err != nil {
				return c, err
			}
			d.ClientID, d.DeviceID, d.State = c.ClientID, c.DeviceID, lifecycle.State(state)
			if inst != nil {
				d.InstalledRevision = int(*inst)
			}
			var err error
			if d.Version, err = versions.parse(version); err != nil {
				return c, err
			}
			if installed != "" {
				if c.InstalledVersion, err = versions.parse(installed); err != nil {
					return c, err
				}
			}
			if params == "{}" {
				d.Parameters = map[string]any{}
			} else if err := json.Unmarshal([]byte(params), &d.Parameters); err != nil {
				return c, fmt.Errorf("deployment %s: stored parameters: %w", d.ID, err)
			}
			c.Deployment = d
		}
		if seen != nil {
			c.LastSeenAt = *seen
		}
		if busy != nil {
			c.BusyRollout = *busy
		}
		if active != nil {
			c.ActiveOperation = *active
		}
		return c, nil
	}
	cands := make([]fleet.RolloutCandidate, 0, pageSize)
	flush := func() error {
		if len(cands) == 0 {
			return nil
		}
		if q.Revisions && !q.Install {
			if err := s.candidateRevisions(ctx, cands); err != nil {
				return translate(err)
			}
		}
		err := page(cands)
		cands = make([]fleet.RolloutCandidate, 0, pageSize) // page may keep the last one
		return err
	}
	for rows.Next() {
		c, err := scan(rows)
		if err != nil {
			return translate(err)
		}
		if cands = append(cands, c); len(cands) == pageSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return translate(err)
	}
	return flush()
}

// versionCache parses each stored version once per read: a page of
// candidates holds few distinct versions.
type versionCache map[string]lifecycle.Version

func (vc versionCache) parse(s string) (lifecycle.Version, error) {
	if v, ok := vc[s]; ok {
		return v, nil
	}
	v, err := lifecycle.ParseVersion(s)
	if err != nil {
		return v, fmt.Errorf("stored version %q: %w", s, err)
	}
	vc[s] = v
	return v, nil
}

// DeviceCapabilities implements fleet.RolloutStore.
func (s *FleetStore) DeviceCapabilities(ctx context.Context, devices [][2]string) (map[[2]string]json.RawMessage, error) {
	out := make(map[[2]string]json.RawMessage, len(devices))
	if len(devices) == 0 {
		return out, nil
	}
	cs, ds := make([]string, len(devices)), make([]string, len(devices))
	for i, k := range devices {
		cs[i], ds[i] = k[0], k[1]
	}
	rows, err := s.pool.Query(ctx, `SELECT client_id, id, capabilities::text FROM devices
WHERE (client_id, id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, cs, ds)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k [2]string
		var caps string
		if err := rows.Scan(&k[0], &k[1], &caps); err != nil {
			return nil, translate(err)
		}
		out[k] = json.RawMessage(caps)
	}
	return out, translate(rows.Err())
}

// skipRow scans lead's columns first, then what scanDeployment asks.
type skipRow struct {
	row  pgx.Row
	lead []any
}

func (r skipRow) Scan(dest ...any) error { return r.row.Scan(append(r.lead, dest...)...) }

func (s *FleetStore) candidateRevisions(ctx context.Context, cands []fleet.RolloutCandidate) error {
	ids := make([]string, len(cands))
	at := make(map[string]int, len(cands))
	for i, c := range cands {
		ids[i] = c.Deployment.ID
		at[c.Deployment.ID] = i
	}
	rows, err := s.pool.Query(ctx, `SELECT deployment_id::text, n, version, created_at, installed_at FROM revisions WHERE deployment_id = ANY($1::text[]::uuid[])`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, version string
		var rt lifecycle.RevisionTimes
		var installed *time.Time
		if err := rows.Scan(&id, &rt.N, &version, &rt.PublishedAt, &installed); err != nil {
			return err
		}
		if rt.Version, err = lifecycle.ParseVersion(version); err != nil {
			return err
		}
		if installed != nil {
			rt.InstalledAt = *installed
		}
		cands[at[id]].Revisions = append(cands[at[id]].Revisions, rt)
	}
	return rows.Err()
}

// ---- creation ----

// memberColumns are the columns InsertRollout copies a member into.
var memberColumns = []string{"rollout_id", "ord", "application_id", "install", "client_id", "device_id", "deployment_id", "classification",
	"reason", "reason_detail", "supplier_reason", "plan", "place", "status", "from_version", "from_revision", "profile_id",
	"restore_revision", "active", "updated_at"}

// memberRow is m's row of rollout r (memberColumns); place is m's place
// among the eligible members (nil when excluded).
func memberRow(r fleet.Rollout, m fleet.RolloutMember, place any) ([]any, error) {
	var dep, reason, plan any
	if m.DeploymentID != "" {
		dep = m.DeploymentID
	}
	if m.Reason != "" {
		reason = string(m.Reason)
	}
	if m.Plan != nil {
		b, err := json.Marshal(m.Plan)
		if err != nil {
			return nil, err
		}
		plan = string(b)
	}
	return []any{r.ID, m.Ord, r.ApplicationID, r.Action == lifecycle.RolloutInstall, m.ClientID, m.DeviceID, dep, m.Classification,
		reason, m.ReasonDetail, m.SupplierReason, plan, place, string(m.Status), m.FromVersion, m.FromRevision, m.ProfileID,
		m.RestoreRevision, m.Classification == fleet.ClassEligible && m.Status != lifecycle.MemberExcluded, r.CreatedAt}, nil
}

// copyQueue is how many pages of members wait for their COPY while the
// next ones are resolved.
const copyQueue = 2

// maxCreating bounds the rollout creations writing at once, each on a
// connection of its own (InsertRollout).
const maxCreating = 2

// InsertRollout implements fleet.RolloutStore. The rollout and its members
// are written in one transaction, on a connection of its own outside the
// pool (at most maxCreating at once): the resolution that gives the
// members reads with pooled connections meanwhile, and a creation holding
// a pooled connection while waiting for another could wait for ever on a
// small pool. The members are copied into rollout_members as fill gives
// them, by a writer goroutine one page behind the resolution (two
// backends, two cores), after head's row (the rollout as known before its
// members, so that the members' rollout exists: migration 00019's
// trigger); the row is then updated to the rollout fill returns (its
// waves, state, deadline), with its history and events.
func (s *FleetStore) InsertRollout(ctx context.Context, head fleet.Rollout, fill func(write func([]fleet.RolloutMember) error) (fleet.Rollout, []lifecycle.Event, error)) error {
	conn, release, err := s.ownConn(ctx, s.creating)
	if err != nil {
		return translate(err)
	}
	defer release()
	err = inTx(ctx, conn, func(tx pgx.Tx) error { return insertRollout(ctx, tx, head, fill) })
	var pe *pgconn.PgError
	if id := busyConstraint(err); id != "" || errors.As(err, &pe) && pe.Code == "55P03" {
		return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: fleet.ProblemRolloutMember,
			Message: "A member of this rollout became a member of another active rollout meanwhile; plan it again."}
	}
	return translate(err)
}

// ownConn opens a connection outside the pool once sem has room for it;
// release closes it (bounded by 5 s) and frees its place.
func (s *FleetStore) ownConn(ctx context.Context, sem chan struct{}) (*pgx.Conn, func(), error) {
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		<-sem
		return nil, nil, err
	}
	return conn, func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
		<-sem
	}, nil
}

// creationLockTimeout bounds the wait of a creation's member COPY for a
// member another creation (not yet committed) holds: the creation is
// refused as a conflict instead of waiting for the other's whole
// resolution.
const creationLockTimeout = "2s"

func insertRollout(ctx context.Context, tx pgx.Tx, head fleet.Rollout, fill func(write func([]fleet.RolloutMember) error) (fleet.Rollout, []lifecycle.Event, error)) error {
	request, err := json.Marshal(head.Request)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+creationLockTimeout+`'`); err != nil {
		return err
	}
	inserted := false
	insertHead := func() error {
		if inserted {
			return nil
		}
		inserted = true
		_, err := tx.Exec(ctx, `INSERT INTO rollouts (id, application_id, action, request, waves, state, cause, state_changed_at, current_wave,
  revert_on_abort, deadline_at, generation, created_by, created_at, updated_at)
VALUES ($1, $2, $3, $4::jsonb, '[]', $5, $6, $7, 0, $8, $7, 1, $9, $7, $7)`,
			head.ID, head.ApplicationID, string(head.Action), string(request), string(head.State), string(head.Cause), head.CreatedAt,
			head.Request.RevertOnAbort, head.CreatedBy)
		return err
	}
	// The writer: the transaction is its own while fill runs.
	pages := make(chan [][]any, copyQueue)
	failed := make(chan struct{}) // closed when the writer failed (copyErr set)
	done := make(chan struct{})   // closed when the writer ended
	var copyErr error
	go func() {
		defer close(done)
		for rows := range pages {
			if copyErr != nil {
				continue // drained: the resolution stops at its next page
			}
			err := insertHead()
			if err == nil {
				_, err = tx.CopyFrom(ctx, pgx.Identifier{"rollout_members"}, memberColumns, pgx.CopyFromRows(rows))
			}
			if err != nil {
				copyErr = err
				close(failed)
			}
		}
	}()
	var closeOnce sync.Once
	stopWriter := func() { closeOnce.Do(func() { close(pages); <-done }) }
	defer stopWriter() // also when fill panics: the writer is not left waiting
	eligible := 0
	r, events, err := fill(func(ms []fleet.RolloutMember) error {
		rows := make([][]any, 0, len(ms))
		for _, m := range ms {
			var place any
			if m.Classification == fleet.ClassEligible {
				place, eligible = eligible, eligible+1
			}
			row, err := memberRow(head, m, place)
			if err != nil {
				return err
			}
			rows = append(rows, row)
		}
		select {
		case pages <- rows:
			return nil
		case <-failed:
			return copyErr
		}
	})
	stopWriter()
	if err == nil {
		err = copyErr
	}
	if err != nil {
		return err
	}
	if err := insertHead(); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = DEFAULT`); err != nil {
		return err
	}
	waves, err := wavesJSON(r.Waves)
	if err != nil {
		return err
	}
	var waiting any
	if r.Waiting != nil {
		b, err := json.Marshal(r.Waiting)
		if err != nil {
			return err
		}
		waiting = string(b)
	}
	// Setting the wave starts counts the members (migration 00020).
	starts := waveStarts(r.Waves)
	if _, err := tx.Exec(ctx, `UPDATE rollouts SET action = $2, waves = $3::jsonb, state = $4, cause = $5, deadline_at = $6, waiting = $7::jsonb,
  wave_starts = $8 WHERE id = $1`, r.ID, string(r.Action), waves, string(r.State), string(r.Cause), r.DeadlineAt, waiting, starts); err != nil {
		return err
	}
	history := r.History
	if len(history) == 0 {
		history = []fleet.RolloutTransition{{To: r.State, Cause: r.Cause, At: r.CreatedAt, Actor: r.CreatedBy}}
	}
	for _, h := range history {
		var from *string
		if h.From != "" {
			f := string(h.From)
			from = &f
		}
		if _, err := tx.Exec(ctx, `INSERT INTO rollout_history (rollout_id, from_state, to_state, cause, at, actor, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			r.ID, from, string(h.To), string(h.Cause), h.At, h.Actor, h.Detail); err != nil {
			return err
		}
	}
	if err := AppendEvents(ctx, tx, events); err != nil {
		return err
	}
	return auditChange(ctx, tx, r.CreatedAt, true)
}

// busyConstraint returns the name of the active-membership index err
// violates ("" for any other error).
func busyConstraint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && strings.HasPrefix(pe.ConstraintName, "rollout_members_active_") {
		return pe.ConstraintName
	}
	return ""
}

// ---- interplay ----

// ActiveRolloutOf implements fleet.RolloutStore.
func (s *FleetStore) ActiveRolloutOf(ctx context.Context, deploymentID string) (string, error) {
	if !validUUID(deploymentID) {
		return "", nil
	}
	return s.oneID(ctx, `SELECT rollout_id::text FROM rollout_members WHERE active AND deployment_id = $1 LIMIT 1`, deploymentID)
}

// ActiveRolloutOfOperation implements fleet.RolloutStore.
func (s *FleetStore) ActiveRolloutOfOperation(ctx context.Context, operationID string) (string, error) {
	if !validUUID(operationID) {
		return "", nil
	}
	return s.oneID(ctx, `SELECT rollout_id::text FROM rollout_members WHERE active AND operation_id = $1 LIMIT 1`, operationID)
}

// rolloutHolds reads, in tx (the deployments locked), the rollout
// membership of each deployment deps[i] that concerns a new operation
// ops[i]: the one reserved for it, else the active one; in one statement,
// by deployment id (none: no membership). Each
// branch of the union is one index's (rollout_members_active_deployment,
// rollout_members_any_operation, rollout_members_revert).
func rolloutHolds(ctx context.Context, tx pgx.Tx, deps, ops []string) (map[string]fleet.RolloutHold, error) {
	out := make(map[string]fleet.RolloutHold, len(deps))
	rows, err := tx.Query(ctx, `SELECT DISTINCT ON (x.dep) x.dep::text, m.rollout_id::text, m.active, coalesce(m.operation_id::text, ''),
  coalesce(m.revert_operation::text, ''), m.status
FROM unnest($1::text[]::uuid[], $2::text[]::uuid[]) AS x(dep, op) CROSS JOIN LATERAL (
  SELECT rollout_id, active, operation_id, revert_operation, status FROM rollout_members WHERE deployment_id = x.dep AND active
  UNION ALL SELECT rollout_id, active, operation_id, revert_operation, status FROM rollout_members WHERE operation_id = x.op AND deployment_id = x.dep
  UNION ALL SELECT rollout_id, active, operation_id, revert_operation, status FROM rollout_members WHERE revert_operation = x.op AND deployment_id = x.dep) m
ORDER BY x.dep, (m.operation_id IS NOT DISTINCT FROM x.op OR m.revert_operation IS NOT DISTINCT FROM x.op) DESC, m.active DESC`, deps, ops)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var d, status string
		var h fleet.RolloutHold
		if err := rows.Scan(&d, &h.RolloutID, &h.Active, &h.OperationID, &h.RevertOperationID, &status); err != nil {
			return nil, err
		}
		h.Status = lifecycle.MemberStatus(status)
		out[d] = h
	}
	return out, rows.Err()
}

func (s *FleetStore) oneID(ctx context.Context, sql string, args ...any) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, sql, args...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, translate(err)
}

// ---- the driver ----

// ClaimRollouts implements fleet.RolloutStore.
func (s *FleetStore) ClaimRollouts(ctx context.Context, owner string, limit int, now time.Time, lease time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, `UPDATE rollouts SET lease_until = $3, lease_owner = $4 WHERE id IN (
  SELECT id FROM rollouts WHERE `+sqlRolloutDue("$2")+`
    AND (lease_until IS NULL OR lease_until <= $2)
  ORDER BY recheck_at NULLS FIRST LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id::text`, limit, now, now.Add(lease), owner)
	if err != nil {
		return nil, translate(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, translate(err)
}

// RenewRolloutLease implements fleet.RolloutStore.
func (s *FleetStore) RenewRolloutLease(ctx context.Context, id, owner string, now time.Time, lease time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE rollouts SET lease_until = $3 WHERE id = $1 AND lease_owner = $2`, id, owner, now.Add(lease))
	if err != nil {
		return false, translate(err)
	}
	return tag.RowsAffected() == 1, nil
}

// SyncRolloutMembers implements fleet.RolloutStore.
func (s *FleetStore) SyncRolloutMembers(ctx context.Context, id string, now time.Time) (int, []fleet.RolloutMember, error) {
	moved := 0
	var unpublished []fleet.RolloutMember
	err := beginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Deleted deployments and unregistered devices: removed (a member
		// under revert is settled by its revert operation instead). Only
		// deployments removed since the rollout started can be members
		// (a candidate is not being removed); the instant of a removal is
		// the clock of the process that decided it: an hour of margin.
		tag, err := tx.Exec(ctx, `UPDATE rollout_members m SET status = 'removed', active = false, updated_at = $2,
  result = 'The deployment was removed.'
FROM rollouts r, deployments d WHERE r.id = $1 AND d.removing AND d.removed_at >= r.created_at - interval '1 hour'
  AND d.application_id = r.application_id AND m.deployment_id = d.id AND m.rollout_id = $1 AND m.revert_outcome IS NULL
  AND m.status IN ('pending', 'in-progress', 'succeeded', 'failed', 'cancelled')`, id, now)
		if err != nil {
			return err
		}
		moved += int(tag.RowsAffected())
		tag, err = tx.Exec(ctx, `UPDATE rollout_members m SET status = CASE o.state WHEN 'succeeded' THEN 'succeeded' WHEN 'failed' THEN 'failed' ELSE 'cancelled' END,
  result = CASE WHEN o.reason = '' THEN 'Operation ' || o.state || '.' ELSE 'Operation ' || o.state || ': ' || o.reason || '.' END, updated_at = $2
FROM operations o WHERE m.rollout_id = $1 AND m.status = 'in-progress' AND o.id = m.operation_id
  AND o.state IN ('succeeded', 'failed', 'cancelled')`, id, now)
		if err != nil {
			return err
		}
		moved += int(tag.RowsAffected())
		// A revert ends the member's status only from where a revert
		// starts (an operator may have excluded it meanwhile: it stays
		// excluded); its outcome is recorded in every case.
		tag, err = tx.Exec(ctx, `UPDATE rollout_members m SET
  status = CASE WHEN m.status NOT IN ('succeeded', 'failed', 'cancelled') THEN m.status
    WHEN o.state = 'succeeded' THEN 'reverted' ELSE 'not-reverted' END,
  revert_outcome = CASE o.state WHEN 'succeeded' THEN 'reverted' ELSE 'failed' END,
  revert_detail = CASE o.state WHEN 'succeeded' THEN m.revert_detail ELSE 'The revert operation ' || o.state || coalesce(': ' || nullif(o.reason, ''), '') || '.' END,
  updated_at = $2
FROM operations o WHERE m.rollout_id = $1 AND m.revert_outcome IN ('pending', 'in-progress') AND o.id = m.revert_operation
  AND o.state IN ('succeeded', 'failed', 'cancelled')`, id, now)
		if err != nil {
			return err
		}
		moved += int(tag.RowsAffected())
		// The rollout's count deltas (migration 00020), compacted: one row
		// per count.
		if _, err := tx.Exec(ctx, `WITH d AS (DELETE FROM rollout_count_deltas WHERE rollout_id = $1 RETURNING *)
INSERT INTO rollout_count_deltas (rollout_id, wave, status, classification, reason, n)
SELECT rollout_id, wave, status, classification, reason, sum(n) FROM d GROUP BY 1, 2, 3, 4, 5 HAVING sum(n) <> 0`, id); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+sqlMemberColumns+` FROM rollout_members m WHERE rollout_id = $1 AND status = 'in-progress'
  AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.id = m.operation_id) ORDER BY ord`, id)
		if err != nil {
			return err
		}
		unpublished, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (fleet.RolloutMember, error) { return scanMember(row, nil) })
		return err
	})
	return moved, unpublished, translate(err)
}

// ReserveRolloutMembers implements fleet.RolloutStore.
// The members of the wave are those whose places are in its range, taken
// in order of place (the order of ord among the eligible) through
// rollout_members_place.
func (s *FleetStore) ReserveRolloutMembers(ctx context.Context, id, owner string, gen int64, wave, n int, now time.Time) ([]fleet.RolloutMember, error) {
	if !validUUID(id) {
		return nil, notFound("There is no rollout %s.", id)
	}
	starts, err := rolloutWaveStarts(ctx, s.pool, id)
	if err != nil {
		return nil, translate(err)
	}
	lo, hi := wavePlaces(starts, wave)
	rows, err := s.pool.Query(ctx, `WITH r AS (SELECT id FROM rollouts WHERE id = $1 AND generation = $2 AND state = 'running' AND lease_owner = $6 FOR UPDATE),
picked AS (SELECT ord AS pick FROM rollout_members WHERE rollout_id = $1 AND status = 'pending' AND place >= $3 AND place < $7
  AND EXISTS (SELECT 1 FROM r) ORDER BY place LIMIT $4 FOR UPDATE)
UPDATE rollout_members m SET status = 'in-progress', operation_id = gen_random_uuid(),
  deployment_id = CASE WHEN m.install THEN gen_random_uuid() ELSE m.deployment_id END, updated_at = $5
FROM picked WHERE m.rollout_id = $1 AND m.ord = picked.pick
RETURNING `+sqlMemberColumns, id, gen, lo, n, now, owner, hi)
	if err != nil {
		return nil, translate(err)
	}
	ms, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fleet.RolloutMember, error) { return scanMember(row, starts) })
	return ms, translate(err)
}

// SetMemberResults implements fleet.RolloutStore.
func (s *FleetStore) SetMemberResults(ctx context.Context, id string, results []fleet.MemberResult, now time.Time) error {
	if len(results) == 0 {
		return nil
	}
	return translate(beginFunc(ctx, s.pool, func(tx pgx.Tx) error { return setMembers(ctx, tx, id, results, now) }))
}

func setMembers(ctx context.Context, tx pgx.Tx, id string, results []fleet.MemberResult, now time.Time) error {
	if len(results) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	guarded := make([]bool, len(results))
	for i, m := range results {
		var outcome, revOp any
		revTo, revDetail, revForced := 0, "", false
		setRevert := m.Revert != nil
		if setRevert {
			outcome, revTo, revDetail, revForced = m.Revert.Outcome, m.Revert.ToRevision, m.Revert.Reason, m.Revert.Forced
			if m.Revert.OperationID != "" {
				revOp = m.Revert.OperationID
			}
		}
		var reason any
		if m.Status == lifecycle.MemberExcluded {
			reason = string(lifecycle.ExcludedOperator)
		}
		b.Queue(`UPDATE rollout_members SET
  status = coalesce(nullif($3, ''), status),
  reason = coalesce($4, reason),
  result = CASE WHEN $5 = '' THEN result ELSE $5 END,
  operation_id = coalesce(nullif($6, '')::uuid, operation_id),
  deployment_id = coalesce(nullif($7, '')::uuid, deployment_id),
  revert_outcome = CASE WHEN $8 THEN $9 ELSE revert_outcome END,
  revert_to = CASE WHEN $8 THEN $10 ELSE revert_to END,
  revert_operation = CASE WHEN $8 THEN $11::uuid ELSE revert_operation END,
  revert_detail = CASE WHEN $8 THEN $12 ELSE revert_detail END,
  revert_forced = CASE WHEN $8 THEN $13 ELSE revert_forced END,
  active = active AND NOT $14,
  updated_at = $15
WHERE rollout_id = $1 AND ord = $2 AND ($16 = '' OR status = $16) AND (NOT $17 OR revert_outcome IS NULL)`, id, m.Ord, string(m.Status), reason,
			m.Result, m.OperationID, m.DeploymentID, setRevert, outcome, revTo, revOp, revDetail, revForced, m.Deactivate, now, string(m.IfStatus), m.IfNoRevert)
		guarded[i] = m.IfStatus != "" || m.IfNoRevert
	}
	br := tx.SendBatch(ctx, b)
	for i := range results {
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close()
			return err
		}
		if guarded[i] && tag.RowsAffected() == 0 {
			_ = br.Close()
			return fleet.ErrMemberChanged
		}
	}
	return br.Close()
}

// UpdateRollout implements fleet.RolloutStore.
func (s *FleetStore) UpdateRollout(ctx context.Context, id string, decide func(fleet.Rollout) (fleet.RolloutChange, error), now time.Time) (fleet.Rollout, error) {
	if !validUUID(id) {
		return fleet.Rollout{}, notFound("There is no rollout %s.", id)
	}
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := scanRollout(tx.QueryRow(ctx, `SELECT `+sqlRolloutColumns+` FROM rollouts WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("There is no rollout %s.", id)
		}
		if err != nil {
			return err
		}
		if err := readCounts(ctx, tx, &r); err != nil {
			return err
		}
		c, err := decide(r)
		if err != nil {
			return err
		}
		if c.Owner != "" {
			var owns bool
			if err := tx.QueryRow(ctx, `SELECT lease_owner IS NOT DISTINCT FROM $2 FROM rollouts WHERE id = $1`, id, c.Owner).Scan(&owns); err != nil {
				return err
			}
			if !owns {
				return fleet.ErrLeaseLost
			}
		}
		if err := applyRolloutChange(ctx, tx, r, c, now); err != nil {
			return err
		}
		if !c.Changes() {
			return nil // an action that found the rollout as asked: audited after the answer
		}
		return auditChange(ctx, tx, now, false)
	})
	if err != nil {
		return fleet.Rollout{}, translate(err)
	}
	return s.Rollout(ctx, id)
}

func applyRolloutChange(ctx context.Context, tx pgx.Tx, r fleet.Rollout, c fleet.RolloutChange, now time.Time) error {
	var w where
	w.add("updated_at = $?", now)
	if c.To != "" {
		w.add("state = $?", string(c.To))
		w.add("cause = $?", string(c.Cause))
		w.add("state_changed_at = $?", now)
		if _, err := tx.Exec(ctx, `INSERT INTO rollout_history (rollout_id, from_state, to_state, cause, at, actor, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			r.ID, string(r.State), string(c.To), string(c.Cause), now, c.Actor, c.Detail); err != nil {
			return err
		}
	}
	if c.Waves != nil {
		js, err := wavesJSON(c.Waves)
		if err != nil {
			return err
		}
		w.add("waves = $?::jsonb", js)
	}
	if c.CurrentWave != nil {
		w.add("current_wave = $?", *c.CurrentWave-1)
	}
	if c.WaveAccepted != nil {
		w.add("threshold_accepted = $?", *c.WaveAccepted) // WaveAccepted: after a threshold or an emptied wave
	}
	if c.Abort != nil {
		b, err := json.Marshal(c.Abort)
		if err != nil {
			return err
		}
		w.add("abort = $?::jsonb", string(b))
	}
	if c.Waiting != nil {
		b, err := json.Marshal(c.Waiting)
		if err != nil {
			return err
		}
		w.add("waiting = $?::jsonb", string(b))
	} else {
		w.add("waiting = NULL")
	}
	if c.Recheck.IsZero() {
		w.add("recheck_at = NULL")
	} else {
		w.add("recheck_at = $?", c.Recheck)
	}
	if c.Release {
		w.add("lease_until = NULL")
		w.add("lease_owner = NULL")
	}
	if c.Bump || c.To != "" {
		w.add("generation = generation + 1")
	}
	args := append(w.args, r.ID)
	if _, err := tx.Exec(ctx, `UPDATE rollouts SET `+strings.Join(w.conds, ", ")+` WHERE id = $`+strconv.Itoa(len(args)), args...); err != nil {
		return err
	}
	if c.CancelPending {
		// Pending members, and members reserved whose operation a crash
		// or a timed-out visit did not create (the next visit would
		// otherwise create it).
		if _, err := tx.Exec(ctx, `UPDATE rollout_members m SET status = 'cancelled', result = 'The rollout ended before starting it.', updated_at = $2
WHERE m.rollout_id = $1 AND (m.status = 'pending' OR (m.status = 'in-progress'
  AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.id = m.operation_id)))`, r.ID, now); err != nil {
			return err
		}
	}
	if err := setMembers(ctx, tx, r.ID, c.Members, now); err != nil {
		return err
	}
	if c.To.Terminal() {
		if _, err := tx.Exec(ctx, `UPDATE rollout_members SET active = false WHERE rollout_id = $1 AND active`, r.ID); err != nil {
			return err
		}
	}
	if c.To.Terminal() || (r.State.Terminal() && c.To == "") {
		// An ended rollout settles while members are in flight: their
		// statuses follow their operations.
		if _, err := tx.Exec(ctx, `UPDATE rollouts SET settling = EXISTS (SELECT 1 FROM rollout_members
  WHERE rollout_id = $1 AND (status = 'in-progress' OR revert_outcome IN ('pending', 'in-progress'))) WHERE id = $1`, r.ID); err != nil {
			return err
		}
	}
	return AppendEvents(ctx, tx, c.Events)
}
