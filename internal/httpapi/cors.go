package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/rs/cors"
)

// CORS (cross-origin resource sharing) lets web consoles served from another
// origin call the management API from a browser. It is off unless origins
// are configured (Config.CORSOrigins): without it a browser refuses to hand
// a cross-origin answer to a page. The work is github.com/rs/cors's; this
// file only decides where it applies and with what lists.

// corsAllowedHeaders are the request headers a browser may send across
// origins: those of the contract's management operations.
var corsAllowedHeaders = []string{"Authorization", "Content-Type", "If-Match", "If-None-Match", "Idempotency-Key", "Last-Event-ID", "X-Request-Id"}

// corsExposedHeaders are the response headers a page may read besides the
// CORS-safelisted ones: what the SDKs act on.
var corsExposedHeaders = []string{"ETag", "Location", "Retry-After", "X-Request-Id"}

// corsMaxAge is how long, in seconds, a browser may reuse a preflight answer.
const corsMaxAge = 600

// CheckCORSOrigin reports whether origin can be configured as an allowed
// CORS origin: a browser's Origin value, scheme "http" or "https" and a
// host with an optional port, nothing else. Returns an error naming what is
// wrong otherwise ("*" and wildcards among them: allowed origins are listed
// one by one).
func CheckCORSOrigin(origin string) error {
	if origin == "*" || strings.Contains(origin, "*") {
		return fmt.Errorf("CORS origin %q: wildcards are not accepted; list each console's origin (https://console.example.com)", origin)
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" ||
		u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(origin, "?") || strings.HasSuffix(origin, "#") {
		return fmt.Errorf("CORS origin %q: want scheme://host[:port] with scheme http or https and nothing after the port (an Origin header's value)", origin)
	}
	return nil
}

// newCORS returns the CORS middleware of origins (checked with
// CheckCORSOrigin), or nil when there are none. It answers preflight
// requests (OPTIONS with Access-Control-Request-Method) itself, before
// authentication (browsers send no credentials with a preflight), and adds
// the CORS headers to every other answer for an allowed origin. It applies
// to the management API (/mgmt/v1/…) on the management listener only: the
// device listener never answers CORS (device agents are not browsers).
func newCORS(origins []string) (func(http.Handler) http.Handler, error) {
	if len(origins) == 0 {
		return nil, nil
	}
	for _, o := range origins {
		if err := CheckCORSOrigin(o); err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
	}
	c := cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete},
		AllowedHeaders: corsAllowedHeaders,
		ExposedHeaders: corsExposedHeaders,
		MaxAge:         corsMaxAge,
		// Bearer tokens travel in Authorization, which a page sets itself;
		// no cookies or client certificates are involved.
		AllowCredentials: false,
	})
	return func(next http.Handler) http.Handler {
		withCORS := c.Handler(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			face, _ := r.Context().Value(faceKey{}).(int)
			if face == faceDevice || !strings.HasPrefix(r.URL.Path, "/mgmt/v1/") {
				next.ServeHTTP(w, r)
				return
			}
			withCORS.ServeHTTP(w, r)
		})
	}, nil
}
