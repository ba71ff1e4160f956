package postgres_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

func TestEventPrunerRunOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	log := postgres.NewEventLog(pool)
	now := eventT0
	old := appendCommitted(t, pool, stateChanged(t, "old-0", now.Add(-8*24*time.Hour)), stateChanged(t, "old-1", now.Add(-7*24*time.Hour-time.Minute)))
	recent := appendCommitted(t, pool, stateChanged(t, "recent", now.Add(-time.Hour)))
	waitReadable(t, log, recent[0].ID)

	p := postgres.NewEventPruner(log, postgres.EventRetention{MaxAge: 7 * 24 * time.Hour}, time.Hour,
		func() time.Time { return now }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	n, err := p.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "RunOnce deleted")

	got, err := log.EventsAfter(ctx, old[1].ID, postgres.EventFilter{}, 10)
	require.NoError(t, err)
	assert.Equal(t, ids(recent), ids(got), "the recent event is kept")
	// A reader behind the deleted events is told it missed some.
	_, err = log.EventsAfter(ctx, old[0].ID, postgres.EventFilter{}, 10)
	require.Equal(t, lifecycle.EGONE, lifecycle.ErrorCode(err), "EventsAfter(old[0]) error = %v", err)
	var le *lifecycle.Error
	require.ErrorAs(t, err, &le)
	assert.Equal(t, old[1].ID, le.Extra["resumeAfter"], "resumeAfter")

	n, err = p.RunOnce(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "second RunOnce deleted")
}
