package httpapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// defaultRetryAfter is the wait a 503 advises when its error names none.
const defaultRetryAfter = 5

// warnUnavailable logs, at WARN, that something could not be done because
// a dependency (the database) is unavailable: sampled through
// Config.OutageLog (keyed by msg and the error's type), which counts the
// lines it holds back and reports the counts when its interval ends; every
// line when there is none.
func (s *Server) warnUnavailable(ctx context.Context, msg string, err error, args ...any) {
	if s.outageLog != nil && !s.outageLog.Allow(msg+" ("+lifecycle.ErrorType(err)+")") {
		return
	}
	s.log.WarnContext(ctx, msg, append(args, "error", err)...)
}

// unavailableNote carries a request's 503 cause from problemFromError to
// requestContext, which logs it (sampled) once the request is answered.
type unavailableNote struct{ err error }

// noteUnavailable records err as the reason the request got a 503. A
// collision with a concurrent change (type "retry") is not an outage and is
// not logged.
func noteUnavailable(r *http.Request, err error) {
	if r == nil || lifecycle.ErrorType(err) == "retry" {
		return
	}
	if st := stateOf(r.Context()); st != nil && st.unavailable.err == nil {
		st.unavailable.err = err
	}
}

// retryMembers completes a 503 problem with Margo's retry members
// (retryable, retryAfterSeconds, backoffStrategy) where the error did not
// set them.
func retryMembers(extra map[string]any) map[string]any {
	out := make(map[string]any, len(extra)+3)
	for k, v := range extra {
		out[k] = v
	}
	if _, ok := out["retryable"]; !ok {
		out["retryable"] = true
	}
	if _, ok := out["retryAfterSeconds"]; !ok {
		out["retryAfterSeconds"] = defaultRetryAfter
	}
	if _, ok := out["backoffStrategy"]; !ok {
		out["backoffStrategy"] = "exponential"
	}
	return out
}

// setRetryAfter sets the Retry-After header of a problem that advises a
// wait, unless the handler set one.
func setRetryAfter(h http.Header, p problem) {
	if h.Get("Retry-After") != "" {
		return
	}
	if secs, ok := p.Extra["retryAfterSeconds"].(int); ok && secs > 0 {
		h.Set("Retry-After", strconv.Itoa(secs))
	}
}
