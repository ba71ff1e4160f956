package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// copyRow inserts, into table, one copy of its row where column key =
// $1 for each patch (a JSON object of the columns to change), in one
// statement.
const copyRow = `INSERT INTO %[1]s SELECT (jsonb_populate_record(NULL::%[1]s, to_jsonb(x) || p.patch)).*
FROM %[1]s x, unnest($2::jsonb[]) AS p (patch) WHERE x.%[2]s = $1`

// hex64 is a digest's 64 hex digits, all c.
func hex64(c byte) string { return strings.Repeat(string(c), 64) }

const missingUUID = "00000000-0000-4000-8000-0000000000ff"

// TestStatementForeignKeys: migration 00022's statement triggers keep what
// the foreign keys they replace kept. A row naming a missing parent is
// refused with the key's SQLSTATE and name, also among rows whose parents
// exist, and nothing of the statement stays; rows with parents go in; key
// columns never change; deleting parents cascades, sets null or is refused
// as the keys' actions did; a delete of a parent waits for a transaction
// that inserted a child of it, and then sees the child.
func TestStatementForeignKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newPubFleet(t)
	d := f.deploy(t, "c", "d1")
	f.deploy(t, "c", "d2")
	var op string
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT id::text FROM operations WHERE deployment_id = $1`, d.ID).Scan(&op))
	closed := `{"to_version": 9, "from_version": 8}`
	cases := []struct {
		table, key, keyValue string
		fresh                string // a patch making a copy that is not a duplicate
		orphan               string // a patch naming a missing parent
		constraint           string
	}{
		{"revisions", "deployment_id", d.ID, `{"n": 7}`, `{"n": 8, "deployment_id": "` + missingUUID + `"}`, "revisions_deployment_id_fkey"},
		{"revisions", "deployment_id", d.ID, `{"n": 7}`, `{"n": 8, "operation_id": "` + missingUUID + `"}`, "revisions_operation_id_fkey"},
		{"revisions", "deployment_id", d.ID, `{"n": 7}`, `{"n": 8, "version": "9.9.9"}`, "revisions_application_id_version_fkey"},
		{"operations", "deployment_id", d.ID, `{"id": "00000000-0000-4000-8000-0000000000a1", "state": "succeeded", "finished_at": "2026-12-01T12:00:00Z"}`,
			`{"id": "00000000-0000-4000-8000-0000000000a2", "state": "succeeded", "finished_at": "2026-12-01T12:00:00Z", "deployment_id": "` + missingUUID + `"}`,
			"operations_deployment_id_fkey"},
		{"operation_steps", "operation_id", op, `{"n": 7}`, `{"n": 8, "operation_id": "` + missingUUID + `"}`, "operation_steps_operation_id_fkey"},
		{"deployment_history", "deployment_id", d.ID, `{"id": 1000}`, `{"id": 1001, "deployment_id": "` + missingUUID + `"}`,
			"deployment_history_deployment_id_fkey"},
		{"documents", "deployment_id", d.ID, `{"digest": "sha256:` + hex64('a') + `"}`,
			`{"digest": "sha256:` + hex64('b') + `", "deployment_id": "` + missingUUID + `"}`, "documents_deployment_id_fkey"},
		{"manifest_entries", "deployment_id", d.ID, closed, `{"to_version": 11, "from_version": 10, "client_id": "nobody"}`, "manifest_entries_client_id_fkey"},
		{"manifest_entries", "deployment_id", d.ID, closed, `{"to_version": 11, "from_version": 10, "digest": "sha256:` + hex64('c') + `"}`,
			"manifest_entries_deployment_id_digest_fkey"},
	}
	for _, tc := range cases {
		count := func() (n int) {
			require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM `+tc.table).Scan(&n))
			return n
		}
		// insert runs the copy in a transaction, committed only when commit
		// is true; it returns the rows inserted.
		insert := func(commit bool, patches ...string) (int64, error) {
			tx, err := f.pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			tag, err := tx.Exec(ctx, fmt.Sprintf(copyRow, tc.table, tc.key), tc.keyValue, patches)
			if err != nil || !commit {
				return tag.RowsAffected(), err
			}
			return tag.RowsAffected(), tx.Commit(ctx)
		}
		before := count()
		_, err := insert(true, tc.fresh, tc.orphan)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, "%s: a row of a missing parent among rows with parents", tc.constraint)
		assert.Equal(t, "23503", pe.Code, tc.constraint)
		assert.Equal(t, tc.constraint, pe.ConstraintName)
		assert.Equal(t, tc.table, pe.TableName, tc.constraint)
		assert.Equal(t, before, count(), "%s: nothing of the statement stays", tc.constraint)
		n, err := insert(false, tc.fresh)
		require.NoError(t, err, "%s: a row whose parents exist", tc.constraint)
		assert.Equal(t, int64(1), n, tc.constraint)
	}

	for _, q := range []string{
		`UPDATE deployments SET id = '` + missingUUID + `' WHERE id = $1`,
		`UPDATE revisions SET deployment_id = '` + missingUUID + `' WHERE deployment_id = $1`,
		`UPDATE revisions SET version = '2.0.0' WHERE deployment_id = $1`,
		`UPDATE documents SET digest = 'sha256:` + hex64('d') + `' WHERE deployment_id = $1`,
		`UPDATE manifest_entries SET deployment_id = '` + missingUUID + `' WHERE deployment_id = $1`,
		`UPDATE operation_steps SET operation_id = '` + missingUUID + `' WHERE operation_id IN (SELECT id FROM operations WHERE deployment_id = $1)`,
		`UPDATE operations SET id = '` + missingUUID + `' WHERE deployment_id = $1`,
		`UPDATE clients SET id = 'c9' WHERE id = 'c' AND $1 <> ''`,
		`UPDATE application_versions SET version = '9.0.0' WHERE version = '1.0.0' AND $1 <> ''`,
	} {
		_, err := f.pool.Exec(ctx, q, d.ID)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, "%s: a key column does not change", q)
		assert.Equal(t, "23503", pe.Code, q)
	}
	_, err := f.pool.Exec(ctx, `UPDATE revisions SET outcome = outcome, operation_id = operation_id WHERE deployment_id = $1`, d.ID)
	require.NoError(t, err, "other columns change, keys may be set to what they are")

	refused := func(q string, constraint string, args ...any) {
		t.Helper()
		_, err := f.pool.Exec(ctx, q, args...)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, q)
		assert.Equal(t, "23503", pe.Code, q)
		assert.Equal(t, constraint, pe.ConstraintName, q)
	}
	refused(`DELETE FROM application_versions WHERE version = '1.0.0'`, "revisions_application_id_version_fkey")

	rows := func(id string) map[string]int {
		n := map[string]int{}
		for _, q := range []string{"revisions", "operations", "deployment_history", "documents", "manifest_entries", "status_reports"} {
			var c int
			require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM `+q+` WHERE deployment_id = $1`, id).Scan(&c))
			n[q] = c
		}
		var c int
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM operation_steps s JOIN operations o ON o.id = s.operation_id
WHERE o.deployment_id = $1`, id).Scan(&c))
		n["operation_steps"] = c
		return n
	}
	f.installed(t, "c", d.ID)
	for table, n := range rows(d.ID) {
		require.Positive(t, n, "%s: the deployment has rows in every child", table)
	}
	_, err = f.pool.Exec(ctx, `DELETE FROM operations WHERE deployment_id = $1`, d.ID)
	require.NoError(t, err)
	var withOp int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM revisions WHERE deployment_id = $1 AND operation_id IS NOT NULL`, d.ID).Scan(&withOp))
	assert.Zero(t, withOp, "a deleted operation's revisions keep no operation (SET NULL)")
	assert.Zero(t, rows(d.ID)["operation_steps"], "a deleted operation's steps go with it")
	_, err = f.pool.Exec(ctx, `DELETE FROM deployments WHERE id = $1`, d.ID)
	require.NoError(t, err)
	for table, n := range rows(d.ID) {
		assert.Zero(t, n, "%s: a deleted deployment's rows go with it", table)
	}

	// A delete of an application version waits for the transaction
	// inserting a revision of it, then refuses.
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, fmt.Sprintf(copyRow, "revisions", "n"), 1, []string{`{"n": 7, "version": "2.0.0"}`})
	require.NoError(t, err)
	deleted := make(chan error, 1)
	go func() {
		_, err := f.pool.Exec(ctx, `DELETE FROM application_versions WHERE version = '2.0.0'`)
		deleted <- err
	}()
	waitForLockWait(t, f.pool)
	select {
	case err := <-deleted:
		t.Fatalf("the delete did not wait for the inserting transaction: %v", err)
	default:
	}
	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-deleted:
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, "revisions_application_id_version_fkey", pe.ConstraintName)
	case <-time.After(30 * time.Second):
		t.Fatal("the delete did not end once the inserting transaction committed")
	}
}

// waitForLockWait waits, bounded, until a session of pool's database waits
// for a lock.
func waitForLockWait(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no session waits for a lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMigrateStatementForeignKeys: migration 00022 rolls back to the
// foreign keys it replaced, which refuse what its triggers refuse.
func TestMigrateStatementForeignKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := open(t, pgtest.EmptyURL(t))
	require.NoError(t, postgres.MigrateTo(ctx, pool, 22))
	require.NoError(t, postgres.MigrateDownTo(ctx, pool, 21))
	var keys int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND conname = ANY($1)`, []string{
		"revisions_deployment_id_fkey", "revisions_operation_id_fkey",
		"revisions_application_id_version_fkey", "operations_deployment_id_fkey", "operation_steps_operation_id_fkey",
		"deployment_history_deployment_id_fkey", "documents_deployment_id_fkey", "manifest_entries_client_id_fkey",
		"manifest_entries_deployment_id_digest_fkey"}).Scan(&keys))
	assert.Equal(t, 9, keys)
	var triggers int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname LIKE '%\_refs' OR tgname LIKE '%\_key\_fixed'
  OR tgname LIKE '%\_delete\_children' OR tgname LIKE '%\_in\_use'`).Scan(&triggers))
	assert.Zero(t, triggers)
	_, err := pool.Exec(ctx, `INSERT INTO operation_steps (operation_id, n, version, state) VALUES ($1, 1, '1.0.0', 'pending')`, missingUUID)
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe))
	assert.Equal(t, "operation_steps_operation_id_fkey", pe.ConstraintName)
	require.NoError(t, postgres.MigrateTo(ctx, pool, 22), "and forward again")
}
