// Package httpapi is the HTTP adapter of wfm: it routes, validates requests
// against openapi.yaml, translates requests into service calls and results
// (or domain errors) into responses. It holds no business rules.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/swaggest/swgui"
	"github.com/swaggest/swgui/v5emb"

	"github.com/wfm-dev/wfm"
	"github.com/wfm-dev/wfm/api"
	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/buildinfo"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/telemetry"
	"github.com/wfm-dev/wfm/internal/webhook"
)

// Config is what the HTTP adapter needs from its owner.
type Config struct {
	// Logger receives access and error logs; lines logged with a request's
	// context carry its request id when the handler is a telemetry.ContextHandler.
	Logger *slog.Logger
	// Ready reports whether the server can serve: nil when the database is
	// reachable and migrated.
	Ready func(ctx context.Context) error
	// Registry receives the HTTP metrics and is served at /metrics.
	Registry *prometheus.Registry
	// Catalog serves the application catalog.
	Catalog *catalog.Service
	// Fleet serves clients, devices, deployments and the device API.
	Fleet *fleet.Service
	// Access authenticates management calls and keeps the audit log.
	Access *access.Service
	// DeviceLimiter, when not nil, bounds each WFM client's device API
	// request rate: Allow returns false and the wait when a client is over.
	DeviceLimiter interface {
		Allow(key string) (bool, time.Duration)
	}
	// MgmtLimiter, when not nil, bounds each caller's management API
	// request rate: keys are "token <id>" for authenticated callers and
	// "address <network>" (access.CallerNetwork) for the others; Exhausted
	// asks, without taking a token, whether a key's bucket is empty.
	// nil: unlimited.
	MgmtLimiter MgmtLimiter
	// TrustedProxies are the peers whose forwarding header (see
	// ForwardedHeader) names the caller's address; none: the TCP peer is
	// always the caller.
	TrustedProxies []netip.Prefix
	// ForwardedHeader is the one forwarding header read from trusted
	// proxies: HeaderXForwardedFor ("" means it too) or HeaderForwarded.
	// The other is ignored.
	ForwardedHeader string
	// Refusals, when not nil, writes refused management calls to the audit
	// log, aggregating floods; nil: each refusal gets its own entry. Its
	// owner starts and stops it.
	Refusals *access.Refusals
	// LogSampler, when not nil, thins out repeated refusal log lines:
	// Allow(key) false means the line is counted instead of logged.
	LogSampler interface{ Allow(key string) bool }
	// OutageLog, when not nil, thins out the WARN lines of an unavailable
	// database (one per request otherwise): Allow(key) false means the line
	// is counted instead of logged; its owner reports the counts (see
	// internal/sampling) and starts and stops it.
	OutageLog interface{ Allow(key string) bool }
	// Idempotency, when not nil, remembers responses to POSTs with an
	// Idempotency-Key.
	Idempotency IdempotencyStore
	// DeviceIdentity names the WFM client calling the device API (from its
	// mTLS certificate, or a header in the development mode).
	DeviceIdentity func(r *http.Request) (string, error)
	// MaxBodyBytes bounds every request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// DecodeBytesPerCaller bounds the bytes of one caller's request bodies
	// being read and decoded at once (beyond it: 429), DecodeBytes the
	// whole server's (beyond it: 503); 0 means DefaultDecodeBytesPerCaller
	// and DefaultDecodeBytes(). A caller, and the server, with nothing in
	// flight always admit one body.
	DecodeBytesPerCaller, DecodeBytes int64
	// Webhooks manages webhook subscriptions; nil: /mgmt/v1/webhooks
	// answers 503.
	Webhooks *webhook.Service
	// Events serves GET /mgmt/v1/events; its zero value answers 503.
	Events EventsConfig
	// Counters, when not nil, receives the domain counters the adapter
	// sees: rate-limited requests by route, status reports ingested.
	Counters DomainCounters
	// DeviceURL is the device listener's base URL as its callers reach it
	// (https://127.0.0.1:8443): the problem the management listener
	// answers for a device API path names it. Empty: the problem names the
	// -device-listen setting instead.
	DeviceURL string
	// CORSOrigins are the browser origins (scheme://host[:port], see
	// CheckCORSOrigin) allowed to call the management API across origins;
	// none: no CORS headers at all, and a preflight is answered 405 like any
	// OPTIONS request.
	CORSOrigins []string
}

// MgmtLimiter is what the management API's rate limit needs
// (ratelimit.Limiter has it).
type MgmtLimiter interface {
	// Allow takes a token from key's bucket; false and the wait when
	// there is none.
	Allow(key string) (bool, time.Duration)
	// Exhausted reports, taking nothing, whether key's bucket is empty,
	// and the wait.
	Exhausted(key string) (bool, time.Duration)
}

// DefaultMaxBodyBytes bounds request bodies when Config.MaxBodyBytes is 0:
// one application description (see maxDescriptionBody).
const DefaultMaxBodyBytes = maxDescriptionBody

// Server implements the generated strict server interface.
type Server struct {
	log      *slog.Logger
	ready    func(ctx context.Context) error
	catalog  *catalog.Service
	fleet    *fleet.Service
	access   *access.Service
	webhooks *webhook.Service
	clientID func(r *http.Request) (string, error)
	ops      map[string]operation // "METHOD /path" of every management operation
	// openOps: the query parameters of the operations outside both APIs
	// (openQueries).
	openOps map[string]operation
	limiter interface {
		Allow(key string) (bool, time.Duration)
	}
	mgmtLimiter    MgmtLimiter
	recent         recentCredentials // credentials that authenticated lately
	trustedProxies []netip.Prefix
	forwarded      string // the forwarding header read from trusted proxies
	refusals       *access.Refusals
	logSampler     interface{ Allow(key string) bool }
	router         *chi.Mux
	// contract routes requests as the validator does (openapi.yaml), for
	// the Allow header.
	contract   routers.Router
	idem       IdempotencyStore
	outageLog  interface{ Allow(key string) bool } // bounds the WARN lines of an unavailable database
	unreleased unreleasedKeys                      // idempotency keys whose release failed
	events     EventsConfig
	counters   DomainCounters // nil: none
	deviceURL  string         // Config.DeviceURL
	maxBody    int64          // Config.MaxBodyBytes
	decoding   *decodeBudget  // request bodies being read and decoded
}

var _ api.StrictServerInterface = (*Server)(nil)

// NewHandler returns the complete HTTP handler: the API from openapi.yaml
// (validated against it), /openapi.yaml, Swagger UI at /docs/ and Prometheus
// metrics at /metrics. Returns an error if the embedded contract cannot be
// loaded or the metrics cannot be registered.
func NewHandler(cfg Config) (http.Handler, error) {
	if cfg.Logger == nil || cfg.Ready == nil || cfg.Registry == nil || cfg.Catalog == nil || cfg.Fleet == nil || cfg.DeviceIdentity == nil || cfg.Access == nil {
		return nil, fmt.Errorf("httpapi: Logger, Ready, Registry, Catalog, Fleet, Access and DeviceIdentity are required")
	}
	switch cfg.ForwardedHeader {
	case "":
		cfg.ForwardedHeader = HeaderXForwardedFor
	case HeaderXForwardedFor, HeaderForwarded:
	default:
		return nil, fmt.Errorf("httpapi: ForwardedHeader %q: want %s or %s", cfg.ForwardedHeader, HeaderXForwardedFor, HeaderForwarded)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.DecodeBytesPerCaller == 0 {
		cfg.DecodeBytesPerCaller = DefaultDecodeBytesPerCaller
	}
	if cfg.DecodeBytes == 0 {
		cfg.DecodeBytes = DefaultDecodeBytes()
	}
	corsMiddleware, err := newCORS(cfg.CORSOrigins)
	if err != nil {
		return nil, err
	}
	registerBodyDecoders()
	// The contract is loaded once, from openapi.yaml as embedded byte for
	// byte (package wfm): the validator and the operation table (roles,
	// audit names as the contract spells them) use it, and /openapi.yaml
	// serves the same bytes.
	spec, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	if err != nil {
		return nil, fmt.Errorf("httpapi: load contract: %w", err)
	}
	spec.Servers = nil // requests are matched on paths only, whatever host serves them
	metrics, err := telemetry.NewHTTPMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("httpapi: register metrics: %w", err)
	}
	ops, err := operationsOf(spec)
	if err != nil {
		return nil, err
	}
	s := &Server{log: cfg.Logger, ready: cfg.Ready, catalog: cfg.Catalog, fleet: cfg.Fleet, access: cfg.Access, webhooks: cfg.Webhooks, clientID: cfg.DeviceIdentity, ops: ops, openOps: openQueries(spec), limiter: cfg.DeviceLimiter,
		mgmtLimiter: cfg.MgmtLimiter, trustedProxies: cfg.TrustedProxies, forwarded: cfg.ForwardedHeader, refusals: cfg.Refusals, logSampler: cfg.LogSampler, idem: cfg.Idempotency, outageLog: cfg.OutageLog,
		events: cfg.Events, counters: cfg.Counters, deviceURL: cfg.DeviceURL, maxBody: cfg.MaxBodyBytes, decoding: newDecodeBudget(cfg.DecodeBytesPerCaller, cfg.DecodeBytes)}

	if s.contract, err = gorillamux.NewRouter(spec); err != nil {
		return nil, fmt.Errorf("httpapi: contract router: %w", err)
	}
	r := chi.NewRouter()
	s.router = r
	r.Use(s.requestContext(metrics), s.recoverer, limitHeaders, s.knownMethod, s.headAsGet, s.faceGuard)
	if corsMiddleware != nil {
		// Before authentication: a preflight carries no credentials.
		r.Use(corsMiddleware)
	}
	r.Use(limitBody(cfg.MaxBodyBytes), s.deviceIdentity, s.authenticate)
	r.NotFound(func(w http.ResponseWriter, req *http.Request) { writeProblem(w, req, notFoundProblem(req)) })
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		s.setAllow(w, req.URL)
		writeProblem(w, req, methodNotAllowedProblem(req))
	})

	r.Get("/openapi.yaml", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(wfm.OpenAPIYAML)
	})
	docs := v5emb.NewWithConfig(swgui.Config{SettingsUI: map[string]string{"plugins": swaggerUIPlugins}})("wfm API", "/openapi.yaml", "/docs/")
	r.Get("/docs", http.RedirectHandler("/docs/", http.StatusMovedPermanently).ServeHTTP)
	r.Mount("/docs/", docs)
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{Registry: cfg.Registry}))

	strict := api.NewStrictHandlerWithOptions(s, []api.StrictMiddlewareFunc{withRequest}, api.StrictHTTPServerOptions{
		RequestErrorHandlerFunc: func(w http.ResponseWriter, req *http.Request, err error) {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeProblem(w, req, problemFromError(s.log, req, bodyReadError(err)))
				return
			}
			writeProblem(w, req, decodeProblem(req, err))
		},
		ResponseErrorHandlerFunc: func(w http.ResponseWriter, req *http.Request, err error) {
			writeProblem(w, req, problemFromError(s.log, req, err))
		},
	})
	api.HandlerWithOptions(strict, api.ChiServerOptions{
		BaseRouter: r,
		// The last middleware runs first: authorization (which audits the
		// outcome), then the bounds on reading and decoding bodies, then
		// unstorable input, then validation, then integers written with an
		// exponent or a fraction made plain for decoding.
		Middlewares: []api.MiddlewareFunc{s.integerBodies, s.requestValidator(spec), s.idempotency, s.checkInput(headerParams(spec)), s.boundBodies, s.authorize},
		ErrorHandlerFunc: func(w http.ResponseWriter, req *http.Request, err error) {
			writeProblem(w, req, paramProblem(req, err))
		},
	})
	return r, nil
}

// swaggerUIPlugins are Swagger UI's plugins (a JavaScript array): its
// default one, and one that turns "Try it out" off for the device API,
// which the listener serving the page does not serve and a browser could
// not call (it cannot present the client certificate). Swagger UI's own
// setting, supportedSubmitMethods, is for every operation at once; the
// spec selector allowTryItOutFor(path, method) is its per-operation hook.
const swaggerUIPlugins = `[
	SwaggerUIBundle.plugins.DownloadUrl,
	function () {
		return {statePlugins: {spec: {wrapSelectors: {
			allowTryItOutFor: function (original) {
				return function (state, path, method) {
					return path.indexOf("/api/v1/") !== 0 && original(state, path, method);
				};
			}
		}}}};
	}
]`

// allowedMethods lists the methods the router serves for u's path, for the
// Allow header of a 405 answer: those both the router and the contract take
// there (HEAD where GET is, see headAsGet).
func (s *Server) allowedMethods(u *url.URL) []string {
	var allowed []string
	for _, m := range servedMethods {
		routed := m
		if m == http.MethodHead && !s.routes(m, u) {
			routed = http.MethodGet // headAsGet
		}
		if s.routes(routed, u) && s.inContract(routed, u) {
			allowed = append(allowed, m)
		}
	}
	return allowed
}

// setAllow sets the Allow header of a 405 answer for u (allowedMethods).
func (s *Server) setAllow(w http.ResponseWriter, u *url.URL) {
	for _, m := range s.allowedMethods(u) {
		w.Header().Add("Allow", m)
	}
}

// routes reports whether the router has a route for method at u's path,
// matched as chi matches a request: on the escaped path when it differs
// (a %2F stays inside its segment).
func (s *Server) routes(method string, u *url.URL) bool {
	path := u.Path
	if u.RawPath != "" {
		path = u.RawPath
	}
	return s.router.Match(chi.NewRouteContext(), method, path)
}

// inContract reports whether the contract lets method reach u's path, or
// does not describe that path at all (the documents and metrics outside
// it). The router matches /mgmt/v1/rollouts/plan as a rollout id too, for
// GET; the contract, which the validator applies, does not.
func (s *Server) inContract(method string, u *url.URL) bool {
	req := &http.Request{Method: method, URL: &url.URL{Path: u.Path, RawPath: u.RawPath}, Host: "localhost"}
	_, _, err := s.contract.FindRoute(req)
	return err == nil || errors.Is(err, routers.ErrPathNotFound)
}

// headKey marks, in a request's context, a HEAD request served as GET.
type headKey struct{}

// isHead reports whether ctx is a HEAD request's served as GET: a handler
// whose answer does not end (the event stream) stops after its headers.
func isHead(ctx context.Context) bool {
	h, _ := ctx.Value(headKey{}).(bool)
	return h
}

// headAsGet answers HEAD on every path that takes GET as GET would, without
// the body (RFC 9110 section 9.3.2: a server that takes GET takes HEAD):
// the request goes on as a GET, so it is authenticated, limited and
// validated as one, and net/http writes no body for a HEAD request. The
// request log and metrics keep the method HEAD.
func (s *Server) headAsGet(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead && !s.routes(http.MethodHead, r.URL) && s.routes(http.MethodGet, r.URL) {
			r = r.WithContext(context.WithValue(r.Context(), headKey{}, true)) // a copy, whose method may change
			r.Method = http.MethodGet
		}
		next.ServeHTTP(w, r)
	})
}

// GetHealth answers liveness: the process serves HTTP, and which build
// it is (a load balancer's health page then shows the replicas' versions).
func (s *Server) GetHealth(ctx context.Context, _ api.GetHealthRequestObject) (api.GetHealthResponseObject, error) {
	return api.GetHealth200JSONResponse{Status: "ok", Version: buildinfo.Read().Version}, nil
}

// GetReady answers readiness: the database is reachable and migrated, or
// the device API is still answered from memory (degraded; see
// fleet.Service.Readiness).
func (s *Server) GetReady(ctx context.Context, _ api.GetReadyRequestObject) (api.GetReadyResponseObject, error) {
	degraded, err := s.fleet.Readiness(s.ready(ctx))
	if err != nil {
		// The cause stays in the chain for the (sampled) log line.
		return nil, fmt.Errorf("%w (%w)", &lifecycle.Error{Code: lifecycle.EUNAVAILABLE, Type: "not-ready",
			Message: "The server cannot serve yet: its database is unreachable or not fully migrated.",
			Extra:   map[string]any{"retryable": true, "retryAfterSeconds": defaultRetryAfter}}, err)
	}
	if degraded != "" {
		return api.GetReady200JSONResponse{Status: api.Degraded, Detail: &degraded, Version: buildinfo.Read().Version}, nil
	}
	return api.GetReady200JSONResponse{Status: api.Ready, Version: buildinfo.Read().Version}, nil
}

type faceKey struct{}

// Faces of the server: which listener a request came through, as far as it
// matters (Split marks only the requests for the other listener's paths).
const (
	faceAll    = iota // tests, single-listener setups, and any request for its own listener's paths
	faceMgmt          // the management listener
	faceDevice        // the device (mTLS) listener
)

// Split divides the complete handler between the two listeners: the device
// API (/api/v1/…, plus /healthz and /readyz) on the mTLS listener, the rest
// on the management listener. Each answers the other's paths with a 404
// problem, so that neither face is reachable through the other's port.
//
// A request for a path its listener serves goes through as is; only one
// for the other listener's paths is marked with its face (a context value,
// a copy of the request), so that faceGuard answers it 404 after the
// request id, logs and metrics are in place. The device poll, the hot path,
// pays nothing for the split.
func Split(h http.Handler) (mgmt, device http.Handler) {
	with := func(face int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !wrongFace(face, r.URL.Path) {
				h.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), faceKey{}, face)))
		})
	}
	return with(faceMgmt), with(faceDevice)
}

// wrongFace reports whether path belongs to the other listener than face's.
func wrongFace(face int, path string) bool {
	device := strings.HasPrefix(path, "/api/v1/")
	return (face == faceMgmt && device) || (face == faceDevice && !device && path != "/healthz" && path != "/readyz")
}

// faceGuard enforces Split: a request Split marked with its face is for
// the other listener's paths and gets 404. On the management listener the
// answer names the device listener (wrongListenerProblem): Swagger UI and
// a curl pointed at the wrong port land there.
func (s *Server) faceGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		face, _ := r.Context().Value(faceKey{}).(int)
		if wrongFace(face, r.URL.Path) {
			p := notFoundProblem(r)
			if face == faceMgmt {
				p = wrongListenerProblem(r, s.deviceURL)
			}
			writeProblem(w, r, p)
			return
		}
		next.ServeHTTP(w, r)
	})
}
