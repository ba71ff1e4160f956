package httpapi

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/wfm-dev/wfm/api"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Media types of the Margo device API.
const (
	manifestMediaType = "application/vnd.margo.manifest.v1+json"
	bundleMediaType   = "application/vnd.margo.bundle.v1+tar+gzip"
	immutableCache    = "private, max-age=31536000, immutable"
)

// caller is the authorized WFM client of a device API request, with the
// manifest the authorization looked up (the poll answers from it).
type caller struct {
	id       string
	manifest fleet.Manifest
}

// callerOf is the authorized caller deviceIdentity found, zero if none.
func callerOf(ctx context.Context) caller {
	if st := stateOf(ctx); st != nil {
		return st.caller
	}
	return caller{}
}

// clientFrom returns the calling WFM client's id, set by deviceIdentity.
func clientFrom(ctx context.Context) string { return callerOf(ctx).id }

// deviceIdentity authenticates every device API request (/api/v1/…): it
// derives the client id from the mTLS certificate (or, in the development
// header mode, from a header), checks the accepted-client policy, and makes
// the id available to the handlers. Refusals are 403 #not-authorized, the
// only refusal rc.3 declares.
func (s *Server) deviceIdentity(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/api/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		id, err := s.clientID(r)
		if err != nil {
			msg := "The caller is not an authenticated WFM client."
			var de *lifecycle.Error
			if errors.As(err, &de) {
				msg = de.Message
			}
			writeProblem(w, r, problemFromError(s.log, r, &lifecycle.Error{Code: lifecycle.EFORBIDDEN, Type: "not-authorized", Message: msg}))
			return
		}
		noteClient(r, id)
		if s.limiter != nil {
			if ok, wait := s.limiter.Allow(id); !ok {
				secs := int(math.Ceil(wait.Seconds()))
				w.Header().Set("Retry-After", strconv.Itoa(secs))
				writeProblem(w, r, problem{Type: ProblemBase + "too-many-requests", Title: "Too many requests", Status: http.StatusTooManyRequests,
					Detail: "This client exceeds its request rate; retry after " + strconv.Itoa(secs) + " s.",
					Extra:  map[string]any{"retryable": true, "retryAfterSeconds": secs, "backoffStrategy": "exponential"}})
				return
			}
		}
		// Authorizing looks up the client's manifest (from memory); the poll
		// answers from that same lookup.
		m, err := s.fleet.Manifest(r.Context(), id)
		if err != nil {
			writeProblem(w, r, problemFromError(s.log, r, err))
			return
		}
		st := stateOf(r.Context())
		if st == nil { // not behind requestContext
			st = &reqState{}
			r = r.WithContext(context.WithValue(r.Context(), reqStateKey{}, st))
		}
		st.caller = caller{id: id, manifest: m}
		next.ServeHTTP(w, r)
	})
}

type rawBodyKey struct{}

// wholeDeviceBody is the whole request body kept by boundBodies, or else the
// bound one.
func wholeDeviceBody[T ~[]byte](ctx context.Context, bound *T) ([]byte, error) {
	if b, ok := ctx.Value(rawBodyKey{}).([]byte); ok {
		return b, nil
	}
	return rawJSON(bound)
}

// manifestCache is the Cache-Control of a state manifest (200 and 304):
// one client's, revalidated by ETag.
const manifestCache = "private"

// manifestResponse writes a state manifest's exact bytes.
type manifestResponse struct {
	body []byte
	etag string
}

func (m manifestResponse) VisitGetStateManifestResponse(w http.ResponseWriter) error {
	h := w.Header()
	h.Set("Content-Type", manifestMediaType)
	h.Set("ETag", m.etag)
	h.Set("Cache-Control", manifestCache)
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(m.body)
	return err
}

// notModified is a 304 that carries the ETag and Cache-Control the 200
// would have had (RFC 9110 section 15.4.5).
type notModified struct{ etag, cacheControl string }

func (n notModified) write(w http.ResponseWriter) error {
	w.Header().Set("ETag", n.etag)
	w.Header().Set("Cache-Control", n.cacheControl)
	w.WriteHeader(http.StatusNotModified)
	return nil
}

func (n notModified) VisitGetStateManifestResponse(w http.ResponseWriter) error { return n.write(w) }

func (n notModified) VisitGetBundleResponse(w http.ResponseWriter) error { return n.write(w) }

// GetStateManifest answers the device poll, from memory.
func (s *Server) GetStateManifest(ctx context.Context, req api.GetStateManifestRequestObject) (api.GetStateManifestResponseObject, error) {
	m := callerOf(ctx).manifest
	if r := requestFrom(ctx); r != nil {
		if !acceptsOwnType(r.Header.Get("Accept"), manifestMediaType) {
			return nil, &lifecycle.Error{Code: lifecycle.ENOTACCEPTABLE, Type: "not-acceptable",
				Message: "The state manifest is available as " + manifestMediaType + "."}
		}
	}
	if req.Params.IfNoneMatch != nil && etagMatches(*req.Params.IfNoneMatch, m.ETag, weak) {
		return notModified{etag: m.ETag, cacheControl: manifestCache}, nil
	}
	return manifestResponse{body: m.JSON, etag: m.ETag}, nil
}

// GetDeploymentYAML serves one ApplicationDeployment YAML by digest.
func (s *Server) GetDeploymentYAML(ctx context.Context, req api.GetDeploymentYAMLRequestObject) (api.GetDeploymentYAMLResponseObject, error) {
	b, err := s.fleet.DeploymentYAML(ctx, clientFrom(ctx), req.DeploymentId, req.Digest)
	if err != nil {
		return nil, err
	}
	return api.GetDeploymentYAML200ApplicationyamlResponse{Body: bytes.NewReader(b), ContentLength: int64(len(b)),
		Headers: api.GetDeploymentYAML200ResponseHeaders{ETag: `"` + req.Digest + `"`, CacheControl: immutableCache}}, nil
}

// GetBundle serves one bundle by digest.
func (s *Server) GetBundle(ctx context.Context, req api.GetBundleRequestObject) (api.GetBundleResponseObject, error) {
	b, err := s.fleet.Bundle(ctx, clientFrom(ctx), req.Digest)
	if err != nil {
		return nil, err
	}
	etag := `"` + req.Digest + `"`
	if req.Params.IfNoneMatch != nil && etagMatches(*req.Params.IfNoneMatch, etag, weak) {
		return notModified{etag: etag, cacheControl: immutableCache}, nil
	}
	return api.GetBundle200ApplicationvndMargoBundleV1TarGzipResponse{Body: bytes.NewReader(b), ContentLength: int64(len(b)),
		Headers: api.GetBundle200ResponseHeaders{ETag: etag, CacheControl: immutableCache}}, nil
}

// PutDeviceCapabilities registers or updates a device.
func (s *Server) PutDeviceCapabilities(ctx context.Context, req api.PutDeviceCapabilitiesRequestObject) (api.PutDeviceCapabilitiesResponseObject, error) {
	raw, err := wholeDeviceBody(ctx, req.Body)
	if err != nil {
		return nil, err
	}
	created, err := s.fleet.PutCapabilities(ctx, clientFrom(ctx), req.DeviceId, raw)
	if err != nil {
		return nil, err
	}
	if created {
		return api.PutDeviceCapabilities201Response{}, nil
	}
	return api.PutDeviceCapabilities200Response{}, nil
}

// DeleteDeviceCapabilities unregisters a device.
func (s *Server) DeleteDeviceCapabilities(ctx context.Context, req api.DeleteDeviceCapabilitiesRequestObject) (api.DeleteDeviceCapabilitiesResponseObject, error) {
	if err := s.fleet.Unregister(ctx, clientFrom(ctx), req.DeviceId); err != nil {
		return nil, err
	}
	return api.DeleteDeviceCapabilities204Response{}, nil
}

// PostDeploymentStatus records a status report.
func (s *Server) PostDeploymentStatus(ctx context.Context, req api.PostDeploymentStatusRequestObject) (api.PostDeploymentStatusResponseObject, error) {
	raw, err := wholeDeviceBody(ctx, req.Body)
	if err != nil {
		return nil, err
	}
	first, err := s.fleet.ReportStatus(ctx, clientFrom(ctx), req.DeploymentId, raw)
	if err != nil {
		return nil, err
	}
	if first {
		return api.PostDeploymentStatus201Response{}, nil
	}
	return api.PostDeploymentStatus200Response{}, nil
}

func rawJSON[T ~[]byte](body *T) ([]byte, error) {
	if body == nil {
		return nil, &lifecycle.Error{Code: lifecycle.EMALFORMED, Type: "invalid-request", Message: "A JSON request body is required."}
	}
	return []byte(*body), nil
}
