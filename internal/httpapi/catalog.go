package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/url"
	"strings"

	"github.com/wfm-dev/wfm/api"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
)

// CreateApplicationVersion adds an application version from its description.
func (s *Server) CreateApplicationVersion(ctx context.Context, req api.CreateApplicationVersionRequestObject) (api.CreateApplicationVersionResponseObject, error) {
	var raw []byte
	mediaType := catalog.MediaYAML
	switch {
	case req.JSONBody != nil:
		raw, mediaType = *req.JSONBody, catalog.MediaJSON
	case req.Body != nil:
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, bodyReadError(err)
		}
		raw = b
	default:
		return nil, &lifecycle.Error{Code: lifecycle.EUNSUPPORTEDTYPE, Type: "unsupported-media-type",
			Message: "Send the application description as application/yaml or application/json."}
	}
	v, created, err := s.catalog.Add(ctx, raw, mediaType)
	if err != nil {
		return nil, err
	}
	body, err := s.versionBody(v, false)
	if err != nil {
		return nil, err
	}
	loc := versionPath(v)
	etag := jsonETag(v)
	if created {
		return api.CreateApplicationVersion201JSONResponse{Body: body, Headers: api.CreateApplicationVersion201ResponseHeaders{Location: loc, ETag: etag}}, nil
	}
	return api.CreateApplicationVersion200JSONResponse{Body: body, Headers: api.CreateApplicationVersion200ResponseHeaders{Location: loc, ETag: etag}}, nil
}

// ListApplications lists applications with their latest version.
func (s *Server) ListApplications(ctx context.Context, req api.ListApplicationsRequestObject) (api.ListApplicationsResponseObject, error) {
	as, next, err := s.catalog.Applications(ctx, deref(req.Params.Limit), deref(req.Params.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListApplications200JSONResponse{Items: make([]api.Application, 0, len(as))}
	for _, a := range as {
		out.Items = append(out.Items, applicationBody(a))
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}

// GetApplication returns one application.
func (s *Server) GetApplication(ctx context.Context, req api.GetApplicationRequestObject) (api.GetApplicationResponseObject, error) {
	a, err := s.catalog.Application(ctx, req.ApplicationId)
	if err != nil {
		return nil, err
	}
	body := applicationBody(a)
	b, _ := json.Marshal(body)
	return api.GetApplication200JSONResponse{Body: body, Headers: api.GetApplication200ResponseHeaders{ETag: strongETag(b)}}, nil
}

// ListApplicationVersions lists an application's versions in SemVer order.
func (s *Server) ListApplicationVersions(ctx context.Context, req api.ListApplicationVersionsRequestObject) (api.ListApplicationVersionsResponseObject, error) {
	vs, next, err := s.catalog.Versions(ctx, req.ApplicationId, deref(req.Params.Limit), deref(req.Params.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListApplicationVersions200JSONResponse{Items: make([]api.ApplicationVersion, 0, len(vs))}
	for _, v := range vs {
		body, err := s.versionBody(v, false)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, body)
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}

// GetApplicationVersion returns one version as JSON or as the original bytes.
func (s *Server) GetApplicationVersion(ctx context.Context, req api.GetApplicationVersionRequestObject) (api.GetApplicationVersionResponseObject, error) {
	v, err := s.catalog.Get(ctx, req.ApplicationId, req.Version)
	if err != nil {
		return nil, err
	}
	accept := ""
	if r := requestFrom(ctx); r != nil {
		accept = r.Header.Get("Accept")
	}
	media, ok := negotiate(accept, "application/json", "application/yaml")
	if !ok {
		return nil, &lifecycle.Error{Code: lifecycle.ENOTACCEPTABLE, Type: "not-acceptable",
			Message: "A version is available as application/json or application/yaml."}
	}
	etag := jsonETag(v)
	if media == "application/yaml" {
		etag = `"` + strings.TrimPrefix(v.Digest, "sha256:") + `"`
	}
	if req.Params.IfNoneMatch != nil && etagMatches(*req.Params.IfNoneMatch, etag, weak) {
		return api.GetApplicationVersion304Response{Headers: api.GetApplicationVersion304ResponseHeaders{ETag: etag}}, nil
	}
	if media == "application/yaml" {
		return api.GetApplicationVersion200ApplicationyamlResponse{Body: bytes.NewReader(v.Raw), ContentLength: int64(len(v.Raw)),
			Headers: api.GetApplicationVersion200ResponseHeaders{ETag: etag}}, nil
	}
	body, err := s.versionBody(v, true)
	if err != nil {
		return nil, err
	}
	return api.GetApplicationVersion200JSONResponse{Body: body, Headers: api.GetApplicationVersion200ResponseHeaders{ETag: etag}}, nil
}

// DeleteApplicationVersion deletes a version that nothing uses.
func (s *Server) DeleteApplicationVersion(ctx context.Context, req api.DeleteApplicationVersionRequestObject) (api.DeleteApplicationVersionResponseObject, error) {
	if err := s.catalog.Delete(ctx, req.ApplicationId, req.Version); err != nil {
		return nil, err
	}
	return api.DeleteApplicationVersion204Response{}, nil
}

// YankApplicationVersion yanks a version.
func (s *Server) YankApplicationVersion(ctx context.Context, req api.YankApplicationVersionRequestObject) (api.YankApplicationVersionResponseObject, error) {
	reason := ""
	if req.Body != nil {
		reason = deref(req.Body.Reason)
	}
	v, err := s.catalog.Yank(ctx, req.ApplicationId, req.Version, reason)
	if err != nil {
		return nil, err
	}
	body, err := s.versionBody(v, false)
	if err != nil {
		return nil, err
	}
	return api.YankApplicationVersion200JSONResponse(body), nil
}

// UnyankApplicationVersion undoes a yank.
func (s *Server) UnyankApplicationVersion(ctx context.Context, req api.UnyankApplicationVersionRequestObject) (api.UnyankApplicationVersionResponseObject, error) {
	v, err := s.catalog.Unyank(ctx, req.ApplicationId, req.Version)
	if err != nil {
		return nil, err
	}
	body, err := s.versionBody(v, false)
	if err != nil {
		return nil, err
	}
	return api.UnyankApplicationVersion200JSONResponse(body), nil
}

// versionBody renders a version; withDescription adds the description JSON.
func (s *Server) versionBody(v catalog.Version, withDescription bool) (api.ApplicationVersion, error) {
	d, err := s.catalog.Description(v)
	if err != nil {
		return api.ApplicationVersion{}, err
	}
	out := api.ApplicationVersion{
		ApplicationId: v.ApplicationID,
		Version:       v.Version.String(),
		Name:          v.Name,
		Digest:        v.Digest,
		MediaType:     api.ApplicationVersionMediaType(v.MediaType),
		CreatedAt:     v.CreatedAt,
		Yanked:        v.Yanked,
		Lifecycle:     lifecycleRules(d),
	}
	if v.Yanked {
		at, reason := v.YankedAt, v.YankedReason
		out.YankedAt = &at
		if reason != "" {
			out.YankedReason = &reason
		}
	}
	if withDescription {
		doc := json.RawMessage(v.Document)
		out.Description = &doc
	}
	return out, nil
}

// lifecycleRules renders a description's lifecycle rules with defaults applied.
func lifecycleRules(d *margo.ApplicationDescription) api.LifecycleRules {
	l := d.Lifecycle
	out := api.LifecycleRules{Rollback: api.RollbackRules{Allowed: l.Rollback.Allowed}}
	for _, st := range l.Upgrade.EffectiveStrategies() {
		out.Strategies = append(out.Strategies, api.UpgradeStrategy(st))
	}
	if v := l.Upgrade.MinUpgradeFrom; v != nil {
		out.MinUpgradeFrom = ptr(v.String())
	}
	if dr := l.Upgrade.Drain; dr != nil {
		out.Drain = &api.DrainRules{Required: dr.Required, Timeout: dr.EffectiveTimeout().String(), OnTimeout: api.DrainTimeoutAction(dr.EffectiveOnTimeout())}
	}
	if v := l.Rollback.MinVersion; v != nil {
		out.Rollback.MinVersion = ptr(v.String())
	}
	if l.Rollback.Window > 0 {
		out.Rollback.Window = ptr(l.Rollback.Window.String())
	}
	if l.Rollback.Reason != "" {
		out.Rollback.Reason = ptr(l.Rollback.Reason)
	}
	for _, sub := range l.Substitutions {
		n := api.DurationNotice{Field: "/lifecycle" + sub.Pointer, Declared: sub.Declared, Message: sub.Message()}
		if sub.Used != 0 {
			n.Used = ptr(sub.Used.String())
		}
		if out.Notices == nil {
			out.Notices = &[]api.DurationNotice{}
		}
		*out.Notices = append(*out.Notices, n)
	}
	if len(d.Parameters) > 0 {
		ps := make(map[string]api.ParameterRules, len(d.Parameters))
		for name := range d.Parameters {
			ps[name] = api.ParameterRules{OnUpgrade: api.ParameterRulesOnUpgrade(l.OnUpgradeOf(name))}
		}
		out.Parameters = &ps
	}
	return out
}

func applicationBody(a catalog.Application) api.Application {
	return api.Application{Id: a.ID, Name: a.Name, LatestVersion: a.LatestVersion.String(), VersionCount: a.VersionCount, CreatedAt: a.CreatedAt}
}

func versionPath(v catalog.Version) string {
	return "/mgmt/v1/applications/" + url.PathEscape(v.ApplicationID) + "/versions/" + url.PathEscape(v.Version.String())
}

// jsonETag is the strong validator of a version's JSON representation: it
// changes exactly when the representation does (content or yank state).
func jsonETag(v catalog.Version) string {
	h := sha256.New()
	h.Write([]byte(v.Digest))
	h.Write([]byte{0})
	if v.Yanked {
		h.Write([]byte(v.YankedAt.UTC().Format("2006-01-02T15:04:05.999999999Z")))
		h.Write([]byte{0})
		h.Write([]byte(v.YankedReason))
	}
	return `"j-` + hex.EncodeToString(h.Sum(nil))[:40] + `"`
}

func strongETag(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:20]) + `"`
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func ptr[T any](v T) *T { return &v }
