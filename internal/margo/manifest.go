package margo

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

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

// bundleCompression is the fixed gzip level of bundles. A level is part of
// the bytes, and so of the digest; it never changes silently.
const bundleCompression = gzip.BestCompression

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
// order. Entries are regular files at the archive root, sorted by name
// (bytewise), in USTAR format, mode 0644, uid and gid 0, no user or group
// name, modification time the Unix epoch. The gzip header has no name, no
// modification time, and operating system 255 ("unknown"); the compression
// level is fixed (best). The bytes are deterministic for one Go toolchain;
// a newer compress/flate may compress differently, so store and serve the
// bytes built at publishing time rather than rebuilding old bundles.
//
// Returns EINVALID with type ProblemEmptyBundle if files is empty (Margo:
// an empty archive is never served; the manifest's bundle is null then), and
// with type ProblemInvalidBundle if a name is unusable or repeated.
func BuildBundle(files []BundleFile) ([]byte, error) {
	if len(files) == 0 {
		return nil, &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemEmptyBundle,
			Message: "a bundle needs at least one file: Margo never serves an empty archive (the manifest's bundle is null instead)"}
	}
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b BundleFile) int { return strings.Compare(a.Name, b.Name) })
	for i, f := range sorted {
		if len(f.Name) > maxBundleNameLength || !bundleNamePattern.MatchString(f.Name) {
			return nil, &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemInvalidBundle,
				Message: fmt.Sprintf("bundle file name %q must be 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", truncate(f.Name), maxBundleNameLength)}
		}
		if i > 0 && sorted[i-1].Name == f.Name {
			return nil, &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemInvalidBundle,
				Message: fmt.Sprintf("bundle file name %q is given twice", f.Name)}
		}
	}

	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, bundleCompression)
	if err != nil {
		return nil, fmt.Errorf("margo: bundle: %w", err)
	}
	zw.Header = gzip.Header{OS: 255} // no name, no comment, no mtime
	tw := tar.NewWriter(zw)
	epoch := time.Unix(0, 0)
	for _, f := range sorted {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     f.Name,
			Mode:     0o644,
			Size:     int64(len(f.Data)),
			ModTime:  epoch,
			Format:   tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("margo: bundle: %s: %w", f.Name, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("margo: bundle: %s: %w", f.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("margo: bundle: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("margo: bundle: %w", err)
	}
	return buf.Bytes(), nil
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
	SizeBytes int    `json:"sizeBytes"`
	URL       string `json:"url"`
}

type deploymentRef struct {
	DeploymentID string `json:"deploymentId"`
	Digest       string `json:"digest"`
	SizeBytes    int    `json:"sizeBytes"`
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
// "<deploymentId>.yaml" file per deployment. With no deployments, bundle is
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
	invalid := func(format string, args ...any) error {
		return &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemInvalidManifest, Message: fmt.Sprintf(format, args...)}
	}
	if m.Version == 0 {
		return nil, nil, invalid("manifestVersion must be at least 1")
	}
	entries := slices.Clone(m.Deployments)
	slices.SortFunc(entries, func(a, b ManifestEntry) int { return strings.Compare(a.DeploymentID, b.DeploymentID) })
	doc := manifestDoc{ManifestVersion: m.Version, Deployments: make([]deploymentRef, 0, len(entries))}
	files := make([]BundleFile, 0, len(entries))
	for i, e := range entries {
		switch {
		case !renderUUIDPattern.MatchString(e.DeploymentID):
			return nil, nil, invalid("deployment id %q is not a UUID in canonical lowercase form", truncate(e.DeploymentID))
		case i > 0 && entries[i-1].DeploymentID == e.DeploymentID:
			return nil, nil, invalid("deployment %s is listed twice", e.DeploymentID)
		case len(e.YAML) == 0:
			return nil, nil, invalid("deployment %s has an empty document", e.DeploymentID)
		}
		d := Digest(e.YAML)
		doc.Deployments = append(doc.Deployments, deploymentRef{
			DeploymentID: e.DeploymentID, Digest: d, SizeBytes: len(e.YAML), URL: DeploymentURL(e.DeploymentID, d),
		})
		files = append(files, BundleFile{Name: e.DeploymentID + ".yaml", Data: e.YAML})
	}
	if len(files) > 0 {
		bundle, err = BuildBundle(files)
		if err != nil {
			return nil, nil, err
		}
		d := Digest(bundle)
		doc.Bundle = &bundleRef{MediaType: BundleMediaType, Digest: d, SizeBytes: len(bundle), URL: BundleURL(d)}
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("margo: encode state manifest: %w", err)
	}
	return append(out, '\n'), bundle, nil
}
