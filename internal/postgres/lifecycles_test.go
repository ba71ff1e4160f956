package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/migrations"
)

// TestMigrationMirrorsLifeCycleTables keeps the triggers of migration 00005
// equal to the revision, operation and step transition tables in the code:
// each trigger tests exactly the table's SQL rendering.
func TestMigrationMirrorsLifeCycleTables(t *testing.T) {
	migrationMirrors(t, "00005_lifecycle_tables.sql", []triggerTable{
		{"revisions_outcome_transition", lifecycle.OutcomeTransitionsSQL()},
		{"operations_state_transition", lifecycle.OperationTransitionsSQL()},
		{"operation_steps_state_transition", lifecycle.StepTransitionsSQL()},
	})
}

// triggerTable is a transition trigger and the SQL rendering of its table.
type triggerTable struct{ trigger, want string }

// migrationMirrors checks that migration file tests, in each of its
// triggers, exactly the SQL rendering of its table, and nothing else.
func migrationMirrors(t *testing.T, file string, cases []triggerTable) {
	t.Helper()
	b, err := migrations.FS.ReadFile(file)
	require.NoError(t, err)
	sql := string(b)
	for _, tc := range cases {
		assert.Equal(t, 1, strings.Count(sql, "IF NOT ("+tc.want+") THEN"),
			"migrations/%s: trigger %s must test exactly\n%s", file, tc.trigger, tc.want)
		assert.Contains(t, sql, "CONSTRAINT = '"+tc.trigger+"'")
	}
	assert.Equal(t, len(cases), strings.Count(sql, "IF NOT ("), "one transition test per trigger, no other")
}

// TestStateChecksListLifeCycleValues compares every state column's CHECK,
// as the migrated database holds it, with the states of its life cycle, in
// order.
func TestStateChecksListLifeCycleValues(t *testing.T) {
	t.Parallel()
	checksList(t, pgtest.New(t), []checkValues{
		{"deployments_state_check", names(lifecycle.AllStates())},
		{"revisions_outcome_check", names(lifecycle.AllOutcomes())},
		{"operations_state_check", names(lifecycle.AllOperationStates())},
		{"operation_steps_state_check", names(lifecycle.AllStepStates())},
	})
}

// checkValues is a CHECK constraint and the values it must list, in order.
type checkValues struct {
	constraint string
	want       []string
}

// checksList compares each constraint, as the database holds it, with the
// values it must list.
func checksList(t *testing.T, pool *pgxpool.Pool, cases []checkValues) {
	t.Helper()
	quoted := regexp.MustCompile(`'([^']*)'::text`)
	for _, tc := range cases {
		var def string
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = $1`, tc.constraint).Scan(&def),
			"constraint %s", tc.constraint)
		var got []string
		for _, m := range quoted.FindAllStringSubmatch(def, -1) {
			got = append(got, m[1])
		}
		assert.Equal(t, tc.want, got, "%s = %s", tc.constraint, def)
	}
}

func names[S ~string](states []S) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

// lifeCycleRows inserts what a revision, an operation and a step need to
// exist: an application version, a client, a device and a deployment.
const lifeCycleRows = `
INSERT INTO applications (id) VALUES ('app');
INSERT INTO application_versions (application_id, version, sort_key, name, digest, media_type, raw, document)
VALUES ('app', '1.0.0', '1.0.0', 'app', 'sha256:` + zeros + `', 'application/yaml', '', '{}');
INSERT INTO clients (id, status, manifest_version, manifest_json, manifest_etag, created_at, updated_at)
VALUES ('c1', 'accepted', 1, '', 'e', now(), now());
INSERT INTO devices (client_id, id, registered, capabilities, created_at, updated_at) VALUES ('c1', 'd1', true, '{}', now(), now());
INSERT INTO deployments (id, client_id, device_id, application_id, state, state_changed_at, revision, desired_since, created_at, updated_at)
VALUES ('00000000-0000-0000-0000-000000000001', 'c1', 'd1', 'app', 'pending', now(), 1, 1, now(), now());
INSERT INTO documents (deployment_id, digest, yaml, created_at)
VALUES ('00000000-0000-0000-0000-000000000001', 'sha256:` + zeros + `', 'x', now());
`

const zeros = "0000000000000000000000000000000000000000000000000000000000000000"

// lifeCycleCase is one life cycle's column, as a test moves it: insert a row
// in state from (an INSERT is not a move), then update it to another.
type lifeCycleCase struct {
	trigger string
	states  []string
	can     func(from, to string) bool
	setup   string // run first, without parameters ("" for none)
	insert  string // $1: the state
	update  string // $1: the new state
}

// TestLifeCycleTriggers moves each life-cycle column from every state to
// every state and checks that the database allows exactly the moves the
// table lists, plus writing the same value again (a no-op, not a move).
func TestLifeCycleTriggers(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, lifeCycleRows)
	require.NoError(t, err)

	const op = `'00000000-0000-0000-0000-0000000000aa'`
	const finished = `CASE WHEN $1 IN ('succeeded', 'failed', 'cancelled') THEN now() END`
	const insertOp = `INSERT INTO operations (id, deployment_id, type, state, from_version, to_version, parameters, profile_id, strategy,
    on_failure, step_timeout, requested_by, base_revision, deadline, created_at, updated_at, finished_at)
VALUES (` + op + `, '00000000-0000-0000-0000-000000000001', 'upgrade', $1, '1.0.0', '1.0.0', '{}', 'p', 'recreate',
    'halt', '1 minute', 'test', 1, now(), now(), now(), ` + finished + `)`
	cases := []lifeCycleCase{
		{
			trigger: "revisions_outcome_transition",
			states:  names(lifecycle.AllOutcomes()),
			can: func(from, to string) bool {
				return lifecycle.RevisionOutcome(from).CanTransitionTo(lifecycle.RevisionOutcome(to))
			},
			insert: `INSERT INTO revisions (deployment_id, n, application_id, version, profile_id, parameters, operation, outcome,
    components, digest, manifest_version, created_at)
VALUES ('00000000-0000-0000-0000-000000000001', 1, 'app', '1.0.0', 'p', '{}', 'install', $1, '{}', 'sha256:` + zeros + `', 1, now())`,
			update: `UPDATE revisions SET outcome = $1 WHERE n = 1`,
		},
		{
			trigger: "operations_state_transition",
			states:  names(lifecycle.AllOperationStates()),
			can: func(from, to string) bool {
				return lifecycle.OperationState(from).CanTransitionTo(lifecycle.OperationState(to))
			},
			insert: insertOp,
			update: `UPDATE operations SET state = $1, finished_at = ` + finished + ` WHERE id = ` + op,
		},
		{
			trigger: "operation_steps_state_transition",
			states:  names(lifecycle.AllStepStates()),
			can: func(from, to string) bool {
				return lifecycle.StepState(from).CanTransitionTo(lifecycle.StepState(to))
			},
			setup:  strings.ReplaceAll(insertOp, "$1", "'queued'"),
			insert: `INSERT INTO operation_steps (operation_id, n, version, state) VALUES (` + op + `, 1, '1.0.0', $1)`,
			update: `UPDATE operation_steps SET state = $1 WHERE n = 1`,
		},
	}
	lifeCycleTriggers(t, pool, cases)
}

// lifeCycleTriggers moves each case's column from every state to every
// state: the database allows exactly the moves the case's table lists (and
// writing the same value again), refusing the others with the case's
// trigger.
func lifeCycleTriggers(t *testing.T, pool *pgxpool.Pool, cases []lifeCycleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.trigger, func(t *testing.T) {
			for _, from := range tc.states {
				for _, to := range tc.states {
					err := moveRolledBack(t.Context(), t, pool, tc, from, to)
					if from == to || tc.can(from, to) {
						assert.NoError(t, err, "%s -> %s", from, to)
						continue
					}
					var pe *pgconn.PgError
					if assert.True(t, errors.As(err, &pe), "%s -> %s: want the trigger's refusal, got %v", from, to, err) {
						assert.Equal(t, "23514", pe.Code, "%s -> %s: check_violation", from, to)
						assert.Equal(t, tc.trigger, pe.ConstraintName, "%s -> %s", from, to)
					}
				}
			}
		})
	}
}

// moveRolledBack inserts a row in state from and updates it to to, in a
// transaction that is rolled back. It returns the update's error.
func moveRolledBack(ctx context.Context, t *testing.T, pool *pgxpool.Pool, tc lifeCycleCase, from, to string) error {
	t.Helper()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	if tc.setup != "" {
		_, err := tx.Exec(ctx, tc.setup)
		require.NoError(t, err, "setup")
	}
	_, err = tx.Exec(ctx, tc.insert, from)
	require.NoError(t, err, "insert in state %s", from)
	_, err = tx.Exec(ctx, tc.update, to)
	if err != nil {
		return fmt.Errorf("update %s -> %s: %w", from, to, err)
	}
	return nil
}
