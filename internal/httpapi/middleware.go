package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/go-chi/chi/v5"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
	"github.com/wfm-dev/wfm/internal/telemetry"
)

// statusRecorder remembers the status code a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusRecorder) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// requestNote carries what the request's log line says beyond method,
// path and status: who called (filled in by authentication) and the
// problem type of an error answer (filled in by writeProblem).
type requestNote struct {
	actor   string // audit actor: a token id or "anonymous"; "client:<id>" on the device API
	client  string // the device API's client id: the actor is "client:<client>" (put together only for a log line)
	problem string // the slug of the problem type, "" for success
}

// actorName is the note's actor as the log line names it.
func (n *requestNote) actorName() string {
	if n.client != "" {
		return "client:" + n.client
	}
	return n.actor
}

// reqState is what the layers of one request share: the status written,
// the log line's notes, a 503's cause, the device API's authorized caller
// and the request the strict handlers see. requestContext allocates it once
// and puts it in the context once, and the later layers fill it in rather
// than each deriving a context and a copy of the request (the device poll
// is the hot path: a derived request is a 250-byte copy).
type reqState struct {
	rec         statusRecorder
	note        requestNote
	unavailable unavailableNote
	caller      caller        // set by deviceIdentity
	req         *http.Request // set by withRequest
}

type reqStateKey struct{}

// stateOf is the request state of ctx, nil outside requestContext.
func stateOf(ctx context.Context) *reqState {
	st, _ := ctx.Value(reqStateKey{}).(*reqState)
	return st
}

// noteActor records the request's caller for its log line.
func noteActor(r *http.Request, actor string) {
	if st := stateOf(r.Context()); st != nil {
		st.note.actor, st.note.client = actor, ""
	}
}

// noteClient records the device API's calling client for the log line
// (actor "client:<id>").
func noteClient(r *http.Request, id string) {
	if st := stateOf(r.Context()); st != nil {
		st.note.actor, st.note.client = "", id
	}
}

// noteProblem records the problem type of the answer for the log line.
func noteProblem(r *http.Request, typ string) {
	if st := stateOf(r.Context()); st != nil {
		if i := strings.LastIndexByte(typ, '#'); i >= 0 {
			typ = typ[i+1:]
		}
		st.note.problem = typ
	}
}

// DomainCounters are the counters the HTTP adapter feeds
// (telemetry.DomainCollector has them).
type DomainCounters interface {
	// RateLimited counts one request refused with 429 on a route pattern
	// of an API ("mgmt" or "device").
	RateLimited(api, route string)
	// ReportIngested counts one accepted device status report.
	ReportIngested()
}

// statusRoute is the route pattern of device status reports.
const statusRoute = "/api/v1/deployments/{deploymentId}/status"

// routeOf is the route pattern that served r, or, for a request answered
// before routing (refused by authentication or a rate limit, a CORS
// preflight), the pattern that would have served it: a HEAD's is its GET's
// (headAsGet), an OPTIONS's the one of the method a preflight asks for, or
// else of any method the path takes. "unmatched" is left to paths no route
// serves.
func (s *Server) routeOf(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
		return rc.RoutePattern()
	}
	if s.router == nil {
		return "unmatched"
	}
	methods := []string{r.Method}
	switch r.Method {
	case http.MethodHead:
		methods = append(methods, http.MethodGet)
	case http.MethodOptions:
		if m := r.Header.Get("Access-Control-Request-Method"); slices.Contains(servedMethods, m) {
			methods = append(methods, m)
		}
		methods = append(methods, servedMethods...)
	}
	path := r.URL.Path
	if r.URL.RawPath != "" {
		path = r.URL.RawPath // as chi matches it (see routes)
	}
	for _, m := range methods {
		rctx := chi.NewRouteContext()
		if s.router.Match(rctx, m, path) && rctx.RoutePattern() != "" {
			return rctx.RoutePattern()
		}
	}
	return "unmatched"
}

// requestContext gives every request an id (the caller's X-Request-Id when it
// is safe, a fresh one otherwise), echoes it, and records the access log line
// (at debug, with the caller and the problem type) and the metrics by route
// pattern once the request is answered.
func (s *Server) requestContext(m *telemetry.HTTPMetrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			id := r.Header.Get("X-Request-Id")
			if !telemetry.ValidRequestID(id) {
				id = telemetry.NewRequestID()
			}
			w.Header().Set("X-Request-Id", id)
			st := &reqState{rec: statusRecorder{ResponseWriter: w, status: http.StatusOK}}
			ctx := context.WithValue(telemetry.WithRequestID(r.Context(), id), reqStateKey{}, st)
			rec, rn := &st.rec, &st.note
			r = r.WithContext(ctx)
			next.ServeHTTP(rec, r)
			if err := st.unavailable.err; err != nil {
				s.warnUnavailable(ctx, "database unavailable: answered 503", err, "method", r.Method, "path", r.URL.Path)
			}

			route := s.routeOf(r)
			d := time.Since(start)
			m.Observe(route, methodLabel(r.Method), rec.status, d)
			if s.counters != nil {
				switch {
				case rec.status == http.StatusTooManyRequests:
					api := "mgmt"
					if strings.HasPrefix(r.URL.Path, "/api/v1/") {
						api = "device"
					}
					s.counters.RateLimited(api, route)
				case route == statusRoute && r.Method == http.MethodPost && rec.status < 300:
					s.counters.ReportIngested()
				}
			}
			if s.log.Enabled(ctx, slog.LevelDebug) {
				s.log.DebugContext(ctx, "http request", "method", r.Method, "path", r.URL.Path, "route", route,
					"status", rec.status, "duration_ms", float64(d.Microseconds())/1000, "actor", rn.actorName(), "problem", rn.problem)
			}
		})
	}
}

// recoverer turns a panic in a handler into a logged 500 problem, so one bad
// request cannot take the process down.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				err := fmt.Errorf("panic: %v\n%s", v, debug.Stack())
				writeProblem(w, r, problemFromError(s.log, r, err))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// servedMethods are the request methods the server implements somewhere;
// any other is refused before anything else reads the request
// (knownMethod).
var servedMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// methodLabel is r's method as metrics label it: one of servedMethods, or
// "other" (a caller chooses the method: labels taken from it unbounded
// would let any caller grow the metrics without end).
func methodLabel(m string) string {
	if slices.Contains(servedMethods, m) {
		return m
	}
	return "other"
}

// knownMethod answers a request whose method the server implements nowhere
// with 405 (the Allow header lists the path's methods), before
// authentication, the audit log and the rate limits see it: such a
// request is not a call of any operation, and its method (up to
// MaxHeaderBytes of the caller's choosing) is neither echoed nor stored.
func (s *Server) knownMethod(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(servedMethods, r.Method) {
			s.setAllow(w, r.URL)
			writeProblem(w, r, problem{Type: ProblemBase + "method-not-allowed", Title: titles["method-not-allowed"], Status: http.StatusMethodNotAllowed,
				Detail: "The request's method is not one this server implements; the Allow header lists the methods " + r.URL.Path + " takes."})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// MaxHeaderBytes bounds the request line and headers of every request: over
// it, the answer is a 431 problem (headers-too-large). The http.Server that
// serves the handler must allow more than this (cmd/wfm sets 1 MiB), or Go
// answers oversized headers itself, in plain text.
const MaxHeaderBytes = 64 << 10

// limitHeaders enforces MaxHeaderBytes. The size is counted as Go's server
// counts it: the request line and every header line with its CRLF.
func limitHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
		if r.Host != "" {
			n += len("Host: ") + len(r.Host) + 2
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		if n > MaxHeaderBytes {
			writeProblem(w, r, problem{Type: ProblemBase + "headers-too-large", Title: titles["headers-too-large"],
				Status: http.StatusRequestHeaderFieldsTooLarge,
				Detail: fmt.Sprintf("The request line and headers take %d bytes; at most %d are accepted.", n, MaxHeaderBytes)})
			return
		}
		joinListHeaders(r.Header)
		next.ServeHTTP(w, r)
	})
}

// listHeaders are the request headers defined as comma-separated lists
// that the handlers read: sent on several lines, they mean the lines joined
// with commas (RFC 9110 section 5.3), and are read so (the contract's
// parameters are single strings, and a repeated one would be refused).
var listHeaders = []string{"If-None-Match", "If-Match"}

// joinListHeaders joins the lines of each list header into one, leaving
// out empty lines (an empty header states no condition; several empty ones
// neither).
func joinListHeaders(h http.Header) {
	for _, k := range listHeaders {
		vs := h.Values(k)
		if len(vs) < 2 {
			continue
		}
		var members []string
		for _, v := range vs {
			if v = strings.TrimSpace(v); v != "" {
				members = append(members, v)
			}
		}
		h.Set(k, strings.Join(members, ", "))
	}
}

// Body bounds per route: an application description (margo's 1 MiB, YAML
// or JSON alike, plus a little, so that a description just over 1 MiB is
// told its exact size by the parser), a capabilities document, a status
// report, and everything else (small JSON requests).
const (
	maxDescriptionBody  = margo.MaxDescriptionSize + descriptionSlack
	maxCapabilitiesBody = 256 << 10
	maxStatusBody       = 64 << 10
	maxOtherBody        = 64 << 10
	descriptionSlack    = 4 << 10
)

// bodyLimit returns the body bound of a request, never above ceiling.
func bodyLimit(r *http.Request, ceiling int64) int64 {
	n := int64(maxOtherBody)
	switch p := r.URL.Path; {
	case isDescriptionUpload(r):
		n = maxDescriptionBody
	case r.Method == http.MethodPut && strings.HasPrefix(p, "/api/v1/capabilities/"):
		n = maxCapabilitiesBody
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/api/v1/deployments/") && strings.HasSuffix(p, "/status"):
		n = maxStatusBody
	}
	return min(n, ceiling)
}

// isDescriptionUpload reports whether r adds an application version: its
// body is an application description.
func isDescriptionUpload(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Path == "/mgmt/v1/applications"
}

// routeBodyError is bodyReadError for r's route: a body over the bound of
// an application description is the description-too-large problem that
// margo.ParseDescription answers from 1 MiB on.
func routeBodyError(r *http.Request, err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) && isDescriptionUpload(r) {
		return &lifecycle.Error{Code: lifecycle.ETOOLARGE, Type: margo.ProblemTooLarge,
			Message: fmt.Sprintf("the application description exceeds %d bytes; at most %d are accepted", mbe.Limit, margo.MaxDescriptionSize)}
	}
	return bodyReadError(err)
}

// limitBody bounds every request body by its route's bound; reading past it
// fails with *http.MaxBytesError, which the error paths answer with 413. A
// declared Content-Length over the bound is refused before reading, on an
// HTTP/1 connection closed after the answer: net/http reads what is left of an
// unread body of up to 256 KiB before it writes an answer that keeps the
// connection, and a client that waits for the answer before sending the
// body would wait for the read timeout.
func limitBody(ceiling int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := bodyLimit(r, ceiling)
			if r.ContentLength > n {
				if r.ProtoMajor == 1 { // HTTP/2 would end the connection's other streams
					w.Header().Set("Connection", "close")
				}
				writeProblem(w, r, problemFromError(nil, r, routeBodyError(r, &http.MaxBytesError{Limit: n})))
				return
			}
			if r.Body != http.NoBody { // nothing to bound (net/http's body of a request without one)
				r.Body = http.MaxBytesReader(w, r.Body, n)
			}
			next.ServeHTTP(w, r)
		})
	}
}

var bodyDecodersOnce sync.Once

// registerBodyDecoders makes the request validator see an application/yaml
// body as the text it is: kin-openapi's registry is process-wide, and its
// default YAML decoder would expand hostile documents (alias bombs) before
// our bounded parser sees them. The contract declares YAML bodies as strings;
// internal/margo parses them with limits.
func registerBodyDecoders() {
	bodyDecodersOnce.Do(func() {
		openapi3filter.RegisterBodyDecoder("application/yaml", func(r io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
			b, err := io.ReadAll(r)
			if err != nil {
				return nil, err
			}
			return string(b), nil
		})
	})
}
