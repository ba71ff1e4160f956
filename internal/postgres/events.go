package postgres

// The event log: a transactional outbox. A change appends its events with
// AppendEvents in its own transaction, so an event exists exactly when its
// change committed; readers (the event stream, webhook dispatch) page
// through it with EventLog.EventsAfter.
//
// # Ids and the no-skip guarantee
//
// A reader resumes from the last id it saw, so an event must never become
// visible with an id below one a reader was already given. A plain bigserial
// breaks that: a transaction that took id 10 can commit after one that took
// id 11, and a reader that saw 11 never looks back. Two known remedies:
//
//   - make ids visible in commit order by serializing their assignment
//     (an advisory lock or a counter row held from the append to the
//     commit). Every event-writing transaction then waits for the commit,
//     fsync included, of the previous one: writers no longer overlap, and
//     group commit cannot help. The status-report hot path appends
//     deployment.state_changed events, so this would cap status ingestion at
//     one commit at a time.
//   - let writers run freely and make the reader wait at gaps that an
//     in-flight transaction may still fill. That is what is done here.
//
// An event's id is (xid << 20) + n, where xid is the 64-bit id of its
// top-level transaction (pg_current_xact_id(), epoch included, the same in
// subtransactions) and n its index among that transaction's events. Ids
// therefore order events by transaction, and in append order within one.
// PostgreSQL hands out xids in increasing order, and a snapshot's xmin is
// the oldest xid still running: every transaction with a smaller xid has
// committed (its events are visible) or aborted (it has none). A reader asks
// for ids above its cursor and below xmin << 20, in one statement whose
// snapshot gives both the rows and xmin; every event it returns is preceded
// by every event with a smaller id that will ever exist. Resuming from any
// returned id, on any replica, thus never skips an event. The price is
// latency, not throughput: an event is held back while any older
// transaction of the server (any database) still runs, so long transactions
// delay readers (statement_timeout and idle_in_transaction_session_timeout
// bound that), and ids have gaps (aborted transactions, xids that wrote no
// event).
//
// Bounds: n < 2^20 (a transaction appends at most 1,048,576 events) and
// xid < 2^43 (about 8.8e12 transactions; 27 years at 10,000 write
// transactions per second). AppendEvents fails the transaction rather than
// break them. Ids exceed 2^53 once the server passed 2^33 transactions, so
// JSON representations should carry them as strings.
//
// A logical dump restored into a new cluster restarts xids from a small
// number, and new events would get ids below the restored ones. Check
// (the readiness check) fails on such a database (ErrEventClockBehind); advance the
// new cluster's transaction id with pg_resetwal -e/-x, or empty the events
// table, before starting.
//
// # Retention
//
// PruneEvents deletes, in batches, the oldest events older than a maximum
// age, always a prefix of the log (in id order, below the reader's xmin gate,
// stopping at the first event still young enough), and records the highest
// deleted id in event_log_horizon. A reader whose cursor is below it has
// missed events; EventsAfter answers EGONE with the id to resume after.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

const (
	// eventIndexBits is the width of an event's index within its
	// transaction, in its id.
	eventIndexBits = 20
	// maxEventXID bounds the transaction id so that xid << eventIndexBits
	// stays a positive int64.
	maxEventXID = int64(1) << (63 - eventIndexBits)
)

// ErrEventClockBehind is wrapped by Check when the event log holds ids of
// transactions the database has not reached yet: it was restored into a new
// cluster, and new events would get ids below old ones (see events.go).
var ErrEventClockBehind = errors.New("event log is ahead of the database's transaction ids")

// sqlInsertEvents renders, as CTEs of one statement, the insert of a
// transaction's events (named ev, returning their ids) whose columns are
// the array parameters $p … $p+6 and whose bounds are $p+7 (transaction id)
// and $p+8 (events per transaction): see eventArgs. It continues the
// numbering of events this transaction appended before (the max id in its
// own id range, which only it can write), and inserts nothing when a bound
// would break. guard, when not empty, is a further condition (the hot path
// inserts only if its update took place).
func sqlInsertEvents(p int, guard string) string {
	if guard != "" {
		guard = " AND " + guard
	}
	return fmt.Sprintf(`ev_tx AS (SELECT pg_current_xact_id()::text::bigint AS xid),
ev_last AS (
    SELECT ev_tx.xid, coalesce(max(e.id) - (ev_tx.xid << 20) + 1, 0) AS next
    FROM ev_tx LEFT JOIN events e ON e.id >= (ev_tx.xid << 20) AND e.id < ((ev_tx.xid + 1) << 20)
    GROUP BY ev_tx.xid
),
ev AS (
    INSERT INTO events (id, type, at, subject_kind, subject_id, refs, actor, body)
    SELECT (ev_last.xid << 20) + ev_last.next + v.ord - 1, v.type, v.at, v.kind, v.sid,
       ARRAY(SELECT jsonb_array_elements_text(v.refs)), v.actor, v.body
    FROM ev_last, unnest($%[1]d::text[], $%[2]d::timestamptz[], $%[3]d::text[], $%[4]d::text[], $%[5]d::jsonb[], $%[6]d::text[], $%[7]d::jsonb[])
        WITH ORDINALITY AS v(type, at, kind, sid, refs, actor, body, ord)
    WHERE ev_last.xid < $%[8]d AND ev_last.next + v.ord - 1 < $%[9]d%[10]s
    RETURNING id
)`, p, p+1, p+2, p+3, p+4, p+5, p+6, p+7, p+8, guard)
}

// sqlAppendEvents inserts a transaction's events.
var sqlAppendEvents = "WITH " + sqlInsertEvents(1, "") + "\nSELECT id FROM ev"

// eventArgs returns the parameters of sqlInsertEvents for events.
//
// Returns EINVALID for an event of an unknown type, whose subject kind is
// not its type's or whose body is not a JSON object.
func eventArgs(events []lifecycle.Event) ([]any, error) {
	n := len(events)
	types, ats, kinds, sids, refs, actors, bodies :=
		make([]string, n), make([]time.Time, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n)
	for i, e := range events {
		if err := checkEvent(i, e); err != nil {
			return nil, err
		}
		r, err := json.Marshal(refStrings(e.Refs()))
		if err != nil {
			return nil, fmt.Errorf("encode event refs: %w", err)
		}
		types[i], ats[i], kinds[i], sids[i] = string(e.Type), e.At, string(e.Subject.Kind), e.Subject.ID
		refs[i], actors[i], bodies[i] = string(r), e.Actor, string(e.Body)
	}
	return []any{types, ats, kinds, sids, refs, actors, bodies, maxEventXID, int64(1) << eventIndexBits}, nil
}

// checkEvent returns EINVALID for an event (the i-th) of an unknown type,
// whose subject kind is not its type's or whose body is not a JSON object.
func checkEvent(i int, e lifecycle.Event) error {
	if kind, ok := e.Type.SubjectKind(); !ok || kind != e.Subject.Kind || e.Subject.ID == "" {
		return lifecycle.Errorf(lifecycle.EINVALID, "event %d: type %q with subject %v", i, e.Type, e.Subject)
	}
	if !json.Valid(e.Body) || !strings.HasPrefix(strings.TrimSpace(string(e.Body)), "{") {
		return lifecycle.Errorf(lifecycle.EINVALID, "event %d (%s): body is not a JSON object", i, e.Type)
	}
	return nil
}

// copyEventsMin is the number of events from which apply appends a batch's
// events with COPY (copyEvents) rather than with sqlAppendEvents: below it,
// the one statement in the pipeline costs less than the extra round trips of
// COPY; above it, COPY avoids encoding and parsing seven arrays of that many
// elements (measured: see BenchmarkAppendEvents).
const copyEventsMin = 256

// sqlNextEvent reads the transaction's id and the index of its next event
// (sqlInsertEvents's ev_tx and ev_last), for copyEvents.
const sqlNextEvent = `
SELECT t.xid, coalesce(max(e.id) - (t.xid << 20) + 1, 0)
FROM (SELECT pg_current_xact_id()::text::bigint AS xid) t
LEFT JOIN events e ON e.id >= (t.xid << 20) AND e.id < ((t.xid + 1) << 20)
GROUP BY t.xid`

// eventColumns are the columns copyEvents writes.
var eventColumns = []string{"id", "type", "at", "subject_kind", "subject_id", "refs", "actor", "body"}

// copyEvents appends events with COPY in tx, the transaction whose id is
// xid and whose next event index is next (read by sqlNextEvent in tx, after
// its last append): the same rows and ids sqlAppendEvents would insert, and
// the same bounds. It sets the events' IDs.
//
// Returns EINVALID as eventArgs does, and an error if the bounds would
// break or the COPY fails; the caller must then roll tx back.
func copyEvents(ctx context.Context, tx pgx.Tx, xid, next int64, events []lifecycle.Event) error {
	for i, e := range events {
		if err := checkEvent(i, e); err != nil {
			return err
		}
	}
	if xid >= maxEventXID || next+int64(len(events)) > int64(1)<<eventIndexBits {
		return errEventBounds(0, len(events))
	}
	rows := make([][]any, len(events))
	for i, e := range events {
		rows[i] = []any{xid<<eventIndexBits + next + int64(i), string(e.Type), e.At, string(e.Subject.Kind), e.Subject.ID,
			refStrings(e.Refs()), e.Actor, string(e.Body)}
	}
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, eventColumns, pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	if n != int64(len(events)) {
		return errEventBounds(int(n), len(events))
	}
	for i := range events {
		events[i].ID = xid<<eventIndexBits + next + int64(i)
	}
	return nil
}

// errEventBounds reports that a transaction's events were not all inserted.
func errEventBounds(inserted, n int) error {
	return fmt.Errorf("append events: %d of %d inserted: the transaction exceeds %d events or the transaction id %d bits",
		inserted, n, 1<<eventIndexBits, 63-eventIndexBits)
}

// AppendEvents appends events to the log in tx, the transaction of the
// change they record, and sets their IDs. They become readable when tx
// commits and vanish with it if it rolls back. Events are numbered in slice
// order; a transaction may append several times.
//
// Returns EINVALID for an event of an unknown type, whose subject kind is
// not its type's or whose body is not a JSON object, and an error if the
// transaction would break the id bounds (see events.go) or the insert
// fails; the caller must then roll tx back.
func AppendEvents(ctx context.Context, tx pgx.Tx, events []lifecycle.Event) error {
	return appendEvents(ctx, tx, events, len(events) >= copyEventsMin)
}

// appendEvents is AppendEvents, with COPY (copyEvents) or with one
// statement (sqlAppendEvents).
func appendEvents(ctx context.Context, tx pgx.Tx, events []lifecycle.Event, useCopy bool) error {
	if len(events) == 0 {
		return nil
	}
	if useCopy {
		var xid, next int64
		if err := tx.QueryRow(ctx, sqlNextEvent).Scan(&xid, &next); err != nil {
			return fmt.Errorf("append events: %w", err)
		}
		return copyEvents(ctx, tx, xid, next, events)
	}
	args, err := eventArgs(events)
	if err != nil {
		return err
	}
	rows, _ := tx.Query(ctx, sqlAppendEvents, args...)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	if len(ids) != len(events) {
		return errEventBounds(len(ids), len(events))
	}
	slices.Sort(ids) // ids follow the slice order; RETURNING need not
	for i := range events {
		events[i].ID = ids[i]
	}
	return nil
}

func refStrings(refs []lifecycle.Ref) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.String()
	}
	return out
}

// EventFilter selects events (lifecycle.EventFilter: its in-memory Matches
// and the SQL of EventsAfter select the same events).
type EventFilter = lifecycle.EventFilter

// EventLog reads and prunes the event log. Appending is AppendEvents, in the
// writer's transaction.
type EventLog struct{ pool *pgxpool.Pool }

// NewEventLog returns an EventLog on pool.
func NewEventLog(pool *pgxpool.Pool) *EventLog { return &EventLog{pool: pool} }

// sqlEventGate is the exclusive upper bound of the ids a reader may return:
// every transaction that could still commit an id below it has ended. It
// must be evaluated in the statement that reads the events (one snapshot).
const sqlEventGate = `(pg_snapshot_xmin(pg_current_snapshot())::text::bigint << 20)`

// sqlEventHorizon reads how far retention has deleted.
const sqlEventHorizon = `SELECT pruned_through FROM event_log_horizon`

// EventsAfter returns up to limit events with ids above after, in id order,
// that match f. after is 0 for the start of the log (the oldest event kept,
// whatever retention deleted), else an id a reader was given (by this or
// any other replica). The events returned are the first
// ones after after: no event with a smaller id can appear later, so the next
// call resumes from the last id returned. Fewer than limit events (even
// none) do not mean the end of the log; events of transactions still
// running come in a later call.
//
// Returns EGONE if retention has deleted events after after (its Extra
// "resumeAfter" holds the id to resume after, skipping what is gone) and
// after is not 0, EINVALID for a limit below 1 or a negative after, and an
// error if the database fails.
func (l *EventLog) EventsAfter(ctx context.Context, after int64, f EventFilter, limit int) ([]lifecycle.Event, error) {
	events, err := eventsAfter(ctx, l.pool, after, f, limit)
	for after == 0 {
		// From the start: resume after what retention deleted, again if it
		// deleted more meanwhile (each round moves forward).
		var le *lifecycle.Error
		if !errors.As(err, &le) || le.Code != lifecycle.EGONE {
			break
		}
		resume, _ := le.Extra["resumeAfter"].(int64)
		events, err = eventsAfter(ctx, l.pool, resume, f, limit)
	}
	return events, err
}

// eventQuerier runs the queries of eventsAfter: a pool, or a transaction
// (the webhook dispatcher reads in the transaction that queues).
type eventQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// eventsAfter is EventsAfter on q. In a transaction, each statement takes
// its own snapshot (read committed), so the gate holds as it does on a pool.
func eventsAfter(ctx context.Context, q eventQuerier, after int64, f EventFilter, limit int) ([]lifecycle.Event, error) {
	if limit < 1 || after < 0 {
		return nil, lifecycle.Errorf(lifecycle.EINVALID, "events after %d, limit %d: both must be positive", after, limit)
	}
	var w where
	w.add("id > $?", after)
	w.add("id < " + sqlEventGate)
	var typeConds []string
	if len(f.Types) > 0 {
		types := make([]string, len(f.Types))
		for i, t := range f.Types {
			types[i] = string(t)
		}
		w.args = append(w.args, types)
		typeConds = append(typeConds, fmt.Sprintf("type = ANY($%d)", len(w.args)))
	}
	for _, p := range f.TypePrefixes {
		w.args = append(w.args, p)
		typeConds = append(typeConds, fmt.Sprintf("starts_with(type, $%d)", len(w.args)))
	}
	if len(typeConds) > 0 {
		w.conds = append(w.conds, "("+strings.Join(typeConds, " OR ")+")")
	}
	if len(f.Refs) > 0 {
		w.add("refs @> $?::text[]", refStrings(f.Refs))
	}
	rows, _ := q.Query(ctx, `SELECT id, type, at, subject_kind, subject_id, refs, actor, body
FROM events WHERE `+w.sql()+` ORDER BY id LIMIT `+w.limit(limit), w.args...)
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	// Read the horizon after the events: if retention had deleted anything
	// after `after` before the read above, the horizon is past it now.
	var horizon int64
	if err := q.QueryRow(ctx, sqlEventHorizon).Scan(&horizon); err != nil {
		return nil, fmt.Errorf("read event log horizon: %w", err)
	}
	if after < horizon {
		return nil, &lifecycle.Error{Code: lifecycle.EGONE, Type: "events-gone",
			Message: fmt.Sprintf("events after %d are no longer kept; the log resumes after %d", after, horizon),
			Extra:   map[string]any{"resumeAfter": horizon}}
	}
	return events, nil
}

func scanEvent(row pgx.CollectableRow) (lifecycle.Event, error) {
	var (
		e    lifecycle.Event
		typ  string
		kind string
		refs []string
		body []byte
	)
	if err := row.Scan(&e.ID, &typ, &e.At, &kind, &e.Subject.ID, &refs, &e.Actor, &body); err != nil {
		return e, err
	}
	e.Type, e.Subject.Kind, e.Body = lifecycle.EventType(typ), lifecycle.SubjectKind(kind), body
	for _, r := range refs {
		k, id, _ := strings.Cut(r, ":")
		if ref := (lifecycle.Ref{Kind: lifecycle.SubjectKind(k), ID: id}); ref != e.Subject {
			e.Related = append(e.Related, ref)
		}
	}
	return e, nil
}

// LatestEventID returns the id a new reader that wants only future events
// starts after: the highest id readable now (or the retention horizon when
// the log is empty). Returns an error if the database fails.
func (l *EventLog) LatestEventID(ctx context.Context) (int64, error) {
	var id int64
	err := l.pool.QueryRow(ctx, `SELECT coalesce((SELECT max(id) FROM events WHERE id < `+sqlEventGate+`),
    (SELECT pruned_through FROM event_log_horizon))`).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("read latest event id: %w", err)
	}
	return id, nil
}

// DefaultEventRetention is how long events are kept unless configured
// otherwise: long enough for a consumer down over a holiday to resume.
const DefaultEventRetention = 30 * 24 * time.Hour

// defaultPruneBatch is how many events one pruning transaction deletes.
const defaultPruneBatch = 5000

// EventRetention is the retention setting of the event log.
type EventRetention struct {
	// MaxAge is how long an event is kept after its time; zero means
	// DefaultEventRetention.
	MaxAge time.Duration
	// Batch is how many events one transaction deletes, so that pruning a
	// large backlog holds no long transaction (which would also hold readers
	// back); zero means 5000.
	Batch int
}

// sqlPruneEvents deletes one batch: the oldest events below the reader gate,
// up to the first one younger than the cutoff, and moves the horizon.
const sqlPruneEvents = `
WITH head AS (SELECT id, at FROM events WHERE id < ` + sqlEventGate + ` ORDER BY id LIMIT $2),
stop AS (SELECT min(id) AS id FROM head WHERE at >= $1),
gone AS (
    DELETE FROM events WHERE id IN (SELECT id FROM head WHERE id < coalesce((SELECT id FROM stop), 9223372036854775807))
    RETURNING id
),
moved AS (
    UPDATE event_log_horizon SET pruned_through = greatest(pruned_through, g.m)
    FROM (SELECT max(id) AS m FROM gone) g WHERE g.m IS NOT NULL
    RETURNING 1
)
SELECT count(*) FROM gone`

// PruneEvents deletes the events older than r.MaxAge at now, one batch per
// transaction, until none is left or ctx ends, and returns how many it
// deleted. Several replicas may run it at once.
//
// Returns the count so far and an error if ctx ends or the database fails.
func (l *EventLog) PruneEvents(ctx context.Context, now time.Time, r EventRetention) (int64, error) {
	if r.MaxAge <= 0 {
		r.MaxAge = DefaultEventRetention
	}
	if r.Batch <= 0 {
		r.Batch = defaultPruneBatch
	}
	cutoff := now.Add(-r.MaxAge)
	var total int64
	for {
		var n int64
		if err := l.pool.QueryRow(ctx, sqlPruneEvents, cutoff, r.Batch).Scan(&n); err != nil {
			return total, fmt.Errorf("prune events: %w", err)
		}
		total += n
		if n < int64(r.Batch) {
			return total, nil
		}
	}
}

// sqlEventClock compares the newest event's transaction id with the next
// transaction id the database will assign.
const sqlEventClock = `SELECT coalesce((SELECT max(id) >> 20 FROM events), 0),
    pg_snapshot_xmax(pg_current_snapshot())::text::bigint`

// checkEventClock returns ErrEventClockBehind if the log holds an event of a
// transaction id the database has not assigned yet.
func checkEventClock(ctx context.Context, pool *pgxpool.Pool) error {
	var newest, next int64
	if err := pool.QueryRow(ctx, sqlEventClock).Scan(&newest, &next); err != nil {
		return fmt.Errorf("check event log ids: %w", err)
	}
	if newest >= next {
		return fmt.Errorf("%w: newest event of transaction %d, next transaction %d; advance the cluster's transaction id (pg_resetwal -e/-x) past it",
			ErrEventClockBehind, newest, next)
	}
	return nil
}

// appendEvent appends, in tx, the event of body about subject, caused by the
// request's actor (fleet.ActorOf: the token's actor; the scheduler's without
// one) at at: the event of a catalog, access or client change, which has no
// decision of its own to return it.
func appendEvent(ctx context.Context, tx pgx.Tx, at time.Time, subject lifecycle.Ref, body lifecycle.EventBody, related ...lifecycle.Ref) error {
	e, err := lifecycle.NewEvent(at, fleet.ActorOf(ctx), subject, body, related...)
	if err != nil {
		return err
	}
	return AppendEvents(ctx, tx, []lifecycle.Event{e})
}
