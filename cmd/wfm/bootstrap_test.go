package main

import (
	"bytes"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestRestartKeepsRevokedBootstrapTokenRevoked: the start-up step warns and
// leaves a revoked bootstrap token revoked; a new configured secret works.
func TestRestartKeepsRevokedBootstrapTokenRevoked(t *testing.T) {
	ctx := t.Context()
	acc := access.NewService(postgres.NewAccessStore(pgtest.New(t)), time.Now)
	c := config{adminToken: "configured-secret-0123456789"}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	require.NoError(t, bootstrapAdmin(ctx, c, true, acc, io.Discard, log))
	_, err := acc.Revoke(ctx, access.BootstrapID)
	require.NoError(t, err)

	require.NoError(t, bootstrapAdmin(ctx, c, true, acc, io.Discard, log)) // the restart
	assert.Contains(t, logs.String(), "level=WARN")
	assert.Contains(t, logs.String(), "stays revoked")
	_, err = acc.Authenticate(ctx, "Bearer "+c.adminToken)
	assert.Error(t, err, "still revoked")

	c.adminToken = "another-secret-0123456789"
	require.NoError(t, bootstrapAdmin(ctx, c, true, acc, io.Discard, log))
	_, err = acc.Authenticate(ctx, "Bearer "+c.adminToken)
	assert.NoError(t, err, "a new secret replaces the revoked token")
}
