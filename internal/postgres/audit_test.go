package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
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
