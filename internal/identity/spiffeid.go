package identity

import (
	"crypto/x509"
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Bounds from the SPIFFE ID specification (section 2.3): a SPIFFE ID is at
// most 2048 bytes, its trust domain (a URI host) at most 255. go-spiffe does
// not enforce them; wfm does, on top of go-spiffe's syntax rules.
const (
	MaxSPIFFEIDLength    = 2048
	MaxTrustDomainLength = 255
)

// spiffePrefix is the scheme and authority delimiter every SPIFFE ID starts
// with, in the one (lowercase) spelling go-spiffe accepts.
const spiffePrefix = "spiffe://"

// parseSPIFFEID parses s with go-spiffe's spiffeid.FromString: the lowercase
// scheme "spiffe", a non-empty trust domain of [a-z0-9.-_], and "/"-separated
// path segments of [A-Za-z0-9.-_], none empty, none "." or "..", no trailing
// "/". That character set also rules out a port, user information, a query,
// a fragment and percent-encoding. wfm adds the specification's length
// bounds. It returns the ID, or a reason a person understands.
func parseSPIFFEID(s string) (spiffeid.ID, string) {
	switch {
	case len(s) > MaxSPIFFEIDLength:
		return spiffeid.ID{}, fmt.Sprintf("it is %d bytes long; a SPIFFE ID has at most %d", len(s), MaxSPIFFEIDLength)
	case !strings.HasPrefix(s, spiffePrefix) && len(s) >= len(spiffePrefix) && strings.EqualFold(s[:len(spiffePrefix)], spiffePrefix):
		return spiffeid.ID{}, `the scheme must be written in lowercase: "spiffe://"`
	}
	id, err := spiffeid.FromString(s)
	if err != nil {
		return spiffeid.ID{}, err.Error()
	}
	if n := len(id.TrustDomain().Name()); n > MaxTrustDomainLength {
		return spiffeid.ID{}, fmt.Sprintf("the trust domain is %d bytes long; at most %d are allowed", n, MaxTrustDomainLength)
	}
	return id, ""
}

// segments returns the path segments of id, nil for an empty path.
func segments(id spiffeid.ID) []string {
	if id.Path() == "" {
		return nil
	}
	return strings.Split(id.Path()[1:], "/")
}

// trustDomainProblem returns why td is not a SPIFFE trust domain name, or "".
func trustDomainProblem(td string) string {
	switch {
	case td == "":
		return "it is empty"
	case len(td) > MaxTrustDomainLength:
		return fmt.Sprintf("it is %d bytes long; at most %d are allowed", len(td), MaxTrustDomainLength)
	case strings.Contains(td, "/"):
		// go-spiffe would read "spiffe://td" as an ID; configuration names
		// the trust domain alone.
		return "it contains '/'; give the trust domain name alone, for example example.org"
	}
	if _, err := spiffeid.TrustDomainFromString(td); err != nil {
		return err.Error()
	}
	return ""
}

// segmentProblem returns why s is not a SPIFFE path segment (go-spiffe's
// spiffeid.ValidatePathSegment: [A-Za-z0-9._-], not empty, not "." or ".."),
// or "".
func segmentProblem(s string) string {
	if s == "" {
		return "it is empty"
	}
	if err := spiffeid.ValidatePathSegment(s); err != nil {
		return err.Error()
	}
	return ""
}

// leafProblem returns why cert breaks the X.509-SVID leaf rules (SPIFFE
// X.509-SVID specification, section 4), or "": a leaf is not a CA, may not
// sign certificates or CRLs, and must have the digitalSignature key usage.
// go-spiffe's x509svid.Verify checks the first three; the fourth is in its
// unexported validateLeafCertificate only (used when loading an SVID with its
// private key), so wfm checks all four here, in go-spiffe's order.
func leafProblem(cert *x509.Certificate) string {
	switch {
	case cert.IsCA:
		return "it is a CA certificate (basic constraints CA:TRUE); an X.509-SVID leaf must not be a CA"
	case cert.KeyUsage&x509.KeyUsageCertSign != 0:
		return "its key usage includes keyCertSign; an X.509-SVID leaf must not sign certificates"
	case cert.KeyUsage&x509.KeyUsageCRLSign != 0:
		return "its key usage includes cRLSign; an X.509-SVID leaf must not sign CRLs"
	case cert.KeyUsage&x509.KeyUsageDigitalSignature == 0:
		return "its key usage lacks digitalSignature, which an X.509-SVID leaf must have"
	}
	return ""
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
