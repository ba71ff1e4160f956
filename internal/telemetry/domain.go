package telemetry

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Snapshot is the state of the fleet the domain metrics show, read at once
// (one aggregate query, see postgres.MetricsSnapshot).
type Snapshot struct {
	// Deployments counts deployments by state.
	Deployments map[string]int
	// Operations counts the operations in flight (queued, running) by
	// type, then state. Their outcomes are counted from the event log
	// (DomainCollector.ObserveEvent): counting the whole history at every
	// scrape would cost a scan of all operations.
	Operations map[string]map[string]int
	// Rollouts counts rollouts by state.
	Rollouts map[string]int
	// ActiveRollouts are the rollouts not ended (running, paused,
	// aborting), at most MaxActiveRollouts of them, newest first.
	ActiveRollouts []RolloutProgress
	// Scheduler is the due work by kind ("operation", "rollout").
	Scheduler map[string]DueWork
	// WebhookBacklogEvents counts the events the webhook dispatcher has not
	// matched yet (at most MaxWebhookBacklog are counted).
	WebhookBacklogEvents int
	// WebhookLag is how long the oldest of them waits; 0 when none.
	WebhookLag time.Duration
}

// MaxActiveRollouts bounds the rollouts whose progress is shown (one label
// value each), and MaxWebhookBacklog the events counted behind the webhook
// dispatcher, so that a scrape stays cheap whatever the state.
const (
	MaxActiveRollouts = 50
	MaxWebhookBacklog = 100_000
)

// RolloutProgress is where one active rollout stands.
type RolloutProgress struct {
	ID, Application, State string
	// Wave is the current wave of Waves, from 1 as the API counts
	// (Rollout.currentWave); 0: none.
	Wave, Waves int
	// Members counts the rollout's members by status.
	Members map[string]int
	// Done is the share of its eligible (not excluded) members whose
	// status is final, 0 to 1.
	Done float64
}

// DueWork is the scheduler's work of one kind that is due.
type DueWork struct {
	// Count is the number of due items.
	Count int
	// Lag is how long the oldest due item has been due; 0 when none.
	Lag time.Duration
}

// DomainConfig configures a DomainCollector.
type DomainConfig struct {
	// Snapshot reads the fleet's state (one aggregate query).
	Snapshot func(ctx context.Context) (Snapshot, error)
	// CacheStats, when not nil, returns the device poll's manifest cache
	// hits and misses since the process started.
	CacheStats func() (hits, misses uint64)
	// TTL is how long a snapshot is reused; scrapes within it (several
	// Prometheus servers, a dashboard refresh) cost no query.
	TTL time.Duration
	// Timeout bounds the snapshot query.
	Timeout time.Duration
	// Now is the clock.
	Now func() time.Time
}

// DomainCollector exports the domain metrics: counts from a cached
// snapshot of the database taken at scrape time, and counters the HTTP
// adapter feeds (rate-limited requests by route, status reports ingested).
// A snapshot that fails or times out keeps the previous values (their age
// shows in wfm_metrics_snapshot_age_seconds), counts the failure
// (wfm_metrics_snapshot_errors_total) and is tried again after the TTL.
type DomainCollector struct {
	cfg DomainConfig

	mu    sync.Mutex
	snap  Snapshot
	taken time.Time // when snap was read
	tried time.Time // the last attempt, successful or not
	ok    bool

	rateLimited     *prometheus.CounterVec
	finished        *prometheus.CounterVec
	reports         prometheus.Counter
	snapErrors      prometheus.Counter
	snapDuration    prometheus.Gauge
	deployments     *prometheus.Desc
	operations      *prometheus.Desc
	rollouts        *prometheus.Desc
	rolloutMembers  *prometheus.Desc
	rolloutProgress *prometheus.Desc
	rolloutWave     *prometheus.Desc
	rolloutWaves    *prometheus.Desc
	dueItems        *prometheus.Desc
	schedulerLag    *prometheus.Desc
	webhookBacklog  *prometheus.Desc
	webhookLag      *prometheus.Desc
	cacheLookups    *prometheus.Desc
	snapshotAge     *prometheus.Desc
}

// NewDomainCollector returns the collector; register it with the registry
// that /metrics serves. A zero TTL or Timeout means 5 s and 2 s.
func NewDomainCollector(cfg DomainConfig) *DomainCollector {
	if cfg.TTL == 0 {
		cfg.TTL = 5 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	finished := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wfm_operations_finished_total",
		Help: "Operations that ended, by type and outcome (succeeded, failed, cancelled), as read from the event log by this process since it started (every replica reads every event)."}, []string{"type", "outcome"})
	for _, k := range lifecycle.AllOperationKinds() {
		for _, o := range []string{"succeeded", "failed", "cancelled"} {
			finished.WithLabelValues(string(k), o) // present from the start, at 0
		}
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("wfm_"+name, help, labels, nil)
	}
	return &DomainCollector{
		cfg: cfg,
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wfm_http_rate_limited_total",
			Help: "Requests refused with 429 by a rate limit, by API (mgmt, device) and route pattern."}, []string{"api", "route"}),
		finished: finished,
		reports: prometheus.NewCounter(prometheus.CounterOpts{Name: "wfm_status_reports_ingested_total",
			Help: "Device status reports accepted (2xx) by this process."}),
		snapErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "wfm_metrics_snapshot_errors_total",
			Help: "Snapshots of the fleet's state for /metrics that failed or timed out (the previous values are kept)."}),
		snapDuration: prometheus.NewGauge(prometheus.GaugeOpts{Name: "wfm_metrics_snapshot_duration_seconds",
			Help: "How long the last snapshot query of the fleet's state took."}),
		deployments:     d("deployments", "Deployments by state.", "state"),
		operations:      d("operations_in_flight", "Operations in flight by type and state (queued, running).", "type", "state"),
		rollouts:        d("rollouts", "Rollouts by state.", "state"),
		rolloutMembers:  d("rollout_members", "Members of each active rollout by status.", "rollout", "application", "status"),
		rolloutProgress: d("rollout_progress_ratio", "Share of an active rollout's eligible members whose status is final (0 to 1).", "rollout", "application", "state"),
		rolloutWave:     d("rollout_current_wave", "The wave an active rollout is at, counted from 1 as the API's currentWave (0: none started).", "rollout", "application"),
		rolloutWaves:    d("rollout_waves", "The number of waves of an active rollout.", "rollout", "application"),
		dueItems:        d("scheduler_due", "Scheduler work that is due now, by kind (operation, rollout).", "kind"),
		schedulerLag:    d("scheduler_lag_seconds", "How long the oldest due scheduler work has been due, by kind (operation, rollout); 0 when none.", "kind"),
		webhookBacklog:  d("webhook_dispatch_backlog_events", "Events of the log the webhook dispatcher has not matched against the subscriptions yet (counted up to 100000)."),
		webhookLag:      d("webhook_dispatch_lag_seconds", "Age of the oldest event the webhook dispatcher has not matched yet; 0 when none."),
		cacheLookups:    d("manifest_cache_lookups_total", "Lookups of the device poll's manifest cache (every device API request) by result (hit, miss), by this process.", "result"),
		snapshotAge:     d("metrics_snapshot_age_seconds", "Age of the fleet-state snapshot these values come from."),
	}
}

// RateLimited counts one request refused with 429 on route (a pattern).
func (c *DomainCollector) RateLimited(api, route string) {
	c.rateLimited.WithLabelValues(api, route).Inc()
}

// ObserveEvent counts the outcome of an operation from its event
// (operation.succeeded, failed, cancelled); other events are ignored. The
// event log's shared reader calls it (feed.Config.Observe).
func (c *DomainCollector) ObserveEvent(e lifecycle.Event) {
	var outcome string
	switch e.Type {
	case lifecycle.EventOperationSucceeded:
		outcome = "succeeded"
	case lifecycle.EventOperationFailed:
		outcome = "failed"
	case lifecycle.EventOperationCancelled:
		outcome = "cancelled"
	default:
		return
	}
	var body struct {
		Operation string `json:"operation"`
	}
	if json.Unmarshal(e.Body, &body) != nil || !lifecycle.OperationKind(body.Operation).Valid() {
		body.Operation = "unknown"
	}
	c.finished.WithLabelValues(body.Operation, outcome).Inc()
}

// ReportIngested counts one accepted status report.
func (c *DomainCollector) ReportIngested() { c.reports.Inc() }

// Describe implements prometheus.Collector.
func (c *DomainCollector) Describe(ch chan<- *prometheus.Desc) {
	c.rateLimited.Describe(ch)
	c.finished.Describe(ch)
	c.reports.Describe(ch)
	c.snapErrors.Describe(ch)
	c.snapDuration.Describe(ch)
	for _, d := range []*prometheus.Desc{c.deployments, c.operations, c.rollouts, c.rolloutMembers, c.rolloutProgress, c.rolloutWave,
		c.rolloutWaves, c.dueItems, c.schedulerLag, c.webhookBacklog, c.webhookLag, c.cacheLookups, c.snapshotAge} {
		ch <- d
	}
}

// snapshot returns the cached snapshot, taking a new one when it is older
// than the TTL; ok is false when none was ever taken.
func (c *DomainCollector) snapshot() (Snapshot, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	if !c.tried.IsZero() && now.Sub(c.tried) < c.cfg.TTL {
		// Also after a failure: an unavailable database is asked once a
		// TTL, not by every scrape.
		return c.snap, c.taken, c.ok
	}
	c.tried = now
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	s, err := c.cfg.Snapshot(ctx)
	c.snapDuration.Set(c.cfg.Now().Sub(now).Seconds())
	if err != nil {
		c.snapErrors.Inc()
		return c.snap, c.taken, c.ok
	}
	c.snap, c.taken, c.ok = s, now, true
	return s, now, true
}

// Collect implements prometheus.Collector.
func (c *DomainCollector) Collect(ch chan<- prometheus.Metric) {
	c.rateLimited.Collect(ch)
	c.finished.Collect(ch)
	c.reports.Collect(ch)
	if c.cfg.CacheStats != nil {
		hits, misses := c.cfg.CacheStats()
		ch <- prometheus.MustNewConstMetric(c.cacheLookups, prometheus.CounterValue, float64(hits), "hit")
		ch <- prometheus.MustNewConstMetric(c.cacheLookups, prometheus.CounterValue, float64(misses), "miss")
	}
	s, taken, ok := c.snapshot()
	c.snapErrors.Collect(ch)
	c.snapDuration.Collect(ch)
	if !ok {
		return
	}
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	g(c.snapshotAge, c.cfg.Now().Sub(taken).Seconds())
	for state, n := range s.Deployments {
		g(c.deployments, float64(n), state)
	}
	for typ, states := range s.Operations {
		for state, n := range states {
			g(c.operations, float64(n), typ, state)
		}
	}
	for state, n := range s.Rollouts {
		g(c.rollouts, float64(n), state)
	}
	for _, r := range s.ActiveRollouts {
		for status, n := range r.Members {
			g(c.rolloutMembers, float64(n), r.ID, r.Application, status)
		}
		g(c.rolloutProgress, r.Done, r.ID, r.Application, r.State)
		g(c.rolloutWave, float64(r.Wave), r.ID, r.Application)
		g(c.rolloutWaves, float64(r.Waves), r.ID, r.Application)
	}
	for _, kind := range []string{"operation", "rollout"} {
		w := s.Scheduler[kind]
		g(c.dueItems, float64(w.Count), kind)
		g(c.schedulerLag, w.Lag.Seconds(), kind)
	}
	g(c.webhookBacklog, float64(s.WebhookBacklogEvents))
	g(c.webhookLag, s.WebhookLag.Seconds())
}
