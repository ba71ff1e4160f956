// Package lifecycle is the pure domain of wfm: versions, lifecycle policies,
// the upgrade planner, the deployment state machine and the error type every
// other package returns. It does no I/O: no context, HTTP, SQL or clock reads.
package lifecycle

import (
	"errors"
	"fmt"
)

// Code classifies an Error. Adapters map codes to their own vocabulary (the
// HTTP adapter keeps the one table from Code to status).
type Code string

// Error codes. Every exported function documents which ones it returns.
const (
	EINVALID         Code = "invalid"                // well-formed input that breaks a rule (HTTP 422)
	EMALFORMED       Code = "malformed"              // input that cannot be parsed (HTTP 400)
	ENOTFOUND        Code = "not-found"              // the named thing does not exist (HTTP 404)
	ECONFLICT        Code = "conflict"               // conflicts with the current state (HTTP 409)
	EPRECONDITION    Code = "precondition"           // If-Match did not match (HTTP 412)
	ETOOLARGE        Code = "too-large"              // input exceeds a size bound (HTTP 413)
	EUNAUTHORIZED    Code = "unauthorized"           // no or bad credentials (HTTP 401)
	EFORBIDDEN       Code = "forbidden"              // credentials lack the right (HTTP 403)
	EUNAVAILABLE     Code = "unavailable"            // a dependency is down (HTTP 503)
	EINTERNAL        Code = "internal"               // a bug or an unexpected failure (HTTP 500)
	EUNSUPPORTEDTYPE Code = "unsupported-media-type" // unsupported media type (HTTP 415)
	ENOTACCEPTABLE   Code = "not-acceptable"         // no acceptable representation (HTTP 406)
	EGONE            Code = "gone"                   // existed once, no longer kept (HTTP 410)
)

// FieldError names one problem with one part of an input, located by a JSON
// pointer (RFC 6901) into the input document.
type FieldError struct {
	Pointer string `json:"pointer"`
	Detail  string `json:"detail"`
}

// Error is the one error type of the domain. Type is a stable, machine
// readable slug (for example "invalid-description" or "rollback-forbidden")
// that the HTTP adapter turns into a problem type URI; Message is a sentence
// a person understands. Fields lists every problem found in an input at once.
// Extra carries structured members for the problem body (for example the
// computed upgrade path of an "upgrade-path-required" refusal).
type Error struct {
	Code    Code
	Type    string
	Message string
	Fields  []FieldError
	Extra   map[string]any
}

// Error implements error.
func (e *Error) Error() string {
	if len(e.Fields) == 0 {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("%s: %s (%d problems, first %s: %s)", e.Code, e.Message, len(e.Fields), e.Fields[0].Pointer, e.Fields[0].Detail)
}

// Errorf returns an *Error with the given code and a formatted message. The
// problem type defaults to the code itself.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Type: string(code), Message: fmt.Sprintf(format, args...)}
}

// Retryable returns an EUNAVAILABLE error of problem type typ whose
// problem body tells the caller to retry after retryAfterSeconds
// (members retryable and retryAfterSeconds, as Margo's ErrorResponse has
// them): the answer to a change that was not made for a passing reason.
func Retryable(typ string, retryAfterSeconds int, message string) *Error {
	return &Error{Code: EUNAVAILABLE, Type: typ, Message: message,
		Extra: map[string]any{"retryable": true, "retryAfterSeconds": retryAfterSeconds}}
}

// ErrOutcomeUnknown matches, with errors.Is, every *Error of problem type
// "outcome-unknown" (see OutcomeUnknown): a change whose commit was under
// way when the connection to the database broke, so that it may or may not
// have been made. Unlike every other EUNAVAILABLE error it does not say
// that nothing was changed: code that would otherwise try the change again
// by itself (a batch stored again item by item) must not.
var ErrOutcomeUnknown error = outcomeUnknownKind{}

// outcomeUnknownKind is the target type of ErrOutcomeUnknown.
type outcomeUnknownKind struct{}

func (outcomeUnknownKind) Error() string { return "outcome-unknown" }

// Is reports whether target is ErrOutcomeUnknown and e is of its type.
func (e *Error) Is(target error) bool {
	_, kind := target.(outcomeUnknownKind)
	return kind && e.Type == outcomeUnknown
}

// outcomeUnknown is the problem type of OutcomeUnknown.
const outcomeUnknown = "outcome-unknown"

// OutcomeUnknown returns the EUNAVAILABLE error of problem type
// "outcome-unknown" (it matches ErrOutcomeUnknown) whose problem body
// advises a retry after retryAfterSeconds and whose message says which
// requests can be sent again as they are.
func OutcomeUnknown(retryAfterSeconds int) *Error {
	return &Error{Code: EUNAVAILABLE, Type: outcomeUnknown, Message: "The connection to the database broke while the change was " +
		"being committed: it may or may not have been made. Sending the request again is safe for a status report, a capabilities " +
		"PUT and a DELETE (a 404 then means it was done), and for a request with an Idempotency-Key sent again with the same key " +
		"(it is not run twice). Any other request: read the resource first to see whether the change was made.",
		Extra: map[string]any{"retryable": true, "retryAfterSeconds": retryAfterSeconds}}
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL for
// any other non-nil error and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorType returns the problem type slug of the first *Error in err's chain,
// "internal" for any other non-nil error and "" for nil.
func ErrorType(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		if e.Type == "" {
			return string(e.Code)
		}
		return e.Type
	}
	return string(EINTERNAL)
}
