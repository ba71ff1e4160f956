package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestAuditAppendNeverFailsOnCallerText: whatever a caller sent (a NUL, bytes
// that are not UTF-8) ends up in the audit log, its unstorable characters
// replaced by U+FFFD, rather than making the append fail.
func TestAuditAppendNeverFailsOnCallerText(t *testing.T) {
	store := postgres.NewAccessStore(pgtest.New(t))
	svc := access.NewService(store, time.Now)
	ctx := t.Context()
	require.NoError(t, svc.Record(ctx, access.AuditEntry{Actor: "anonymous", Action: "revoke\x00Token", Method: "DELETE",
		Target: "/mgmt/v1/tokens/a\x00b\xff", Status: 401, Outcome: "failure", RequestID: "req-nul",
		Detail: map[string]any{"reason": "bad \x00 token", "k\x00": []any{"x\x00", map[string]any{"y": "\xfe"}}, "n": 3}}))
	es, err := store.Audit(ctx, access.AuditFilter{}, 0, 10)
	require.NoError(t, err)
	require.Len(t, es, 1)
	e := es[0]
	assert.Equal(t, "/mgmt/v1/tokens/a\uFFFDb\uFFFD", e.Target)
	assert.Equal(t, "revoke\uFFFDToken", e.Action)
	assert.Equal(t, "bad \uFFFD token", e.Detail["reason"])
	assert.Equal(t, []any{"x\uFFFD", map[string]any{"y": "\uFFFD"}}, e.Detail["k\uFFFD"])
	assert.EqualValues(t, 3, e.Detail["n"])
}

// TestUnreachableDatabaseIsUnavailable: a database that cannot be reached,
// or a connection the server terminated, is EUNAVAILABLE (503) at the store
// boundary, not an internal error.
func TestUnreachableDatabaseIsUnavailable(t *testing.T) {
	ctx := t.Context()
	nowhere, err := pgxpool.New(ctx, "postgres://wfm@127.0.0.1:1/wfm?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(nowhere.Close)
	_, _, err = postgres.NewAccessStore(nowhere).Token(ctx, "abc")
	assert.Equal(t, lifecycle.EUNAVAILABLE, lifecycle.ErrorCode(err), "%v", err)
	assert.Equal(t, "unavailable", lifecycle.ErrorType(err))

	// A connection the server terminates under the pool (57P01, or the
	// connection found closed).
	url := pgtest.URL(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(one.Close)
	var pid int
	require.NoError(t, one.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	other, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(other.Close)
	var ok bool
	require.NoError(t, other.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok))
	require.True(t, ok)
	_, _, err = postgres.NewAccessStore(one).Token(ctx, "abc")
	assert.Equal(t, lifecycle.EUNAVAILABLE, lifecycle.ErrorCode(err), "%v", err)
}
