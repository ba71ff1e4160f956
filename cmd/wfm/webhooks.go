package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/internal/webhook"
)

// webhooks is the running webhook machinery of the server.
type webhooks struct {
	service    *webhook.Service
	river      *river.Client[pgx.Tx]
	dispatcher *webhook.Dispatcher
	pruner     *webhook.DeliveryPruner
	rescuer    *webhook.Rescuer
}

// startWebhooks loads (or, without -webhook-key-file, creates in the data
// dir) the key that seals signing secrets, and starts the dispatcher, the
// River client that runs deliveries and the delivery pruner. Returns an
// error if the key cannot be had or River cannot start.
func startWebhooks(ctx context.Context, c config, pool *pgxpool.Pool, log *slog.Logger) (*webhooks, error) {
	var key []byte
	var err error
	if c.webhooks.keyFile != "" {
		key, err = webhook.LoadKey(c.webhooks.keyFile)
	} else {
		path := filepath.Join(c.dataDir, "webhook-key")
		key, err = webhook.LoadOrCreateKey(path)
		if err == nil {
			log.Info("webhooks: signing secrets are encrypted with the development key in the data dir; set -webhook-key-file in production", "file", path)
		}
	}
	if err != nil {
		return nil, err
	}
	keys, err := webhook.NewKeyring(key)
	if err != nil {
		return nil, err
	}
	store, err := postgres.NewWebhookStore(pool, log)
	if err != nil {
		return nil, err
	}
	guard := webhook.Guard{AllowHTTP: c.webhooks.allowHTTP, Allowed: c.webhooks.allowCIDRs}
	worker := webhook.NewWorker(store, keys, webhook.WorkerConfig{Timeout: c.webhooks.timeout, DisableAfter: c.webhooks.disableAfter,
		Guard: guard, Now: time.Now})
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, worker); err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	dispatcher := webhook.NewDispatcher(store, 0, log)
	// A delivery that was running on a replica that died (kill -9, a lost
	// node) is retried once it has been running for twice its timeout
	// (webhook.Rescuer; River's own rescuer, on the same rule, is slower).
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:               map[string]river.QueueConfig{webhook.Queue: {MaxWorkers: c.webhooks.workers}},
		Workers:              workers,
		JobTimeout:           worker.Timeout(nil),
		RescueStuckJobsAfter: worker.RescueAfter(),
		// River fetches at most MaxWorkers jobs per fetch and waits
		// FetchCooldown between fetches (100 ms by default: at most 500
		// deliveries/s with 50 workers); 20 ms lifts that cap.
		FetchCooldown: 20 * time.Millisecond,
		// River retries every second while the database is away and logs
		// each failure: those lines are folded into the dispatcher's one
		// line per outage.
		Logger: slog.New(dispatcher.Outage().Handler(log.Handler())).With("component", "river"),
	})
	if err != nil {
		return nil, fmt.Errorf("webhooks: river client: %w", err)
	}
	if err := rc.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, fmt.Errorf("webhooks: start river: %w", err)
	}
	h := &webhooks{service: webhook.NewService(store, keys, guard, time.Now), river: rc,
		dispatcher: dispatcher,
		pruner:     webhook.NewDeliveryPruner(store.PruneDeliveries, c.webhooks.deliveryRetention, 0, time.Now, log, dispatcher.Outage()),
		rescuer:    webhook.NewRescuer(store.RescueDeliveries, worker.RescueAfter(), 0, log, dispatcher.Outage())}
	h.dispatcher.Start(context.WithoutCancel(ctx))
	h.pruner.Start(context.WithoutCancel(ctx))
	h.rescuer.Start(context.WithoutCancel(ctx))
	return h, nil
}

// stop ends the dispatcher and the pruner, then lets River finish the
// deliveries in flight (up to the request timeout and a little more); what
// it cannot finish is retried by any replica later.
func (h *webhooks) stop(log *slog.Logger) {
	h.dispatcher.Stop()
	h.pruner.Stop()
	h.rescuer.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := h.river.Stop(ctx); err != nil {
		log.Warn("webhooks: deliveries in flight at shutdown are retried later", "error", err)
	}
}
