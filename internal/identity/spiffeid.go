package identity

import (
	"fmt"
	"strings"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Bounds from the SPIFFE ID specification (section 2.3): a SPIFFE ID is at
// most 2048 bytes, its trust domain (a URI host) at most 255.
const (
	MaxSPIFFEIDLength    = 2048
	MaxTrustDomainLength = 255
)

// spiffePrefix is the scheme and authority delimiter every SPIFFE ID starts
// with. The specification requires the scheme "spiffe"; we accept only the
// lowercase spelling, as go-spiffe does, so that one identity has one name.
const spiffePrefix = "spiffe://"

// SPIFFEID is a syntactically valid SPIFFE ID: a trust domain and a path
// (possibly empty). The zero SPIFFEID is "no ID": IsZero reports true and
// String returns "".
type SPIFFEID struct {
	trustDomain string
	path        string // "" or "/seg/seg..."
}

// ParseSPIFFEID reads a SPIFFE ID as the SPIFFE ID specification defines it:
// the lowercase scheme "spiffe", a non-empty trust domain of [a-z0-9.-_] (at
// most 255 bytes), and an optional path of "/"-separated segments of
// [A-Za-z0-9.-_]. Refused: uppercase scheme or trust domain, userinfo, a port,
// a query, a fragment, percent-encoding, empty segments ("//"), dot segments
// ("." and ".."), a trailing "/", and more than 2048 bytes in all.
//
// Returns EINVALID (type "invalid-spiffe-id") if s is not such an ID; the
// message says what is wrong.
func ParseSPIFFEID(s string) (SPIFFEID, error) {
	id, reason := parseSPIFFEID(s)
	if reason != "" {
		return SPIFFEID{}, &lifecycle.Error{
			Code:    lifecycle.EINVALID,
			Type:    "invalid-spiffe-id",
			Message: fmt.Sprintf("%s is not a valid SPIFFE ID: %s", quoteUntrusted(s), reason),
		}
	}
	return id, nil
}

// TrustDomain returns the trust domain, for example "example.org".
func (id SPIFFEID) TrustDomain() string { return id.trustDomain }

// Path returns the path: "" or a string starting with "/", without a trailing
// "/".
func (id SPIFFEID) Path() string { return id.path }

// Segments returns the path segments, nil for an empty path.
func (id SPIFFEID) Segments() []string {
	if id.path == "" {
		return nil
	}
	return strings.Split(id.path[1:], "/")
}

// IsZero reports whether id is the zero SPIFFEID.
func (id SPIFFEID) IsZero() bool { return id.trustDomain == "" }

// String returns the ID in its one canonical spelling, "" for the zero ID.
func (id SPIFFEID) String() string {
	if id.IsZero() {
		return ""
	}
	return spiffePrefix + id.trustDomain + id.path
}

// parseSPIFFEID returns the ID or, if s is not one, a reason a person
// understands.
func parseSPIFFEID(s string) (SPIFFEID, string) {
	switch {
	case s == "":
		return SPIFFEID{}, "it is empty"
	case len(s) > MaxSPIFFEIDLength:
		return SPIFFEID{}, fmt.Sprintf("it is %d bytes long; a SPIFFE ID has at most %d", len(s), MaxSPIFFEIDLength)
	case !strings.HasPrefix(s, spiffePrefix):
		if len(s) >= len(spiffePrefix) && strings.EqualFold(s[:len(spiffePrefix)], spiffePrefix) {
			return SPIFFEID{}, `the scheme must be written in lowercase: "spiffe://"`
		}
		return SPIFFEID{}, `it does not start with "spiffe://"`
	}
	rest := s[len(spiffePrefix):]
	td, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		td, path = rest[:i], rest[i:]
	}
	if reason := trustDomainProblem(td); reason != "" {
		return SPIFFEID{}, reason
	}
	if path != "" {
		if reason := pathProblem(path); reason != "" {
			return SPIFFEID{}, reason
		}
	}
	return SPIFFEID{trustDomain: td, path: path}, ""
}

// trustDomainProblem returns why td is not a SPIFFE trust domain name, or "".
func trustDomainProblem(td string) string {
	if td == "" {
		return "the trust domain is missing"
	}
	if len(td) > MaxTrustDomainLength {
		return fmt.Sprintf("the trust domain is %d bytes long; at most %d are allowed", len(td), MaxTrustDomainLength)
	}
	for i := 0; i < len(td); i++ {
		c := td[i]
		if isTrustDomainChar(c) {
			continue
		}
		switch {
		case c >= 'A' && c <= 'Z':
			return "the trust domain must be lowercase"
		case c == ':':
			return "the trust domain has a port (a ':'); a SPIFFE ID has none"
		case c == '@':
			return "the trust domain has user information (an '@'); a SPIFFE ID has none"
		case c == '%':
			return "the trust domain is percent-encoded; a SPIFFE ID allows only [a-z0-9.-_] there"
		case c == '?':
			return "it has a query (a '?'); a SPIFFE ID has none"
		case c == '#':
			return "it has a fragment (a '#'); a SPIFFE ID has none"
		default:
			return fmt.Sprintf("the trust domain contains %s; only [a-z0-9.-_] are allowed", describeByte(c))
		}
	}
	return ""
}

// pathProblem returns why path (non-empty, starting with "/") is not a
// SPIFFE ID path, or "".
func pathProblem(path string) string {
	segments := strings.Split(path[1:], "/")
	for i, seg := range segments {
		switch {
		case seg == "" && i == len(segments)-1:
			return "the path ends with '/'"
		case seg == "":
			return "the path has an empty segment ('//' or a lone '/')"
		case seg == "." || seg == "..":
			return fmt.Sprintf("the path has a %q segment; dot segments are not allowed", seg)
		}
		if reason := segmentCharProblem(seg); reason != "" {
			return reason
		}
	}
	return ""
}

// segmentCharProblem returns why seg has a character a SPIFFE ID path
// segment may not hold, or "".
func segmentCharProblem(seg string) string {
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if isSegmentChar(c) {
			continue
		}
		switch c {
		case '?':
			return "it has a query (a '?'); a SPIFFE ID has none"
		case '#':
			return "it has a fragment (a '#'); a SPIFFE ID has none"
		case '%':
			return "the path is percent-encoded; a SPIFFE ID allows only [A-Za-z0-9.-_] in path segments"
		default:
			return fmt.Sprintf("the path contains %s; only [A-Za-z0-9.-_] are allowed in path segments", describeByte(c))
		}
	}
	return ""
}

func isTrustDomainChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_'
}

func isSegmentChar(c byte) bool {
	return isTrustDomainChar(c) || c >= 'A' && c <= 'Z'
}

// describeByte names a byte for a message without echoing control bytes.
func describeByte(c byte) string {
	if c >= ' ' && c < 0x7f {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("the byte 0x%02x", c)
}

// maxQuoted bounds how much of an untrusted string a message repeats.
const maxQuoted = 160

// quoteUntrusted quotes s for a message, escaping control and non-ASCII
// bytes and cutting it short, so that a hostile value can neither forge log
// lines nor bloat an answer.
func quoteUntrusted(s string) string {
	if len(s) > maxQuoted {
		return fmt.Sprintf("%+q… (%d bytes)", s[:maxQuoted], len(s))
	}
	return fmt.Sprintf("%+q", s)
}

// shorten cuts a string already known to be printable ASCII (a valid SPIFFE
// ID) for a message.
func shorten(s string) string {
	if len(s) > maxQuoted {
		return s[:maxQuoted] + "…"
	}
	return s
}
