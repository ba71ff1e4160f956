package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/webhook"
)

// WebhookStore keeps webhook subscriptions and their delivery attempts, and
// queues deliveries as River jobs (in the transaction that decides them).
type WebhookStore struct {
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx] // insert-only
	logger *slog.Logger
}

var (
	_ webhook.Store         = (*WebhookStore)(nil)
	_ webhook.DeliveryStore = (*WebhookStore)(nil)
	_ webhook.DispatchStore = (*WebhookStore)(nil)
)

// NewWebhookStore returns a store on pool. Returns an error if River's
// insert-only client cannot be made.
func NewWebhookStore(pool *pgxpool.Pool, logger *slog.Logger) (*WebhookStore, error) {
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return &WebhookStore{pool: pool, river: rc, logger: logger}, nil
}

const sqlWebhookColumns = `id::text, url, description, types, filters, enabled, disabled_reason, consecutive_failures,
    coalesce(previous_until, 'epoch'::timestamptz), generation, after_event, created_at, updated_at, coalesce(failing_since, 'epoch'::timestamptz)`

func scanWebhook(row pgx.Row, extra ...any) (webhook.Webhook, error) {
	var (
		w       webhook.Webhook
		filters []byte
	)
	dest := append([]any{&w.ID, &w.URL, &w.Description, &w.Types, &filters, &w.Enabled, &w.DisabledReason,
		&w.ConsecutiveFailures, &w.PreviousUntil, &w.Generation, &w.AfterEvent, &w.CreatedAt, &w.UpdatedAt, &w.FailingSince}, extra...)
	if err := row.Scan(dest...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return w, lifecycle.Errorf(lifecycle.ENOTFOUND, "no such webhook")
		}
		return w, translate(err)
	}
	if w.PreviousUntil.Equal(time.Unix(0, 0)) {
		w.PreviousUntil = time.Time{}
	}
	if w.FailingSince.Equal(time.Unix(0, 0)) {
		w.FailingSince = time.Time{}
	}
	if err := json.Unmarshal(filters, &w.Filters); err != nil {
		return w, fmt.Errorf("webhook %s filters: %w", w.ID, err)
	}
	return w, nil
}

func refStringsOf(f webhook.Filters) []string { return refStrings(f.Refs()) }

// sqlXactPosition is the writing transaction's position in the event log:
// the id its first event has or would have (events.go).
const sqlXactPosition = `(pg_current_xact_id()::text::bigint << 20)`

// sqlRecordVersion records subscription $1 as it is now, at the writing
// transaction's position in the event log (webhook_versions): from there on,
// events are judged by it. A second change in one transaction replaces the
// first one's version.
const sqlRecordVersion = `
INSERT INTO webhook_versions (webhook_id, position, enabled, types, filters)
SELECT id, ` + sqlXactPosition + `, enabled, types, filters FROM webhooks WHERE id::text = $1
ON CONFLICT (webhook_id, position) DO UPDATE SET enabled = excluded.enabled, types = excluded.types, filters = excluded.filters`

// judgesAlike reports whether a and b receive the same events: a change
// between them needs no new version.
func judgesAlike(a, b webhook.Webhook) bool {
	return a.Enabled == b.Enabled && slices.Equal(a.Types, b.Types) && a.Filters == b.Filters
}

// CreateWebhook implements webhook.Store. The subscription receives the
// events at or after its transaction's position in the log: those committed
// after it (its first version).
func (s *WebhookStore) CreateWebhook(ctx context.Context, w webhook.Webhook, sealed []byte) (webhook.Webhook, error) {
	filters, err := json.Marshal(w.Filters)
	if err != nil {
		return w, fmt.Errorf("webhook filters: %w", err)
	}
	var out webhook.Webhook
	err = inTx(ctx, s.pool, func(tx pgx.Tx) error {
		out, err = scanWebhook(tx.QueryRow(ctx, `
INSERT INTO webhooks (id, url, description, types, refs, filters, enabled, secret_enc, after_event, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
    `+sqlXactPosition+` - 1, $9, $9)
RETURNING `+sqlWebhookColumns,
			w.ID, w.URL, w.Description, w.Types, refStringsOf(w.Filters), filters, w.Enabled, sealed, w.CreatedAt))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlRecordVersion, out.ID); err != nil {
			return fmt.Errorf("record webhook version: %w", err)
		}
		return auditChange(ctx, tx, w.CreatedAt, true)
	})
	return out, translate(err)
}

// Webhooks implements webhook.Store.
func (s *WebhookStore) Webhooks(ctx context.Context, after string, limit int) ([]webhook.Webhook, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+sqlWebhookColumns+` FROM webhooks WHERE id::text > $1 ORDER BY id::text LIMIT $2`, after, limit)
	if err != nil {
		return nil, translate(err)
	}
	ws, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (webhook.Webhook, error) { return scanWebhook(r) })
	return ws, translate(err)
}

// Webhook implements webhook.Store.
func (s *WebhookStore) Webhook(ctx context.Context, id string) (webhook.Webhook, error) {
	return scanWebhook(s.pool.QueryRow(ctx, `SELECT `+sqlWebhookColumns+` FROM webhooks WHERE id::text = $1`, id))
}

// UpdateWebhook implements webhook.Store.
func (s *WebhookStore) UpdateWebhook(ctx context.Context, id string, at time.Time, fn func(*webhook.Webhook) error) (webhook.Webhook, error) {
	var out webhook.Webhook
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		w, err := scanWebhook(tx.QueryRow(ctx, `SELECT `+sqlWebhookColumns+` FROM webhooks WHERE id::text = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		before := w
		if err := fn(&w); err != nil {
			return err
		}
		filters, err := json.Marshal(w.Filters)
		if err != nil {
			return fmt.Errorf("webhook filters: %w", err)
		}
		out, err = scanWebhook(tx.QueryRow(ctx, `
UPDATE webhooks SET url = $2, description = $3, types = $4, refs = $5, filters = $6, enabled = $7,
    disabled_reason = $8, consecutive_failures = $9, failing_since = CASE WHEN $9 = 0 THEN NULL ELSE failing_since END,
    generation = generation + 1, updated_at = $10
WHERE id::text = $1 RETURNING `+sqlWebhookColumns,
			id, w.URL, w.Description, w.Types, refStringsOf(w.Filters), filters, w.Enabled, w.DisabledReason, w.ConsecutiveFailures, at))
		if err != nil {
			return err
		}
		if !judgesAlike(before, out) {
			if _, err := tx.Exec(ctx, sqlRecordVersion, id); err != nil {
				return fmt.Errorf("record webhook version: %w", err)
			}
		}
		return auditChange(ctx, tx, at, false)
	})
	return out, translate(err)
}

// DeleteWebhook implements webhook.Store.
func (s *WebhookStore) DeleteWebhook(ctx context.Context, id string, check func(webhook.Webhook) error) error {
	return translate(inTx(ctx, s.pool, func(tx pgx.Tx) error {
		w, err := scanWebhook(tx.QueryRow(ctx, `SELECT `+sqlWebhookColumns+` FROM webhooks WHERE id::text = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		if err := check(w); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM webhooks WHERE id::text = $1`, id); err != nil {
			return err
		}
		return auditChange(ctx, tx, time.Now(), false)
	}))
}

// RotateWebhookSecret implements webhook.Store.
func (s *WebhookStore) RotateWebhookSecret(ctx context.Context, id string, sealed []byte, at, until time.Time) (webhook.Webhook, error) {
	var out webhook.Webhook
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = scanWebhook(tx.QueryRow(ctx, `
UPDATE webhooks SET previous_secret_enc = secret_enc, previous_until = $3, secret_enc = $2,
    generation = generation + 1, updated_at = $4
WHERE id::text = $1 RETURNING `+sqlWebhookColumns, id, sealed, until, at))
		if err != nil {
			return err
		}
		return auditChange(ctx, tx, at, false)
	})
	return out, translate(err)
}

// Deliveries implements webhook.Store.
func (s *WebhookStore) Deliveries(ctx context.Context, id string, before int64, limit int) ([]webhook.Delivery, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := s.pool.Query(ctx, `
SELECT id, webhook_id::text, event_id, sequence, attempt, at, succeeded, coalesce(status_code, 0), error, latency_ms,
    coalesce(next_retry_at, 'epoch'::timestamptz)
FROM webhook_deliveries WHERE webhook_id::text = $1 AND id < $2 ORDER BY id DESC LIMIT $3`, id, before, limit)
	if err != nil {
		return nil, translate(err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (webhook.Delivery, error) {
		var (
			d  webhook.Delivery
			ms int64
		)
		err := r.Scan(&d.ID, &d.WebhookID, &d.EventID, &d.Sequence, &d.Attempt, &d.At, &d.Succeeded, &d.StatusCode, &d.Error, &ms, &d.NextRetryAt)
		d.Latency = time.Duration(ms) * time.Millisecond
		if d.NextRetryAt.Equal(time.Unix(0, 0)) {
			d.NextRetryAt = time.Time{}
		}
		return d, err
	})
	return ds, translate(err)
}

// Redeliver implements webhook.Store.
func (s *WebhookStore) Redeliver(ctx context.Context, id string, deliveryID int64) error {
	return translate(inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			enabled      bool
			eventID, seq int64
			eventKept    bool
		)
		err := tx.QueryRow(ctx, `
SELECT w.enabled, d.event_id, d.sequence, EXISTS (SELECT 1 FROM events e WHERE e.id = d.event_id)
FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
WHERE d.webhook_id::text = $1 AND d.id = $2`, id, deliveryID).Scan(&enabled, &eventID, &seq, &eventKept)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return lifecycle.Errorf(lifecycle.ENOTFOUND, "no delivery %d of webhook %s", deliveryID, id)
		case err != nil:
			return err
		case !enabled:
			return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "webhook-disabled",
				Message: "The webhook is disabled; enable it (PATCH enabled: true) before redelivering."}
		case !eventKept:
			return &lifecycle.Error{Code: lifecycle.EGONE, Type: "events-gone",
				Message: fmt.Sprintf("Event %d is no longer in the event log (retention).", eventID)}
		}
		if _, err := s.river.InsertTx(ctx, tx, webhook.DeliveryArgs{WebhookID: id, EventID: eventID, Sequence: seq}, nil); err != nil {
			return fmt.Errorf("queue redelivery: %w", err)
		}
		return auditChange(ctx, tx, time.Now(), false)
	}))
}

// DeliveryTarget implements webhook.DeliveryStore.
func (s *WebhookStore) DeliveryTarget(ctx context.Context, id string) (webhook.Target, error) {
	var t webhook.Target
	w, err := scanWebhook(s.pool.QueryRow(ctx, `SELECT `+sqlWebhookColumns+`, secret_enc, previous_secret_enc FROM webhooks WHERE id::text = $1`, id),
		&t.Secret, &t.PreviousSecret)
	t.Webhook = w
	return t, err
}

// Event implements webhook.DeliveryStore.
func (s *WebhookStore) Event(ctx context.Context, id int64) (lifecycle.Event, error) {
	rows, _ := s.pool.Query(ctx, `SELECT id, type, at, subject_kind, subject_id, refs, actor, body FROM events WHERE id = $1`, id)
	e, err := pgx.CollectExactlyOneRow(rows, scanEvent)
	if errors.Is(err, pgx.ErrNoRows) {
		return e, lifecycle.Errorf(lifecycle.ENOTFOUND, "no event %d", id)
	}
	return e, translate(err)
}

// sqlInsertDelivery records one attempt.
const sqlInsertDelivery = `
INSERT INTO webhook_deliveries (webhook_id, event_id, sequence, attempt, at, succeeded, status_code, error, latency_ms, next_retry_at)
VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// statusOf is an attempt's status code, NULL when no response came.
func statusOf(d webhook.Delivery) *int {
	if d.StatusCode == 0 {
		return nil
	}
	return &d.StatusCode
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// RecordAttempt implements webhook.DeliveryStore.
func (s *WebhookStore) RecordAttempt(ctx context.Context, d webhook.Delivery,
	decide func(webhook.Webhook) (lifecycle.WebhookOutcome, []lifecycle.Event, error)) (lifecycle.WebhookOutcome, error) {
	var out lifecycle.WebhookOutcome
	// The common case, a success of a subscription with no failure run,
	// changes nothing of the subscription: it is decided on the row as read,
	// without locking it, so that concurrent deliveries to one subscription
	// do not queue on its row. Anything else is decided on the locked row.
	w, err := scanWebhook(s.pool.QueryRow(ctx, `SELECT `+sqlWebhookColumns+` FROM webhooks WHERE id::text = $1`, d.WebhookID))
	if err != nil {
		return out, err
	}
	if o, events, err := decide(w); err == nil && o.Succeeded && w.ConsecutiveFailures == 0 && len(events) == 0 {
		_, err := s.pool.Exec(ctx, sqlInsertDelivery, d.WebhookID, d.EventID, d.Sequence, d.Attempt, d.At, true, statusOf(d), truncate(d.Error, 1024),
			d.Latency.Milliseconds(), nil)
		return o, translate(err)
	}
	err = beginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		w, err := scanWebhook(tx.QueryRow(ctx, `SELECT `+sqlWebhookColumns+` FROM webhooks WHERE id::text = $1 FOR UPDATE`, d.WebhookID))
		if err != nil {
			return err
		}
		var events []lifecycle.Event
		if out, events, err = decide(w); err != nil {
			return err
		}
		var next *time.Time
		if out.Retry && !d.NextRetryAt.IsZero() {
			next = &d.NextRetryAt
		}
		if _, err := tx.Exec(ctx, sqlInsertDelivery,
			d.WebhookID, d.EventID, d.Sequence, d.Attempt, d.At, out.Succeeded, statusOf(d), truncate(d.Error, 1024), d.Latency.Milliseconds(), next); err != nil {
			return err
		}
		enabled, reason := w.Enabled, w.DisabledReason
		if out.Disable && w.Enabled {
			enabled, reason = false, out.Reason
		}
		var since *time.Time
		if !out.FailingSince.IsZero() {
			since = &out.FailingSince
		}
		if _, err := tx.Exec(ctx, `UPDATE webhooks SET consecutive_failures = $2, enabled = $3, disabled_reason = $4, failing_since = $5,
    generation = generation + CASE WHEN enabled <> $3 THEN 1 ELSE 0 END WHERE id::text = $1`,
			d.WebhookID, out.ConsecutiveFailures, enabled, reason, since); err != nil {
			return err
		}
		if enabled != w.Enabled {
			if _, err := tx.Exec(ctx, sqlRecordVersion, d.WebhookID); err != nil {
				return fmt.Errorf("record webhook version: %w", err)
			}
		}
		return AppendEvents(ctx, tx, events)
	})
	return out, translate(err)
}

// dispatchLockID names the transaction advisory lock one dispatcher holds
// at a time ("wfm-whdp" in ASCII).
const dispatchLockID int64 = 0x77666d2d77686470

// Dispatch implements webhook.DispatchStore. The transaction takes no row
// lock until it has events to queue (the advisory lock keeps other
// dispatchers out), so an idle poll writes nothing.
func (s *WebhookStore) Dispatch(ctx context.Context, limit int, match func([]lifecycle.Event, []webhook.History) []webhook.Job) (int, error) {
	n := 0
	err := beginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, dispatchLockID).Scan(&locked); err != nil || !locked {
			return err
		}
		var after int64
		if err := tx.QueryRow(ctx, `SELECT after FROM webhook_dispatch`).Scan(&after); err != nil {
			return err
		}
		// No enabled version of any subscription: every event belongs to
		// none. The position moves past what a pass would read (the same
		// gate) without reading the events' bodies. The check and the move
		// are one statement, one snapshot: a version below the gate was
		// committed before it (it stops the move), and one committed after
		// it judges only events at or above the gate.
		tag, err := tx.Exec(ctx, `UPDATE webhook_dispatch SET after = coalesce((SELECT max(id) FROM events WHERE id > $1 AND id < `+sqlEventGate+`), $1)
WHERE after = $1 AND NOT EXISTS (SELECT FROM webhook_versions WHERE enabled)`, after)
		if err != nil || tag.RowsAffected() == 1 {
			return err
		}
		events, err := eventsAfter(ctx, tx, after, EventFilter{}, limit)
		if lifecycle.ErrorCode(err) == lifecycle.EGONE {
			// The dispatcher was away longer than the event log keeps
			// events: what retention deleted cannot be delivered.
			var le *lifecycle.Error
			errors.As(err, &le)
			resume, _ := le.Extra["resumeAfter"].(int64)
			s.logger.ErrorContext(ctx, "webhooks: events deleted by retention before they were dispatched; they are not delivered",
				"after", after, "resume_after", resume)
			_, err = tx.Exec(ctx, `UPDATE webhook_dispatch SET after = $1`, resume)
			return err
		}
		if err != nil || len(events) == 0 {
			return err
		}
		n = len(events)
		last := events[len(events)-1].ID
		// Every version at or before an event read was committed before
		// this statement (its position is below the gate the events were
		// read under), so each event finds the version that judges it.
		hs, err := histories(ctx, tx, last)
		if err != nil {
			return err
		}
		if jobs := match(events, hs); len(jobs) > 0 {
			if err := s.queue(ctx, tx, jobs); err != nil {
				return err
			}
		}
		if _, err = tx.Exec(ctx, `UPDATE webhook_dispatch SET after = $1`, last); err != nil {
			return err
		}
		// A version followed by another at or before the new position
		// judges no event still to dispatch.
		_, err = tx.Exec(ctx, `DELETE FROM webhook_versions v WHERE EXISTS (
    SELECT FROM webhook_versions n WHERE n.webhook_id = v.webhook_id AND n.position > v.position AND n.position <= $1)`, last)
		return err
	})
	return n, translate(err)
}

// histories reads the versions of every subscription at or before position
// through, as one history per subscription.
func histories(ctx context.Context, tx pgx.Tx, through int64) ([]webhook.History, error) {
	rows, _ := tx.Query(ctx, `SELECT webhook_id::text, position, enabled, types, filters
FROM webhook_versions WHERE position <= $1 ORDER BY webhook_id, position`, through)
	var (
		hs      []webhook.History
		id      string
		v       lifecycle.WebhookVersion
		types   []string
		filters []byte
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &v.Position, &v.Enabled, &types, &filters}, func() error {
		var f webhook.Filters
		if err := json.Unmarshal(filters, &f); err != nil {
			return fmt.Errorf("webhook %s filters: %w", id, err)
		}
		v.Filter = lifecycle.WebhookFilter{Types: slices.Clone(types), Refs: f.Refs()}
		if len(hs) == 0 || hs[len(hs)-1].WebhookID != id {
			hs = append(hs, webhook.History{WebhookID: id})
		}
		h := &hs[len(hs)-1]
		h.Versions = append(h.Versions, v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read webhook versions: %w", err)
	}
	return hs, nil
}

// queue assigns each job's event its subject's next sequence number (one
// per event, in log order, whatever the number of subscriptions) and inserts
// the jobs.
func (s *WebhookStore) queue(ctx context.Context, tx pgx.Tx, jobs []webhook.Job) error {
	var subjects []string
	var eventIDs []int64
	seen := map[int64]bool{}
	for _, j := range jobs {
		if !seen[j.EventID] {
			seen[j.EventID] = true
			subjects, eventIDs = append(subjects, j.Subject.String()), append(eventIDs, j.EventID)
		}
	}
	// Number the events per subject in id order, continuing each
	// subject's counter, and move the counters: one statement.
	rows, _ := tx.Query(ctx, `
WITH ev AS (
    SELECT s.subject, s.event_id, row_number() OVER (PARTITION BY s.subject ORDER BY s.event_id) AS n
    FROM unnest($1::text[], $2::bigint[]) AS s(subject, event_id)
),
cur AS (
    SELECT ev.subject, ev.event_id, coalesce(q.seq, 0) + ev.n AS seq
    FROM ev LEFT JOIN webhook_sequences q ON q.subject = ev.subject
),
up AS (
    INSERT INTO webhook_sequences (subject, seq) SELECT subject, max(seq) FROM cur GROUP BY subject
    ON CONFLICT (subject) DO UPDATE SET seq = excluded.seq
)
SELECT event_id, seq FROM cur`, subjects, eventIDs)
	seqs := map[int64]int64{}
	var id, seq int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &seq}, func() error { seqs[id] = seq; return nil }); err != nil {
		return fmt.Errorf("webhook sequences: %w", err)
	}
	params := make([]river.InsertManyParams, len(jobs))
	for i, j := range jobs {
		params[i] = river.InsertManyParams{Args: webhook.DeliveryArgs{WebhookID: j.WebhookID, EventID: j.EventID, Sequence: seqs[j.EventID]}}
	}
	if _, err := s.river.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("queue deliveries: %w", err)
	}
	return nil
}

// RescueDeliveries makes the delivery jobs that have been running for
// longer than stuckAfter (by the database's clock, which also stamped their
// start) available again, as River's rescuer does, and returns how many.
// The caller makes stuckAfter longer than any live delivery runs
// (webhook.RescueAfter), so only jobs of a server that died qualify. Jobs
// out of attempts are left to River's rescuer, which discards them. Returns
// an error if the database fails.
func (s *WebhookStore) RescueDeliveries(ctx context.Context, stuckAfter time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
UPDATE river_job SET state = 'available', scheduled_at = now(),
    errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', attempt,
        'error', 'the delivery was cut off: the server running it stopped', 'trace', '')),
    metadata = metadata || jsonb_build_object('river:rescue_count', coalesce((metadata->>'river:rescue_count')::int, 0) + 1)
WHERE state = 'running' AND queue = $1 AND kind = $2 AND attempted_at < now() - make_interval(secs => $3) AND attempt < max_attempts`,
		webhook.Queue, webhook.DeliveryArgs{}.Kind(), stuckAfter.Seconds())
	if err != nil {
		return 0, fmt.Errorf("rescue webhook deliveries: %w", translate(err))
	}
	return tag.RowsAffected(), nil
}

// PruneDeliveries deletes delivery attempts older than maxAge at now, in
// batches, and returns how many it deleted. Returns an error if the
// database fails.
func (s *WebhookStore) PruneDeliveries(ctx context.Context, now time.Time, maxAge time.Duration) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE id IN (
    SELECT id FROM webhook_deliveries WHERE at < $1 ORDER BY at LIMIT 5000)`, now.Add(-maxAge))
		if err != nil {
			return total, fmt.Errorf("prune webhook deliveries: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < 5000 {
			return total, nil
		}
	}
}
