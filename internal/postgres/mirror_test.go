package postgres_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/migrations"
)

// TestMigrationMirrorsTransitionTable keeps the database's CHECK constraint
// on deployment_history equal to the transition table in the code (as
// migration 00023 last wrote it), and the state column's CHECK equal to the
// list of states. TestHistoryCheckIsTheTransitionTable compares what the
// migrated database accepts.
func TestMigrationMirrorsTransitionTable(t *testing.T) {
	b, err := migrations.FS.ReadFile("00023_history_check.sql")
	require.NoError(t, err)
	up, _, ok := strings.Cut(string(b), "-- +goose Down")
	require.True(t, ok)
	assert.True(t, strings.Contains(up, "CHECK (from_state IS NULL AND to_state = 'pending' OR "+lifecycle.TransitionsSQL()+") NOT VALID"),
		"migrations/00023_history_check.sql must check exactly\n%s\n(the output of lifecycle.TransitionsSQL)", lifecycle.TransitionsSQL())
	b, err = migrations.FS.ReadFile("00002_fleet.sql")
	require.NoError(t, err)
	sql := string(b)
	for _, s := range lifecycle.AllStates() {
		assert.Contains(t, sql, "'"+string(s)+"'", "state %s missing from the deployments.state CHECK", s)
	}
}

// TestHistoryCheckIsTheTransitionTable evaluates the CHECK of
// deployment_history, as the migrated database holds it, for every pair of
// states, NULL, the empty string and an unknown name: it must accept
// exactly a NULL from_state into pending and the pairs of the transition
// table (a CHECK that answers NULL accepts: such an answer counts as one).
func TestHistoryCheckIsTheTransitionTable(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	var def string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = 'deployment_history'::regclass AND conname = 'deployment_history_transition'`).Scan(&def))
	expr, ok := strings.CutPrefix(def, "CHECK ")
	require.True(t, ok, def)
	names := []string{"", "bogus", "Pending", "pending "}
	for _, s := range lifecycle.AllStates() {
		names = append(names, string(s))
	}
	var froms []*string
	var tos []string
	for _, to := range names {
		froms, tos = append(froms, nil), append(tos, to)
		for _, from := range names {
			froms, tos = append(froms, &from), append(tos, to)
		}
	}
	rows, err := pool.Query(t.Context(), `SELECT v.from_state, v.to_state, coalesce(`+expr+`, true)
FROM unnest($1::text[], $2::text[]) AS v (from_state, to_state)`, froms, tos)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		var from *string
		var to string
		var accepted bool
		require.NoError(t, rows.Scan(&from, &to, &accepted))
		want := from == nil && to == string(lifecycle.StatePending) ||
			from != nil && lifecycle.CanTransition(lifecycle.State(*from), lifecycle.State(to))
		name := "NULL"
		if from != nil {
			name = fmt.Sprintf("%q", *from)
		}
		assert.Equal(t, want, accepted, "from %s to %q", name, to)
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(tos), n)
}
