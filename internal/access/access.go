// Package access decides who may use the management API: bearer tokens with
// roles (viewer < operator < admin), stored only as hashes, and the
// append-only audit log of what they did.
package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/page"
)

// Role is what a token may do.
type Role string

// Roles, each allowing everything the previous one does.
const (
	Viewer   Role = "viewer"   // reads
	Operator Role = "operator" // also changes the catalog and deployments
	Admin    Role = "admin"    // also tokens, clients, the audit log, break-glass overrides
)

func (r Role) rank() int {
	switch r {
	case Viewer:
		return 1
	case Operator:
		return 2
	case Admin:
		return 3
	}
	return 0
}

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r.rank() > 0 }

// Allows reports whether a token of role r may do what needs role need.
func (r Role) Allows(need Role) bool { return r.rank() >= need.rank() && need.Valid() }

// EventVisibility is which events a token of role r may read: an admin
// every event, a viewer or operator those of lifecycle.VisibilityViewer
// (as they may read the fleet but not tokens or clients).
func (r Role) EventVisibility() lifecycle.Visibility {
	if r == Admin {
		return lifecycle.VisibilityAdmin
	}
	return lifecycle.VisibilityViewer
}

// BootstrapID is the id of the admin token that comes from configuration.
const BootstrapID = "bootstrap"

// Token is an API token (never its secret).
type Token struct {
	ID         string
	Name       string
	Role       Role
	CreatedAt  time.Time
	CreatedBy  string
	ExpiresAt  time.Time // zero: never
	RevokedAt  time.Time // zero: not revoked
	LastUsedAt time.Time
}

// Principal is who calls: the token that authenticated the request.
type Principal struct {
	TokenID string
	Name    string
	Role    Role
}

// Anonymous is the principal of a request without a valid token.
var Anonymous = Principal{TokenID: "anonymous"}

// secret layout: "wfm_" + id (16 base32 chars) + "_" + secret (52 base32 chars, 256 bits).
const prefix = "wfm_"

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewSecret returns a fresh token id and its bearer secret.
func NewSecret() (id, secret string) {
	var idb [10]byte
	var sb [32]byte
	_, _ = rand.Read(idb[:])
	_, _ = rand.Read(sb[:])
	id = strings.ToLower(b32.EncodeToString(idb[:]))
	return id, prefix + id + "_" + strings.ToLower(b32.EncodeToString(sb[:]))
}

// Hash is what is stored of a secret. The secret carries 256 random bits, so
// a fast hash is enough: there is nothing to brute-force.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// parseBearer splits an Authorization header into the token id and the
// whole secret. The bootstrap token may have any shape (it comes from
// configuration); it is recognised by hash, under BootstrapID.
func parseBearer(header string) (id, secret string, ok bool) {
	scheme, secret, found := strings.Cut(strings.TrimSpace(header), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", "", false
	}
	secret = strings.TrimSpace(secret)
	if secret == "" || len(secret) > 512 {
		return "", "", false
	}
	if rest, ok := strings.CutPrefix(secret, prefix); ok {
		// An id that is not storable text names no token (and must not
		// reach the database as a lookup key).
		if id, _, ok := strings.Cut(rest, "_"); ok && id != "" && storable(id) == id {
			return id, secret, true
		}
	}
	return BootstrapID, secret, true
}

// AuditEntry is one line of the audit log.
type AuditEntry struct {
	ID        int64
	At        time.Time
	Actor     string // token id, or "anonymous"
	Role      Role
	Action    string // operation id, or "" when the route was not reached
	Method    string
	Target    string // request path
	Status    int
	Outcome   string // success | failure
	RequestID string
	Detail    map[string]any
}

// AuditFilter selects audit entries.
type AuditFilter struct {
	Actor, Action, Outcome string
	Since, Until           time.Time
	// TargetKind and TargetID (both or neither) select the calls addressed
	// to one resource; Service.Audit resolves them into Target
	// (AuditTargetPath).
	TargetKind, TargetID string
	// Target, when set, selects the entries whose target is this path or
	// a path below it ("<Target>/…").
	Target string
}

// Store is what access needs from storage.
type Store interface {
	// InsertToken stores a token with the hash of its secret.
	InsertToken(ctx context.Context, t Token, hash string) error
	// PutBootstrap installs the admin token from configuration with hash:
	// a new one when prevHash is "", otherwise in place of the stored one
	// whose hash is prevHash (not revoked, as of now). It appends e to the
	// audit log in the same transaction. Returns ECONFLICT if the stored
	// token is not the one expected (another server process changed it).
	PutBootstrap(ctx context.Context, prevHash, hash string, now time.Time, e AuditEntry) error
	// Token returns a token and its hash. Returns ENOTFOUND if there is none.
	Token(ctx context.Context, id string) (Token, string, error)
	// Tokens returns up to limit tokens with ids after after.
	Tokens(ctx context.Context, after string, limit int) ([]Token, error)
	// RevokeToken revokes a token (once) and returns it. Returns ENOTFOUND
	// if there is none.
	RevokeToken(ctx context.Context, id string, at time.Time) (Token, error)
	// TouchToken records a use of the token.
	TouchToken(ctx context.Context, id string, at time.Time) error
	// AppendAudit appends one entry.
	AppendAudit(ctx context.Context, e AuditEntry) error
	// InsertTicket stores a stream ticket's hash for token tokenID, issued at
	// at and valid until expires, and deletes expired tickets.
	InsertTicket(ctx context.Context, hash, tokenID string, at, expires time.Time) error
	// TakeTicket deletes the ticket of hash and returns its token id.
	// Returns ENOTFOUND if there is none or it expired at now.
	TakeTicket(ctx context.Context, hash string, now time.Time) (string, error)
	// Audit returns up to limit entries matching f with ids below before
	// (0: from the newest), newest first.
	Audit(ctx context.Context, f AuditFilter, before int64, limit int) ([]AuditEntry, error)
}

// Service authenticates and authorizes management calls and keeps the audit log.
type Service struct {
	store Store
	now   func() time.Time

	mu     sync.Mutex
	tokens map[string]cachedToken // by id: tokens read from the store (Authenticate)
	// forgets counts Forget calls: a read that began before one is not
	// remembered (it may hold what the forgotten change replaced).
	forgets uint64
}

// cachedToken is a token as the store returned it, with its hash, and when.
type cachedToken struct {
	t    Token
	hash string
	read time.Time
}

// TokenCacheTTL is how long Authenticate trusts a token it read from the
// store without reading it again. A call's token is otherwise one read per
// call (a round trip, and a tenth of a deployment creation's database
// work). A revocation takes effect at once in the process that revoked the
// token (Revoke), in the others when they read its token.revoked event
// (Forget, within the event feed's delay) and at the latest after this
// long; an expiry takes effect at its instant (checked at every call).
const TokenCacheTTL = time.Second

// NewService returns the access service.
func NewService(store Store, now func() time.Time) *Service {
	return &Service{store: store, now: now, tokens: map[string]cachedToken{}}
}

// Forget drops what the service remembers of token id: the next call with
// it reads it from the store. The server calls it for every token.revoked
// event, which is how another process's revocation reaches this one.
func (s *Service) Forget(id string) {
	s.mu.Lock()
	delete(s.tokens, id)
	s.forgets++
	s.mu.Unlock()
}

// ObserveEvent forgets the token of a token.revoked event (the event
// feed's observer): a revocation made by another server process.
func (s *Service) ObserveEvent(e lifecycle.Event) {
	if e.Type == lifecycle.EventTokenRevoked {
		s.Forget(e.Subject.ID)
	}
}

// token returns token id and its hash: as read at most TokenCacheTTL ago,
// unless fresh, else from the store (and remembered). cached says whether
// it was not read now. Returns ENOTFOUND if there is none.
func (s *Service) token(ctx context.Context, id string, fresh bool) (t Token, hash string, cached bool, err error) {
	now := s.now()
	s.mu.Lock()
	c, ok := s.tokens[id]
	forgets := s.forgets
	s.mu.Unlock()
	if !fresh && ok && now.Sub(c.read) < TokenCacheTTL && !now.Before(c.read) {
		return c.t, c.hash, true, nil
	}
	if t, hash, err = s.store.Token(ctx, id); err != nil {
		if lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND {
			s.Forget(id)
		}
		return t, hash, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forgets != forgets {
		// Something was forgotten while this read was under way (a
		// revocation that committed after it, perhaps): what it read is
		// used by this call, not remembered.
		return t, hash, false, nil
	}
	if len(s.tokens) >= maxCachedTokens {
		for id, c := range s.tokens {
			if now.Sub(c.read) >= TokenCacheTTL || now.Before(c.read) {
				delete(s.tokens, id)
			}
		}
	}
	s.tokens[id] = cachedToken{t: t, hash: hash, read: now}
	return t, hash, false, nil
}

// maxCachedTokens is the size from which remembering a token first drops
// the entries too old to be used (the others are at most a second old).
const maxCachedTokens = 256

// SystemActor is the audit actor of what the server does by itself (not on
// a request), such as installing the bootstrap token from configuration:
// the actor its events name too (lifecycle.ActorScheduler), one spelling
// of the server wherever an actor is recorded.
const SystemActor = lifecycle.ActorScheduler

// BootstrapOutcome is what Bootstrap did.
type BootstrapOutcome int

// What Bootstrap can do.
const (
	// BootstrapCreated: there was no bootstrap token; it was installed.
	BootstrapCreated BootstrapOutcome = iota + 1
	// BootstrapUnchanged: the configured secret is the stored one.
	BootstrapUnchanged
	// BootstrapRevoked: the configured secret is that of the stored token,
	// which was revoked; it stays revoked (a restart must not undo a
	// revocation). The caller should warn: configure a new secret to get a
	// working bootstrap token again.
	BootstrapRevoked
	// BootstrapReplaced: the configured secret is a new one; it replaced the
	// stored token (revoked or not), whose secret no longer works.
	BootstrapReplaced
)

// decideBootstrap is the rule for the configured secret's hash given the
// stored bootstrap token (found false: none).
func decideBootstrap(found bool, stored Token, storedHash, hash string) BootstrapOutcome {
	switch {
	case !found:
		return BootstrapCreated
	case subtle.ConstantTimeCompare([]byte(storedHash), []byte(hash)) != 1:
		return BootstrapReplaced
	case !stored.RevokedAt.IsZero():
		return BootstrapRevoked
	}
	return BootstrapUnchanged
}

// Bootstrap installs the admin token from configuration, so a fresh server
// is usable, or replaces the stored one when the configured secret changed.
// A revoked bootstrap token stays revoked while its secret stays configured.
// Installing and replacing are audited (actor SystemActor).
//
// Returns EINVALID if secret is shorter than 16 characters.
func (s *Service) Bootstrap(ctx context.Context, secret string) (BootstrapOutcome, error) {
	if len(secret) < 16 {
		return 0, &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-configuration", Message: "The bootstrap admin token must be at least 16 characters."}
	}
	hash := Hash(secret)
	var err error
	for range 3 { // another server process may be installing it at the same moment
		stored, storedHash, lookErr := s.store.Token(ctx, BootstrapID)
		found := lookErr == nil
		if lookErr != nil && lifecycle.ErrorCode(lookErr) != lifecycle.ENOTFOUND {
			return 0, lookErr
		}
		out := decideBootstrap(found, stored, storedHash, hash)
		if out == BootstrapUnchanged || out == BootstrapRevoked {
			return out, nil
		}
		now := s.now().UTC()
		e := AuditEntry{At: now, Actor: SystemActor, Action: "createBootstrapToken", Target: "/mgmt/v1/tokens/" + BootstrapID,
			Outcome: "success", Detail: map[string]any{"reason": "the bootstrap admin token was installed from configuration"}}
		if out == BootstrapReplaced {
			e.Action = "replaceBootstrapToken"
			e.Detail = map[string]any{"reason": "the configured bootstrap admin token changed; the previous secret no longer works",
				"previousRevoked": !stored.RevokedAt.IsZero()}
		}
		err = s.store.PutBootstrap(ctx, storedHash, hash, now, e)
		s.Forget(BootstrapID)
		if lifecycle.ErrorCode(err) == lifecycle.ECONFLICT {
			continue
		}
		if err != nil {
			return 0, err
		}
		return out, nil
	}
	return 0, err
}

func unauthorized(msg string) error {
	return &lifecycle.Error{Code: lifecycle.EUNAUTHORIZED, Type: "unauthorized", Message: msg}
}

// Authenticate returns the principal of an Authorization header.
//
// Returns EUNAUTHORIZED (type "unauthorized") when the header is missing or
// malformed, or the token is unknown, wrong, expired or revoked; the message
// says which, without revealing whether a token id exists.
func (s *Service) Authenticate(ctx context.Context, header string) (Principal, error) {
	if strings.TrimSpace(header) == "" {
		return Anonymous, unauthorized("This operation needs an API token: send Authorization: Bearer <token>.")
	}
	id, secret, ok := parseBearer(header)
	if !ok {
		return Anonymous, unauthorized("The Authorization header must be \"Bearer <token>\".")
	}
	t, err := s.match(ctx, id, secret)
	if err != nil {
		return Anonymous, err
	}
	now := s.now()
	switch {
	case !t.RevokedAt.IsZero():
		return Anonymous, unauthorized("The API token was revoked.")
	case !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt):
		return Anonymous, unauthorized("The API token expired at " + t.ExpiresAt.UTC().Format(time.RFC3339) + ".")
	}
	if now.Sub(t.LastUsedAt) > time.Minute { // at most one write a minute per token
		if s.store.TouchToken(ctx, t.ID, now.UTC()) == nil {
			s.mu.Lock()
			if c, ok := s.tokens[t.ID]; ok {
				c.t.LastUsedAt = now
				s.tokens[t.ID] = c
			}
			s.mu.Unlock()
		}
	}
	return Principal{TokenID: t.ID, Name: t.Name, Role: t.Role}, nil
}

// match finds the token a secret belongs to: the one its id names, or else
// the bootstrap token (configured secrets may have any shape, including
// that of a generated token).
func (s *Service) match(ctx context.Context, id, secret string) (Token, error) {
	ids := []string{id}
	if id != BootstrapID {
		ids = append(ids, BootstrapID)
	}
	want := []byte(Hash(secret))
	for _, id := range ids {
		t, hash, cached, err := s.token(ctx, id, false)
		if err == nil && cached && subtle.ConstantTimeCompare([]byte(hash), want) != 1 {
			// The secret may be one that replaced the remembered one (a
			// bootstrap token configured anew): read it again.
			t, hash, _, err = s.token(ctx, id, true)
		}
		if lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND {
			continue
		}
		if err != nil {
			return Token{}, err
		}
		if subtle.ConstantTimeCompare([]byte(hash), want) == 1 {
			return t, nil
		}
	}
	return Token{}, unauthorized("The API token is not valid.")
}

// Authorize checks that p may do what needs role need.
//
// Returns EFORBIDDEN (type "forbidden") naming the role needed.
func Authorize(p Principal, need Role) error {
	if p.Role.Allows(need) {
		return nil
	}
	return &lifecycle.Error{Code: lifecycle.EFORBIDDEN, Type: "forbidden",
		Message: fmt.Sprintf("This operation needs the %s role; the token %s has the %s role.", need, p.TokenID, p.Role),
		Extra:   map[string]any{"requiredRole": string(need), "tokenRole": string(p.Role)}}
}

// MaxTokenName bounds token names.
const MaxTokenName = 128

// CreateToken creates a token of role for actor and returns it with its
// secret, which is never stored or shown again.
//
// Returns EINVALID for an empty or long name, an unknown role or a bad
// expiresIn (a duration within lifecycle.DurationRangeOf(DurationTokenExpiry);
// "" means never).
func (s *Service) CreateToken(ctx context.Context, actor Principal, name string, role Role, expiresIn string) (Token, string, error) {
	var fields []lifecycle.FieldError
	if name = strings.TrimSpace(name); name == "" || len(name) > MaxTokenName {
		fields = append(fields, lifecycle.FieldError{Pointer: "/name", Detail: "1 to 128 characters"})
	}
	if !role.Valid() {
		fields = append(fields, lifecycle.FieldError{Pointer: "/role", Detail: "viewer, operator or admin"})
	}
	now := s.now().UTC()
	t := Token{Name: name, Role: role, CreatedAt: now, CreatedBy: actor.TokenID}
	if expiresIn != "" {
		if d, fe := lifecycle.ParseDuration(lifecycle.DurationTokenExpiry, expiresIn, "/expiresIn"); fe != nil {
			fields = append(fields, *fe)
		} else {
			t.ExpiresAt = now.Add(d)
		}
	}
	if len(fields) > 0 {
		return Token{}, "", &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-request", Message: "The token request is not valid.", Fields: fields}
	}
	id, secret := NewSecret()
	t.ID = id
	if err := s.store.InsertToken(ctx, t, Hash(secret)); err != nil {
		return Token{}, "", err
	}
	return t, secret, nil
}

// Token returns one token. Returns ENOTFOUND if there is none.
func (s *Service) Token(ctx context.Context, id string) (Token, error) {
	t, _, err := s.store.Token(ctx, id)
	return t, err
}

// Tokens returns a page of tokens and the next cursor.
func (s *Service) Tokens(ctx context.Context, limit int, cursor string) ([]Token, string, error) {
	limit, after, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	ts, err := s.store.Tokens(ctx, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	ts, next := page.Trim(ts, limit, func(x Token) string { return x.ID })
	return ts, next, nil
}

// Revoke revokes a token. Returns ENOTFOUND if there is none.
func (s *Service) Revoke(ctx context.Context, id string) (Token, error) {
	t, err := s.store.RevokeToken(ctx, id, s.now().UTC())
	s.Forget(id) // whatever the outcome: the next call reads the store
	return t, err
}

// Record appends an audit entry, stamped now. What a caller sent never makes
// the append fail: text PostgreSQL cannot store (a NUL, bytes that are not
// UTF-8) is replaced by U+FFFD in every string of the entry.
func (s *Service) Record(ctx context.Context, e AuditEntry) error {
	e.At = s.now().UTC()
	return s.store.AppendAudit(ctx, storableEntry(e))
}

// storableEntry returns e with every string made storable.
func storableEntry(e AuditEntry) AuditEntry {
	e.Actor, e.Action, e.Method, e.Target = storable(e.Actor), storable(e.Action), storable(e.Method), storable(CanonicalTarget(e.Target))
	e.Outcome, e.RequestID, e.Role = storable(e.Outcome), storable(e.RequestID), Role(storable(string(e.Role)))
	if e.Detail != nil {
		e.Detail = storableValue(e.Detail).(map[string]any)
	}
	return e
}

// storable replaces invalid UTF-8 and NUL characters with U+FFFD.
func storable(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// storableValue applies storable to the strings (and member names) of a
// JSON-like value.
func storableValue(v any) any {
	switch x := v.(type) {
	case string:
		return storable(x)
	case []string:
		out := make([]string, len(x))
		for i, s := range x {
			out[i] = storable(s)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = storableValue(e)
		}
		return out
	case map[string]string:
		out := make(map[string]string, len(x))
		for k, e := range x {
			out[storable(k)] = storable(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[storable(k)] = storableValue(e)
		}
		return out
	}
	return v
}

// Audit returns a page of audit entries, newest first, and the next cursor.
//
// Returns EINVALID for a bad limit or cursor, or a target filter that
// AuditTargetPath refuses.
func (s *Service) Audit(ctx context.Context, f AuditFilter, limit int, cursor string) ([]AuditEntry, string, error) {
	limit, after, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	if f.Target, err = AuditTargetPath(f.TargetKind, f.TargetID); err != nil {
		return nil, "", err
	}
	var before int64
	if after != "" {
		if _, err := fmt.Sscan(after, &before); err != nil || before <= 0 {
			return nil, "", page.BadCursor()
		}
	}
	es, err := s.store.Audit(ctx, f, before, limit+1)
	if err != nil {
		return nil, "", err
	}
	es, next := page.Trim(es, limit, func(x AuditEntry) string { return fmt.Sprint(x.ID) })
	return es, next, nil
}

// TicketTTL is how long a stream ticket stays valid: long enough for a
// browser to open the stream right after obtaining it, short enough that a
// ticket seen in a log or a proxy's URL history is already useless.
const TicketTTL = 60 * time.Second

// ticketPrefix marks stream tickets, so that one pasted as a bearer token
// (or the other way round) is recognisably the wrong credential.
const ticketPrefix = "wfmt_"

// IssueTicket returns a single-use stream ticket for p, valid for TicketTTL,
// and its expiry. The ticket carries p's identity and role: redeeming it
// (RedeemTicket) authenticates as p's token. Only its hash is stored.
//
// Returns an error if the store fails.
func (s *Service) IssueTicket(ctx context.Context, p Principal) (string, time.Time, error) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	ticket := ticketPrefix + strings.ToLower(b32.EncodeToString(b[:]))
	now := s.now().UTC()
	expires := now.Add(TicketTTL)
	if err := s.store.InsertTicket(ctx, Hash(ticket), p.TokenID, now, expires); err != nil {
		return "", time.Time{}, err
	}
	return ticket, expires, nil
}

// RedeemTicket returns the principal a stream ticket was issued to, and
// uses the ticket up.
//
// Returns EUNAUTHORIZED (type "unauthorized") when the ticket is malformed,
// unknown, used already or expired, or its token was revoked or expired
// meanwhile; the message does not say which of the first four.
func (s *Service) RedeemTicket(ctx context.Context, ticket string) (Principal, error) {
	if !strings.HasPrefix(ticket, ticketPrefix) || len(ticket) > 128 {
		return Anonymous, unauthorized("The stream ticket is not valid.")
	}
	tokenID, err := s.store.TakeTicket(ctx, Hash(ticket), s.now().UTC())
	if lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND {
		return Anonymous, unauthorized("The stream ticket is not valid: unknown, used already or expired. Tickets work once, within " +
			TicketTTL.String() + ".")
	}
	if err != nil {
		return Anonymous, err
	}
	t, err := s.usable(ctx, tokenID)
	if err != nil {
		return Anonymous, err
	}
	return Principal{TokenID: t.ID, Name: t.Name, Role: t.Role}, nil
}

// CheckToken reports whether the token tokenID may still be used (a
// long-lived call, such as an event stream, re-checks it).
//
// Returns EUNAUTHORIZED (type "unauthorized") when the token was deleted,
// revoked or has expired, and an error if the store fails.
func (s *Service) CheckToken(ctx context.Context, tokenID string) error {
	_, err := s.usable(ctx, tokenID)
	return err
}

// usable returns token id if it is neither revoked nor expired.
func (s *Service) usable(ctx context.Context, id string) (Token, error) {
	t, _, err := s.store.Token(ctx, id)
	if lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND {
		return Token{}, unauthorized("The API token no longer exists.")
	}
	if err != nil {
		return Token{}, err
	}
	switch now := s.now(); {
	case !t.RevokedAt.IsZero():
		return Token{}, unauthorized("The API token was revoked.")
	case !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt):
		return Token{}, unauthorized("The API token expired at " + t.ExpiresAt.UTC().Format(time.RFC3339) + ".")
	}
	return t, nil
}
