package margo

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// BundleMediaType is the media type of a deployment bundle: a gzip
// compressed tar whose root holds one ApplicationDeployment YAML file per
// deployment.
const BundleMediaType = "application/vnd.margo.bundle.v1+tar+gzip"

// Problem types of BuildBundle and RenderManifest (all EINVALID).
const (
	ProblemEmptyBundle     = "empty-bundle"     // no files: Margo never serves an empty archive
	ProblemInvalidBundle   = "invalid-bundle"   // a file name is unusable or repeated
	ProblemInvalidManifest = "invalid-manifest" // a version, deployment id or document is unusable
)

// maxBundleNameLength is what a USTAR header holds without a prefix split.
const maxBundleNameLength = 100

var (
	bundleNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	digestPattern     = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// Digest returns the content digest of b as Margo writes it:
// "sha256:<64 lowercase hex digits>", over exactly these bytes.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ValidDigest reports whether s is a digest as Digest writes it, and so a
// usable {digest} path segment.
func ValidDigest(s string) bool { return digestPattern.MatchString(s) }

// ETag returns the strong entity tag of b: the quoted digest,
// "\"sha256:<hex>\"", over exactly these bytes.
func ETag(b []byte) string { return `"` + Digest(b) + `"` }

// DeploymentURL is the content-addressed URL of one deployment document:
// /api/v1/deployments/{deploymentId}/{digest}.
func DeploymentURL(deploymentID, digest string) string {
	return "/api/v1/deployments/" + deploymentID + "/" + digest
}

// BundleURL is the content-addressed URL of a bundle: /api/v1/bundles/{digest}.
func BundleURL(digest string) string { return "/api/v1/bundles/" + digest }

// BundleFile is one file of a bundle.
type BundleFile struct {
	// Name is the file name at the archive root: letters, digits, '.', '_'
	// and '-', starting with a letter or digit, at most 100 bytes.
	Name string
	Data []byte
}

// BuildBundle returns the deterministic tar+gzip archive (BundleMediaType)
// of files: the same set of files gives the same bytes, whatever their
// order. It is AssembleBundle of one NewBundlePiece per file, sorted by name
// (bytewise): entries are regular files at the archive root in USTAR
// format, mode 0644, uid and gid 0, no user or group name, modification time
// the Unix epoch; the gzip header has no name, no modification time, and
// operating system 255 ("unknown"). The bytes are deterministic for one Go
// toolchain; a newer compress/flate may compress differently, so store and
// serve the bytes built at publishing time rather than rebuilding old
// bundles.
//
// Since bundles are assembled from per-file pieces (issue 11), the bytes of
// a bundle differ from the whole-stream BestCompression archives built
// before: the same files give a new digest. That is accepted: stored bundles
// are never rebuilt, the store keeps serving the bytes it stored, and a
// device fetches a bundle only by the digest its manifest names.
//
// Returns EINVALID with type ProblemEmptyBundle if files is empty (Margo:
// an empty archive is never served; the manifest's bundle is null then), and
// with type ProblemInvalidBundle if a name is unusable or repeated.
func BuildBundle(files []BundleFile) ([]byte, error) {
	if len(files) == 0 {
		return nil, emptyBundleError()
	}
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b BundleFile) int { return strings.Compare(a.Name, b.Name) })
	pieces := make([]BundlePiece, 0, len(sorted))
	for i, f := range sorted {
		if err := checkBundleFileName(f.Name); err != nil {
			return nil, err
		}
		if i > 0 && sorted[i-1].Name == f.Name {
			return nil, &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemInvalidBundle,
				Message: fmt.Sprintf("bundle file name %q is given twice", f.Name)}
		}
	}
	for _, f := range sorted {
		p, err := NewBundlePiece(f.Name, f.Data)
		if err != nil {
			return nil, err
		}
		pieces = append(pieces, p)
	}
	return AssembleBundle(pieces)
}

// ManifestEntry is one deployment of a state manifest: its id and the exact
// ApplicationDeployment bytes served for it (RenderDeployment's output).
type ManifestEntry struct {
	DeploymentID string
	YAML         []byte
}

// StateManifest is the input of RenderManifest: one client's manifest
// version and every deployment it currently desires.
type StateManifest struct {
	Version     uint64
	Deployments []ManifestEntry
}

// manifestDoc is rc.3's UnsignedAppStateManifest; member order is the
// order written.
type manifestDoc struct {
	ManifestVersion uint64          `json:"manifestVersion"`
	Bundle          *bundleRef      `json:"bundle"`
	Deployments     []deploymentRef `json:"deployments"`
}

type bundleRef struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	SizeBytes int64  `json:"sizeBytes"`
	URL       string `json:"url"`
}

type deploymentRef struct {
	DeploymentID string `json:"deploymentId"`
	Digest       string `json:"digest"`
	SizeBytes    int64  `json:"sizeBytes"`
	URL          string `json:"url"`
}

// RenderManifest returns a client's state manifest (rc.3
// UnsignedAppStateManifest) and the bundle it names, both computed from the
// deployments' bytes, so the digests, sizes and URLs in the manifest always
// agree with the bytes served:
//
//	{
//	  "manifestVersion": 7,
//	  "bundle": {"mediaType": "application/vnd.margo.bundle.v1+tar+gzip", "digest": "sha256:…", "sizeBytes": 1234, "url": "/api/v1/bundles/sha256:…"},
//	  "deployments": [{"deploymentId": "…", "digest": "sha256:…", "sizeBytes": 567, "url": "/api/v1/deployments/…/sha256:…"}]
//	}
//
// Deployments are sorted by deploymentId; the bundle is BuildBundle of one
// BundleFileName(deploymentId) file per deployment, and the JSON is
// ManifestJSON of the deployments' digests and sizes and the bundle's. With no deployments, bundle is
// null, deployments is [] and the returned bundle bytes are nil. The JSON is
// deterministic: members in the order above, indented by two spaces, always
// ending in one newline; manifestVersion is written as an integer, exactly
// (up to 18446744073709551615). Serve manifestJSON as it is, with
// ETag(manifestJSON); serve each YAML at its URL and the bundle at
// BundleURL(Digest(bundle)).
//
// Returns EINVALID (type ProblemInvalidManifest) if Version is 0 (Margo
// manifest versions start at 1), a deployment id is not a canonical
// lowercase UUID or is given twice, or a YAML is empty.
func RenderManifest(m StateManifest) (manifestJSON []byte, bundle []byte, err error) {
	if m.Version == 0 {
		return nil, nil, errManifestVersion()
	}
	entries := slices.Clone(m.Deployments)
	slices.SortFunc(entries, func(a, b ManifestEntry) int { return strings.Compare(a.DeploymentID, b.DeploymentID) })
	docs := make([]ManifestDocument, 0, len(entries))
	for _, e := range entries {
		docs = append(docs, ManifestDocument{DeploymentID: e.DeploymentID, Digest: Digest(e.YAML), SizeBytes: int64(len(e.YAML))})
	}
	if err := checkManifestDocuments(docs); err != nil {
		return nil, nil, err
	}
	var bundleDigest string
	if len(entries) > 0 {
		pieces := make([]BundlePiece, 0, len(entries))
		for _, e := range entries {
			p, err := NewBundlePiece(BundleFileName(e.DeploymentID), e.YAML)
			if err != nil {
				return nil, nil, err
			}
			pieces = append(pieces, p)
		}
		if bundle, err = AssembleBundle(pieces); err != nil {
			return nil, nil, err
		}
		bundleDigest = Digest(bundle)
	}
	js, err := ManifestJSON(m.Version, docs, bundleDigest, int64(len(bundle)))
	if err != nil {
		return nil, nil, err
	}
	return js, bundle, nil
}

// ManifestDocument is one deployment in a state manifest, without its bytes.
type ManifestDocument struct {
	DeploymentID string
	Digest       string // of the YAML
	SizeBytes    int64
}

// ManifestJSON renders the client's state manifest (rc.3
// UnsignedAppStateManifest), exactly the bytes RenderManifest writes for the
// same content: deployments sorted by id, bundle null if and only if docs is
// empty. bundleDigest and bundleSize describe the bundle of exactly these
// docs (AssembleBundle of their pieces, sorted by BundleFileName); they are
// ignored when docs is empty. It reads no document, so a store that keeps
// each document's digest and size renders a manifest without its bytes.
//
// Returns EINVALID (type ProblemInvalidManifest) if version is 0, a
// deployment id is not a canonical lowercase UUID or is given twice, a
// digest is not one Digest writes, a size is not positive (a document is
// never empty), or, with docs, the bundle's digest or size is unusable.
func ManifestJSON(version uint64, docs []ManifestDocument, bundleDigest string, bundleSize int64) ([]byte, error) {
	if version == 0 {
		return nil, errManifestVersion()
	}
	sorted := slices.Clone(docs)
	slices.SortFunc(sorted, func(a, b ManifestDocument) int { return strings.Compare(a.DeploymentID, b.DeploymentID) })
	if err := checkManifestDocuments(sorted); err != nil {
		return nil, err
	}
	doc := manifestDoc{ManifestVersion: version, Deployments: make([]deploymentRef, 0, len(sorted))}
	for _, d := range sorted {
		doc.Deployments = append(doc.Deployments, deploymentRef{
			DeploymentID: d.DeploymentID, Digest: d.Digest, SizeBytes: d.SizeBytes, URL: DeploymentURL(d.DeploymentID, d.Digest),
		})
	}
	if len(sorted) > 0 {
		if !ValidDigest(bundleDigest) {
			return nil, invalidManifest("bundle digest %q is not sha256:<64 lowercase hex digits>", truncate(bundleDigest))
		}
		if bundleSize <= 0 {
			return nil, invalidManifest("bundle size %d must be positive", bundleSize)
		}
		doc.Bundle = &bundleRef{MediaType: BundleMediaType, Digest: bundleDigest, SizeBytes: bundleSize, URL: BundleURL(bundleDigest)}
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("margo: encode state manifest: %w", err)
	}
	return append(out, '\n'), nil
}

// checkManifestDocuments checks docs sorted by id: canonical ids, none
// twice, usable digests and sizes.
func checkManifestDocuments(docs []ManifestDocument) error {
	for i, d := range docs {
		switch {
		case !renderUUIDPattern.MatchString(d.DeploymentID):
			return invalidManifest("deployment id %q is not a UUID in canonical lowercase form", truncate(d.DeploymentID))
		case i > 0 && docs[i-1].DeploymentID == d.DeploymentID:
			return invalidManifest("deployment %s is listed twice", d.DeploymentID)
		case !ValidDigest(d.Digest):
			return invalidManifest("deployment %s: digest %q is not sha256:<64 lowercase hex digits>", d.DeploymentID, truncate(d.Digest))
		case d.SizeBytes <= 0:
			return invalidManifest("deployment %s has an empty document", d.DeploymentID)
		}
	}
	return nil
}

func invalidManifest(format string, args ...any) error {
	return &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemInvalidManifest, Message: fmt.Sprintf(format, args...)}
}

func errManifestVersion() error { return invalidManifest("manifestVersion must be at least 1") }
