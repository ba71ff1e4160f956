package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestOverlappingCreationsConflict: a creation whose member another
// creation holds, not yet committed, is refused as a conflict within the
// creation's lock timeout instead of waiting for the other's whole
// resolution; nothing of it is stored, and the other creation commits.
func TestOverlappingCreationsConflict(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := t.Context()
	s := postgres.NewFleetStore(pool, 0)
	dep := uuid.NewString()
	head := func() fleet.Rollout {
		return fleet.Rollout{ID: uuid.NewString(), ApplicationID: "app", Action: lifecycle.RolloutUpgrade, State: lifecycle.RolloutRunning,
			Cause: lifecycle.RolloutCauseStarted, CreatedAt: time.Now().UTC(), CreatedBy: "t"}
	}
	member := fleet.RolloutMember{ClientID: "c", DeviceID: "d", DeploymentID: dep, Classification: fleet.ClassEligible,
		Status: lifecycle.MemberPending, Plan: &lifecycle.MemberPlan{}}
	fill := func(h fleet.Rollout, hold <-chan struct{}) func(write func([]fleet.RolloutMember) error) (fleet.Rollout, []lifecycle.Event, error) {
		return func(write func([]fleet.RolloutMember) error) (fleet.Rollout, []lifecycle.Event, error) {
			if err := write([]fleet.RolloutMember{member}); err != nil {
				return h, nil, err
			}
			<-hold
			h.Waves = []fleet.RolloutWave{{Index: 1, ResolvedSize: 1, State: fleet.WavePublishing}}
			h.DeadlineAt = h.CreatedAt.Add(time.Hour)
			return h, nil, nil
		}
	}
	first, release := head(), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() { firstDone <- s.InsertRollout(ctx, first, fill(first, release)) }()
	// The first creation's member is copied (its transaction idle after the COPY).
	require.Eventually(t, func() bool {
		var copied bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
WHERE state = 'idle in transaction' AND query ILIKE 'copy%rollout_members%')`).Scan(&copied))
		return copied
	}, 10*time.Second, 10*time.Millisecond)
	second := head()
	open := make(chan struct{})
	close(open)
	err := s.InsertRollout(ctx, second, fill(second, open))
	assert.Equal(t, lifecycle.ECONFLICT, lifecycle.ErrorCode(err), "%v", err)
	assert.Equal(t, fleet.ProblemRolloutMember, lifecycle.ErrorType(err))
	close(release)
	require.NoError(t, <-firstDone)
	var rollouts, members int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM rollouts), (SELECT count(*) FROM rollout_members)`).Scan(&rollouts, &members))
	assert.Equal(t, 1, rollouts, "the refused creation stored nothing")
	assert.Equal(t, 1, members)
}
