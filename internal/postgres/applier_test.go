package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestApplyAppendsEventsInItsTransaction checks that the applier appends a
// change's events in the change's own transaction: a change that rolls back
// leaves no event (and no manifest version), one that commits leaves
// exactly its events.
func TestApplyAppendsEventsInItsTransaction(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	s := postgres.NewFleetStore(pool, 0)
	now := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	_, _, err := s.AcceptClient(ctx, "c", now)
	require.NoError(t, err)
	count := func() (events, version int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM events), (SELECT manifest_version FROM clients WHERE id = 'c')`).Scan(&events, &version))
		return events, version
	}
	ev0, v0 := count()
	change := func() []*lifecycle.Change {
		cs, err := lifecycle.DecideUnregister("c", "dev", nil, now, "c")
		require.NoError(t, err)
		return cs
	}
	boom := errors.New("boom")
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := postgres.Apply(ctx, tx, change()); err != nil {
			return err
		}
		return boom // something after the change fails: all of it rolls back
	})
	require.ErrorIs(t, err, boom)
	ev, v := count()
	assert.Equal(t, ev0, ev, "a rolled-back change leaves no event")
	assert.Equal(t, v0, v)

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return postgres.Apply(ctx, tx, change()) }))
	ev, v = count()
	assert.Equal(t, ev0+1, ev, "a committed change leaves its events")
	assert.Equal(t, v0+1, v, "one manifest version")
	var typ string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT type FROM events ORDER BY id DESC LIMIT 1`).Scan(&typ))
	assert.Equal(t, string(lifecycle.EventDeviceUnregistered), typ)
}

// TestApplyBatchBumpsEachClientOnce checks that a batch of changes of
// several clients' deployments publishes one manifest version per affected
// client, however many of its changes there are, in one transaction.
func TestApplyBatchBumpsEachClientOnce(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	s := postgres.NewFleetStore(pool, 0)
	now := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	versions := func() map[string]int {
		out := map[string]int{}
		for _, c := range []string{"a", "b", "c"} {
			var v int
			require.NoError(t, pool.QueryRow(ctx, `SELECT manifest_version FROM clients WHERE id = $1`, c).Scan(&v))
			out[c] = v
		}
		return out
	}
	for _, c := range []string{"a", "b", "c"} {
		_, _, err := s.AcceptClient(ctx, c, now)
		require.NoError(t, err)
	}
	before := versions()
	var changes []*lifecycle.Change
	for _, c := range []string{"b", "a", "b", "b"} {
		cs, err := lifecycle.DecideUnregister(c, "dev", nil, now, c)
		require.NoError(t, err)
		changes = append(changes, cs...)
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return postgres.Apply(ctx, tx, changes) }))
	after := versions()
	assert.Equal(t, before["a"]+1, after["a"])
	assert.Equal(t, before["b"]+1, after["b"], "one version for three changes")
	assert.Equal(t, before["c"], after["c"], "an unaffected client keeps its version")
}

// TestFoldedMovesFollowTheLifeCycles: the rows a change creates are
// inserted in their final state (folded), past the transition triggers of
// migration 00005; the applier checks each folded move against the life
// cycle tables instead. A creation is hand-built, then given one illegal
// move of its operation, its step or its revision: the batch fails and
// writes nothing. The untouched creation is applied (the control).
func TestFoldedMovesFollowTheLifeCycles(t *testing.T) {
	ctx := t.Context()
	f := newPubFleet(t)
	_, err := f.svc.PutCapabilities(ctx, "c", "d1", pubCaps("d1"))
	require.NoError(t, err)
	now := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	v, err := lifecycle.ParseVersion("1.0.0")
	require.NoError(t, err)
	for i, tc := range []struct {
		name   string
		tamper func(c *lifecycle.Change, opID string)
	}{
		{"operation running -> queued", func(c *lifecycle.Change, opID string) {
			c.Operations = append(c.Operations, lifecycle.OperationMove{ID: opID, From: lifecycle.OperationRunning, To: lifecycle.OperationQueued})
		}},
		{"step published -> pending", func(c *lifecycle.Change, opID string) {
			c.Steps = append(c.Steps, lifecycle.StepMove{OperationID: opID, N: 1, From: []lifecycle.StepState{lifecycle.StepPublished}, To: lifecycle.StepPending})
		}},
		{"revision active -> failed", func(c *lifecycle.Change, _ string) {
			c.Outcomes = append(c.Outcomes, lifecycle.OutcomeMove{Revision: 1, To: lifecycle.OutcomeActive}, lifecycle.OutcomeMove{Revision: 1, To: lifecycle.OutcomeFailed})
		}},
		{"control: no illegal move", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i+1)
			opID := fmt.Sprintf("00000000-0000-4000-9000-%012d", i+1)
			c, err := lifecycle.DecideCreate(lifecycle.CreateInput{
				Deployment: lifecycle.Deployment{ID: id, ClientID: "c", DeviceID: "d1", ApplicationID: "app"},
				Revision:   lifecycle.NewRevision{Version: "1.0.0", ProfileID: "p", Components: []string{"web"}, YAML: []byte("id: " + id + "\n")},
				Device:     lifecycle.DeviceRegistered, OperationID: opID, Deadline: now.Add(time.Hour),
			}, now, "op")
			require.NoError(t, err)
			if tc.tamper != nil {
				tc.tamper(c, opID)
			}
			op := fleet.Operation{ID: opID, DeploymentID: id, Type: lifecycle.OperationInstall, State: lifecycle.OperationQueued, FromVersion: v, ToVersion: v,
				ProfileID: "p", Strategy: lifecycle.StrategyRecreate, OnFailure: fleet.OnFailureHalt, StepTimeout: time.Hour, Deadline: now.Add(time.Hour),
				Steps: []fleet.Step{{N: 1, Version: v, State: lifecycle.StepPending}}}
			err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error { return postgres.ApplyCreating(ctx, tx, []*lifecycle.Change{c}, op) })
			var n int
			require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM deployments WHERE id = $1`, id).Scan(&n))
			if tc.tamper == nil {
				require.NoError(t, err)
				assert.Equal(t, 1, n)
				return
			}
			assert.Error(t, err, "an illegal folded move fails the batch")
			assert.Zero(t, n, "and writes nothing")
		})
	}
}

// TestConcurrentPublicationsOfOneClient: two transactions publish for the
// same client at once (a scheduler visit and an HTTP operation on one
// gateway's deployments); the second waits for the first's client lock and
// then publishes the next version. It used to fail with a unique violation
// of manifest_versions_current: the bump was one statement, whose snapshot
// (taken before the lock wait) did not see the version the first had
// inserted, so it did not supersede it.
func TestConcurrentPublicationsOfOneClient(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	s := postgres.NewFleetStore(pool, 0)
	now := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	_, _, err := s.AcceptClient(ctx, "a", now)
	require.NoError(t, err)
	change := func() []*lifecycle.Change {
		cs, err := lifecycle.DecideUnregister("a", "dev", nil, now, "a")
		require.NoError(t, err)
		return cs
	}
	var before int
	require.NoError(t, pool.QueryRow(ctx, `SELECT manifest_version FROM clients WHERE id = 'a'`).Scan(&before))

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(ctx) }()
	require.NoError(t, postgres.Apply(ctx, first, change()))
	second := make(chan error, 1)
	go func() {
		second <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return postgres.Apply(ctx, tx, change()) })
	}()
	// The second waits for the client's row lock (bounded).
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&waiting))
		return waiting > 0
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, first.Commit(ctx))
	require.NoError(t, <-second, "the second publication commits after the first")

	var after, current int
	require.NoError(t, pool.QueryRow(ctx, `SELECT manifest_version FROM clients WHERE id = 'a'`).Scan(&after))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM manifest_versions WHERE client_id = 'a' AND superseded_at IS NULL`).Scan(&current))
	assert.Equal(t, before+2, after)
	assert.Equal(t, 1, current, "one current manifest version")
}
