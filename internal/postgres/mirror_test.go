package postgres_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/migrations"
)

// TestMigrationMirrorsTransitionTable keeps the database's CHECK constraint
// on deployment_history equal to the transition table in the code, and the
// state column's CHECK equal to the list of states.
func TestMigrationMirrorsTransitionTable(t *testing.T) {
	b, err := migrations.FS.ReadFile("00002_fleet.sql")
	require.NoError(t, err)
	sql := string(b)
	assert.True(t, strings.Contains(sql, lifecycle.TransitionsSQL()),
		"migrations/00002_fleet.sql must contain exactly\n%s\n(the output of lifecycle.TransitionsSQL)", lifecycle.TransitionsSQL())
	for _, s := range lifecycle.AllStates() {
		assert.Contains(t, sql, "'"+string(s)+"'", "state %s missing from the deployments.state CHECK", s)
	}
}
