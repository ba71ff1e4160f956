// Package catalog stores Margo application descriptions as immutable,
// SemVer-ordered application versions, and answers questions about them.
// Parsing and validation live in internal/margo; storage behind Store.
package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
	"github.com/wfm-dev/wfm/internal/page"
)

// Media types a description may be posted as.
const (
	MediaYAML = margo.MediaTypeYAML
	MediaJSON = margo.MediaTypeJSON
)

// MaxYankReason bounds the reason given for a yank.
const MaxYankReason = 1024

// Version is one stored application version.
type Version struct {
	ApplicationID string
	Version       lifecycle.Version
	Name          string // metadata.name
	Digest        string // sha256:<hex> of Raw
	MediaType     string // how Raw was posted
	Raw           []byte // the description exactly as posted
	Document      []byte // the description as JSON
	CreatedAt     time.Time
	Yanked        bool
	YankedAt      time.Time
	YankedReason  string
}

// Application is an application and a summary of its versions.
type Application struct {
	ID            string
	Name          string            // metadata.name of LatestVersion
	LatestVersion lifecycle.Version // highest non-yanked version; highest of all when every one is yanked
	VersionCount  int
	CreatedAt     time.Time
}

// Store is what the catalog needs from storage. Implementations translate
// their errors into *lifecycle.Error codes as documented per method.
type Store interface {
	// InsertVersion stores v (and its application, on its first version) in
	// one transaction. When the version already exists it stores nothing and
	// returns the stored one with inserted == false.
	InsertVersion(ctx context.Context, v Version) (stored Version, inserted bool, err error)
	// Version returns one version. Returns ENOTFOUND if there is none.
	Version(ctx context.Context, appID string, v lifecycle.Version) (Version, error)
	// Versions returns up to limit versions of appID in SemVer order whose
	// SortKey is greater than after. Returns ENOTFOUND if the application
	// does not exist.
	Versions(ctx context.Context, appID string, after string, limit int) ([]Version, error)
	// Application returns one application. Returns ENOTFOUND if there is none.
	Application(ctx context.Context, appID string) (Application, error)
	// Applications returns up to limit applications ordered by id, with ids
	// greater than after.
	Applications(ctx context.Context, after string, limit int) ([]Application, error)
	// SetYanked sets the yank state of a version at at (its yank time when
	// yanked) and returns it. Returns ENOTFOUND if there is no such version.
	SetYanked(ctx context.Context, appID string, v lifecycle.Version, yanked bool, reason string, at time.Time) (Version, error)
	// DeleteVersion deletes a version, and its application with its last
	// version, at at. Returns ENOTFOUND if there is no such version,
	// ECONFLICT (type "version-in-use") while anything refers to it.
	DeleteVersion(ctx context.Context, appID string, v lifecycle.Version, at time.Time) error
}

// Service is the catalog's use cases.
type Service struct {
	store Store
	now   func() time.Time

	mu    sync.Mutex
	descs map[string]*margo.ApplicationDescription // parsed descriptions by digest (immutable)
}

// maxCachedDescriptions bounds the parsed-description cache.
const maxCachedDescriptions = 4096

// NewService returns a catalog over store; now is the clock.
func NewService(store Store, now func() time.Time) *Service {
	return &Service{store: store, now: now, descs: map[string]*margo.ApplicationDescription{}}
}

// All returns every version of an application in SemVer order.
//
// Returns ENOTFOUND if the application does not exist.
func (s *Service) All(ctx context.Context, appID string) ([]Version, error) {
	var all []Version
	after := ""
	for {
		vs, err := s.store.Versions(ctx, appID, after, page.MaxLimit)
		if err != nil {
			return nil, err
		}
		all = append(all, vs...)
		if len(vs) < page.MaxLimit {
			return all, nil
		}
		after = vs[len(vs)-1].Version.SortKey()
	}
}

// Add parses, validates and stores a description posted as mediaType. It
// returns the stored version and whether it was created now; posting content
// equivalent to a stored version again creates nothing.
//
// Returns EUNSUPPORTEDTYPE for another media type; EMALFORMED, ETOOLARGE or
// EINVALID (type "invalid-description", every problem with its pointer) as
// margo.ParseDescription does; ECONFLICT (type "version-exists") if the
// version exists with different content.
func (s *Service) Add(ctx context.Context, raw []byte, mediaType string) (Version, bool, error) {
	if mediaType != MediaYAML && mediaType != MediaJSON {
		return Version{}, false, &lifecycle.Error{Code: lifecycle.EUNSUPPORTEDTYPE, Type: "unsupported-media-type",
			Message: "An application description must be sent as application/yaml or application/json."}
	}
	parsed, err := margo.ParseDescription(raw, mediaType)
	if err != nil {
		return Version{}, false, err
	}
	d := parsed.Description
	v := Version{
		ApplicationID: d.ID,
		Version:       d.Version,
		Name:          d.Metadata.Name,
		Digest:        margo.Digest(raw),
		MediaType:     mediaType,
		Raw:           bytes.Clone(raw),
		Document:      parsed.JSON,
		CreatedAt:     s.now().UTC(),
	}
	stored, inserted, err := s.store.InsertVersion(ctx, v)
	if err != nil {
		return Version{}, false, err
	}
	if inserted {
		return stored, true, nil
	}
	if stored.Digest == v.Digest || sameJSON(stored.Document, v.Document) {
		return stored, false, nil
	}
	return Version{}, false, &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "version-exists",
		Message: "Version " + v.Version.String() + " of " + v.ApplicationID + " is already stored with different content (digest " +
			stored.Digest + "); versions are immutable: publish the change under a new version.",
		Extra: map[string]any{"applicationId": v.ApplicationID, "version": v.Version.String(), "storedDigest": stored.Digest}}
}

// Get returns one version, spelled in any SemVer spelling ("1.0" is "1.0.0").
//
// Returns EINVALID (type "invalid-version") if version is not SemVer and
// ENOTFOUND if there is no such version.
func (s *Service) Get(ctx context.Context, appID, version string) (Version, error) {
	v, err := lifecycle.ParseVersion(version)
	if err != nil {
		return Version{}, err
	}
	return s.store.Version(ctx, appID, v)
}

// Description returns the parsed description of a stored version. The
// result is shared: callers must not modify it. A lifecycle duration that a
// version stored before the ranges were rules declares out of range is
// replaced by the value used instead (listed in Lifecycle.Substitutions).
//
// Returns EINTERNAL if the stored bytes no longer parse (they were valid
// when stored, so that is a bug).
func (s *Service) Description(v Version) (*margo.ApplicationDescription, error) {
	s.mu.Lock()
	d, ok := s.descs[v.Digest]
	s.mu.Unlock()
	if ok {
		return d, nil
	}
	parsed, err := margo.ParseStoredDescription(v.Raw, v.MediaType)
	if err != nil {
		return nil, &lifecycle.Error{Code: lifecycle.EINTERNAL, Message: "stored description " + v.ApplicationID + "@" + v.Version.String() + " no longer parses: " + err.Error()}
	}
	s.mu.Lock()
	if len(s.descs) >= maxCachedDescriptions {
		clear(s.descs)
	}
	s.descs[v.Digest] = parsed.Description
	s.mu.Unlock()
	return parsed.Description, nil
}

// Versions returns a page of an application's versions in SemVer order and
// the cursor of the next page ("" at the end).
//
// Returns EINVALID for a bad limit or cursor, ENOTFOUND if the application
// does not exist.
func (s *Service) Versions(ctx context.Context, appID string, limit int, cursor string) ([]Version, string, error) {
	limit, after, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	vs, err := s.store.Versions(ctx, appID, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	vs, next := page.Trim(vs, limit, func(x Version) string { return x.Version.SortKey() })
	return vs, next, nil
}

// Application returns one application. Returns ENOTFOUND if there is none.
func (s *Service) Application(ctx context.Context, appID string) (Application, error) {
	return s.store.Application(ctx, appID)
}

// Applications returns a page of applications ordered by id and the cursor
// of the next page ("" at the end). Returns EINVALID for a bad limit or cursor.
func (s *Service) Applications(ctx context.Context, limit int, cursor string) ([]Application, string, error) {
	limit, after, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	as, err := s.store.Applications(ctx, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	as, next := page.Trim(as, limit, func(x Application) string { return x.ID })
	return as, next, nil
}

// Yank marks a version yanked with a reason (kept for existing deployments,
// refused for new ones, upgrades and as an intermediate hop). Yanking again
// updates the reason.
//
// Returns EINVALID for a bad version or an over-long reason, ENOTFOUND if
// there is no such version.
func (s *Service) Yank(ctx context.Context, appID, version, reason string) (Version, error) {
	v, err := lifecycle.ParseVersion(version)
	if err != nil {
		return Version{}, err
	}
	if len(reason) > MaxYankReason {
		return Version{}, &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-request", Message: "The yank reason is too long.",
			Fields: []lifecycle.FieldError{{Pointer: "/reason", Detail: "at most 1024 bytes"}}}
	}
	return s.store.SetYanked(ctx, appID, v, true, strings.TrimSpace(reason), s.now().UTC())
}

// Unyank undoes Yank. Returns EINVALID for a bad version, ENOTFOUND if there
// is no such version.
func (s *Service) Unyank(ctx context.Context, appID, version string) (Version, error) {
	v, err := lifecycle.ParseVersion(version)
	if err != nil {
		return Version{}, err
	}
	return s.store.SetYanked(ctx, appID, v, false, "", s.now().UTC())
}

// Delete deletes a version no deployment uses.
//
// Returns EINVALID for a bad version, ENOTFOUND if there is no such version,
// ECONFLICT (type "version-in-use") while a deployment refers to it.
func (s *Service) Delete(ctx context.Context, appID, version string) error {
	v, err := lifecycle.ParseVersion(version)
	if err != nil {
		return err
	}
	return s.store.DeleteVersion(ctx, appID, v, s.now().UTC())
}

// sameJSON reports whether two JSON documents have the same content, member
// order aside (the store may normalise order).
func sameJSON(a, b []byte) bool {
	var x, y any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
