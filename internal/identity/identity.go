// Package identity decides who is calling the device API.
//
// Margo WFM clients (device agents) authenticate with mutual TLS: each
// presents an X.509-SVID whose one URI SAN is the SPIFFE ID
//
//	spiffe://<trust-domain>/margo/wfm/<wfm-id>/client/<client-id>
//
// The TLS stack verifies the certificate chain against the trust bundle and
// then, with the SPIFFE project's own library (go-spiffe's x509svid), that
// the certificate is an X.509-SVID at all (ServerTLSConfig);
// Config.ClientIDFromRequest then reads the client id from the verified leaf
// and refuses any certificate that is not a client identity of this WFM
// (trust domain, wfm id, path layout). SPIFFE ID syntax and path segment
// rules are go-spiffe's (spiffeid); wfm adds only its own rules and the
// specification's length bounds. HeaderIdentity is an insecure stand-in for
// local development.
//
// Refusals of a caller are *lifecycle.Error values with code EUNAUTHORIZED
// and one of two problem types, TypeClientCertificateRequired and
// TypeInvalidClientIdentity; checks of configuration and input (Validate,
// CheckClientID) return EINVALID. Messages explain what is
// wrong and never contain secrets (no keys; the SPIFFE IDs they quote are
// public names, quoted and cut short when malformed).
package identity

import (
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"net/http"
	"strings"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Problem types of identity refusals (lifecycle.Error.Type); both come with
// code EUNAUTHORIZED. (wfm's device API answers them as 403
// #not-authorized, the only refusal Margo rc.3 declares; see
// internal/httpapi.)
const (
	// TypeClientCertificateRequired: the request carries no verified client
	// certificate (not TLS, no certificate, or an unverified one).
	TypeClientCertificateRequired = "client-certificate-required"
	// TypeInvalidClientIdentity: the caller presented an identity, but it is
	// not a client identity of this WFM.
	TypeInvalidClientIdentity = "invalid-client-identity"
)

// MaxClientIDLength bounds a client id.
const MaxClientIDLength = 128

// Config names the identities this WFM accepts: WFM client SPIFFE IDs of the
// form spiffe://<TrustDomain>/margo/wfm/<WFMID>/client/<client-id>.
type Config struct {
	// TrustDomain is the SPIFFE trust domain, for example "example.org".
	TrustDomain string
	// WFMID is this WFM's id, one SPIFFE path segment.
	WFMID string
}

// Validate checks that c can name identities: TrustDomain is a SPIFFE trust
// domain name and WFMID a SPIFFE path segment. Call it once at startup; a
// Config that fails it refuses every certificate.
//
// Returns EINVALID (type "invalid-identity-config") naming the bad field.
func (c Config) Validate() error {
	if reason := trustDomainProblem(c.TrustDomain); reason != "" {
		return configError("trust domain %s: %s", quoteUntrusted(c.TrustDomain), reason)
	}
	if reason := segmentProblem(c.WFMID); reason != "" {
		return configError("WFM id %s: %s", quoteUntrusted(c.WFMID), reason)
	}
	return nil
}

// ClientSPIFFEID returns the SPIFFE ID of client clientID of this WFM, the
// URI SAN its certificate must carry.
//
// Returns EINVALID if c is invalid (type "invalid-identity-config", see
// Validate) or clientID is not a valid client id (type "invalid-client-id",
// see CheckClientID).
func (c Config) ClientSPIFFEID(clientID string) (string, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	if err := CheckClientID(clientID); err != nil {
		return "", err
	}
	return c.clientTemplate(clientID), nil
}

// CheckClientID checks the syntax of a client id: 1 to 128 characters of
// [A-Za-z0-9._-], and neither "." nor ".." (a SPIFFE path segment, by
// go-spiffe's rules). It is the one check of a client id: the certificate
// path (ClientID), the development header, the management API (accepting a
// client) and "wfm issue-client-cert" all use it.
//
// Returns EINVALID (type "invalid-client-id") with the reason.
func CheckClientID(id string) error {
	if reason := clientIDProblem(id); reason != "" {
		return &lifecycle.Error{
			Code:    lifecycle.EINVALID,
			Type:    "invalid-client-id",
			Message: fmt.Sprintf("client id %s is not valid: %s", quoteUntrusted(id), reason),
		}
	}
	return nil
}

// ClientID returns the client id named by cert, a WFM client's X.509-SVID.
// It checks the identity only; the caller must have verified the certificate
// chain (ClientIDFromRequest uses a chain the TLS stack verified).
//
// cert must be an X.509-SVID leaf (not a CA, no keyCertSign or cRLSign,
// digitalSignature key usage; ServerTLSConfig already refuses others at the
// handshake, this repeats the check for any other caller) and carry exactly
// one URI SAN (an X.509-SVID has exactly one), a
// valid SPIFFE ID in c.TrustDomain whose path is exactly
// /margo/wfm/<c.WFMID>/client/<client-id>, with a client id CheckClientID
// accepts. The URI SAN is read as the bytes the issuer signed, not as Go's
// normalized url.URL, so that "SPIFFE://" or a "%20" is seen and refused.
//
// Returns EUNAUTHORIZED with type TypeInvalidClientIdentity for every
// refusal (TypeClientCertificateRequired if cert is nil); the message says
// what the certificate names and what this WFM expects.
func (c Config) ClientID(cert *x509.Certificate) (string, error) {
	if cert == nil {
		return "", certificateRequired("no client certificate was given")
	}
	if reason := leafProblem(cert); reason != "" {
		return "", invalidIdentity("the certificate is not an X.509-SVID: %s", reason)
	}
	uris, err := uriSANs(cert)
	if err != nil {
		return "", invalidIdentity("the certificate's subject alternative names cannot be read: %v", err)
	}
	switch len(uris) {
	case 0:
		return "", invalidIdentity("the certificate has no URI SAN; a WFM client certificate is an X.509-SVID whose one URI SAN is %s",
			c.clientTemplate("<client-id>"))
	case 1:
	default:
		return "", invalidIdentity("the certificate has %d URI SANs; an X.509-SVID has exactly one, %s",
			len(uris), c.clientTemplate("<client-id>"))
	}
	raw := uris[0]
	id, reason := parseSPIFFEID(raw)
	if reason != "" {
		if !strings.HasPrefix(strings.ToLower(raw), spiffePrefix) {
			return "", invalidIdentity("the certificate's URI SAN %s is not a SPIFFE ID; want %s",
				quoteUntrusted(raw), c.clientTemplate("<client-id>"))
		}
		return "", invalidIdentity("the certificate's URI SAN %s is not a valid SPIFFE ID: %s", quoteUntrusted(raw), reason)
	}
	if td := id.TrustDomain().Name(); td != c.TrustDomain {
		return "", invalidIdentity("certificate SPIFFE ID %s is from trust domain %s; this WFM trusts %s",
			shorten(id.String()), shorten(td), c.TrustDomain)
	}
	segs := segments(id)
	if len(segs) < 4 || segs[0] != "margo" || segs[1] != "wfm" || segs[3] != "client" {
		return "", invalidIdentity("certificate SPIFFE ID %s is not a WFM client identity; want %s",
			shorten(id.String()), c.clientTemplate("<client-id>"))
	}
	if segs[2] != c.WFMID {
		return "", invalidIdentity("certificate SPIFFE ID %s is a client of WFM %s; this WFM is %s",
			shorten(id.String()), shorten(segs[2]), c.WFMID)
	}
	switch {
	case len(segs) == 4:
		return "", invalidIdentity("certificate SPIFFE ID %s names no client id; want %s",
			shorten(id.String()), c.clientTemplate("<client-id>"))
	case len(segs) > 5:
		return "", invalidIdentity("certificate SPIFFE ID %s has %d path segments after the client id; want exactly %s",
			shorten(id.String()), len(segs)-5, c.clientTemplate("<client-id>"))
	}
	clientID := segs[4]
	if reason := clientIDProblem(clientID); reason != "" {
		return "", invalidIdentity("certificate SPIFFE ID %s has an invalid client id: %s", shorten(id.String()), reason)
	}
	return clientID, nil
}

// ClientIDFromRequest returns the client id of the caller of r, read from the
// client certificate the TLS stack verified (r.TLS.VerifiedChains[0][0]).
// Unverified peer certificates never count. The server must use a TLS
// configuration that verifies client certificates (ServerTLSConfig).
//
// On a connection whose context came from ConnContext, the certificate is
// checked once per connection and the answer (id or refusal) reused.
//
// Returns EUNAUTHORIZED with type TypeClientCertificateRequired if r did not
// arrive over TLS or carries no verified client certificate, and the errors
// of ClientID if the certificate is not a client identity of this WFM.
func (c Config) ClientIDFromRequest(r *http.Request) (string, error) {
	if r.TLS == nil {
		return "", certificateRequired("the request did not arrive over TLS; the device API requires mutual TLS with the WFM client's X.509-SVID")
	}
	if len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		if len(r.TLS.PeerCertificates) == 0 {
			return "", certificateRequired("no client certificate was presented; the device API requires the WFM client's X.509-SVID (mutual TLS)")
		}
		return "", certificateRequired("the client certificate was not verified against this WFM's trust bundle, so it does not identify the caller")
	}
	return c.clientIDOnce(r.Context(), r.TLS.VerifiedChains[0][0])
}

// clientTemplate spells the SPIFFE ID of a client of this WFM.
func (c Config) clientTemplate(clientID string) string {
	return spiffePrefix + c.TrustDomain + "/margo/wfm/" + c.WFMID + "/client/" + clientID
}

// clientIDProblem returns why id is not a valid client id, or "".
func clientIDProblem(id string) string {
	switch {
	case id == "":
		return "it is empty"
	case len(id) > MaxClientIDLength:
		return fmt.Sprintf("it is %d characters long; at most %d are allowed", len(id), MaxClientIDLength)
	}
	return segmentProblem(id)
}

// oidSubjectAltName is the subject alternative name extension (RFC 5280
// section 4.2.1.6).
var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// uriSANs returns the URI SANs of cert as the exact strings the issuer
// signed. crypto/x509 keeps only url.Parse results, which lowercase the scheme
// and re-escape the path; a SPIFFE ID check must see the original. A
// certificate built in memory without its extensions falls back to
// cert.URIs.
func uriSANs(cert *x509.Certificate) ([]string, error) {
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		var seq asn1.RawValue
		rest, err := asn1.Unmarshal(ext.Value, &seq)
		if err != nil {
			return nil, err
		}
		if len(rest) != 0 || seq.Class != asn1.ClassUniversal || seq.Tag != asn1.TagSequence || !seq.IsCompound {
			return nil, fmt.Errorf("the extension is not a sequence of names")
		}
		var uris []string
		for data := seq.Bytes; len(data) > 0; {
			var name asn1.RawValue
			if data, err = asn1.Unmarshal(data, &name); err != nil {
				return nil, err
			}
			const uniformResourceIdentifier = 6 // GeneralName [6] IA5String
			if name.Class == asn1.ClassContextSpecific && name.Tag == uniformResourceIdentifier {
				uris = append(uris, string(name.Bytes))
			}
		}
		return uris, nil
	}
	uris := make([]string, 0, len(cert.URIs))
	for _, u := range cert.URIs {
		uris = append(uris, u.String())
	}
	return uris, nil
}

func certificateRequired(msg string) *lifecycle.Error {
	return &lifecycle.Error{Code: lifecycle.EUNAUTHORIZED, Type: TypeClientCertificateRequired, Message: msg}
}

func invalidIdentity(format string, args ...any) *lifecycle.Error {
	return &lifecycle.Error{Code: lifecycle.EUNAUTHORIZED, Type: TypeInvalidClientIdentity, Message: fmt.Sprintf(format, args...)}
}

func configError(format string, args ...any) *lifecycle.Error {
	return &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-identity-config", Message: fmt.Sprintf(format, args...)}
}
