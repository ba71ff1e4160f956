package postgres_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/internal/webhook"
)

// TestDispatchSkipsNothingOfANewSubscription: a dispatcher pass that finds
// no subscription moves past the events without reading them; a
// subscription created during that pass, and an event committed after it,
// are not skipped: that pass or the next matches the event to the
// subscription.
// (Found by review: with the check and the move in two statements, the
// move skipped that event.)
func TestDispatchSkipsNothingOfANewSubscription(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	plain, err := postgres.NewWebhookStore(pool, log)
	require.NoError(t, err)
	var armed atomic.Bool
	var hookID string
	var eventID int64
	traced := tracedPool(t, pool, func(sql string) {
		if !strings.HasPrefix(sql, "SELECT after") || !armed.CompareAndSwap(true, false) {
			return
		}
		// Within the pass, once it read its position: a subscription is
		// created, then an event commits.
		now := time.Now()
		w, err := plain.CreateWebhook(context.Background(), webhook.Webhook{ID: "0b9a3c4e-1111-4222-8333-444455556666", URL: "https://example.com/h",
			Enabled: true, Types: []string{}, CreatedAt: now, UpdatedAt: now, Generation: 1}, []byte("sealed"))
		if err != nil {
			panic(err)
		}
		hookID = w.ID
		e, err := lifecycle.NewEvent(now, "test", lifecycle.Ref{Kind: lifecycle.SubjectClient, ID: "c1"}, lifecycle.ClientRetiredBody{})
		if err != nil {
			panic(err)
		}
		if err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
			return postgres.AppendEvents(context.Background(), tx, []lifecycle.Event{e})
		}); err != nil {
			panic(err)
		}
		if err := pool.QueryRow(context.Background(), `SELECT max(id) FROM events`).Scan(&eventID); err != nil {
			panic(err)
		}
	})
	store, err := postgres.NewWebhookStore(traced, log)
	require.NoError(t, err)

	var jobs []webhook.Job
	match := func(evs []lifecycle.Event, hs []webhook.History) []webhook.Job {
		jobs = append(jobs, webhook.Match(evs, hs)...)
		return nil
	}
	armed.Store(true)
	_, err = store.Dispatch(ctx, 500, match)
	require.NoError(t, err)
	require.NotEmpty(t, hookID, "the subscription was created within the pass")
	w, err := plain.Webhook(ctx, hookID)
	require.NoError(t, err)
	require.Greater(t, eventID, w.AfterEvent, "the event is one the subscription must receive")

	_, err = store.Dispatch(ctx, 500, match) // the pass after
	require.NoError(t, err)
	var matched bool
	for _, j := range jobs {
		matched = matched || j.EventID == eventID && j.WebhookID == hookID
	}
	require.True(t, matched, "the event committed after the subscription is matched to it (jobs %v)", jobs)
}
