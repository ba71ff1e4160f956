package margotest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// The operations the extra rules are about, by method and rc.3 path template.
const (
	opManifest   = "GET /api/v1/deployments"
	opDeployment = "GET /api/v1/deployments/{deploymentId}/{digest}"
	opBundle     = "GET /api/v1/bundles/{digest}"
	opStatus     = "POST /api/v1/deployments/{deploymentId}/status"
)

// BundleMediaType is the media type of the deployment bundle archive.
const BundleMediaType = "application/vnd.margo.bundle.v1+tar+gzip"

// The Cache-Control directives rc.3 documents for content-addressed responses
// ("private, max-age=31536000, immutable").
var immutableDirectives = []string{"private", "max-age=31536000", "immutable"}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Digest returns the Margo digest ("sha256:" and 64 lowercase hex digits) of b.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

var maxUint64 = new(big.Rat).SetInt(new(big.Int).SetUint64(^uint64(0)))

// checkUint64 checks a JSON number is an integer in [min, 2^64-1] (rc.3's
// ManifestVersion and sizeBytes are "type: number" with the range in prose).
func checkUint64(fail func(string, ...any), where string, v any, min int64) {
	n, ok := v.(json.Number)
	if !ok {
		return // a non-number is the schema's finding
	}
	r, ok := new(big.Rat).SetString(n.String())
	if !ok {
		fail("%s %s is not a number", where, n)
		return
	}
	switch {
	case !r.IsInt():
		fail("%s %s is not an integer (an unsigned 64-bit integer is required)", where, n)
	case r.Cmp(new(big.Rat).SetInt64(min)) < 0:
		fail("%s %s is below %d", where, n, min)
	case r.Cmp(maxUint64) > 0:
		fail("%s %s is above 2^64-1", where, n)
	}
}

func checkDigest(fail func(string, ...any), where string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		return "", false
	}
	if !digestRE.MatchString(s) {
		fail("%s %q is not a digest of the form sha256:<64 lowercase hex digits>", where, s)
		return s, false
	}
	return s, true
}

// strongETag reports whether v is one strong entity-tag (RFC 9110 §8.8.3): a
// quoted opaque-tag without the W/ prefix. It returns the opaque value.
func strongETag(v string) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		if c == '"' || c < 0x21 || c == 0x7f {
			return "", false
		}
	}
	return inner, true
}

func cacheDirectives(h http.Header) map[string]bool {
	set := map[string]bool{}
	for _, line := range h.Values("Cache-Control") {
		for _, d := range strings.Split(line, ",") {
			if d = strings.ToLower(strings.TrimSpace(d)); d != "" {
				set[d] = true
			}
		}
	}
	return set
}

func (x *exchange) extraResponseChecks(fail func(string, ...any), status int, h http.Header, body []byte) {
	switch x.key {
	case opManifest:
		switch status {
		case http.StatusOK:
			checkManifest(fail, body)
			etag := h.Get("ETag")
			switch opaque, ok := strongETag(etag); {
			case etag == "":
				fail("the manifest ETag is missing (the manifest ETag is a strong validator over the bytes served)")
			case !ok:
				fail("ETag %s is not one strong quoted entity-tag (no W/, one pair of quotes)", etag)
			case strings.HasPrefix(opaque, "sha256:") && opaque != Digest(body):
				fail("ETag %s looks like a digest but is not the digest of the manifest bytes served (%s)", etag, Digest(body))
			}
			cc := cacheDirectives(h)
			if cc["immutable"] || cc["public"] {
				fail("Cache-Control %q: the manifest is per client and changes; it must be neither public nor immutable", h.Get("Cache-Control"))
			}
		case http.StatusNotModified:
			checkNotModifiedETag(fail, h, "")
		}
	case opDeployment, opBundle:
		digest := x.params["digest"]
		switch status {
		case http.StatusOK:
			if _, ok := checkDigest(fail, "the {digest} path segment", digest); ok && Digest(body) != digest {
				fail("the body's digest is %s, not the %s of the {digest} path segment (content-addressed responses must match their URL)", Digest(body), digest)
			}
			cc := cacheDirectives(h)
			for _, d := range immutableDirectives {
				if !cc[d] {
					fail("Cache-Control %q lacks %q (content-addressed responses are \"private, max-age=31536000, immutable\")", h.Get("Cache-Control"), d)
				}
			}
			if etag := h.Get("ETag"); etag != "" {
				if _, ok := strongETag(etag); !ok {
					fail("ETag %s is not one strong quoted entity-tag", etag)
				} else if x.key == opBundle && etag != `"`+digest+`"` {
					fail("ETag %s is not the quoted digest %q of the bundle", etag, digest)
				}
			}
			if x.key == opDeployment {
				checkDeploymentText(fail, body)
			} else {
				checkBundleArchive(fail, body)
			}
		case http.StatusNotModified:
			if x.key == opBundle {
				checkNotModifiedETag(fail, h, `"`+digest+`"`)
			}
		}
	}
}

// checkNotModifiedETag: RFC 9110 §15.4.5, a 304 carries the ETag a 200 would.
func checkNotModifiedETag(fail func(string, ...any), h http.Header, want string) {
	etag := h.Get("ETag")
	switch _, ok := strongETag(etag); {
	case etag == "":
		fail("a 304 must carry the ETag a 200 would have (RFC 9110 §15.4.5)")
	case !ok:
		fail("ETag %s is not one strong quoted entity-tag", etag)
	case want != "" && etag != want:
		fail("ETag %s is not %s", etag, want)
	}
}

func checkManifest(fail func(string, ...any), body []byte) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&m) != nil || m == nil {
		return // the schema check has reported it
	}
	if v, ok := m["manifestVersion"]; ok {
		checkUint64(fail, "manifestVersion", v, 1)
	}
	deployments, _ := m["deployments"].([]any)
	bundle, hasBundle := m["bundle"]
	switch {
	case !hasBundle:
		// The schema check reports the missing member.
	case len(deployments) == 0 && bundle != nil:
		fail("bundle must be null when deployments is empty (an empty archive is never served)")
	case len(deployments) > 0 && bundle == nil:
		fail("bundle is null but there are %d deployments (bundle is null only when a client has no deployments)", len(deployments))
	}
	if b, ok := bundle.(map[string]any); ok {
		if mt, ok := b["mediaType"].(string); ok && mt != BundleMediaType {
			fail("bundle.mediaType %q must be %s", mt, BundleMediaType)
		}
		if d, ok := checkDigest(fail, "bundle.digest", b["digest"]); ok {
			if u, ok := b["url"].(string); ok && u != "/api/v1/bundles/"+d {
				fail("bundle.url %q is not /api/v1/bundles/{digest} with bundle.digest %s", u, d)
			}
		}
		if v, ok := b["sizeBytes"]; ok {
			checkUint64(fail, "bundle.sizeBytes", v, 0)
		}
	}
	for i, e := range deployments {
		d, ok := e.(map[string]any)
		if !ok {
			continue
		}
		where := fmt.Sprintf("deployments[%d]", i)
		digest, ok := checkDigest(fail, where+".digest", d["digest"])
		id, idOK := d["deploymentId"].(string)
		if u, uOK := d["url"].(string); ok && idOK && uOK {
			if want := "/api/v1/deployments/" + url.PathEscape(id) + "/" + digest; u != want {
				fail("%s.url %q is not %q (/api/v1/deployments/{deploymentId}/{digest} with this entry's deploymentId and digest)", where, u, want)
			}
		}
		if v, ok := d["sizeBytes"]; ok {
			checkUint64(fail, where+".sizeBytes", v, 0)
		}
	}
}

// checkDeploymentText: the body is one ApplicationDeployment YAML document.
func checkDeploymentText(fail func(string, ...any), body []byte) {
	if err := yamlMapping(body); err != nil {
		fail("the body is not an ApplicationDeployment YAML document: %v", err)
	}
}

func yamlMapping(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("not UTF-8 text")
	}
	var n yaml.Node // a Node keeps aliases unexpanded
	if err := yaml.Unmarshal(b, &n); err != nil {
		return err
	}
	if n.Kind != yaml.DocumentNode || len(n.Content) != 1 || n.Content[0].Kind != yaml.MappingNode {
		return errors.New("the document is not a YAML mapping")
	}
	return nil
}

// BundleProblems returns what is wrong with body as a Margo deployment bundle
// (rc.3: a gzip-compressed tar whose root holds one or more
// ApplicationDeployment YAML files, and nothing else), the findings Check
// reports for a bundle response, so that code building bundles can be held
// to Margo's rules without an HTTP exchange. It returns none for a good
// bundle.
func BundleProblems(body []byte) []string {
	var problems []string
	checkBundleArchive(func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }, body)
	return problems
}

// checkBundleArchive: rc.3, "a gzip-compressed tar whose root contains one or
// more ApplicationDeployment YAML files"; an empty archive is never served.
func checkBundleArchive(fail func(string, ...any), body []byte) {
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		fail("the bundle is not gzip-compressed: %v", err)
		return
	}
	tr := tar.NewReader(zr)
	files := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fail("the bundle is not a valid gzip-compressed tar: %v", err)
			return
		}
		name := strings.TrimPrefix(hdr.Name, "./")
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name != "" && name != "." {
				fail("the bundle has the directory %q: its YAML files belong at the archive's root", hdr.Name)
			}
			continue
		case tar.TypeReg:
		default:
			fail("the bundle entry %q is not a regular file (type %q)", hdr.Name, hdr.Typeflag)
			continue
		}
		files++
		if name == "" || strings.Contains(name, "/") || path.Clean(name) != name {
			fail("the bundle file %q is not at the archive's root", hdr.Name)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			fail("the bundle file %q cannot be read: %v", hdr.Name, err)
			return
		}
		if err := yamlMapping(data); err != nil {
			fail("the bundle file %q is not an ApplicationDeployment YAML document: %v", hdr.Name, err)
		}
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		fail("the bundle's gzip stream is damaged: %v", err)
	}
	if files == 0 {
		fail("the bundle archive holds no file (an empty archive is never served: bundle is null instead)")
	}
}

func (x *exchange) extraRequestChecks(fail func(string, ...any), body []byte) {
	if x.key != opStatus {
		return
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&m) != nil {
		return
	}
	if v, ok := m["adoptedManifestVersion"]; ok {
		checkUint64(fail, "adoptedManifestVersion", v, 1)
	}
}
