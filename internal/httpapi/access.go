package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"

	"github.com/wfm-dev/wfm/api"
	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/telemetry"
)

type principalKey struct{}

type auditDetailKey struct{}

// setAuditDetail adds members to the audit entry of the current request
// (for example a break-glass override and its reason).
func setAuditDetail(ctx context.Context, detail map[string]any) {
	if m, ok := ctx.Value(auditDetailKey{}).(map[string]any); ok {
		for k, v := range detail {
			m[k] = v
		}
	}
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
}

// operationsOf reads every management operation's id and required role
// (x-wfm-role) from the contract. Returns an error if a /mgmt/ operation
// declares no valid role: such an endpoint would be open to every token.
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
			o := operation{id: op.OperationID, role: access.Role(role)}
			for _, p := range op.Parameters {
				if p.Value != nil && p.Value.In == "header" && p.Value.Name == "Idempotency-Key" {
					o.idempotent = true
				}
			}
			ops[method+" "+path] = o
		}
	}
	return ops, nil
}

func mutating(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// authenticate identifies the caller of every management request by its
// bearer token (401 problem otherwise, with WWW-Authenticate).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/mgmt/") {
			next.ServeHTTP(w, r)
			return
		}
		p, err := s.access.Authenticate(r.Context(), r.Header.Get("Authorization"))
		if err != nil {
			if lifecycle.ErrorCode(err) == lifecycle.EUNAUTHORIZED {
				w.Header().Set("WWW-Authenticate", `Bearer realm="wfm"`)
			}
			prob := problemFromError(s.log, r, err)
			// Unauthenticated callers cannot grow the audit log without
			// bound: beyond a modest rate their refusals only reach the log.
			if mutating(r.Method) {
				if ok, _ := s.anonAudit.Allow("anonymous"); ok {
					s.audit(r, access.Anonymous, "", prob.Status, map[string]any{"reason": prob.Detail})
				} else {
					s.log.WarnContext(r.Context(), "unauthenticated mutating call (not audited: rate exceeded)", "method", r.Method, "path", r.URL.Path)
				}
			}
			writeProblem(w, r, prob)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// authorize checks the caller's role against the operation's x-wfm-role
// once the route is known, and appends every mutating call (and every
// refusal) to the audit log with its outcome.
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
			prob := problemFromError(s.log, r, err)
			s.audit(r, p, op.id, prob.Status, map[string]any{"reason": prob.Detail})
			writeProblem(w, r, prob)
			return
		}
		if !mutating(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		detail := map[string]any{}
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), auditDetailKey{}, detail)))
		s.audit(r, p, op.id, rec.status, detail)
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
	return api.RevokeToken200JSONResponse(tokenBody(t)), nil
}

// ListAudit reads the audit log.
func (s *Server) ListAudit(ctx context.Context, req api.ListAuditRequestObject) (api.ListAuditResponseObject, error) {
	p := req.Params
	f := access.AuditFilter{Actor: deref(p.Actor), Action: deref(p.Action), Outcome: string(deref(p.Outcome))}
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
			Status: e.Status, Outcome: api.AuditEntryOutcome(e.Outcome)}
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
