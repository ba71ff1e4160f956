package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// TestAuditRowCommitsWithItsChange: the audit entry of a management call
// (access.Pending) is appended in the transaction of its change, and
// counts as written only once that transaction committed: a transaction
// that rolls back after appending it leaves no row, and the entry is left
// to the HTTP adapter; a committed one writes it once, with the status of
// the change and the change's time. Outside inTx, or outside a call,
// nothing is appended.
func TestAuditRowCommitsWithItsChange(t *testing.T) {
	pool := pgtest.New(t)
	store := postgres.NewAccessStore(pool)
	count := func(requestID string) int {
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_log WHERE request_id = $1`, requestID).Scan(&n))
		return n
	}
	pending := func(requestID string) (*access.Pending, context.Context) {
		p := access.NewPending(access.AuditEntry{Actor: "tok", Role: access.Admin, Action: "createToken", Method: "POST",
			Target: "/mgmt/v1/tokens", RequestID: requestID}, 201, 200)
		return p, access.WithPending(t.Context(), p)
	}
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

	p, ctx := pending("rolled-back")
	refused := errors.New("refused after the audit row was appended")
	err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		require.NoError(t, postgres.AuditChange(ctx, tx, at, true))
		return refused
	})
	require.ErrorIs(t, err, refused)
	assert.Zero(t, count("rolled-back"), "the row rolled back with its change")
	_, written := p.Written()
	assert.False(t, written, "left to the HTTP adapter")

	require.NoError(t, postgres.InTx(ctx, pool, func(tx pgx.Tx) error { return postgres.AuditChange(ctx, tx, at, true) }))
	status, written := p.Written()
	assert.True(t, written)
	assert.Equal(t, 201, status)
	require.NoError(t, postgres.InTx(ctx, pool, func(tx pgx.Tx) error { return postgres.AuditChange(ctx, tx, at, false) }))
	assert.Equal(t, 1, count("rolled-back"), "one row per call")
	es, err := store.Audit(t.Context(), access.AuditFilter{Action: "createToken"}, 0, 10)
	require.NoError(t, err)
	require.Len(t, es, 1)
	assert.Equal(t, at, es[0].At.UTC(), "at the change's time")
	assert.Equal(t, "success", es[0].Outcome)

	p, ctx = pending("plain")
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return postgres.AuditChange(ctx, tx, at, false) }))
	_, written = p.Written()
	assert.False(t, written, "a transaction not begun by inTx takes no entry")
	assert.Zero(t, count("plain"))
	require.NoError(t, postgres.InTx(t.Context(), pool, func(tx pgx.Tx) error { return postgres.AuditChange(t.Context(), tx, at, false) }),
		"outside a call: nothing to append")

	// A store call of a change: right after it returns, the change and its
	// audit row are both there, committed together, before the caller
	// (the HTTP adapter) does anything more.
	p, ctx = pending("store")
	id, secret := access.NewSecret()
	require.NoError(t, store.InsertToken(ctx, access.Token{ID: id, Name: "ci", Role: access.Viewer, CreatedAt: at}, access.Hash(secret)))
	var both bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM api_tokens k JOIN audit_log a ON a.request_id = 'store' AND a.at = k.created_at
AND a.status = 201 WHERE k.id = $1)`, id).Scan(&both))
	assert.True(t, both)
	_, written = p.Written()
	assert.True(t, written)
}
