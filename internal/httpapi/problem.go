package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/telemetry"
)

// ProblemBase is the namespace of wfm's own problem types; the slug after
// '#' is the domain error's Type. docs/problems.md documents each one.
const ProblemBase = "https://github.com/wfm-dev/wfm/blob/main/docs/problems.md#"

// MargoProblemBase is the namespace Margo reserves for its problem types;
// the device API uses it for the conditions Margo defines.
const MargoProblemBase = "https://docs.margo.org/specification/problem-types#"

// margoTypes are the problem types Margo defines for the device API.
var margoTypes = map[string]bool{"invalid-request": true, "not-authorized": true}

// problemContentType is the media type of RFC 9457 problem details.
const problemContentType = "application/problem+json"

// statusByCode is the one table from domain error codes to HTTP status.
var statusByCode = map[lifecycle.Code]int{
	lifecycle.EINVALID:         http.StatusUnprocessableEntity,
	lifecycle.EMALFORMED:       http.StatusBadRequest,
	lifecycle.ENOTFOUND:        http.StatusNotFound,
	lifecycle.ECONFLICT:        http.StatusConflict,
	lifecycle.EPRECONDITION:    http.StatusPreconditionFailed,
	lifecycle.ETOOLARGE:        http.StatusRequestEntityTooLarge,
	lifecycle.EUNAUTHORIZED:    http.StatusUnauthorized,
	lifecycle.EFORBIDDEN:       http.StatusForbidden,
	lifecycle.EUNAVAILABLE:     http.StatusServiceUnavailable,
	lifecycle.EINTERNAL:        http.StatusInternalServerError,
	lifecycle.EUNSUPPORTEDTYPE: http.StatusUnsupportedMediaType,
	lifecycle.ENOTACCEPTABLE:   http.StatusNotAcceptable,
	lifecycle.EGONE:            http.StatusGone,
}

// problem is the body of an RFC 9457 answer. Extra members are merged in at
// the top level, as RFC 9457 section 3.2 describes.
type problem struct {
	Type      string         `json:"type"`
	Title     string         `json:"title"`
	Status    int            `json:"status"`
	Detail    string         `json:"detail,omitempty"`
	Instance  string         `json:"instance,omitempty"`
	RequestID string         `json:"requestId,omitempty"`
	Errors    []fieldProblem `json:"errors,omitempty"`
	Extra     map[string]any `json:"-"`
}

type fieldProblem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (p problem) MarshalJSON() ([]byte, error) {
	type plain problem
	base, err := json.Marshal(plain(p))
	if err != nil || len(p.Extra) == 0 {
		return base, err
	}
	merged := make(map[string]any, len(p.Extra)+8)
	for k, v := range p.Extra {
		merged[k] = v
	}
	var fixed map[string]any
	if err := json.Unmarshal(base, &fixed); err != nil {
		return nil, err
	}
	for k, v := range fixed { // standard members win over extras of the same name
		merged[k] = v
	}
	return json.Marshal(merged)
}

// writeProblem writes p as application/problem+json, filling in the request
// id and instance from r.
func writeProblem(w http.ResponseWriter, r *http.Request, p problem) {
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	if p.Instance == "" && r != nil {
		p.Instance = r.URL.Path
	}
	if r != nil {
		noteProblem(r, p.Type)
		p.RequestID = telemetry.RequestID(r.Context())
		if slug, ok := strings.CutPrefix(p.Type, ProblemBase); ok && margoTypes[slug] && strings.HasPrefix(r.URL.Path, "/api/v1/") {
			p.Type = MargoProblemBase + slug
		}
	}
	body, err := json.Marshal(p)
	if err != nil { // cannot happen for the types above; never leave the client without an answer
		body = []byte(`{"type":"` + ProblemBase + `internal","title":"Internal Server Error","status":500}`)
		p.Status = http.StatusInternalServerError
	}
	h := w.Header()
	setRetryAfter(h, p)
	h.Set("Content-Type", problemContentType)
	h.Set("Cache-Control", "no-store")
	h.Del("ETag")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// problemFromError turns any error into a problem. Domain errors keep their
// type, message and fields; every other error becomes a 500 that shows no
// internals (the details go to the log with the request id).
func problemFromError(logger *slog.Logger, r *http.Request, err error) problem {
	var de *lifecycle.Error
	if !errors.As(err, &de) || de.Code == lifecycle.EINTERNAL {
		if logger != nil {
			logger.ErrorContext(r.Context(), "internal error", "method", r.Method, "path", r.URL.Path, "error", err)
		}
		return problem{Type: ProblemBase + "internal", Status: http.StatusInternalServerError,
			Detail: "The server failed to answer this request. The request id identifies the details in the server log."}
	}
	status, ok := statusByCode[de.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	typ := de.Type
	if typ == "" {
		typ = string(de.Code)
	}
	p := problem{Type: ProblemBase + typ, Title: titleOf(typ, status), Status: status, Detail: de.Message, Extra: de.Extra}
	if de.Code == lifecycle.EUNAVAILABLE {
		p.Extra = retryMembers(de.Extra)
		noteUnavailable(r, err)
	}
	for _, f := range de.Fields {
		p.Errors = append(p.Errors, fieldProblem{Field: f.Pointer, Message: f.Detail})
	}
	return p
}

// titles gives a short human summary per problem type; types without an
// entry fall back to the HTTP status text.
var titles = map[string]string{
	"idempotency-key-in-use":      "Idempotency key in use",
	"idempotency-answer-lost":     "Answer lost",
	"invalid-webhook":             "Invalid webhook",
	"webhook-disabled":            "Webhook disabled",
	"invalid-rollout":             "Invalid rollout",
	"waves-do-not-cover":          "Waves do not cover the eligible members",
	"wave-empty":                  "Empty wave",
	"no-eligible-members":         "No eligible member",
	"rollout-state-conflict":      "Conflicting rollout state",
	"rollout-member":              "Member of an active rollout",
	"not-a-member":                "Not a member of the rollout",
	"already-at-version":          "Already at that version",
	"downgrade-requires-rollback": "A downgrade is a rollback",
	"upgrade-path-required":       "Upgrade path required",
	"no-upgrade-path":             "No upgrade path",
	"rollback-forbidden":          "Rollback forbidden",
	"rollback-target-newer":       "Rollback target is newer",
	"force-reason-required":       "A reason is required to force",
	"break-glass-forbidden":       "Break-glass override not allowed",
	"immutable-parameter":         "Immutable parameter",
	"no-change":                   "Nothing to change",
	"strategy-unsupported":        "Strategy not supported",
	"operation-in-progress":       "Operation in progress",
	"operation-ended":             "Operation already ended",
	"deployment-removed":          "Deployment removed",
	"no-rollback-target":          "No rollback target",
	"invalid-rollback-target":     "Invalid rollback target",
	"idempotency-key-reused":      "Idempotency key reused",
	"capabilities-too-large":      "Device capabilities too large",
	"client-certificate-required": "Client certificate required",
	"client-retired":              "Client retired",
	"component-mismatch":          "Components do not match the deployment",
	"description-too-large":       "Application description too large",
	"malformed-description":       "Malformed application description",
	"invalid-parameter-values":    "Invalid parameter values",
	"invalid-client-identity":     "Invalid client identity",
	"invalid-client-id":           "Invalid client id",
	"invalid-deployment-input":    "Invalid deployment",
	"invalid-operation":           "Invalid operation",
	"malformed-capabilities":      "Malformed device capabilities",
	"malformed-status":            "Malformed status report",
	"retry":                       "Retry",
	"outcome-unknown":             "Outcome unknown",
	"state-conflict":              "Conflicting deployment state",
	"status-too-large":            "Status report too large",
	"too-many-requests":           "Too many requests",
	"server-busy":                 "Server busy",
	"invalid-manifest":            "Invalid state manifest",
	"empty-bundle":                "Empty bundle",
	"invalid-bundle":              "Invalid bundle",
	"invalid-configuration":       "Invalid configuration",
	"not-found":                   "Not found",
	"wrong-listener":              "Served on the device listener",
	"method-not-allowed":          "Method not allowed",
	"invalid-request":             "Invalid request",
	"invalid-text":                "Text that cannot be stored",
	"headers-too-large":           "Request headers too large",
	"invalid-description":         "Invalid application description",
	"invalid-version":             "Invalid version",
	"malformed":                   "Malformed request",
	"not-ready":                   "Not ready",
	"conflict":                    "Conflict",
	"too-large":                   "Request too large",
	"unsupported-media-type":      "Unsupported media type",
	"not-acceptable":              "Not acceptable",
	"version-exists":              "Version exists with different content",
	"version-in-use":              "Version in use",
	"internal":                    "Internal error",
	"unauthorized":                "Unauthorized",
	"not-authorized":              "Not authorized",
	"unknown-deployment":          "Unknown deployment",
	"device-id-mismatch":          "Device id mismatch",
	"deployment-id-mismatch":      "Deployment id mismatch",
	"invalid-capabilities":        "Invalid device capabilities",
	"invalid-status":              "Invalid status report",
	"not-placeable":               "No deployment profile fits the device",
	"unknown-profile":             "Unknown deployment profile",
	"version-yanked":              "Version yanked",
	"device-unregistered":         "Device unregistered",
	"precondition-failed":         "Precondition failed",
	"forbidden":                   "Forbidden",
	"unavailable":                 "Service unavailable",
	"invalid":                     "Invalid request",
	"precondition":                "Precondition failed",
}

func titleOf(typ string, status int) string {
	if t, ok := titles[typ]; ok {
		return t
	}
	return http.StatusText(status)
}
