package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestBootstrapTokenRevocationSurvivesRestart: a revoked bootstrap token
// stays revoked when the server starts again with the same configured
// secret (the outcome asks the caller to warn); a new secret replaces it,
// the old one is refused, and the replacement is in the audit log.
func TestBootstrapTokenRevocationSurvivesRestart(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	svc := access.NewService(postgres.NewAccessStore(pool), func() time.Time { return now })
	const first, second = "first-bootstrap-secret-0123", "second-bootstrap-secret-4567"

	out, err := svc.Bootstrap(ctx, first)
	require.NoError(t, err)
	assert.Equal(t, access.BootstrapCreated, out)
	_, err = svc.Authenticate(ctx, "Bearer "+first)
	require.NoError(t, err)

	out, err = svc.Bootstrap(ctx, first) // a restart, nothing changed
	require.NoError(t, err)
	assert.Equal(t, access.BootstrapUnchanged, out)

	_, err = svc.Revoke(ctx, access.BootstrapID)
	require.NoError(t, err)
	now = now.Add(time.Hour)
	out, err = svc.Bootstrap(ctx, first) // a restart with the same secret
	require.NoError(t, err)
	assert.Equal(t, access.BootstrapRevoked, out, "the caller warns: the configured token stays revoked")
	_, err = svc.Authenticate(ctx, "Bearer "+first)
	assert.Equal(t, lifecycle.EUNAUTHORIZED, lifecycle.ErrorCode(err), "a restart does not revive a revoked bootstrap token")
	tok, err := svc.Token(ctx, access.BootstrapID)
	require.NoError(t, err)
	assert.False(t, tok.RevokedAt.IsZero())

	now = now.Add(time.Hour)
	out, err = svc.Bootstrap(ctx, second) // the operator configures a new secret
	require.NoError(t, err)
	assert.Equal(t, access.BootstrapReplaced, out)
	p, err := svc.Authenticate(ctx, "Bearer "+second)
	require.NoError(t, err)
	assert.Equal(t, access.Admin, p.Role)
	_, err = svc.Authenticate(ctx, "Bearer "+first)
	assert.Equal(t, lifecycle.EUNAUTHORIZED, lifecycle.ErrorCode(err), "the old secret is refused")

	es, _, err := svc.Audit(ctx, access.AuditFilter{Actor: access.SystemActor}, 10, "")
	require.NoError(t, err)
	require.Len(t, es, 2, "installing and replacing the bootstrap token are audited")
	assert.Equal(t, "replaceBootstrapToken", es[0].Action)
	assert.Equal(t, now, es[0].At.UTC())
	assert.Equal(t, "success", es[0].Outcome)
	assert.Equal(t, true, es[0].Detail["previousRevoked"])
	assert.Equal(t, "createBootstrapToken", es[1].Action)

	// Replacing a token that was not revoked works the same way.
	now = now.Add(time.Hour)
	out, err = svc.Bootstrap(ctx, first)
	require.NoError(t, err)
	assert.Equal(t, access.BootstrapReplaced, out)
	_, err = svc.Authenticate(ctx, "Bearer "+second)
	assert.Equal(t, lifecycle.EUNAUTHORIZED, lifecycle.ErrorCode(err))
	_, err = svc.Authenticate(ctx, "Bearer "+first)
	assert.NoError(t, err)
}

// TestTokenRevocationAcrossProcesses: a process remembers a token it read
// for access.TokenCacheTTL. A revocation takes effect at once in the
// process that revoked it; in another, when it forgets the token (the
// server does so for every token.revoked event it reads) or at the latest
// once the TTL passed, never later. A bootstrap secret that another
// process configured anew works at once.
func TestTokenRevocationAcrossProcesses(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a := access.NewService(postgres.NewAccessStore(pool), clock) // the process that revokes
	b := access.NewService(postgres.NewAccessStore(pool), clock) // another process
	_, err := a.Bootstrap(ctx, "bootstrap-secret-0123456789")
	require.NoError(t, err)
	admin, err := a.Authenticate(ctx, "Bearer bootstrap-secret-0123456789")
	require.NoError(t, err)

	for _, forget := range []bool{true, false} {
		_, secret, err := a.CreateToken(ctx, admin, "ops", access.Operator, "")
		require.NoError(t, err)
		p, err := b.Authenticate(ctx, "Bearer "+secret) // b remembers it
		require.NoError(t, err)
		_, err = a.Revoke(ctx, p.TokenID)
		require.NoError(t, err)
		_, err = a.Authenticate(ctx, "Bearer "+secret)
		assert.Equal(t, lifecycle.EUNAUTHORIZED, lifecycle.ErrorCode(err), "refused at once by the process that revoked it")
		_, err = b.Authenticate(ctx, "Bearer "+secret)
		assert.NoError(t, err, "another process within the TTL, before it read the event, still takes it")
		if forget {
			b.Forget(p.TokenID)
		} else {
			now = now.Add(access.TokenCacheTTL)
		}
		_, err = b.Authenticate(ctx, "Bearer "+secret)
		assert.Equal(t, lifecycle.EUNAUTHORIZED, lifecycle.ErrorCode(err), "refused once forgotten (%v) or after the TTL", forget)
	}

	// A new bootstrap secret configured by a's restart works in b at once
	// (b remembers the old one), and the old one no longer once b read
	// the new.
	out, err := a.Bootstrap(ctx, "bootstrap-secret-new-987654")
	require.NoError(t, err)
	require.Equal(t, access.BootstrapReplaced, out)
	_, err = b.Authenticate(ctx, "Bearer bootstrap-secret-new-987654")
	assert.NoError(t, err)
	_, err = b.Authenticate(ctx, "Bearer bootstrap-secret-0123456789")
	assert.Equal(t, lifecycle.EUNAUTHORIZED, lifecycle.ErrorCode(err))
}

// heldTokenStore holds one Token read of id, after it read the row, until
// release is closed (read is closed then).
type heldTokenStore struct {
	*postgres.AccessStore
	id            string
	read, release chan struct{}
}

func (s *heldTokenStore) Token(ctx context.Context, id string) (access.Token, string, error) {
	t, h, err := s.AccessStore.Token(ctx, id)
	if id == s.id && s.read != nil {
		r := s.read
		s.read = nil
		close(r)
		<-s.release
	}
	return t, h, err
}

// TestRevocationDuringACall: a call that read its token before the
// revocation committed is answered as before it; it does not leave its
// read behind, so that every call after the revocation, in the process
// that revoked it, is refused. The same for a token.revoked event observed
// (another process's revocation). (Found by review: the call's read was
// remembered after the revocation forgot the token.)
func TestRevocationDuringACall(t *testing.T) {
	for _, byEvent := range []bool{false, true} {
		ctx := t.Context()
		pool := pgtest.New(t)
		st := &heldTokenStore{AccessStore: postgres.NewAccessStore(pool)}
		svc := access.NewService(st, time.Now)
		other := access.NewService(postgres.NewAccessStore(pool), time.Now)
		_, err := svc.Bootstrap(ctx, "bootstrap-secret-0123456789")
		require.NoError(t, err)
		admin, err := svc.Authenticate(ctx, "Bearer bootstrap-secret-0123456789")
		require.NoError(t, err)
		tok, secret, err := svc.CreateToken(ctx, admin, "ops", access.Operator, "")
		require.NoError(t, err)

		st.id, st.read, st.release = tok.ID, make(chan struct{}), make(chan struct{})
		read := st.read
		done := make(chan error, 1)
		go func() { _, err := svc.Authenticate(ctx, "Bearer "+secret); done <- err }() // a call in flight
		<-read
		if byEvent {
			_, err = other.Revoke(ctx, tok.ID)
			require.NoError(t, err)
			svc.ObserveEvent(lifecycle.Event{Type: lifecycle.EventTokenRevoked, Subject: lifecycle.Ref{Kind: lifecycle.SubjectToken, ID: tok.ID}})
		} else {
			_, err = svc.Revoke(ctx, tok.ID)
			require.NoError(t, err)
		}
		close(st.release)
		require.NoError(t, <-done, "the call in flight began before the revocation")
		_, err = svc.Authenticate(ctx, "Bearer "+secret)
		assert.Equal(t, lifecycle.EUNAUTHORIZED, lifecycle.ErrorCode(err), "a call after the revocation (by event: %v)", byEvent)
	}
}
