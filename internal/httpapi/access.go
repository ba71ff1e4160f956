package httpapi

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"

	"github.com/wfm-dev/wfm/api"
	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/telemetry"
)

type principalKey struct{}

// setAuditDetail adds members to the audit entry of the current request
// (for example a break-glass override and its reason). The entry of a
// change is written in the change's transaction: members of its row must be
// set before the store call commits (see access.Pending.SetDetail).
func setAuditDetail(ctx context.Context, detail map[string]any) {
	access.PendingOf(ctx).SetDetail(detail)
}

// principalFrom returns the caller of a management request.
func principalFrom(ctx context.Context) access.Principal {
	p, ok := ctx.Value(principalKey{}).(access.Principal)
	if !ok {
		return access.Anonymous
	}
	return p
}

// operation is what the contract says about one management operation.
type operation struct {
	id   string
	role access.Role
	// idempotent: the operation declares the Idempotency-Key header.
	idempotent bool
	// read: a POST that changes nothing (x-wfm-read: true, such as the
	// rollout plan), authorized and audited like a GET: no audit row
	// unless it is refused.
	read bool
	// created and changed are the statuses the operation answers to a
	// change that creates its resource and to any other change, as its
	// audit row written in the change's transaction says (see
	// changeStatuses).
	created, changed int
	// query holds the query parameters the operation declares; any other
	// is refused (400 naming it) rather than silently ignored, so that a
	// misspelt filter does not list everything.
	query map[string]bool
	// integers: the operation's JSON body schema has an integer somewhere
	// (decoded into a Go integer: see integralNumbers).
	integers bool
	// body: the operation declares a request body.
	body bool
}

// changeStatuses picks, from the success (2xx) statuses an operation
// declares, the one it answers to a change that creates its resource (201)
// and the one it answers to any other change: 202 (accepted, carried out
// later; the 200 beside it answers a dry run), else 200, else 204. An
// operation that declares only one answers it to both.
func changeStatuses(op *openapi3.Operation) (created, changed int) {
	declared := map[int]bool{}
	if op.Responses != nil {
		for code := range op.Responses.Map() {
			if n, err := strconv.Atoi(code); err == nil && n >= 200 && n < 300 {
				declared[n] = true
			}
		}
	}
	for _, n := range []int{http.StatusAccepted, http.StatusOK, http.StatusNoContent, http.StatusCreated} {
		if declared[n] {
			changed = n
			break
		}
	}
	created = changed
	if declared[http.StatusCreated] {
		created = http.StatusCreated
	}
	return created, changed
}

// operationsOf reads every management operation's id, required role
// (x-wfm-role) and success statuses from the contract. Returns an error if
// a /mgmt/ operation declares no valid role (such an endpoint would be open
// to every token), or a mutating one no success status.
func operationsOf(spec *openapi3.T) (map[string]operation, error) {
	ops := map[string]operation{}
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			if !strings.HasPrefix(path, "/mgmt/") {
				continue
			}
			role, _ := op.Extensions["x-wfm-role"].(string)
			if !access.Role(role).Valid() {
				return nil, fmt.Errorf("httpapi: %s %s declares no valid x-wfm-role", method, path)
			}
			read, _ := op.Extensions["x-wfm-read"].(bool)
			o := operation{id: op.OperationID, role: access.Role(role), read: read}
			if o.created, o.changed = changeStatuses(op); o.changed == 0 && mutating(method) {
				return nil, fmt.Errorf("httpapi: %s %s declares no success status", method, path)
			}
			o.query = map[string]bool{}
			if op.Security != nil {
				// A credential an apiKey scheme carries in the query (the
				// event stream's ticket) is a parameter too.
				for _, req := range *op.Security {
					for name := range req {
						if ref := spec.Components.SecuritySchemes[name]; ref != nil && ref.Value != nil && ref.Value.Type == "apiKey" && ref.Value.In == "query" {
							o.query[ref.Value.Name] = true
						}
					}
				}
			}
			for _, p := range append(slices.Clone(item.Parameters), op.Parameters...) {
				if p.Value != nil && p.Value.In == "header" && p.Value.Name == "Idempotency-Key" {
					o.idempotent = true
				}
			}
			maps.Copy(o.query, queryParams(item, op))
			o.body = op.RequestBody != nil
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				if mt := op.RequestBody.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
					o.integers = hasInteger(mt.Schema, map[*openapi3.Schema]bool{})
				}
			}
			ops[method+" "+path] = o
		}
	}
	return ops, nil
}

// hasInteger reports whether schema, or one nested in it, is of type
// integer.
func hasInteger(ref *openapi3.SchemaRef, seen map[*openapi3.Schema]bool) bool {
	if ref == nil || ref.Value == nil || seen[ref.Value] {
		return false
	}
	sc := ref.Value
	seen[sc] = true
	if sc.Type != nil && sc.Type.Is(openapi3.TypeInteger) {
		return true
	}
	for _, p := range sc.Properties {
		if hasInteger(p, seen) {
			return true
		}
	}
	for _, list := range [][]*openapi3.SchemaRef{sc.AllOf, sc.AnyOf, sc.OneOf} {
		for _, r := range list {
			if hasInteger(r, seen) {
				return true
			}
		}
	}
	if sc.AdditionalProperties.Schema != nil && hasInteger(sc.AdditionalProperties.Schema, seen) {
		return true
	}
	return hasInteger(sc.Items, seen)
}

// openQueries returns, by "METHOD path", the query parameters of the
// contract's operations outside the management API that need no token
// (GET /schemas/{name}, /healthz, /readyz), so that an unknown one is
// refused there too (unknownQuery). The device API is Margo's and is left
// as Margo defines it.
func openQueries(spec *openapi3.T) map[string]operation {
	ops := map[string]operation{}
	for path, item := range spec.Paths.Map() {
		if strings.HasPrefix(path, "/mgmt/") || strings.HasPrefix(path, "/api/") {
			continue
		}
		for method, op := range item.Operations() {
			ops[method+" "+path] = operation{id: op.OperationID, query: queryParams(item, op)}
		}
	}
	return ops
}

// queryParams are the query parameters an operation of item declares.
func queryParams(item *openapi3.PathItem, op *openapi3.Operation) map[string]bool {
	q := map[string]bool{}
	for _, p := range append(slices.Clone(item.Parameters), op.Parameters...) {
		if p.Value != nil && p.Value.In == "query" {
			q[p.Value.Name] = true
		}
	}
	return q
}

// unknownQuery refuses a query parameter op does not declare (400 naming
// query/<name>), and a query that does not parse.
func unknownQuery(r *http.Request, op operation) error {
	if r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return badParam("query", "does not parse: "+err.Error())
	}
	names := make([]string, 0, len(q))
	for k := range q {
		if !op.query[k] {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	fields := make([]lifecycle.FieldError, len(names))
	for i, k := range names {
		fields[i] = lifecycle.FieldError{Pointer: "query/" + k, Detail: "is not a parameter of this operation"}
	}
	return &lifecycle.Error{Code: lifecycle.EMALFORMED, Type: "invalid-request",
		Message: "The request is not valid: query/" + names[0] + " is not a parameter of this operation.", Fields: fields}
}

func mutating(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// authenticate identifies the caller of every management request by its
// bearer token (401 problem otherwise, with WWW-Authenticate) and applies
// the management rate limit: per token, or per client network
// (access.CallerNetwork) for callers without a valid token (429 problem
// with Retry-After beyond it). A caller whose network has used up its
// budget is refused before its token is looked up, so that a flood of
// made-up tokens does not reach the database; a credential that
// authenticated recently on this process is exempt from that early
// refusal (see recentCredentials). Paths outside /mgmt/
// (health, readiness, metrics, the contract, Swagger UI) are neither
// authenticated nor limited.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/mgmt/") {
			next.ServeHTTP(w, r)
			return
		}
		noteActor(r, access.Anonymous.TokenID)
		if len(r.Header.Values("Authorization")) > 1 {
			// One credential a request: with two, a proxy and wfm could
			// each take another as the caller.
			writeProblem(w, r, problemFromError(s.log, r, badParam("header/Authorization", "given more than once; send one credential")))
			return
		}
		addr := clientAddr(r, s.trustedProxies, s.forwarded)
		anonKey := "address " + access.CallerNetwork(addr)
		authz := r.Header.Get("Authorization")
		if over, wait := s.mgmtExhausted(anonKey); over && !s.recent.has(authz) {
			s.refuse(w, r, access.Anonymous, addr, "", tooManyRequests(wait), mutating(r.Method))
			return
		}
		ticket, isTicket, err := streamTicket(r)
		if err != nil {
			writeProblem(w, r, problemFromError(s.log, r, err))
			return
		}
		var p access.Principal
		if isTicket {
			// The ticket is never logged: only the path is.
			p, err = s.access.RedeemTicket(r.Context(), ticket)
		} else {
			p, err = s.access.Authenticate(r.Context(), authz)
		}
		if err != nil {
			s.recent.forget(authz)
			// Unauthenticated callers are refused their mutating calls in
			// the audit log (reads are not audited); a flood of them is
			// aggregated there (see access.Refusals).
			if ok, wait := s.mgmtAllow(anonKey); !ok {
				s.refuse(w, r, access.Anonymous, addr, "", tooManyRequests(wait), mutating(r.Method))
				return
			}
			if lifecycle.ErrorCode(err) == lifecycle.EUNAUTHORIZED {
				w.Header().Set("WWW-Authenticate", `Bearer realm="wfm"`)
			}
			s.refuse(w, r, access.Anonymous, addr, "", problemFromError(s.log, r, err), mutating(r.Method))
			return
		}
		noteActor(r, p.TokenID)
		if !isTicket {
			s.recent.add(authz)
		}
		if ok, wait := s.mgmtAllow("token " + p.TokenID); !ok {
			s.refuse(w, r, p, addr, s.actionOf(r), tooManyRequests(wait), true)
			return
		}
		// The token id, as the audit log and the request log name the
		// caller: one spelling per actor (the name is a label, and not
		// unique).
		ctx := fleet.WithActor(context.WithValue(r.Context(), principalKey{}, p), p.TokenID)
		next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, addrKey{}, addr)))
	})
}

type addrKey struct{}

// recentCredentials remembers (as SHA-256 hashes) the Authorization headers
// that authenticated recently, so that a token holder who shares a network
// with a flood of made-up tokens keeps being served: only callers not known
// to hold a valid token are refused before the database is asked. It only
// exempts from that early refusal; every request is still authenticated
// (a revoked token is refused, and forgotten). Bounded: when full, it
// starts over.
type recentCredentials struct {
	mu  sync.Mutex
	set map[[sha256.Size]byte]struct{}
}

// maxRecentCredentials bounds recentCredentials.
const maxRecentCredentials = 10_000

func (c *recentCredentials) has(authz string) bool {
	if authz == "" {
		return false
	}
	sum := sha256.Sum256([]byte(authz))
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.set[sum]
	return ok
}

func (c *recentCredentials) add(authz string) {
	sum := sha256.Sum256([]byte(authz))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set == nil || len(c.set) >= maxRecentCredentials {
		c.set = map[[sha256.Size]byte]struct{}{}
	}
	c.set[sum] = struct{}{}
}

func (c *recentCredentials) forget(authz string) {
	sum := sha256.Sum256([]byte(authz))
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.set, sum)
}

// mgmtAllow takes a token from key's management bucket (always allowed
// when the limit is lifted).
func (s *Server) mgmtAllow(key string) (bool, time.Duration) {
	if s.mgmtLimiter == nil {
		return true, 0
	}
	return s.mgmtLimiter.Allow(key)
}

// mgmtExhausted reports, without taking a token, whether key's management
// bucket is empty (never when the limit is lifted).
func (s *Server) mgmtExhausted(key string) (bool, time.Duration) {
	if s.mgmtLimiter == nil {
		return false, 0
	}
	return s.mgmtLimiter.Exhausted(key)
}

// actionOf names the operation r is routed to ("" if none), for refusals
// made before routing.
func (s *Server) actionOf(r *http.Request) string {
	rctx := chi.NewRouteContext()
	if s.router == nil || !s.router.Match(rctx, r.Method, r.URL.Path) {
		return ""
	}
	return s.ops[r.Method+" "+rctx.RoutePattern()].id
}

// tooManyRequests is the 429 answer of a caller over its management rate.
func tooManyRequests(wait time.Duration) problem {
	secs := max(int(math.Ceil(wait.Seconds())), 1)
	return problem{Type: ProblemBase + "too-many-requests", Title: titles["too-many-requests"], Status: http.StatusTooManyRequests,
		Detail: "This caller exceeds its management API request rate; retry after " + strconv.Itoa(secs) + " s.",
		Extra:  map[string]any{"retryable": true, "retryAfterSeconds": secs}}
}

// refuse answers prob to a refused management call, logs it (sampled: the
// first few lines per caller and interval, then a count) and, when audited,
// appends it to the audit log (aggregated beyond a rate, see
// access.Refusals).
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, p access.Principal, addr, action string, prob problem, audited bool) {
	if prob.Status == http.StatusTooManyRequests {
		if secs, ok := prob.Extra["retryAfterSeconds"].(int); ok {
			w.Header().Set("Retry-After", strconv.Itoa(secs))
		}
	}
	if prob.Status == http.StatusServiceUnavailable {
		// Not a refusal: the database is away (logged, sampled, as an
		// outage once the request is answered), and nothing can be audited.
		writeProblem(w, r, prob)
		return
	}
	slug := strings.TrimPrefix(prob.Type, ProblemBase)
	logKey := "management call refused: " + p.TokenID
	if p.TokenID == access.Anonymous.TokenID {
		logKey += " from " + access.CallerNetwork(addr)
	}
	if s.logSampler == nil || s.logSampler.Allow(logKey) {
		s.log.Log(r.Context(), refusalLevel(prob.Status), "management call refused", "actor", p.TokenID, "address", addr, "method", r.Method,
			"path", r.URL.Path, "status", prob.Status, "type", slug)
	}
	if audited {
		ctx := context.WithoutCancel(r.Context())
		f := access.Refusal{Principal: p, Address: addr, Action: action, Method: r.Method, Target: r.URL.Path, Status: prob.Status,
			Problem: slug, Reason: prob.Detail, RequestID: telemetry.RequestID(ctx)}
		var err error
		if s.refusals != nil {
			err = s.refusals.Record(ctx, f)
		} else {
			err = s.access.Record(ctx, access.AuditEntry{Actor: p.TokenID, Role: p.Role, Action: action, Method: r.Method, Target: r.URL.Path,
				Status: prob.Status, Outcome: "failure", RequestID: f.RequestID, Detail: map[string]any{"reason": prob.Detail, "address": addr}})
		}
		s.auditFailed(ctx, err, action, p)
	}
	writeProblem(w, r, prob)
}

// refusalLevel is the level of a refused call's log line: WARN for a 403,
// a known token asking for more than its role allows (a person or a job to
// talk to); INFO for a 401 or a 429, which anyone on the network can cause
// at will (scanners, a brute force: noise the audit log and the sampler
// already count) and which would bury the warnings that need a person.
func refusalLevel(status int) slog.Level {
	if status == http.StatusForbidden {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// authorize checks the caller's role against the operation's x-wfm-role
// once the route is known, and appends every mutating call (and every
// refusal) to the audit log with its outcome: exactly one row per call. The
// row of a call that changes something is written by the store, in the
// change's own transaction (access.Pending, carried in the request's
// context), so that a crash after the commit cannot lose it; the row of a
// call that changed nothing (a refusal, a failure, a rolled-back change, a
// dry run, a replayed Idempotency-Key) is appended here after the answer.
func (s *Server) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pattern := chi.RouteContext(r.Context()).RoutePattern()
		op, ok := s.ops[r.Method+" "+pattern]
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		p := principalFrom(r.Context())
		if err := access.Authorize(p, op.role); err != nil {
			addr, _ := r.Context().Value(addrKey{}).(string)
			s.refuse(w, r, p, addr, op.id, problemFromError(s.log, r, err), true)
			return
		}
		if !mutating(r.Method) || op.read {
			next.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		pending := access.NewPending(access.AuditEntry{Actor: p.TokenID, Role: p.Role, Action: op.id, Method: r.Method,
			Target: r.URL.Path, RequestID: telemetry.RequestID(r.Context())}, op.created, op.changed)
		next.ServeHTTP(rec, r.WithContext(access.WithPending(r.Context(), pending)))
		if status, ok := pending.Written(); ok {
			if status != rec.status {
				// The change committed with its audit row; answering it
				// failed afterwards (for example, reading it back).
				s.log.WarnContext(r.Context(), "a committed change was answered with another status than its audit row's",
					"action", op.id, "actor", p.TokenID, "audited", status, "answered", rec.status)
			}
			return
		}
		s.audit(r, p, op.id, rec.status, pending.Entry().Detail)
	})
}

// audit appends one entry; a failure to do so is logged (the request's
// answer is already decided).
func (s *Server) audit(r *http.Request, p access.Principal, action string, status int, detail map[string]any) {
	outcome := "success"
	if status >= 400 {
		outcome = "failure"
	}
	ctx := context.WithoutCancel(r.Context())
	err := s.access.Record(ctx, access.AuditEntry{Actor: p.TokenID, Role: p.Role, Action: action, Method: r.Method,
		Target: r.URL.Path, Status: status, Outcome: outcome, RequestID: telemetry.RequestID(ctx), Detail: detail})
	s.auditFailed(ctx, err, action, p)
}

// auditFailed logs a failed audit append, if err is one: sampled at WARN
// while the database is unavailable, at ERROR otherwise.
func (s *Server) auditFailed(ctx context.Context, err error, action string, p access.Principal) {
	switch {
	case lifecycle.ErrorCode(err) == lifecycle.EUNAVAILABLE:
		s.warnUnavailable(ctx, "database unavailable: audit entry not appended", err, "action", action, "actor", p.TokenID)
	case err != nil:
		s.log.ErrorContext(ctx, "audit log append failed", "error", err, "action", action, "actor", p.TokenID)
	}
}

func tokenBody(t access.Token) api.Token {
	out := api.Token{Id: t.ID, Name: t.Name, Role: api.Role(t.Role), CreatedAt: t.CreatedAt}
	if t.CreatedBy != "" {
		out.CreatedBy = ptr(t.CreatedBy)
	}
	if !t.ExpiresAt.IsZero() {
		out.ExpiresAt = ptr(t.ExpiresAt)
	}
	if !t.RevokedAt.IsZero() {
		out.RevokedAt = ptr(t.RevokedAt)
	}
	if !t.LastUsedAt.IsZero() {
		out.LastUsedAt = ptr(t.LastUsedAt)
	}
	return out
}

// CreateToken creates an API token.
func (s *Server) CreateToken(ctx context.Context, req api.CreateTokenRequestObject) (api.CreateTokenResponseObject, error) {
	t, secret, err := s.access.CreateToken(ctx, principalFrom(ctx), req.Body.Name, access.Role(req.Body.Role), deref(req.Body.ExpiresIn))
	if err != nil {
		return nil, err
	}
	return api.CreateToken201JSONResponse{Body: api.NewToken{Token: tokenBody(t), Secret: secret},
		Headers: api.CreateToken201ResponseHeaders{Location: "/mgmt/v1/tokens/" + t.ID}}, nil
}

// ListTokens lists API tokens.
func (s *Server) ListTokens(ctx context.Context, req api.ListTokensRequestObject) (api.ListTokensResponseObject, error) {
	ts, next, err := s.access.Tokens(ctx, deref(req.Params.Limit), deref(req.Params.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListTokens200JSONResponse{Items: make([]api.Token, 0, len(ts))}
	for _, t := range ts {
		out.Items = append(out.Items, tokenBody(t))
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}

// GetToken returns one API token.
func (s *Server) GetToken(ctx context.Context, req api.GetTokenRequestObject) (api.GetTokenResponseObject, error) {
	t, err := s.access.Token(ctx, req.TokenId)
	if err != nil {
		return nil, err
	}
	return api.GetToken200JSONResponse(tokenBody(t)), nil
}

// RevokeToken revokes an API token.
func (s *Server) RevokeToken(ctx context.Context, req api.RevokeTokenRequestObject) (api.RevokeTokenResponseObject, error) {
	t, err := s.access.Revoke(ctx, req.TokenId)
	if err != nil {
		return nil, err
	}
	if s.events.Hub != nil {
		s.events.Hub.EndToken(t.ID) // this process's streams at once; the others' at their next check
	}
	return api.RevokeToken200JSONResponse(tokenBody(t)), nil
}

// ListAudit reads the audit log.
func (s *Server) ListAudit(ctx context.Context, req api.ListAuditRequestObject) (api.ListAuditResponseObject, error) {
	p := req.Params
	f := access.AuditFilter{Actor: deref(p.Actor), Action: deref(p.Action), Outcome: string(deref(p.Outcome)),
		TargetKind: string(deref(p.TargetKind)), TargetID: deref(p.TargetId)}
	if p.Since != nil {
		f.Since = *p.Since
	}
	if p.Until != nil {
		f.Until = *p.Until
	}
	es, next, err := s.access.Audit(ctx, f, deref(p.Limit), deref(p.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListAudit200JSONResponse{Items: make([]api.AuditEntry, 0, len(es))}
	for _, e := range es {
		item := api.AuditEntry{Id: e.ID, At: e.At, Actor: e.Actor, Action: e.Action, Method: e.Method, Target: e.Target,
			Status: e.Status, Outcome: api.AuditOutcome(e.Outcome)}
		if e.Role != "" {
			item.Role = ptr(string(e.Role))
		}
		if e.RequestID != "" {
			item.RequestId = ptr(e.RequestID)
		}
		if len(e.Detail) > 0 {
			b, err := jsonRaw(e.Detail)
			if err != nil {
				return nil, err
			}
			item.Detail = &b
		}
		out.Items = append(out.Items, item)
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}
