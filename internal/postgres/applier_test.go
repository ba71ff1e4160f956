package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
