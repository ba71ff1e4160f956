package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// defaultRetryAfter is the wait a 503 advises when its error names none.
const defaultRetryAfter = 5

// outageLogEvery bounds the WARN lines about an unavailable dependency: at
// most one per problem type in this interval, each saying how many like it
// were suppressed since the last. An outage under load would otherwise log
// a line per request.
const outageLogEvery = 10 * time.Second

// sampledLog lets one line per key through per interval and counts the rest.
type sampledLog struct {
	mu         sync.Mutex
	every      time.Duration
	now        func() time.Time
	last       map[string]time.Time
	suppressed map[string]int
}

func newSampledLog(every time.Duration, now func() time.Time) *sampledLog {
	return &sampledLog{every: every, now: now, last: map[string]time.Time{}, suppressed: map[string]int{}}
}

// allow reports whether a line for key may be logged now and, if so, how
// many were suppressed before it.
func (l *sampledLog) allow(key string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if last, ok := l.last[key]; ok && now.Sub(last) < l.every {
		l.suppressed[key]++
		return false, 0
	}
	n := l.suppressed[key]
	l.last[key], l.suppressed[key] = now, 0
	return true, n
}

// warnUnavailable logs, sampled, that a request could not be served because
// a dependency (the database) is unavailable.
func (s *Server) warnUnavailable(ctx context.Context, msg string, err error, args ...any) {
	key := lifecycle.ErrorType(err) + " " + msg
	ok, suppressed := s.outageLog.allow(key)
	if !ok {
		return
	}
	args = append(args, "error", err, "suppressed", suppressed, "sampled_every", outageLogEvery.String())
	s.log.WarnContext(ctx, msg, args...)
}

// unavailableNote carries a request's 503 cause from problemFromError to
// requestContext, which logs it (sampled) once the request is answered.
type unavailableNote struct{ err error }

type unavailableKey struct{}

// noteUnavailable records err as the reason the request got a 503. A
// collision with a concurrent change (type "retry") is not an outage and is
// not logged.
func noteUnavailable(r *http.Request, err error) {
	if r == nil || lifecycle.ErrorType(err) == "retry" {
		return
	}
	if n, ok := r.Context().Value(unavailableKey{}).(*unavailableNote); ok && n.err == nil {
		n.err = err
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
