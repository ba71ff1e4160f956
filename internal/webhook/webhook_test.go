package webhook_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/internal/webhook"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// loopback lets the tests' receivers (httptest, on 127.0.0.1) through the
// SSRF guard, as -webhook-allow-cidr does for an on-premises receiver.
var loopback = webhook.Guard{AllowHTTP: true, Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// delivery is one request a receiver got.
type delivery struct {
	header http.Header
	body   []byte
}

// receiver is an HTTP receiver: answer decides the status of the n-th
// request (from 1); every request is sent on got.
type receiver struct {
	*httptest.Server
	got chan delivery
	mu  sync.Mutex
	n   int
}

func newReceiver(t *testing.T, answer func(n int) int) *receiver {
	r := &receiver{got: make(chan delivery, 1000)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.n++
		n := r.n
		r.mu.Unlock()
		r.got <- delivery{header: req.Header.Clone(), body: b}
		w.WriteHeader(answer(n))
	}))
	t.Cleanup(r.Close)
	return r
}

// next returns the next request, failing the test if none comes within 20 s.
func (r *receiver) next(t *testing.T) delivery {
	t.Helper()
	select {
	case d := <-r.got:
		return d
	case <-time.After(20 * time.Second):
		t.Fatal("the receiver got no request within 20 s")
		return delivery{}
	}
}

type env struct {
	pool  *pgxpool.Pool
	store *postgres.WebhookStore
	svc   *webhook.Service
	disp  *webhook.Dispatcher
	river *river.Client[pgx.Tx]
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newEnv runs the webhook machinery on a fresh database: the worker with
// cfg (loopback guard, a 5 ms backoff unless set) on a River client that
// polls often.
func newEnv(t *testing.T, cfg webhook.WorkerConfig) *env {
	t.Helper()
	pool := pgtest.New(t)
	key := make([]byte, webhook.KeySize)
	for i := range key {
		key[i] = byte(i + 1)
	}
	keys, err := webhook.NewKeyring(key)
	require.NoError(t, err)
	store, err := postgres.NewWebhookStore(pool, quiet())
	require.NoError(t, err)
	if cfg.Guard.Allowed == nil && !cfg.Guard.AllowHTTP {
		cfg.Guard = loopback
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func(int64, int) time.Duration { return 5 * time.Millisecond }
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, webhook.NewWorker(store, keys, cfg))
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{webhook.Queue: {MaxWorkers: 10}},
		Workers:           workers,
		FetchPollInterval: 20 * time.Millisecond,
		FetchCooldown:     5 * time.Millisecond,
		TestOnly:          true,
		Logger:            quiet(),
	})
	require.NoError(t, err)
	require.NoError(t, rc.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rc.Stop(ctx)
	})
	return &env{pool: pool, store: store, svc: webhook.NewService(store, keys, cfg.Guard, cfg.Now),
		disp: webhook.NewDispatcher(store, 0, quiet()), river: rc}
}

// appendEvents commits events about application app (one transaction) and
// returns their ids.
func (e *env) appendEvents(t *testing.T, subjects ...string) []int64 {
	t.Helper()
	ctx := context.Background()
	events := make([]lifecycle.Event, len(subjects))
	for i, s := range subjects {
		ev, err := lifecycle.NewEvent(time.Now(), "alice", lifecycle.Ref{Kind: lifecycle.SubjectApplication, ID: s},
			lifecycle.ApplicationVersionAddedBody{Version: "1.0." + strconv.Itoa(i)})
		require.NoError(t, err)
		events[i] = ev
	}
	require.NoError(t, pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error { return postgres.AppendEvents(ctx, tx, events) }))
	ids := make([]int64, len(events))
	for i, ev := range events {
		ids[i] = ev.ID
	}
	return ids
}

// dispatch runs the dispatcher until it has read n events: events become
// readable once every older transaction of the server ended (the event
// log's gate), so a test on a shared server may need a few rounds.
func (e *env) dispatch(t *testing.T, n int) {
	t.Helper()
	got := 0
	deadline := time.Now().Add(20 * time.Second)
	for got < n {
		m, err := e.disp.RunOnce(context.Background())
		require.NoError(t, err)
		got += m
		if got < n {
			require.True(t, time.Now().Before(deadline), "dispatched %d of %d events within 20 s", got, n)
			time.Sleep(10 * time.Millisecond)
		}
	}
	require.Equal(t, n, got)
}

func (e *env) create(t *testing.T, w webhook.Webhook) (webhook.Webhook, string) {
	t.Helper()
	w.Enabled = true
	w, secret, err := e.svc.Create(context.Background(), w)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)
	return w, secret
}

type body struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Subject  struct{ Kind, ID string }
	Sequence int64 `json:"sequence"`
}

func decode(t *testing.T, d delivery) body {
	t.Helper()
	var b body
	require.NoError(t, json.Unmarshal(d.body, &b))
	return b
}

// TestDeliverySignedAndSequenced: each matching event arrives once, signed
// as Standard Webhooks says (verified by the specification's own Go
// library), with webhook-id = the event id and a per-subject sequence in
// log order; events filtered out and events before the subscription do not
// arrive.
func TestDeliverySignedAndSequenced(t *testing.T) {
	e := newEnv(t, webhook.WorkerConfig{})
	e.appendEvents(t, "before")
	rcv := newReceiver(t, func(int) int { return http.StatusNoContent })
	_, secret := e.create(t, webhook.Webhook{URL: rcv.URL + "/hook", Types: []string{"application."},
		Filters: webhook.Filters{}})
	other := newReceiver(t, func(int) int { return http.StatusNoContent })
	e.create(t, webhook.Webhook{URL: other.URL, Types: []string{"deployment."}}) // matches none
	ids := e.appendEvents(t, "a", "b", "a", "a")
	e.dispatch(t, 5) // "before" too: read, matched by no subscription

	verifier, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	seqs := map[string][]int64{}
	for range ids {
		d := rcv.next(t)
		require.NoError(t, verifier.Verify(d.body, d.header), "signature of %s", d.body)
		b := decode(t, d)
		require.Equal(t, b.ID, d.header.Get("webhook-id"))
		seqs[b.Subject.ID] = append(seqs[b.Subject.ID], b.Sequence)
		require.NotEqual(t, "before", b.Subject.ID)
	}
	require.ElementsMatch(t, []int64{1, 2, 3}, seqs["a"])
	require.Equal(t, []int64{1}, seqs["b"])
	select {
	case d := <-rcv.got:
		t.Fatalf("unexpected further delivery %s", d.body)
	case d := <-other.got:
		t.Fatalf("a subscription to deployment. got %s", d.body)
	case <-time.After(300 * time.Millisecond):
	}
	// A forged signature fails the same verification.
	d := delivery{header: http.Header{"Webhook-Id": {"1"}, "Webhook-Timestamp": {strconv.FormatInt(time.Now().Unix(), 10)},
		"Webhook-Signature": {"v1,AAAA"}}, body: []byte(`{}`)}
	require.Error(t, verifier.Verify(d.body, d.header))
}

// TestReceiverDownThenUp: a receiver that fails for a while gets every
// event once it is up, and the retries of one event carry its webhook-id
// and the same body; the deliveries list shows the failed attempts with
// their next retry.
func TestReceiverDownThenUp(t *testing.T) {
	// 9 failed attempts in a few seconds exceed DisableAfter (5) but not
	// the period a run must last (the default): a short outage during a
	// burst does not disable the subscription.
	e := newEnv(t, webhook.WorkerConfig{DisableAfter: 5})
	rcv := newReceiver(t, func(n int) int {
		if n <= 9 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	w, _ := e.create(t, webhook.Webhook{URL: rcv.URL})
	ids := e.appendEvents(t, "x", "y", "z")
	e.dispatch(t, 3)

	bodies := map[string][]string{} // webhook-id -> bodies received
	ok := map[string]bool{}
	for n := 1; len(ok) < len(ids); n++ {
		d := rcv.next(t)
		id := d.header.Get("webhook-id")
		bodies[id] = append(bodies[id], string(d.body))
		if n > 9 {
			ok[id] = true
		}
	}
	for _, id := range ids {
		sid := strconv.FormatInt(id, 10)
		require.True(t, ok[sid], "event %s delivered", sid)
		for _, b := range bodies[sid] {
			require.Equal(t, bodies[sid][0], b, "retries of %s carry the same body", sid)
		}
	}
	require.Len(t, bodies, 3)

	// The receiver answers before the worker records the attempt: wait for
	// the three successes to be recorded.
	var ds []webhook.Delivery
	require.Eventually(t, func() bool {
		var err error
		ds, _, err = e.svc.Deliveries(context.Background(), w.ID, 100, "")
		ok := 0
		for _, d := range ds {
			if d.Succeeded {
				ok++
			}
		}
		return err == nil && ok == 3
	}, 20*time.Second, 10*time.Millisecond)
	failed := 0
	for _, d := range ds {
		if !d.Succeeded {
			failed++
			require.Equal(t, 503, d.StatusCode)
			require.False(t, d.NextRetryAt.IsZero(), "a failed attempt shows its next retry")
		}
	}
	require.Equal(t, 9, failed)
	got, err := e.svc.Get(context.Background(), w.ID)
	require.NoError(t, err)
	require.True(t, got.Enabled)
	require.Zero(t, got.ConsecutiveFailures, "a success ends the run of failures")
}

// TestDisabledAfterFailures: a run of failed attempts disables the
// subscription, and an admin-only webhook.disabled event says so; a 410
// disables at once.
func TestDisabledAfterFailures(t *testing.T) {
	for _, tt := range []struct {
		name     string
		status   int
		attempts int
		reason   string
	}{
		{"failures", http.StatusInternalServerError, 3, "failures"},
		{"gone", http.StatusGone, 1, "gone"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, webhook.WorkerConfig{DisableAfter: 3, DisableAfterPeriod: -1})
			rcv := newReceiver(t, func(int) int { return tt.status })
			w, _ := e.create(t, webhook.Webhook{URL: rcv.URL})
			e.appendEvents(t, "x")
			e.dispatch(t, 1)
			for range tt.attempts {
				rcv.next(t)
			}
			var got webhook.Webhook
			require.Eventually(t, func() bool {
				var err error
				got, err = e.svc.Get(context.Background(), w.ID)
				return err == nil && !got.Enabled
			}, 20*time.Second, 10*time.Millisecond)
			require.Equal(t, tt.reason, got.DisabledReason)
			require.Equal(t, tt.attempts, got.ConsecutiveFailures)

			events, err := postgres.NewEventLog(e.pool).EventsAfter(context.Background(), 0,
				postgres.EventFilter{Types: []lifecycle.EventType{lifecycle.EventWebhookDisabled}}, 10)
			require.NoError(t, err)
			require.Len(t, events, 1)
			require.Equal(t, lifecycle.Ref{Kind: lifecycle.SubjectWebhook, ID: w.ID}, events[0].Subject)
			var b lifecycle.WebhookDisabledBody
			require.NoError(t, json.Unmarshal(events[0].Body, &b))
			require.Equal(t, tt.reason, b.Reason)
			select {
			case d := <-rcv.got:
				t.Fatalf("a disabled subscription got %s", d.body)
			case <-time.After(200 * time.Millisecond):
			}
		})
	}
}

// TestRotationOverlap: after a rotation both secrets verify a delivery
// (two signatures) until the overlap ends; then only the new one does.
func TestRotationOverlap(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, webhook.WorkerConfig{Now: clock})
	rcv := newReceiver(t, func(int) int { return http.StatusOK })
	w, oldSecret := e.create(t, webhook.Webhook{URL: rcv.URL})
	rotated, newSecret, err := e.svc.RotateSecret(context.Background(), w.ID)
	require.NoError(t, err)
	require.NotEqual(t, oldSecret, newSecret)
	require.WithinDuration(t, now.Add(webhook.DefaultRotationOverlap), rotated.PreviousUntil, time.Second)

	oldV, err := standardwebhooks.NewWebhook(oldSecret)
	require.NoError(t, err)
	newV, err := standardwebhooks.NewWebhook(newSecret)
	require.NoError(t, err)

	e.appendEvents(t, "x")
	e.dispatch(t, 1)
	d := rcv.next(t)
	require.Len(t, strings.Fields(d.header.Get("webhook-signature")), 2)
	require.NoError(t, newV.Verify(d.body, d.header))
	require.NoError(t, oldV.Verify(d.body, d.header))

	mu.Lock()
	now = now.Add(webhook.DefaultRotationOverlap + time.Second)
	mu.Unlock()
	e.appendEvents(t, "y")
	e.dispatch(t, 1)
	d = rcv.next(t)
	require.Len(t, strings.Fields(d.header.Get("webhook-signature")), 1)
	require.NoError(t, newV.VerifyIgnoringTimestamp(d.body, d.header))
	require.Error(t, oldV.VerifyIgnoringTimestamp(d.body, d.header))
}

// TestForbiddenAddress: a literal forbidden address is refused at creation
// (EINVALID naming /url) unless a range allows it; a name that resolves to
// one is refused when connecting, and the attempt says why.
func TestForbiddenAddress(t *testing.T) {
	e := newEnv(t, webhook.WorkerConfig{Guard: webhook.Guard{AllowHTTP: true}})
	ctx := context.Background()
	for _, u := range []string{"http://127.0.0.1:9/x", "http://[::1]/", "http://169.254.169.254/latest", "http://10.1.2.3/",
		"http://[fd00:ec2::254]/", "http://100.64.0.1/", "http://[::ffff:127.0.0.1]/", "ftp://example.com/", "http://u:p@example.com/",
		"http://[fe80::1%25eth0]/", "http://[::127.0.0.1]/", "http://[2002:a00:1::1]/", "http://[64:ff9b::a9fe:a9fe]/",
		"http://2852039166/", "http://0xa9fea9fe/", "http://0251.0376.0251.0376/", "http://169.254.43518/", "http://169.254.169.254./",
		"http://10.1/", "http://0/", "https://example.com:99999/x", "https://example.com:0/"} {
		_, _, err := e.svc.Create(ctx, webhook.Webhook{URL: u, Enabled: true})
		require.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), u)
		var le *lifecycle.Error
		require.ErrorAs(t, err, &le)
		require.Equal(t, "/url", le.Fields[0].Pointer, u)
	}
	// At connect time: zones, embedded IPv4 addresses; a public address
	// behind NAT64 passes.
	dial := webhook.Guard{}.Dialer(time.Second)
	for addr, ok := range map[string]bool{"[fe80::1%lo]:80": false, "[::127.0.0.1]:80": false, "[2002:7f00:1::1]:80": false,
		"[64:ff9b::7f00:1]:80": false, "[64:ff9b::808:808]:80": true, "8.8.8.8:80": true} {
		err := dial.Control("tcp", addr, nil)
		require.Equal(t, ok, err == nil, "%s: %v", addr, err)
	}
	strict := webhook.Guard{}
	require.Error(t, strict.CheckURL("/url", "http://example.com/"), "http without -webhook-allow-http")
	require.NoError(t, strict.CheckURL("/url", "https://example.com/"))
	require.NoError(t, loopback.CheckURL("/url", "http://127.0.0.1:8080/"))

	// localhost passes creation (a name) and is refused at connect time.
	rcv := newReceiver(t, func(int) int { return http.StatusOK })
	port := rcv.URL[strings.LastIndexByte(rcv.URL, ':'):]
	w, _ := e.create(t, webhook.Webhook{URL: "http://localhost" + port + "/"})
	e.appendEvents(t, "x")
	e.dispatch(t, 1)
	var ds []webhook.Delivery
	require.Eventually(t, func() bool {
		var err error
		ds, _, err = e.svc.Deliveries(ctx, w.ID, 10, "")
		return err == nil && len(ds) > 0
	}, 20*time.Second, 10*time.Millisecond)
	require.False(t, ds[0].Succeeded)
	require.Contains(t, ds[0].Error, "range receivers may not be in")
	select {
	case d := <-rcv.got:
		t.Fatalf("the guard let a request to loopback through: %s", d.body)
	default:
	}
}

// TestNoPlainTextSecret: neither the secret nor its key bytes appear in any
// column of any table (text, bytea, json, arrays), rotated secrets
// included.
func TestNoPlainTextSecret(t *testing.T) {
	e := newEnv(t, webhook.WorkerConfig{})
	ctx := context.Background()
	w, s1 := e.create(t, webhook.Webhook{URL: "https://example.com/hook"})
	_, s2, err := e.svc.RotateSecret(ctx, w.ID)
	require.NoError(t, err)
	rows, err := e.pool.Query(ctx, `SELECT table_schema, table_name, column_name FROM information_schema.columns
WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND data_type IN ('text', 'bytea', 'jsonb', 'json', 'ARRAY', 'character varying')`)
	require.NoError(t, err)
	type col struct{ schema, table, column string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (col, error) {
		var c col
		return c, r.Scan(&c.schema, &c.table, &c.column)
	})
	require.NoError(t, err)
	require.NotEmpty(t, cols)
	scanned := 0
	for _, s := range []string{s1, s2} {
		b64 := strings.TrimPrefix(s, "whsec_")
		for _, c := range cols {
			q := `SELECT count(*) FROM ` + pgx.Identifier{c.schema, c.table}.Sanitize() + ` WHERE position($1::bytea in convert_to(` +
				pgx.Identifier{c.column}.Sanitize() + `::text, 'UTF8')) > 0 OR position(decode($2, 'base64') in convert_to(` +
				pgx.Identifier{c.column}.Sanitize() + `::text, 'UTF8')) > 0`
			var n int
			require.NoError(t, e.pool.QueryRow(ctx, q, []byte(b64), b64).Scan(&n), c)
			require.Zero(t, n, "secret found in %s.%s", c.table, c.column)
			scanned++
		}
		// bytea columns hold raw bytes: search them as bytes too.
		var n int
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM webhooks WHERE position(decode($1, 'base64') in secret_enc) > 0
    OR position(convert_to($2, 'UTF8') in secret_enc) > 0 OR position(convert_to($2, 'UTF8') in coalesce(previous_secret_enc, ''::bytea)) > 0`,
			b64, s).Scan(&n))
		require.Zero(t, n)
	}
	require.Positive(t, scanned)
}

// TestDeliveryRetention: the pruner deletes attempts older than the
// retention setting and keeps the others.
func TestDeliveryRetention(t *testing.T) {
	e := newEnv(t, webhook.WorkerConfig{})
	ctx := context.Background()
	w, _ := e.create(t, webhook.Webhook{URL: "https://example.com/hook"})
	now := time.Now()
	for i, age := range []time.Duration{10 * 24 * time.Hour, 8 * 24 * time.Hour, time.Hour} {
		_, err := e.pool.Exec(ctx, `INSERT INTO webhook_deliveries (webhook_id, event_id, sequence, attempt, at, succeeded, latency_ms)
VALUES ($1::uuid, $2, 1, 1, $3, true, 1)`, w.ID, i+1, now.Add(-age))
		require.NoError(t, err)
	}
	p := webhook.NewDeliveryPruner(e.store.PruneDeliveries, 7*24*time.Hour, 0, func() time.Time { return now }, quiet(), nil)
	n, err := p.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	ds, _, err := e.svc.Deliveries(ctx, w.ID, 10, "")
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, int64(3), ds[0].EventID)
}

// TestDispatchOnceAcrossReplicas: dispatchers of several replicas running
// at once queue each event once per subscription (one holds the dispatch
// lock at a time; the cursor moves in the transaction that queues).
func TestDispatchOnceAcrossReplicas(t *testing.T) {
	e := newEnv(t, webhook.WorkerConfig{})
	require.NoError(t, e.river.Stop(context.Background())) // count the jobs, do not run them
	e.create(t, webhook.Webhook{URL: "https://example.com/a"})
	e.create(t, webhook.Webhook{URL: "https://example.com/b", Types: []string{"application."}})
	const events = 60
	var wg sync.WaitGroup
	for range 3 {
		d := webhook.NewDispatcher(e.store, 0, quiet())
		wg.Go(func() {
			for range 200 {
				if _, err := d.RunOnce(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for i := range events {
		e.appendEvents(t, "s"+strconv.Itoa(i%7))
	}
	wg.Wait()
	for deadline := time.Now().Add(30 * time.Second); ; {
		require.True(t, time.Now().Before(deadline), "the dispatcher did not reach the end of the log")
		n, err := e.disp.RunOnce(context.Background())
		require.NoError(t, err)
		if n == 0 {
			var after, last int64
			require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT (SELECT after FROM webhook_dispatch), (SELECT max(id) FROM events)`).Scan(&after, &last))
			if after == last {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var jobs, distinct int
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT (args->>'webhookId', args->>'eventId'))
FROM river_job WHERE kind = 'webhook_delivery'`).Scan(&jobs, &distinct))
	require.Equal(t, 2*events, jobs, "each event once per subscription")
	require.Equal(t, jobs, distinct)
	var bad int
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT count(*) FROM (
    SELECT args->>'webhookId' AS w, (args->>'sequence')::bigint AS seq, count(*) FROM river_job
    GROUP BY 1, 2, (SELECT subject_id FROM events WHERE id = (args->>'eventId')::bigint) HAVING count(*) > 1) d`).Scan(&bad))
	require.Zero(t, bad, "one sequence number per event of a subject")
}

// TestRedeliver: redelivering an attempt sends its event again with the
// same webhook-id, body and sequence; a disabled subscription refuses.
func TestRedeliver(t *testing.T) {
	e := newEnv(t, webhook.WorkerConfig{})
	ctx := context.Background()
	rcv := newReceiver(t, func(int) int { return http.StatusOK })
	w, _ := e.create(t, webhook.Webhook{URL: rcv.URL})
	e.appendEvents(t, "x")
	e.dispatch(t, 1)
	first := rcv.next(t)
	var ds []webhook.Delivery
	require.Eventually(t, func() bool {
		var err error
		ds, _, err = e.svc.Deliveries(ctx, w.ID, 10, "")
		return err == nil && len(ds) == 1
	}, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, e.svc.Redeliver(ctx, w.ID, ds[0].ID))
	again := rcv.next(t)
	require.Equal(t, first.header.Get("webhook-id"), again.header.Get("webhook-id"))
	require.Equal(t, string(first.body), string(again.body))

	off := false
	_, err := e.svc.Update(ctx, w.ID, webhook.Update{Enabled: &off}, webhook.Expect{})
	require.NoError(t, err)
	err = e.svc.Redeliver(ctx, w.ID, ds[0].ID)
	require.Equal(t, lifecycle.ECONFLICT, lifecycle.ErrorCode(err))
	require.Equal(t, lifecycle.ENOTFOUND, lifecycle.ErrorCode(e.svc.Redeliver(ctx, w.ID, ds[0].ID+1000)))
}

// TestSubscriptionJudgedAtCommit: whether an event belongs to a
// subscription is fixed when the event commits, not when the dispatcher
// reads it. An event committed while the subscription was enabled, and the
// subscription disabled before the dispatcher ran, is recorded as not sent,
// listed and, once the subscription is enabled again, redelivered; an event
// committed while it was disabled, and the subscription enabled before the
// dispatcher ran, is not delivered.
func TestSubscriptionJudgedAtCommit(t *testing.T) {
	e := newEnv(t, webhook.WorkerConfig{})
	ctx := context.Background()
	rcv := newReceiver(t, func(int) int { return http.StatusNoContent })
	w, _ := e.create(t, webhook.Webhook{URL: rcv.URL})
	on, off := true, false
	set := func(enabled *bool) {
		t.Helper()
		_, err := e.svc.Update(ctx, w.ID, webhook.Update{Enabled: enabled}, webhook.Expect{})
		require.NoError(t, err)
	}
	jobsOf := func(eventID int64) int {
		var n int
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'webhook_delivery' AND (args->>'eventId')::bigint = $1`,
			eventID).Scan(&n))
		return n
	}

	// Committed while enabled, disabled at once.
	sent := e.appendEvents(t, "while-enabled")[0]
	set(&off)
	e.dispatch(t, 1)
	require.Equal(t, 1, jobsOf(sent), "the event belonged to the subscription when it was committed")
	var ds []webhook.Delivery
	require.Eventually(t, func() bool {
		var err error
		ds, _, err = e.svc.Deliveries(ctx, w.ID, 10, "")
		return err == nil && len(ds) == 1
	}, 20*time.Second, 10*time.Millisecond, "the delivery is listed")
	require.Equal(t, sent, ds[0].EventID)
	require.False(t, ds[0].Succeeded)
	require.Equal(t, "not sent: the subscription is disabled", ds[0].Error)

	// Committed while disabled, enabled at once.
	skipped := e.appendEvents(t, "while-disabled")[0]
	set(&on)
	e.dispatch(t, 1)
	require.Zero(t, jobsOf(skipped), "the event did not belong to the subscription when it was committed")

	// The first one is redelivered; the second one never arrives.
	require.NoError(t, e.svc.Redeliver(ctx, w.ID, ds[0].ID))
	require.Equal(t, strconv.FormatInt(sent, 10), rcv.next(t).header.Get("webhook-id"))
	after := e.appendEvents(t, "after")[0]
	e.dispatch(t, 1)
	require.Equal(t, strconv.FormatInt(after, 10), rcv.next(t).header.Get("webhook-id"))
	require.Zero(t, jobsOf(skipped))
	// The dispatcher is past every change: only the last version, which
	// judges the events to come, is kept.
	var versions int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_versions`).Scan(&versions))
	require.Equal(t, 1, versions)
}

// TestDeliveryBodiesMatchTheContract: the bodies receivers get are valid
// WebhookEvents under a strict validator (no member the schema does not
// name), and WebhookEvent names exactly Event's members and sequence.
func TestDeliveryBodiesMatchTheContract(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()))
	schema := doc.Components.Schemas["WebhookEvent"].Value
	event := doc.Components.Schemas["Event"].Value
	require.NotNil(t, schema)
	want := []string{"sequence"}
	for name := range event.Properties {
		want = append(want, name)
	}
	var got []string
	for name := range schema.Properties {
		got = append(got, name)
	}
	require.ElementsMatch(t, want, got, "WebhookEvent's members are Event's and sequence")

	e := newEnv(t, webhook.WorkerConfig{})
	rcv := newReceiver(t, func(int) int { return http.StatusNoContent })
	e.create(t, webhook.Webhook{URL: rcv.URL})
	dep := lifecycle.Ref{Kind: lifecycle.SubjectDeployment, ID: "d1"}
	changed, err := lifecycle.NewEvent(time.Now(), "c1", dep, lifecycle.DeploymentStateChangedBody{From: lifecycle.StateInstalling,
		To: lifecycle.StateInstalled, Cause: "report"}, lifecycle.Ref{Kind: lifecycle.SubjectApplication, ID: "app"},
		lifecycle.Ref{Kind: lifecycle.SubjectClient, ID: "c1"}, lifecycle.Ref{Kind: lifecycle.SubjectDevice, ID: "c1/dev"})
	require.NoError(t, err)
	retired, err := lifecycle.NewEvent(time.Now(), "alice", lifecycle.Ref{Kind: lifecycle.SubjectClient, ID: "c2"}, lifecycle.ClientRetiredBody{})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		return postgres.AppendEvents(context.Background(), tx, []lifecycle.Event{changed, retired})
	}))
	e.appendEvents(t, "app")
	e.dispatch(t, 3)
	for range 3 {
		d := rcv.next(t)
		var v any
		require.NoError(t, json.Unmarshal(d.body, &v))
		require.NoError(t, schema.VisitJSON(v, openapi3.MultiErrors()), "body %s", d.body)
	}
	// A member the contract does not name is refused: the check is strict.
	require.Error(t, schema.VisitJSON(map[string]any{"id": "1", "type": "client.retired", "at": "2026-12-01T00:00:00Z",
		"subject": map[string]any{"kind": "client", "id": "c"}, "related": []any{}, "actor": "a", "data": map[string]any{},
		"sequence": 1.0, "extra": true}))
}

// TestCrashedDeliveryIsRescued: a delivery job left running by a client
// that died is made available again once it has been running for twice the
// request timeout (not before: it could still be running), and a new client
// delivers it. The rescuer runs at start and every DefaultRescueInterval,
// so with the default 10 s timeout a delivery cut off is retried at most
// 25 s after it started, whenever the server restarts; a job that is still
// running ends (River cancels it) before it could be taken for a dead one.
// The job's start is moved back in the database rather than waited for.
func TestCrashedDeliveryIsRescued(t *testing.T) {
	const timeout = 10 * time.Second
	w := webhook.NewWorker(nil, nil, webhook.WorkerConfig{Timeout: timeout})
	require.Less(t, w.Timeout(nil), w.RescueAfter(), "a live delivery ends before it is taken for a dead one")
	require.Equal(t, 2*timeout, w.RescueAfter())
	require.LessOrEqual(t, w.RescueAfter()+webhook.DefaultRescueInterval, 30*time.Second)

	e := newEnv(t, webhook.WorkerConfig{Timeout: timeout})
	ctx := context.Background()
	require.NoError(t, e.river.Stop(ctx)) // the client that will "crash"
	rcv := newReceiver(t, func(int) int { return http.StatusNoContent })
	e.create(t, webhook.Webhook{URL: rcv.URL})
	id := e.appendEvents(t, "x")[0]
	e.dispatch(t, 1)
	// The crashed client had fetched the job and was sending it.
	tag, err := e.pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = '{crashed}'
WHERE kind = 'webhook_delivery'`)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	// The restarted server: a new River client and the rescuer.
	require.NoError(t, e.river.Start(ctx))
	r := webhook.NewRescuer(e.store.RescueDeliveries, w.RescueAfter(), 0, quiet(), nil)
	n, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a delivery running for less than twice its timeout may still be running")
	_, err = e.pool.Exec(ctx, `UPDATE river_job SET attempted_at = now() - $1::interval WHERE kind = 'webhook_delivery'`,
		(w.RescueAfter() + time.Second).String())
	require.NoError(t, err)
	n, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, strconv.FormatInt(id, 10), rcv.next(t).header.Get("webhook-id"))
}
