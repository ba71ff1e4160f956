package postgres_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/migrations"
)

// TestMigrationMirrorsRolloutTables keeps the triggers of migration 00009
// equal to the rollout and member transition tables in the code.
func TestMigrationMirrorsRolloutTables(t *testing.T) {
	b, err := migrations.FS.ReadFile("00009_rollouts.sql")
	require.NoError(t, err)
	sql := string(b)
	for _, tc := range []struct {
		trigger, want string
	}{
		{"rollouts_state_transition", lifecycle.RolloutTransitionsSQL()},
		{"rollout_members_status_transition", lifecycle.MemberTransitionsSQL()},
	} {
		assert.Equal(t, 1, strings.Count(sql, "IF NOT ("+tc.want+") THEN"),
			"migrations/00009_rollouts.sql: trigger %s must test exactly\n%s", tc.trigger, tc.want)
		assert.Contains(t, sql, "CONSTRAINT = '"+tc.trigger+"'")
	}
	assert.Equal(t, 2, strings.Count(sql, "IF NOT ("), "one transition test per trigger, no other")
}

// TestRolloutChecksListLifeCycleValues compares the CHECKs of the rollout
// tables, as the migrated database holds them, with the code's lists.
func TestRolloutChecksListLifeCycleValues(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	quoted := regexp.MustCompile(`'([^']*)'::text`)
	for _, tc := range []struct {
		constraint string
		want       []string
	}{
		{"rollouts_state_check", names(lifecycle.AllRolloutStates())},
		{"rollout_members_status_check", names(lifecycle.AllMemberStatuses())},
		{"rollout_members_reason_check", names(lifecycle.AllExclusionReasons())},
	} {
		var def string
		require.NoError(t, pool.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = $1`, tc.constraint).Scan(&def),
			"constraint %s", tc.constraint)
		var got []string
		for _, m := range quoted.FindAllStringSubmatch(def, -1) {
			got = append(got, m[1])
		}
		assert.Equal(t, tc.want, got, "%s = %s", tc.constraint, def)
	}
}

// TestRolloutTriggers moves a rollout's state and a member's status from
// every value to every value: the database allows exactly the table's moves.
func TestRolloutTriggers(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	insertRollout := func(state string) error {
		_, err := pool.Exec(ctx, `DELETE FROM rollouts; INSERT INTO rollouts (id, application_id, action, request, waves, state, cause, state_changed_at,
  deadline_at, created_by, created_at, updated_at) VALUES ('00000000-0000-0000-0000-0000000000a1', 'app', 'upgrade', '{}', '[]', '`+state+`', 'started', now(), now(), 't', now(), now())`)
		return err
	}
	for _, from := range lifecycle.AllRolloutStates() {
		for _, to := range lifecycle.AllRolloutStates() {
			require.NoError(t, insertRollout(string(from)))
			_, err := pool.Exec(ctx, `UPDATE rollouts SET state = $1`, string(to))
			if from == to || from.CanTransitionTo(to) {
				assert.NoError(t, err, "%s -> %s", from, to)
			} else {
				assert.ErrorContains(t, err, "is not a transition of the rollout life cycle", "%s -> %s", from, to)
			}
		}
	}
	require.NoError(t, insertRollout("running"))
	for _, from := range lifecycle.AllMemberStatuses() {
		for _, to := range lifecycle.AllMemberStatuses() {
			_, err := pool.Exec(ctx, `DELETE FROM rollout_members; INSERT INTO rollout_members (rollout_id, ord, application_id, install, client_id, device_id,
  classification, reason, status, active, updated_at) VALUES ('00000000-0000-0000-0000-0000000000a1', 0, 'app', false, 'c', 'd', 'eligible', NULL, '`+string(from)+`', false, now())`)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, `UPDATE rollout_members SET status = $1, reason = CASE WHEN $1 = 'excluded' THEN 'operator' END`, string(to))
			if from == to || from.CanTransitionTo(to) {
				assert.NoError(t, err, "%s -> %s", from, to)
			} else {
				assert.ErrorContains(t, err, "is not a transition of the member life cycle", "%s -> %s", from, to)
			}
		}
	}
}

// TestRolloutMembershipIsADatabaseFact: a deployment is an active member of
// at most one rollout, and a device the pending member of at most one
// install rollout of an application; an inactive member (ended rollout,
// excluded, removed) holds nothing.
func TestRolloutMembershipIsADatabaseFact(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO rollouts (id, application_id, action, request, waves, state, cause, state_changed_at, deadline_at, created_by, created_at, updated_at)
SELECT ('00000000-0000-0000-0000-00000000000'||n)::uuid, 'app', 'upgrade', '{}', '[]', 'running', 'started', now(), now(), 't', now(), now()
FROM generate_series(1, 4) n`)
	require.NoError(t, err)
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
