package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// AccessStore is the PostgreSQL implementation of access.Store.
type AccessStore struct{ pool *pgxpool.Pool }

var _ access.Store = (*AccessStore)(nil)

// NewAccessStore returns an access store over pool.
func NewAccessStore(pool *pgxpool.Pool) *AccessStore { return &AccessStore{pool: pool} }

const sqlTokenColumns = `id, name, role, secret_hash, created_at, created_by, expires_at, revoked_at, last_used_at`

func scanToken(r pgx.Row) (access.Token, string, error) {
	var t access.Token
	var role, hash string
	var expires, revoked, used *time.Time
	if err := r.Scan(&t.ID, &t.Name, &role, &hash, &t.CreatedAt, &t.CreatedBy, &expires, &revoked, &used); err != nil {
		return t, "", err
	}
	t.Role = access.Role(role)
	for _, p := range []struct {
		src *time.Time
		dst *time.Time
	}{{expires, &t.ExpiresAt}, {revoked, &t.RevokedAt}, {used, &t.LastUsedAt}} {
		if p.src != nil {
			*p.dst = *p.src
		}
	}
	return t, hash, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// InsertToken implements access.Store.
func (s *AccessStore) InsertToken(ctx context.Context, t access.Token, hash string) error {
	return translate(inTx(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO api_tokens (id, name, role, secret_hash, created_at, created_by, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			t.ID, t.Name, string(t.Role), hash, t.CreatedAt, t.CreatedBy, nullTime(t.ExpiresAt)); err != nil {
			return err
		}
		if err := appendEvent(ctx, tx, t.CreatedAt, lifecycle.Ref{Kind: lifecycle.SubjectToken, ID: t.ID},
			lifecycle.TokenCreatedBody{Name: t.Name, Role: string(t.Role), ExpiresAt: nullTime(t.ExpiresAt)}); err != nil {
			return err
		}
		return auditChange(ctx, tx, t.CreatedAt, true)
	}))
}

// PutBootstrap implements access.Store.
func (s *AccessStore) PutBootstrap(ctx context.Context, prevHash, hash string, now time.Time, e access.AuditEntry) error {
	return beginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var tag pgconn.CommandTag
		var err error
		if prevHash == "" {
			tag, err = tx.Exec(ctx, `INSERT INTO api_tokens (id, name, role, secret_hash, created_at, created_by)
VALUES ($1, 'bootstrap admin (configuration)', 'admin', $2, $3, 'configuration') ON CONFLICT (id) DO NOTHING`, access.BootstrapID, hash, now)
		} else {
			tag, err = tx.Exec(ctx, `UPDATE api_tokens SET secret_hash = $2, role = 'admin', created_at = $3, created_by = 'configuration',
expires_at = NULL, revoked_at = NULL, last_used_at = NULL WHERE id = $1 AND secret_hash = $4`, access.BootstrapID, hash, now, prevHash)
		}
		if err != nil {
			return translate(err)
		}
		if tag.RowsAffected() != 1 {
			return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "conflict", Message: "The bootstrap token changed concurrently."}
		}
		return appendAudit(ctx, tx, e)
	})
}

// Token implements access.Store.
func (s *AccessStore) Token(ctx context.Context, id string) (access.Token, string, error) {
	t, hash, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+sqlTokenColumns+` FROM api_tokens WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, "", notFound("There is no token %s.", id)
	}
	return t, hash, translate(err)
}

// Tokens implements access.Store.
func (s *AccessStore) Tokens(ctx context.Context, after string, limit int) ([]access.Token, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+sqlTokenColumns+` FROM api_tokens WHERE id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, translate(err)
	}
	ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (access.Token, error) {
		t, _, err := scanToken(r)
		return t, err
	})
	return ts, translate(err)
}

// RevokeToken implements access.Store.
func (s *AccessStore) RevokeToken(ctx context.Context, id string, at time.Time) (access.Token, error) {
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var name string
		err := tx.QueryRow(ctx, `UPDATE api_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL RETURNING name`, id, at).Scan(&name)
		if errors.Is(err, pgx.ErrNoRows) { // none, or revoked already: no change
			return nil
		}
		if err != nil {
			return err
		}
		if err := appendEvent(ctx, tx, at, lifecycle.Ref{Kind: lifecycle.SubjectToken, ID: id}, lifecycle.TokenRevokedBody{Name: name}); err != nil {
			return err
		}
		return auditChange(ctx, tx, at, false)
	})
	if err != nil {
		return access.Token{}, translate(err)
	}
	t, _, err := s.Token(ctx, id)
	return t, err
}

// TouchToken implements access.Store.
func (s *AccessStore) TouchToken(ctx context.Context, id string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = $2 WHERE id = $1`, id, at)
	return translate(err)
}

// AppendAudit implements access.Store.
func (s *AccessStore) AppendAudit(ctx context.Context, e access.AuditEntry) error {
	return appendAudit(ctx, s.pool, e)
}

func appendAudit(ctx context.Context, db execer, e access.AuditEntry) error {
	detail := []byte("{}")
	if len(e.Detail) > 0 {
		var err error
		if detail, err = json.Marshal(e.Detail); err != nil {
			return err
		}
	}
	_, err := db.Exec(ctx, `INSERT INTO audit_log (at, actor, role, action, method, target, status, outcome, request_id, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb)`,
		e.At, e.Actor, string(e.Role), e.Action, e.Method, e.Target, e.Status, e.Outcome, e.RequestID, string(detail))
	return translate(err)
}

// sqlAppendAudits appends audit entries with one statement, their ids in
// the order of the arrays.
const sqlAppendAudits = `
INSERT INTO audit_log (at, actor, role, action, method, target, status, outcome, request_id, detail)
SELECT v.at, v.actor, v.role, v.action, v.method, v.target, v.status, v.outcome, v.request_id, v.detail::jsonb
FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[], $8::text[], $9::text[], $10::text[])
    WITH ORDINALITY AS v(at, actor, role, action, method, target, status, outcome, request_id, detail, ord)
ORDER BY v.ord`

// appendAudits appends es, in order, with one statement (appendAudit for
// one entry): the entries of a batch of coalesced calls.
func appendAudits(ctx context.Context, db execer, es []access.AuditEntry) error {
	switch len(es) {
	case 0:
		return nil
	case 1:
		return appendAudit(ctx, db, es[0])
	}
	var a cols
	for _, e := range es {
		detail := []byte("{}")
		if len(e.Detail) > 0 {
			var err error
			if detail, err = json.Marshal(e.Detail); err != nil {
				return err
			}
		}
		a.add(e.At, e.Actor, string(e.Role), e.Action, e.Method, e.Target, int32(e.Status), e.Outcome, e.RequestID, string(detail))
	}
	_, err := db.Exec(ctx, sqlAppendAudits, a.args()...)
	return translate(err)
}

// Audit implements access.Store.
func (s *AccessStore) Audit(ctx context.Context, f access.AuditFilter, before int64, limit int) ([]access.AuditEntry, error) {
	var w where
	if f.Actor != "" {
		w.add("actor = $?", f.Actor)
	}
	if f.Action != "" {
		w.add("action = $?", f.Action)
	}
	if f.Outcome != "" {
		w.add("outcome = $?", f.Outcome)
	}
	if f.Target != "" {
		// The resource's own path or one below it; the LIKE is a prefix
		// match (its wildcards in the path escaped) that the index
		// audit_log_target (text_pattern_ops) serves.
		w.add(`(target = $? OR target LIKE $? ESCAPE '\')`, f.Target, likeEscaper.Replace(f.Target)+"/%")
	}
	if !f.Since.IsZero() {
		w.add("at >= $?", f.Since)
	}
	if !f.Until.IsZero() {
		w.add("at < $?", f.Until)
	}
	if before > 0 {
		w.add("id < $?", before)
	}
	rows, err := s.pool.Query(ctx, `SELECT id, at, actor, role, action, method, target, status, outcome, request_id, detail::text FROM audit_log WHERE `+
		w.sql()+` ORDER BY id DESC LIMIT `+w.limit(limit), w.args...)
	if err != nil {
		return nil, translate(err)
	}
	es, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (access.AuditEntry, error) {
		var e access.AuditEntry
		var role, detail string
		if err := r.Scan(&e.ID, &e.At, &e.Actor, &role, &e.Action, &e.Method, &e.Target, &e.Status, &e.Outcome, &e.RequestID, &detail); err != nil {
			return e, err
		}
		e.Role = access.Role(role)
		return e, json.Unmarshal([]byte(detail), &e.Detail)
	})
	return es, translate(err)
}

// IdempotencyTTL is how long an Idempotency-Key is remembered.
const IdempotencyTTL = 24 * time.Hour

// idempotencyAbandoned is how long a reservation may stay unanswered before
// it is taken to be abandoned (its server process died mid-request).
const idempotencyAbandoned = 5 * time.Minute

// ReserveIdempotent claims actor's key for a request with hash. When it
// was free (or expired, or abandoned) it returns reserved true; otherwise it
// returns what is remembered for the key.
func (s *AccessStore) ReserveIdempotent(ctx context.Context, actor, key, hash string, now time.Time) (access.IdempotentResponse, bool, error) {
	now = now.Truncate(time.Microsecond) // as stored: the reservation's ownership token
	var reserved bool
	err := s.pool.QueryRow(ctx, `
INSERT INTO idempotency_keys (actor, key, request_hash, status, location, body, created_at) VALUES ($1, $2, $3, 0, '', '', $4)
ON CONFLICT (actor, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, status = 0, location = '', body = '', created_at = EXCLUDED.created_at
WHERE idempotency_keys.created_at <= $4 - make_interval(secs => $5)
   OR (idempotency_keys.status = 0 AND idempotency_keys.created_at <= $4 - make_interval(secs => $6))
RETURNING true`, actor, key, hash, now, IdempotencyTTL.Seconds(), idempotencyAbandoned.Seconds()).Scan(&reserved)
	if err == nil {
		return access.IdempotentResponse{}, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return access.IdempotentResponse{}, false, translate(err)
	}
	var r access.IdempotentResponse
	err = s.pool.QueryRow(ctx, `SELECT request_hash, status, location, etag, body, created_at <= $3::timestamptz - make_interval(secs => $4::float8)
FROM idempotency_keys WHERE actor = $1 AND key = $2`, actor, key, now, idempotencyAbandoned.Seconds()).
		Scan(&r.RequestHash, &r.Status, &r.Location, &r.ETag, &r.Body, &r.Abandoned)
	return r, false, translate(err)
}

// CompleteIdempotent remembers the response to the key reserved at
// reservedAt, running or made (a reservation another request took over is
// left alone).
func (s *AccessStore) CompleteIdempotent(ctx context.Context, actor, key string, reservedAt time.Time, r access.IdempotentResponse) error {
	_, err := s.pool.Exec(ctx, `UPDATE idempotency_keys SET status = $3, location = $4, body = $5, etag = $8
WHERE actor = $1 AND key = $2 AND request_hash = $6 AND status IN (0, 1) AND created_at = $7`,
		actor, key, r.Status, r.Location, r.Body, r.RequestHash, reservedAt.Truncate(time.Microsecond), r.ETag)
	return translate(err)
}

// ReleaseIdempotent frees the key reserved at reservedAt when its request
// failed unexpectedly, so that it can be retried with the same key; a
// reservation whose change was made (access.IdempotentMade) stays.
func (s *AccessStore) ReleaseIdempotent(ctx context.Context, actor, key string, reservedAt time.Time) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE actor = $1 AND key = $2 AND status = 0 AND created_at = $3`,
		actor, key, reservedAt.Truncate(time.Microsecond))
	return translate(err)
}

// InsertTicket implements access.Store. The call's audit entry is written in
// the same transaction.
func (s *AccessStore) InsertTicket(ctx context.Context, hash, tokenID string, at, expires time.Time) error {
	return translate(inTx(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM stream_tickets WHERE expires_at <= $1`, at); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO stream_tickets (hash, token_id, created_at, expires_at) VALUES ($1, $2, $3, $4)`,
			hash, tokenID, at, expires); err != nil {
			return err
		}
		return auditChange(ctx, tx, at, true)
	}))
}

// TakeTicket implements access.Store: the delete makes a ticket single-use
// even when two replicas redeem it at once.
func (s *AccessStore) TakeTicket(ctx context.Context, hash string, now time.Time) (string, error) {
	var tokenID string
	var expires time.Time
	err := s.pool.QueryRow(ctx, `DELETE FROM stream_tickets WHERE hash = $1 RETURNING token_id, expires_at`, hash).Scan(&tokenID, &expires)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !now.Before(expires)) {
		return "", &lifecycle.Error{Code: lifecycle.ENOTFOUND, Type: "not-found", Message: "no such stream ticket"}
	}
	if err != nil {
		return "", translate(err)
	}
	return tokenID, nil
}
