// Package testpki mints the client certificates that only tests need: odd or
// malformed X.509-SVIDs (extra or missing URI SANs, wrong key usages, a CA
// flag, expired) that the server must refuse, issued by a development CA
// (internal/devpki, which also issues the well-formed ones). Production code
// does not import it.
package testpki

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"time"

	"github.com/wfm-dev/wfm/internal/devpki"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// ClientOption adjusts a client certificate IssueClient mints.
type ClientOption func(*clientOptions)

type clientOptions struct {
	extraURIs           []string
	noURI               bool
	notBefore, notAfter time.Time
	validitySet         bool
	extKeyUsage         []x509.ExtKeyUsage
	commonName          string
	keyUsage            x509.KeyUsage
	keyUsageSet         bool
	isCA                bool
}

// WithExtraURISANs adds URI SANs after the SPIFFE ID, written exactly as
// given (an X.509-SVID has one; a test of the refusal needs more).
func WithExtraURISANs(uris ...string) ClientOption {
	return func(o *clientOptions) { o.extraURIs = append(o.extraURIs, uris...) }
}

// WithoutURISAN leaves out the SPIFFE ID, so the certificate has no URI SAN
// (unless WithExtraURISANs adds some).
func WithoutURISAN() ClientOption {
	return func(o *clientOptions) { o.noURI = true }
}

// WithValidity sets the validity period exactly, for example one in the past
// to mint an expired certificate. It is not clamped to the CA's.
func WithValidity(notBefore, notAfter time.Time) ClientOption {
	return func(o *clientOptions) { o.notBefore, o.notAfter, o.validitySet = notBefore, notAfter, true }
}

// WithExtKeyUsage replaces the extended key usages (default: client
// authentication only); none at all if called without arguments.
func WithExtKeyUsage(usages ...x509.ExtKeyUsage) ClientOption {
	return func(o *clientOptions) { o.extKeyUsage = usages }
}

// WithKeyUsage replaces the key usage (default: digital signature only);
// none at all if usage is 0. The X.509-SVID leaf rules refuse a client
// certificate without digital signature or with certificate or CRL signing.
func WithKeyUsage(usage x509.KeyUsage) ClientOption {
	return func(o *clientOptions) { o.keyUsage, o.keyUsageSet = usage, true }
}

// WithCA marks the certificate as a CA (basic constraints CA:TRUE), which an
// X.509-SVID leaf must not be. The key usage stays as set (WithKeyUsage).
func WithCA() ClientOption {
	return func(o *clientOptions) { o.isCA = true }
}

// WithCommonName sets the subject common name (default: an empty subject, as
// X.509-SVIDs commonly have).
func WithCommonName(cn string) ClientOption {
	return func(o *clientOptions) { o.commonName = cn }
}

// IssueClient issues a client certificate from ca: without options the
// X.509-SVID that ca.IssueClient(spiffeID, 0) issues (extended key usage
// client authentication, key usage digital signature, not a CA, spiffeID as
// its one URI SAN, valid from an hour ago for devpki.DefaultValidity, never
// beyond the CA's own expiry), changed as the options say. URI SANs are
// written byte for byte as given and not checked against the SPIFFE rules,
// so tests can mint malformed identities. The certificate's Leaf is set.
//
// Returns EINVALID if a URI SAN is not ASCII (IA5String) or is one
// crypto/x509 cannot parse back (for example an invalid percent escape),
// or if a WithValidity period ends before it starts.
func IssueClient(ca *devpki.CA, spiffeID string, opts ...ClientOption) (tls.Certificate, error) {
	o := clientOptions{extKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, opt := range opts {
		opt(&o)
	}
	var uris []string
	if !o.noURI {
		uris = append(uris, spiffeID)
	}
	uris = append(uris, o.extraURIs...)

	now := time.Now()
	notAfter := now.Add(devpki.DefaultValidity)
	if caEnd := ca.Certificate().NotAfter; notAfter.After(caEnd) {
		notAfter = caEnd
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: o.commonName},
		NotBefore:   now.Add(-devpki.Backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: o.extKeyUsage,
		IsCA:        o.isCA,
	}
	if o.keyUsageSet {
		tmpl.KeyUsage = o.keyUsage
	}
	if o.validitySet {
		if o.notAfter.Before(o.notBefore) {
			return tls.Certificate{}, lifecycle.Errorf(lifecycle.EINVALID, "the validity period ends (%s) before it starts (%s)",
				o.notAfter.Format(time.RFC3339), o.notBefore.Format(time.RFC3339))
		}
		tmpl.NotBefore, tmpl.NotAfter = o.notBefore, o.notAfter
	}
	if len(uris) > 0 {
		// RFC 5280 4.2.1.6: with an empty subject the SAN extension is critical.
		san, err := devpki.URISANExtension(uris, o.commonName == "")
		if err != nil {
			return tls.Certificate{}, err
		}
		tmpl.ExtraExtensions = []pkix.Extension{san}
	}
	return ca.Sign(tmpl)
}
