package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestMigrationMirrorsRolloutTables keeps the triggers of migration 00009
// equal to the rollout and member transition tables in the code.
func TestMigrationMirrorsRolloutTables(t *testing.T) {
	migrationMirrors(t, "00009_rollouts.sql", []triggerTable{
		{"rollouts_state_transition", lifecycle.RolloutTransitionsSQL()},
		{"rollout_members_status_transition", lifecycle.MemberTransitionsSQL()},
	})
}

// TestRolloutChecksListLifeCycleValues compares the CHECKs of the rollout
// tables, as the migrated database holds them, with the code's lists.
func TestRolloutChecksListLifeCycleValues(t *testing.T) {
	t.Parallel()
	checksList(t, pgtest.New(t), []checkValues{
		{"rollouts_state_check", names(lifecycle.AllRolloutStates())},
		{"rollout_members_status_check", names(lifecycle.AllMemberStatuses())},
		{"rollout_members_reason_check", names(lifecycle.AllExclusionReasons())},
	})
}

// TestRolloutTriggers moves a rollout's state and a member's status from
// every value to every value: the database allows exactly the table's moves.
func TestRolloutTriggers(t *testing.T) {
	t.Parallel()
	const insertRollout = `INSERT INTO rollouts (id, application_id, action, request, waves, state, cause, state_changed_at,
  deadline_at, created_by, created_at, updated_at) VALUES ('00000000-0000-0000-0000-0000000000a1', 'app', 'upgrade', '{}', '[]', $1, 'started',
  now(), now(), 't', now(), now())`
	lifeCycleTriggers(t, pgtest.New(t), []lifeCycleCase{
		{
			trigger: "rollouts_state_transition",
			states:  names(lifecycle.AllRolloutStates()),
			can: func(from, to string) bool {
				return lifecycle.RolloutState(from).CanTransitionTo(lifecycle.RolloutState(to))
			},
			insert: insertRollout,
			update: `UPDATE rollouts SET state = $1`,
		},
		{
			trigger: "rollout_members_status_transition",
			states:  names(lifecycle.AllMemberStatuses()),
			can: func(from, to string) bool {
				return lifecycle.MemberStatus(from).CanTransitionTo(lifecycle.MemberStatus(to))
			},
			setup: strings.ReplaceAll(insertRollout, "$1", "'running'"),
			insert: `INSERT INTO rollout_members (rollout_id, ord, application_id, install, client_id, device_id, classification, reason, status,
  active, updated_at) VALUES ('00000000-0000-0000-0000-0000000000a1', 0, 'app', false, 'c', 'd', 'eligible', NULL, $1, false, now())`,
			update: `UPDATE rollout_members SET status = $1, reason = CASE WHEN $1 = 'excluded' THEN 'operator' END`,
		},
	})
}

// TestRolloutMembershipIsADatabaseFact: a deployment is an active member of
// at most one rollout, and a device the pending member of at most one
// install rollout of an application; an inactive member (ended rollout,
// excluded, removed) holds nothing.
func TestRolloutMembershipIsADatabaseFact(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	insertRollouts(t, pool, 4)
	member := func(rollout int, install bool, deployment *string, active bool) error {
		_, err := pool.Exec(ctx, `INSERT INTO rollout_members (rollout_id, ord, application_id, install, client_id, device_id, deployment_id,
  classification, status, active, updated_at) VALUES (('00000000-0000-0000-0000-00000000000'||$1::int)::uuid, 0, 'app', $2, 'c', 'd', $3::uuid,
  'eligible', 'pending', $4, now())`, rollout, install, deployment, active)
		return err
	}
	dep := "00000000-0000-0000-0000-0000000000d1"
	require.NoError(t, member(1, false, &dep, true))
	assert.ErrorContains(t, member(2, false, &dep, true), "rollout_members_active_deployment")
	require.NoError(t, member(2, false, &dep, false), "an inactive member holds nothing")
	require.NoError(t, member(3, true, nil, true))
	assert.ErrorContains(t, member(4, true, nil, true), "rollout_members_active_install")
}

// TestRolloutMembersReferTheirRollout: migration 00019's statement triggers
// keep what the foreign key kept: no member of a missing rollout (in a
// statement of many rows too), a member's rollout and a rollout's id never
// change, deleting a rollout deletes its members.
func TestRolloutMembersReferTheirRollout(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	insertRollouts(t, pool, 2)
	members := func(rollouts ...int) error {
		_, err := pool.Exec(ctx, `INSERT INTO rollout_members (rollout_id, ord, application_id, install, client_id, device_id,
  classification, status, active, updated_at)
SELECT ('00000000-0000-0000-0000-00000000000'||r)::uuid, ord::int - 1, 'app', false, 'c', 'd'||ord, 'eligible', 'pending', false, now()
FROM unnest($1::int[]) WITH ORDINALITY AS x(r, ord)`, rollouts)
		return err
	}
	count := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM rollout_members`).Scan(&n))
		return n
	}
	err := members(1, 1, 3)
	require.Error(t, err, "a member of no rollout, among members of one")
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "23503", pe.Code)
	assert.Equal(t, "rollout_members_rollout_id_fkey", pe.ConstraintName)
	assert.Zero(t, count(), "nothing of the statement stays")
	require.NoError(t, members(1, 1, 2))
	_, err = pool.Exec(ctx, `UPDATE rollout_members SET rollout_id = '00000000-0000-0000-0000-000000000002' WHERE ord = 0`)
	assert.ErrorContains(t, err, "do not change")
	_, err = pool.Exec(ctx, `UPDATE rollouts SET id = '00000000-0000-0000-0000-000000000003' WHERE id = '00000000-0000-0000-0000-000000000002'`)
	assert.ErrorContains(t, err, "do not change", "a rollout's id does not change either")
	_, err = pool.Exec(ctx, `UPDATE rollout_members SET status = 'in-progress' WHERE ord = 0`)
	require.NoError(t, err, "other columns change")
	_, err = pool.Exec(ctx, `DELETE FROM rollouts WHERE id = '00000000-0000-0000-0000-000000000001'`)
	require.NoError(t, err)
	assert.Equal(t, 1, count(), "the deleted rollout's members went with it")
}

// TestMigrateMemberPlaces: migration 00019 turns each member's stored wave
// into its place among the eligible members (the waves then follow from
// the places), and back when rolled back; 00020 counts them by wave.
func TestMigrateMemberPlaces(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := open(t, pgtest.EmptyURL(t))
	require.NoError(t, postgres.MigrateTo(ctx, pool, 17))
	_, err := pool.Exec(ctx, `INSERT INTO rollouts (id, application_id, action, request, waves, state, cause, state_changed_at,
  deadline_at, created_by, created_at, updated_at) VALUES ('00000000-0000-0000-0000-0000000000a1', 'app', 'upgrade', '{}',
  '[{"ResolvedSize": 1}, {"ResolvedSize": 2}, {"ResolvedSize": 2}]', 'running', 'started', now(), now(), 't', now(), now())`)
	require.NoError(t, err)
	// ord: 0 eligible wave 0; 1 excluded; 2, 3 wave 1; 4 excluded; 5, 6 wave 2.
	_, err = pool.Exec(ctx, `INSERT INTO rollout_members (rollout_id, ord, application_id, install, client_id, device_id,
  classification, reason, status, wave, active, updated_at)
SELECT '00000000-0000-0000-0000-0000000000a1', ord::int - 1, 'app', false, 'c', 'd'||ord, CASE WHEN w IS NULL THEN 'excluded' ELSE 'eligible' END,
  CASE WHEN w IS NULL THEN 'busy' END, CASE WHEN w IS NULL THEN 'excluded' ELSE 'pending' END, w, false, now()
FROM unnest('{0,NULL,1,1,NULL,2,2}'::int[]) WITH ORDINALITY AS x(w, ord)`)
	require.NoError(t, err)
	column := func(name string) []*int {
		rows, err := pool.Query(ctx, `SELECT `+name+` FROM rollout_members ORDER BY ord`)
		require.NoError(t, err)
		vs, err := pgx.CollectRows(rows, pgx.RowTo[*int])
		require.NoError(t, err)
		return vs
	}
	p := func(v int) *int { return &v }
	require.NoError(t, postgres.MigrateTo(ctx, pool, 19))
	assert.Equal(t, []*int{p(0), nil, p(1), p(2), nil, p(3), p(4)}, column("place"))
	// 00020 counts the members of the rollouts there are.
	require.NoError(t, postgres.MigrateTo(ctx, pool, 20))
	rows, err := pool.Query(ctx, `SELECT wave || ' ' || status || ' ' || sum(n) FROM rollout_count_deltas GROUP BY wave, status ORDER BY wave, status`)
	require.NoError(t, err)
	counts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{"-1 excluded 2", "0 pending 1", "1 pending 2", "2 pending 2"}, counts)
	require.NoError(t, postgres.MigrateDownTo(ctx, pool, 17))
	assert.Equal(t, []*int{p(0), nil, p(1), p(1), nil, p(2), p(2)}, column("wave"))
}

// TestWaveStartsInSQL: the wave SQL derives from a member's place and its
// rollout's wave starts (width_bucket with a last bound no place reaches,
// migration 00020) is lifecycle.WaveAt's, and wavePlaces gives each wave's
// places; single waves and waves of size 0 included.
func TestWaveStartsInSQL(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	for _, sizes := range [][]int{{5}, {1, 4}, {1, 0, 3, 2}, {0, 2}, {2, 0}, {1, 1, 1}} {
		starts := lifecycle.WaveStarts(sizes)
		total := 0
		for _, n := range sizes {
			total += n
		}
		for p := range total {
			var got int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT width_bucket($1::int, $2::int[] || 2147483647)`, p, starts).Scan(&got))
			want := lifecycle.WaveAt(starts, p)
			assert.Equal(t, want, got, "sizes %v place %d", sizes, p)
			lo, hi := postgres.WavePlaces(starts, want)
			assert.True(t, lo <= p && p < hi, "sizes %v: place %d in wave %d's places [%d, %d)", sizes, p, want, lo, hi)
		}
		for k, n := range sizes {
			lo, hi := postgres.WavePlaces(starts, k)
			if k == len(sizes)-1 {
				assert.Equal(t, total-lo, n, "sizes %v: the last wave starts at %d", sizes, lo)
			} else {
				assert.Equal(t, n, hi-lo, "sizes %v wave %d", sizes, k)
			}
		}
		lo, hi := postgres.WavePlaces(starts, len(sizes))
		assert.Equal(t, lo, hi, "sizes %v: no wave after the last", sizes)
	}
}

// insertRollouts inserts n running rollouts, ids
// 00000000-0000-0000-0000-00000000000<i> for i from 1 (n < 10).
func insertRollouts(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO rollouts (id, application_id, action, request, waves, state, cause, state_changed_at, deadline_at, created_by, created_at, updated_at)
SELECT ('00000000-0000-0000-0000-00000000000'||n)::uuid, 'app', 'upgrade', '{}', '[]', 'running', 'started', now(), now(), 't', now(), now()
FROM generate_series(1, $1::int) n`, n)
	require.NoError(t, err)
}
