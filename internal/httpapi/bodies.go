package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
)

// This file bounds what reading and decoding request bodies may cost, on
// both APIs. First the bytes of bodies being read and decoded at once are
// bounded, per caller and overall: beyond either bound the request is
// answered at once (429 for the caller, 503 for the server) with
// Retry-After, never queued, so that a flood neither grows memory nor
// makes every answer wait. Then an admitted body is read whole (within its
// route's bound, see bodyLimit) and its shape checked by a pass over its
// bytes that builds nothing (margo.Check*Bounds: values, member names,
// nesting; YAML entries, keys and flow items) before anything decodes it:
// the contract's validator decodes a JSON body whole into Go values, and a
// YAML parser builds every node of a document, so a body of many small
// values costs a hundred times its size once decoded. The budget is a
// map under a mutex rather than golang.org/x/sync/semaphore, whose
// weighted semaphore is one counter and not keyed by caller.

// DefaultDecodeBytesPerCaller bounds, when Config.DecodeBytesPerCaller is
// 0, the bytes of one caller's bodies read and decoded at once: one
// application description, or many small bodies.
const DefaultDecodeBytesPerCaller = maxDescriptionBody

// DefaultDecodeBytes bounds, when Config.DecodeBytes is 0, the whole
// server's: one application description per CPU (GOMAXPROCS), at least two.
// Decoding is CPU work (a description of 100,000 nodes takes a few hundred
// milliseconds and some 50 MiB of short-lived memory): more at once than
// there are CPUs would only make every answer slower and memory higher.
func DefaultDecodeBytes() int64 {
	return int64(max(runtime.GOMAXPROCS(0), 2)) * maxDescriptionBody
}

// decodeRetryAfter is the Retry-After, in seconds, of a body refused for
// the decoding bound: a body is read and decoded in well under a second.
const decodeRetryAfter = 1

// decodeBudget counts the bytes of request bodies being read and decoded,
// per caller and in all. A caller with nothing in flight, and a server
// with nothing in flight, always admit one body, whatever its size.
type decodeBudget struct {
	perCaller, total int64

	mu       sync.Mutex
	inFlight int64
	byCaller map[string]int64
}

func newDecodeBudget(perCaller, total int64) *decodeBudget {
	return &decodeBudget{perCaller: perCaller, total: total, byCaller: map[string]int64{}}
}

// acquire takes n bytes for caller, or answers the status that refuses
// them: 429 when the caller is at its bound, 503 when the server is.
func (b *decodeBudget) acquire(caller string, n int64) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	mine := b.byCaller[caller]
	if mine > 0 && mine+n > b.perCaller {
		return http.StatusTooManyRequests, false
	}
	if b.inFlight > 0 && b.inFlight+n > b.total {
		return http.StatusServiceUnavailable, false
	}
	b.byCaller[caller] = mine + n
	b.inFlight += n
	return 0, true
}

func (b *decodeBudget) release(caller string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight -= n
	if left := b.byCaller[caller] - n; left > 0 {
		b.byCaller[caller] = left
	} else {
		delete(b.byCaller, caller)
	}
}

// bodyCaller names the caller a body is counted against: the management
// token, the device API's client, or else the caller's network.
func (s *Server) bodyCaller(r *http.Request) string {
	if st := stateOf(r.Context()); st != nil && st.caller.id != "" {
		return "client " + st.caller.id
	}
	if p := principalFrom(r.Context()); p.TokenID != access.Anonymous.TokenID {
		return "token " + p.TokenID
	}
	return "address " + clientAddr(r, s.trustedProxies, s.forwarded)
}

// boundBodies is the route middleware that admits a request body under
// the decoding bounds, reads it, and refuses a body whose shape is beyond
// its route's bounds, before the input checks, the validator and the
// handler decode it. It keeps the device API's bodies whole for their
// handlers (rawBodyKey): the generated binding reads only the first JSON
// value of a body, while the Margo parsers must see all of it.
func (s *Server) boundBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		n := bodyLimit(r, s.maxBody)
		if r.ContentLength >= 0 && r.ContentLength < n {
			n = max(r.ContentLength, 1)
		}
		caller := s.bodyCaller(r)
		if status, ok := s.decoding.acquire(caller, n); !ok {
			writeProblem(w, r, decodeBusy(status))
			return
		}
		defer s.decoding.release(caller, n)
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeProblem(w, r, problemFromError(s.log, r, routeBodyError(r, err)))
			return
		}
		if err := checkBodyBounds(r, body); err != nil {
			writeProblem(w, r, problemFromError(s.log, r, err))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.HasPrefix(r.URL.Path, "/api/v1/") {
			r = r.WithContext(context.WithValue(r.Context(), rawBodyKey{}, body))
		}
		next.ServeHTTP(w, r)
	})
}

// decodeBusy is the answer to a body refused for the decoding bounds.
func decodeBusy(status int) problem {
	extra := map[string]any{"retryable": true, "retryAfterSeconds": decodeRetryAfter, "backoffStrategy": "exponential"}
	if status == http.StatusTooManyRequests {
		return problem{Type: ProblemBase + "too-many-requests", Title: titles["too-many-requests"], Status: status,
			Detail: "This caller has as many request bodies being read and decoded as it may at once; retry after " + strconv.Itoa(decodeRetryAfter) + " s.",
			Extra:  extra}
	}
	return problem{Type: ProblemBase + "server-busy", Title: titles["server-busy"], Status: status,
		Detail: "The server is reading and decoding as many request bodies as it may at once; retry after " + strconv.Itoa(decodeRetryAfter) + " s.",
		Extra:  extra}
}

// checkBodyBounds checks the shape of a JSON or YAML body against its
// route's bounds: an application description's (with the errors of
// margo.ParseDescription), a capabilities document's and a status report's
// (with their parsers' errors), or else MaxDepth levels and maxOtherValues
// values (margo.CheckJSONBounds, answered as malformed or too-large). Other media
// types are left to the validator (415).
func checkBodyBounds(r *http.Request, body []byte) error {
	ct := r.Header.Get("Content-Type")
	p := r.URL.Path
	switch {
	case isDescriptionUpload(r):
		return margo.CheckDescriptionBounds(body, ct)
	case r.Method == http.MethodPut && strings.HasPrefix(p, "/api/v1/capabilities/"):
		if isJSONType(ct) {
			return margo.CheckCapabilitiesBounds(body)
		}
		return nil
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/api/v1/deployments/") && strings.HasSuffix(p, "/status"):
		if isJSONType(ct) {
			return margo.CheckStatusBounds(body)
		}
		return nil
	}
	if !isJSONType(ct) {
		return nil
	}
	err := margo.CheckJSONBounds(body, maxOtherValues)
	var e *lifecycle.Error
	if errors.As(err, &e) {
		typed := *e
		typed.Type = "malformed"
		if e.Code == lifecycle.ETOOLARGE {
			typed.Type = "too-large"
		}
		typed.Message = "The request body is not accepted: " + e.Message + "."
		return &typed
	}
	return err
}

// maxOtherValues bounds the values and member names of a JSON body on a
// route other than the three above: decoded by the contract's validator, a
// value costs some 250 bytes, and no such request needs thousands.
const maxOtherValues = 8192

// isJSONType reports whether a Content-Type value declares JSON.
func isJSONType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}
