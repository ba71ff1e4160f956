package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/telemetry"
)

// sqlMetricsSnapshot reads everything the domain metrics show in one
// statement (one snapshot, one round trip), as rows (kind, a, b, n, seconds):
//
//	deployment  state                -      count
//	operation   type       state     count (in flight)
//	rollout     state                -      count
//	active      rollout id application|state  current wave  number of waves (as n2)
//	member      rollout id status    count
//	due         operation|rollout    -      count          seconds the oldest waited
//	webhook     -          -         backlog               seconds the oldest waited
//
// Each part reads a set bounded by the fleet or the work in flight, never
// by history: deployments are grouped whole (one per deployment of the
// fleet), operations only in flight (the partial index operations_due; the
// outcomes are counted from the event log instead, see
// telemetry.DomainCollector.ObserveEvent), rollouts whole (one row per
// rollout), members only those of the newest active rollouts, from their
// counts (rollout_count_deltas, migration 00020), the webhook backlog at most
// telemetry.MaxWebhookBacklog events by primary key.
// The due conditions are the scheduler's (sqlOperationDue, sqlRolloutDue).
var sqlMetricsSnapshot = `
WITH active AS (
  SELECT id, application_id, state, current_wave, jsonb_array_length(waves) AS waves FROM rollouts
  WHERE state IN ('running', 'paused', 'aborting') ORDER BY created_at DESC LIMIT $2
), due_ops AS (
  SELECT least(CASE WHEN o.recheck_at < $1 THEN o.recheck_at END,
               CASE WHEN o.state = 'queued' OR o.visited_generation IS DISTINCT FROM d.generation OR o.recheck_at IS NULL
                    THEN greatest(o.updated_at, d.updated_at) END) AS since
  FROM operations o JOIN deployments d ON d.id = o.deployment_id
  WHERE ` + sqlOperationDue("$1") + `
), due_rollouts AS (
  SELECT coalesce(recheck_at, updated_at) AS since FROM rollouts
  WHERE ` + sqlRolloutDue("$1") + `
), backlog AS (
  SELECT e.id, e.at FROM events e, webhook_dispatch w WHERE e.id > w.after ORDER BY e.id LIMIT $3
)
SELECT 'deployment', state, '', count(*), 0::float8 FROM deployments GROUP BY state
UNION ALL SELECT 'operation', type, state, count(*), 0 FROM operations WHERE state IN ('queued', 'running') GROUP BY type, state
UNION ALL SELECT 'rollout', state, '', count(*), 0 FROM rollouts GROUP BY state
UNION ALL SELECT 'active', id::text, application_id || '|' || state, current_wave, waves FROM active
UNION ALL SELECT 'member', c.rollout_id::text, c.status, sum(c.n), 0 FROM rollout_count_deltas c JOIN active a ON a.id = c.rollout_id
  GROUP BY c.rollout_id, c.status HAVING sum(c.n) <> 0
UNION ALL SELECT 'due', 'operation', '', count(*), coalesce(extract(epoch FROM $1 - min(since)), 0)::float8 FROM due_ops
UNION ALL SELECT 'due', 'rollout', '', count(*), coalesce(extract(epoch FROM $1 - min(since)), 0)::float8 FROM due_rollouts
UNION ALL SELECT 'webhook', '', '', count(*), coalesce(extract(epoch FROM $1 - min(at)), 0)::float8 FROM backlog`

// MetricsSnapshot reads the state of the fleet that /metrics shows (see
// telemetry.Snapshot) at now, in one statement. Every known state, type and
// status is present, with 0 when none has it, so that dashboards show
// series from the start.
func MetricsSnapshot(ctx context.Context, pool *pgxpool.Pool, now time.Time) (telemetry.Snapshot, error) {
	s := telemetry.Snapshot{Deployments: map[string]int{}, Operations: map[string]map[string]int{}, Rollouts: map[string]int{},
		Scheduler: map[string]telemetry.DueWork{}}
	for _, st := range lifecycle.AllStates() {
		s.Deployments[string(st)] = 0
	}
	for _, k := range lifecycle.AllOperationKinds() {
		s.Operations[string(k)] = map[string]int{}
		for _, st := range lifecycle.AllOperationStates() {
			if !st.Terminal() {
				s.Operations[string(k)][string(st)] = 0
			}
		}
	}
	for _, st := range lifecycle.AllRolloutStates() {
		s.Rollouts[string(st)] = 0
	}
	rows, err := pool.Query(ctx, sqlMetricsSnapshot, now, telemetry.MaxActiveRollouts, telemetry.MaxWebhookBacklog)
	if err != nil {
		return s, fmt.Errorf("metrics snapshot: %w", translate(err))
	}
	active := map[string]*telemetry.RolloutProgress{}
	var order []string
	members := map[string]map[string]int{}
	var kind, a, b string
	var n int64
	var secs float64
	_, err = pgx.ForEachRow(rows, []any{&kind, &a, &b, &n, &secs}, func() error {
		lag := time.Duration(max(secs, 0) * float64(time.Second))
		switch kind {
		case "deployment":
			s.Deployments[a] = int(n)
		case "operation":
			if s.Operations[a] == nil {
				s.Operations[a] = map[string]int{}
			}
			s.Operations[a][b] = int(n)
		case "rollout":
			s.Rollouts[a] = int(n)
		case "active":
			app, state := splitLast(b, '|')
			// rollouts.current_wave counts from 0, the API and the metric from 1.
			active[a] = &telemetry.RolloutProgress{ID: a, Application: app, State: state, Wave: int(n) + 1, Waves: int(secs)}
			order = append(order, a)
		case "member":
			if members[a] == nil {
				members[a] = map[string]int{}
			}
			members[a][b] = int(n)
		case "due":
			s.Scheduler[a] = telemetry.DueWork{Count: int(n), Lag: lag}
		case "webhook":
			s.WebhookBacklogEvents, s.WebhookLag = int(n), lag
		}
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("metrics snapshot: %w", translate(err))
	}
	for _, id := range order {
		r := active[id]
		r.Members = map[string]int{}
		for _, st := range lifecycle.AllMemberStatuses() {
			r.Members[string(st)] = 0
		}
		var eligible, done int
		for st, n := range members[id] {
			r.Members[st] = n
			if ms := lifecycle.MemberStatus(st); ms != lifecycle.MemberExcluded {
				eligible += n
				if ms.Terminal() {
					done += n
				}
			}
		}
		if eligible > 0 {
			r.Done = float64(done) / float64(eligible)
		}
		s.ActiveRollouts = append(s.ActiveRollouts, *r)
	}
	return s, nil
}

// splitLast splits s at the last sep (application ids cannot hold '|').
func splitLast(s string, sep byte) (string, string) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == sep {
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}
