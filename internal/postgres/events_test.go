package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

var eventT0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func depRef(id string) lifecycle.Ref {
	return lifecycle.Ref{Kind: lifecycle.SubjectDeployment, ID: id}
}

func stateChanged(t testing.TB, dep string, at time.Time, related ...lifecycle.Ref) lifecycle.Event {
	t.Helper()
	e, err := lifecycle.NewEvent(at, "test", depRef(dep),
		lifecycle.DeploymentStateChangedBody{From: lifecycle.StatePending, To: lifecycle.StateInstalling, Cause: "report", Revision: 1},
		related...)
	require.NoError(t, err)
	return e
}

// appendCommitted appends events in a transaction of their own.
func appendCommitted(t testing.TB, pool *pgxpool.Pool, events ...lifecycle.Event) []lifecycle.Event {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		return postgres.AppendEvents(context.Background(), tx, events)
	}))
	return events
}

// waitReadable waits until the event with id is readable: until every
// older transaction of the server has ended, other tests' included (see
// events.go). PostgreSQL signals no transaction's end, so it polls, with a
// bound; the tests that append and read at once use it before reading.
func waitReadable(t testing.TB, log *postgres.EventLog, id int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		latest, err := log.LatestEventID(ctx)
		require.NoError(t, err)
		if latest >= id {
			return
		}
		select {
		case <-ctx.Done():
			require.NoError(t, ctx.Err(), "event %d still not readable (latest %d)", id, latest)
		case <-tick.C:
		}
	}
}

func ids(events []lifecycle.Event) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

func TestAppendEventsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	log := postgres.NewEventLog(pool)

	// A transaction that rolls back leaves no event.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	rolledBack := []lifecycle.Event{stateChanged(t, "rolled-back", eventT0)}
	require.NoError(t, postgres.AppendEvents(ctx, tx, rolledBack))
	require.NoError(t, tx.Rollback(ctx))

	// A committed one appends in several calls, one inside a savepoint: one
	// transaction, consecutive ids, in append order.
	app := lifecycle.Ref{Kind: lifecycle.SubjectApplication, ID: "nginx"}
	first := []lifecycle.Event{stateChanged(t, "a", eventT0, app), stateChanged(t, "b", eventT0)}
	second := []lifecycle.Event{stateChanged(t, "c", eventT0.Add(time.Second))}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := postgres.AppendEvents(ctx, tx, first); err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { return postgres.AppendEvents(ctx, sp, second) })
	}))
	want := append(slices.Clone(first), second...)
	for i := 1; i < len(want); i++ {
		assert.Equal(t, want[i-1].ID+1, want[i].ID, "ids of one transaction must be consecutive: %v", ids(want))
	}
	waitReadable(t, log, want[len(want)-1].ID)

	got, err := log.EventsAfter(ctx, 0, postgres.EventFilter{}, 10)
	require.NoError(t, err)
	require.Len(t, got, len(want), "events after the commit (the rolled-back one must be absent)")
	for i := range want {
		assert.Equal(t, want[i].ID, got[i].ID)
		assert.Equal(t, want[i].Type, got[i].Type)
		assert.True(t, want[i].At.Equal(got[i].At), "At = %v, want %v", got[i].At, want[i].At)
		assert.Equal(t, want[i].Subject, got[i].Subject)
		assert.Equal(t, want[i].Related, got[i].Related)
		assert.Equal(t, want[i].Actor, got[i].Actor)
		assert.JSONEq(t, string(want[i].Body), string(got[i].Body))
	}
	latest, err := log.LatestEventID(ctx)
	require.NoError(t, err)
	assert.Equal(t, want[len(want)-1].ID, latest, "LatestEventID")
	none, err := log.EventsAfter(ctx, latest, postgres.EventFilter{}, 10)
	require.NoError(t, err)
	assert.Empty(t, none, "EventsAfter(latest)")
}

func TestAppendEventsRefusesInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	good := stateChanged(t, "d", eventT0)
	tests := []struct {
		name  string
		event func(e lifecycle.Event) lifecycle.Event
	}{
		{"unknown type", func(e lifecycle.Event) lifecycle.Event { e.Type = "rollout.imagined"; return e }},
		{"wrong subject kind", func(e lifecycle.Event) lifecycle.Event { e.Subject.Kind = lifecycle.SubjectClient; return e }},
		{"empty subject", func(e lifecycle.Event) lifecycle.Event { e.Subject.ID = ""; return e }},
		{"body not an object", func(e lifecycle.Event) lifecycle.Event { e.Body = []byte(`[1]`); return e }},
		{"body not JSON", func(e lifecycle.Event) lifecycle.Event { e.Body = []byte(`{`); return e }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return postgres.AppendEvents(ctx, tx, []lifecycle.Event{good, tt.event(good)})
			})
			assert.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "AppendEvents error = %v", err)
		})
	}
	got, err := postgres.NewEventLog(pool).EventsAfter(ctx, 0, postgres.EventFilter{}, 10)
	require.NoError(t, err)
	assert.Empty(t, got, "events after refused appends")
}

// TestEventsAfterNeverSkips has two replicas (pools) append events from many
// goroutines, holding their transactions open for random short times so
// that transactions commit out of id order, while a reader pages through
// the log resuming from its last id, alternating replicas. The reader must
// end with every committed event exactly once and none rolled back.
func TestEventsAfterNeverSkips(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pgtest.URL(t)
	pools := []*pgxpool.Pool{open(t, url), open(t, url)}
	logs := []*postgres.EventLog{postgres.NewEventLog(pools[0]), postgres.NewEventLog(pools[1])}

	const writersPerPool, txPerWriter = 6, 120
	var (
		mu        sync.Mutex
		committed = map[string]commit{} // by subject id
		commitSeq atomic.Int64
		writers   sync.WaitGroup
		errs      = make(chan error, 2*writersPerPool)
	)
	for p, pool := range pools {
		for w := range writersPerPool {
			writers.Go(func() {
				rnd := rand.New(rand.NewPCG(uint64(p), uint64(w)))
				for i := range txPerWriter {
					var events []lifecycle.Event
					for j := range 1 + rnd.IntN(3) {
						events = append(events, stateChanged(t, fmt.Sprintf("p%d-w%d-t%d-e%d", p, w, i, j), eventT0))
					}
					rollback := rnd.IntN(10) == 0
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						// Take the transaction id early, as a change that writes
						// its rows before its events does.
						if _, err := tx.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
							return err
						}
						time.Sleep(time.Duration(rnd.IntN(1500)) * time.Microsecond)
						if err := postgres.AppendEvents(ctx, tx, events); err != nil {
							return err
						}
						time.Sleep(time.Duration(rnd.IntN(1500)) * time.Microsecond)
						if rollback {
							return errRollback
						}
						return nil
					})
					if rollback && err == errRollback {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					seq := commitSeq.Add(1)
					mu.Lock()
					for _, e := range events {
						committed[e.Subject.ID] = commit{seq: seq, id: e.ID}
					}
					mu.Unlock()
				}
			})
		}
	}
	writersDone := make(chan struct{})
	go func() { writers.Wait(); close(writersDone) }()

	var (
		read      []lifecycle.Event
		cursor    int64
		emptyRead int
		reads     int
	)
	readPage := func() []lifecycle.Event {
		reads++
		page, err := logs[reads%2].EventsAfter(ctx, cursor, postgres.EventFilter{}, 1+reads%97)
		require.NoError(t, err)
		for _, e := range page {
			require.Greater(t, e.ID, cursor, "ids must increase")
			cursor = e.ID
		}
		read = append(read, page...)
		return page
	}
	// Page through the log while the writers write.
	for writing := true; writing; {
		select {
		case <-writersDone:
			writing = false
		default:
			if len(readPage()) == 0 {
				emptyRead++
			}
		}
	}
	// Every writer has committed or rolled back: once the newest committed
	// event is readable, the rest of the log is there to read.
	var newest int64
	for _, e := range committed {
		newest = max(newest, e.id)
	}
	waitReadable(t, logs[0], newest)
	for {
		if len(readPage()) == 0 {
			break
		}
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err, "writer")
	}

	seen := map[string]bool{}
	inversions := 0
	for i, e := range read {
		c, ok := committed[e.Subject.ID]
		require.True(t, ok, "event %d (%s) was not committed", e.ID, e.Subject.ID)
		require.False(t, seen[e.Subject.ID], "event %s read twice", e.Subject.ID)
		seen[e.Subject.ID] = true
		if i > 0 && c.seq < committed[read[i-1].Subject.ID].seq {
			inversions++
		}
	}
	assert.Equal(t, len(committed), len(seen), "committed events read once (the others were skipped)")
	// The hazard was there: transactions with higher ids committed before
	// ones with lower ids. Without it this test could not fail.
	assert.Positive(t, inversions, "commits out of id order")
	t.Logf("%d events, %d commit-order inversions, %d empty reads while writing", len(read), inversions, emptyRead)

	// The order is stable: one read of the whole log gives the same ids.
	all, err := logs[1].EventsAfter(ctx, 0, postgres.EventFilter{}, len(read)+1)
	require.NoError(t, err)
	assert.Equal(t, ids(read), ids(all), "order of a second read")
}

var errRollback = errors.New("roll back on purpose")

// commit records when a writer saw its transaction commit, and an event's id.
type commit struct{ seq, id int64 }

func TestPruneEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	log := postgres.NewEventLog(pool)
	now := eventT0
	old, young := now.Add(-40*24*time.Hour), now.Add(-24*time.Hour)

	var appended []lifecycle.Event
	for i := range 5 {
		appended = append(appended, appendCommitted(t, pool, stateChanged(t, fmt.Sprintf("old-%d", i), old))...)
	}
	appended = append(appended, appendCommitted(t, pool, stateChanged(t, "young-0", young), stateChanged(t, "young-1", young))...)
	// An old event after a young one stays: only a prefix of the log goes.
	appended = append(appended, appendCommitted(t, pool, stateChanged(t, "old-late", old))...)

	waitReadable(t, log, appended[len(appended)-1].ID)

	n, err := log.PruneEvents(ctx, now, postgres.EventRetention{MaxAge: 30 * 24 * time.Hour, Batch: 2})
	require.NoError(t, err)
	assert.Equal(t, int64(5), n, "pruned")
	horizon := appended[4].ID

	tests := []struct {
		name  string
		after int64
		want  []int64 // nil: gone
	}{
		{"from the start: the oldest event kept", 0, ids(appended[5:])},
		{"from a pruned event", appended[1].ID, nil},
		{"from the last pruned event", horizon, ids(appended[5:])},
		{"from a kept event", appended[5].ID, ids(appended[6:])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := log.EventsAfter(ctx, tt.after, postgres.EventFilter{}, 10)
			if tt.want == nil {
				require.Equal(t, lifecycle.EGONE, lifecycle.ErrorCode(err), "EventsAfter(%d) error = %v", tt.after, err)
				var le *lifecycle.Error
				require.ErrorAs(t, err, &le)
				assert.Equal(t, horizon, le.Extra["resumeAfter"], "resumeAfter")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, ids(got))
		})
	}

	n, err = log.PruneEvents(ctx, now, postgres.EventRetention{MaxAge: 30 * 24 * time.Hour})
	require.NoError(t, err)
	assert.Zero(t, n, "second prune")
	// Everything goes a year later; the log then starts after the newest id.
	n, err = log.PruneEvents(ctx, now.Add(365*24*time.Hour), postgres.EventRetention{})
	require.NoError(t, err)
	assert.Equal(t, int64(3), n, "prune a year later")
	latest, err := log.LatestEventID(ctx)
	require.NoError(t, err)
	assert.Equal(t, appended[len(appended)-1].ID, latest, "LatestEventID of an empty log")
	got, err := log.EventsAfter(ctx, latest, postgres.EventFilter{}, 10)
	require.NoError(t, err)
	assert.Empty(t, got)
}

func TestEventsAfterFilter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	log := postgres.NewEventLog(pool)

	mk := func(subject lifecycle.Ref, body lifecycle.EventBody, related ...lifecycle.Ref) lifecycle.Event {
		e, err := lifecycle.NewEvent(eventT0, "admin", subject, body, related...)
		require.NoError(t, err)
		return e
	}
	nginx := lifecycle.Ref{Kind: lifecycle.SubjectApplication, ID: "nginx"}
	redis := lifecycle.Ref{Kind: lifecycle.SubjectApplication, ID: "redis"}
	c1 := lifecycle.Ref{Kind: lifecycle.SubjectClient, ID: "c1"}
	op := func(id string) lifecycle.Ref { return lifecycle.Ref{Kind: lifecycle.SubjectOperation, ID: id} }
	events := appendCommitted(t, pool,
		mk(depRef("d1"), lifecycle.DeploymentStateChangedBody{To: lifecycle.StatePending, Cause: "operator"}, nginx, c1),
		mk(depRef("d1"), lifecycle.RevisionPublishedBody{Revision: 1, Version: "1.0.0", Operation: "install"}, nginx, c1),
		mk(op("o1"), lifecycle.OperationCreatedBody{Operation: "upgrade", ToVersion: "2.0.0", Steps: 1}, depRef("d2"), redis),
		mk(op("o1"), lifecycle.OperationStepPublishedBody{Step: 1, Steps: 1, Version: "2.0.0", Revision: 2}, depRef("d2")),
		mk(c1, lifecycle.ClientAcceptedBody{}),
		mk(nginx, lifecycle.ApplicationVersionAddedBody{Version: "1.0.0"}),
	)
	waitReadable(t, log, events[len(events)-1].ID)

	tests := []struct {
		name   string
		filter postgres.EventFilter
		want   []lifecycle.EventType
	}{
		{"all", postgres.EventFilter{}, []lifecycle.EventType{
			lifecycle.EventDeploymentStateChanged, lifecycle.EventRevisionPublished, lifecycle.EventOperationCreated,
			lifecycle.EventOperationStepPublished, lifecycle.EventClientAccepted, lifecycle.EventApplicationVersionAdded}},
		{"one type", postgres.EventFilter{Types: []lifecycle.EventType{lifecycle.EventRevisionPublished}},
			[]lifecycle.EventType{lifecycle.EventRevisionPublished}},
		{"prefix (underscore is no wildcard)", postgres.EventFilter{TypePrefixes: []string{"operation."}},
			[]lifecycle.EventType{lifecycle.EventOperationCreated, lifecycle.EventOperationStepPublished}},
		{"type or prefix", postgres.EventFilter{Types: []lifecycle.EventType{lifecycle.EventClientAccepted}, TypePrefixes: []string{"operation.step_"}},
			[]lifecycle.EventType{lifecycle.EventOperationStepPublished, lifecycle.EventClientAccepted}},
		{"subject", postgres.EventFilter{Refs: []lifecycle.Ref{op("o1")}},
			[]lifecycle.EventType{lifecycle.EventOperationCreated, lifecycle.EventOperationStepPublished}},
		{"related", postgres.EventFilter{Refs: []lifecycle.Ref{depRef("d2")}},
			[]lifecycle.EventType{lifecycle.EventOperationCreated, lifecycle.EventOperationStepPublished}},
		{"subject or related", postgres.EventFilter{Refs: []lifecycle.Ref{c1}},
			[]lifecycle.EventType{lifecycle.EventDeploymentStateChanged, lifecycle.EventRevisionPublished, lifecycle.EventClientAccepted}},
		{"all refs must match", postgres.EventFilter{Refs: []lifecycle.Ref{nginx, c1}},
			[]lifecycle.EventType{lifecycle.EventDeploymentStateChanged, lifecycle.EventRevisionPublished}},
		{"refs and type", postgres.EventFilter{Refs: []lifecycle.Ref{nginx}, Types: []lifecycle.EventType{lifecycle.EventApplicationVersionAdded}},
			[]lifecycle.EventType{lifecycle.EventApplicationVersionAdded}},
		{"nothing", postgres.EventFilter{Refs: []lifecycle.Ref{redis}, TypePrefixes: []string{"client."}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := log.EventsAfter(ctx, 0, tt.filter, 100)
			require.NoError(t, err)
			var types []lifecycle.EventType
			for _, e := range got {
				types = append(types, e.Type)
			}
			assert.Equal(t, tt.want, types, "EventsAfter(0, %+v)", tt.filter)
			// The in-memory filter (the stream's shared reader) agrees.
			var matched []lifecycle.EventType
			for _, e := range events {
				if tt.filter.Matches(e) {
					matched = append(matched, e.Type)
				}
			}
			assert.Equal(t, tt.want, matched, "%+v.Matches", tt.filter)
		})
	}

	_, err := log.EventsAfter(ctx, 0, postgres.EventFilter{}, 0)
	assert.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "limit 0")
}

func TestCheckEventClockBehind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	require.NoError(t, postgres.Check(ctx, pool), "Check of a fresh database")
	appendCommitted(t, pool, stateChanged(t, "d", eventT0))
	require.NoError(t, postgres.Check(ctx, pool), "Check after an append")

	// As after a restore into a new cluster: an event of a transaction id
	// far ahead of the database's.
	_, err := pool.Exec(ctx, `INSERT INTO events (id, type, at, subject_kind, subject_id, refs, actor, body)
VALUES ((pg_current_xact_id()::text::bigint + 1000000) << 20, 'deployment.state_changed', now(), 'deployment', 'x', '{deployment:x}', 'test', '{}')`)
	require.NoError(t, err)
	assert.ErrorIs(t, postgres.Check(ctx, pool), postgres.ErrEventClockBehind)
}

// TestAppendEventsCopy: events appended with COPY are the rows, with the
// ids, that the statement appends: the same events appended in one
// transaction by both ways, interleaved (a savepoint included), and in
// another by the statement alone, give the same rows at the same indexes;
// the bounds are kept.
func TestAppendEventsCopy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	app := lifecycle.Ref{Kind: lifecycle.SubjectApplication, ID: "nginx"}
	events := func() [][]lifecycle.Event {
		var out [][]lifecycle.Event
		k := 0
		for _, n := range []int{2, 3, 1, 4, 2} {
			var part []lifecycle.Event
			for range n {
				at := eventT0.Add(time.Duration(k) * time.Millisecond)
				if k%2 == 0 {
					part = append(part, stateChanged(t, fmt.Sprint("dép-", k), at, app))
				} else {
					part = append(part, stateChanged(t, fmt.Sprint("d\"", k), at))
				}
				k++
			}
			out = append(out, part)
		}
		return out
	}
	type row struct {
		N             int64
		Type          string
		At            time.Time
		Kind, Subject string
		Refs          []string
		Actor, Body   string
	}
	rowsOf := func(first int64) []row {
		rows, err := pool.Query(ctx, `SELECT id - ($1::bigint >> 20 << 20), type, at, subject_kind, subject_id, refs, actor, body::text
FROM events WHERE id >> 20 = $1::bigint >> 20 ORDER BY id`, first)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		require.NoError(t, err)
		return out
	}
	appendAll := func(parts [][]lifecycle.Event, byCopy func(i int) bool) []lifecycle.Event {
		var all []lifecycle.Event
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for i, part := range parts {
				if i == 3 { // in a savepoint
					if err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { return postgres.AppendEventsBy(ctx, sp, part, byCopy(i)) }); err != nil {
						return err
					}
				} else if err := postgres.AppendEventsBy(ctx, tx, part, byCopy(i)); err != nil {
					return err
				}
				all = append(all, part...)
			}
			return nil
		}))
		return all
	}
	mixed := appendAll(events(), func(i int) bool { return i%2 == 1 || i == 3 })
	plain := appendAll(events(), func(int) bool { return false })
	for _, all := range [][]lifecycle.Event{mixed, plain} {
		for i := range all {
			assert.Equal(t, all[0].ID+int64(i), all[i].ID, "ids of one transaction: consecutive from its first index: %v", ids(all))
		}
		assert.Zero(t, all[0].ID&(1<<20-1), "the first event of a transaction has index 0")
	}
	got, want := rowsOf(mixed[0].ID), rowsOf(plain[0].ID)
	require.Len(t, want, len(plain))
	assert.Equal(t, want, got, "rows appended with COPY and with the statement")

	// Bounds: a COPY that would pass the last index or the largest
	// transaction id inserts nothing and fails.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	two := []lifecycle.Event{stateChanged(t, "x", eventT0), stateChanged(t, "y", eventT0)}
	require.Error(t, postgres.CopyEvents(ctx, tx, 1000, 1<<20-1, two), "index bound")
	require.Error(t, postgres.CopyEvents(ctx, tx, 1<<43, 0, two), "transaction id bound")
	require.NoError(t, postgres.CopyEvents(ctx, tx, 1000, 1<<20-2, two), "the last two indexes")
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM events WHERE id >> 20 = 1000`).Scan(&n))
	assert.Equal(t, 2, n)
}

// BenchmarkAppendEvents times appending n events in one transaction with
// COPY and with the statement (copyEventsMin is where COPY starts to win).
func BenchmarkAppendEvents(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.New(b)
	for _, n := range []int{16, 64, 256, 1024, 50_000} {
		events := make([]lifecycle.Event, n)
		for i := range events {
			events[i] = stateChanged(b, fmt.Sprint("d", i), eventT0)
		}
		for _, byCopy := range []bool{false, true} {
			b.Run(fmt.Sprintf("n=%d/copy=%v", n, byCopy), func(b *testing.B) {
				for b.Loop() {
					require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						return postgres.AppendEventsBy(ctx, tx, events, byCopy)
					}))
				}
			})
		}
	}
}
