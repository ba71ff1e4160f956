package identity

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// TLSOption adjusts the configuration ServerTLSConfig returns.
type TLSOption func(*tlsOptions)

type tlsOptions struct {
	clientAuth tls.ClientAuthType
	minVersion uint16
}

// RequireClientCert makes a missing client certificate fail the TLS
// handshake (tls.RequireAndVerifyClientCert) instead of reaching the HTTP
// layer. Use it for a listener that serves only the device API: nothing
// unauthenticated is parsed beyond the handshake, at the price of an opaque
// TLS alert ("certificate required") instead of a 401 problem+json that says
// what is missing, and of locking out every caller without a certificate
// (operators, /openapi.yaml, health checks).
func RequireClientCert() TLSOption {
	return func(o *tlsOptions) { o.clientAuth = tls.RequireAndVerifyClientCert }
}

// AllowTLS12 lowers the minimum protocol version to TLS 1.2, which the Margo
// API permits only as a non-default fallback for clients that cannot speak
// TLS 1.3. Go's default TLS 1.2 cipher suites (ECDHE with AEAD ciphers) apply.
func AllowTLS12() TLSOption {
	return func(o *tlsOptions) { o.minVersion = tls.VersionTLS12 }
}

// ServerTLSConfig returns the TLS configuration of a WFM server that presents
// serverCert and authenticates WFM clients against trustBundle, the
// certificate authorities that issue client X.509-SVIDs.
//
// Defaults: TLS 1.3 minimum (the Margo MIAF default; see AllowTLS12) and
// tls.VerifyClientCertIfGiven. A client certificate, when presented, is
// fully verified during the handshake, in two steps; a certificate that
// fails either fails the handshake (a TLS "bad certificate" alert, no HTTP
// answer):
//
//  1. the standard verifier: chain to trustBundle, validity period, and the
//     client-authentication extended key usage;
//  2. go-spiffe's x509svid.ParseAndVerify: the certificate is an X.509-SVID,
//     that is exactly one URI SAN holding a well-formed SPIFFE ID, a leaf
//     that is not a CA and has neither keyCertSign nor cRLSign, chaining to
//     trustBundle; and, the one leaf rule x509svid.ParseAndVerify leaves out,
//     the digitalSignature key usage.
//
// Which SVIDs are clients of this WFM (trust domain, wfm id, path layout) is
// decided per request by Config.ClientIDFromRequest, which answers a refusal
// the device can read. trustBundle authenticates certificates of any trust
// domain for step 2, so that a certificate of another trust domain reaches
// that explanation rather than a bare alert.
//
// A connection without a certificate is accepted, and the HTTP layer must
// call Config.ClientIDFromRequest on every device API request, which refuses
// it with 401 client-certificate-required. That default lets one listener
// also serve callers without certificates (the management API with bearer
// tokens, /openapi.yaml, /docs, health) and lets a device that forgot its
// certificate learn why in a problem+json body rather than from a TLS alert.
// Use RequireClientCert where the listener serves only the device API.
//
// An empty trustBundle refuses every client certificate: crypto/tls would
// otherwise verify client certificates against the host's public roots. The
// returned configuration is new on every call; the caller may change it.
func ServerTLSConfig(serverCert tls.Certificate, trustBundle []*x509.Certificate, opts ...TLSOption) *tls.Config {
	o := tlsOptions{clientAuth: tls.VerifyClientCertIfGiven, minVersion: tls.VersionTLS13}
	for _, opt := range opts {
		opt(&o)
	}
	pool := x509.NewCertPool()
	for _, c := range trustBundle {
		pool.AddCert(c)
	}
	return &tls.Config{
		Certificates:          []tls.Certificate{serverCert},
		ClientCAs:             pool,
		ClientAuth:            o.clientAuth,
		MinVersion:            o.minVersion,
		VerifyPeerCertificate: verifySVID(anyTrustDomain(append([]*x509.Certificate(nil), trustBundle...))),
	}
}

// verifySVID is step 2 of ServerTLSConfig's verification, run by crypto/tls
// after its own (not again when a session is resumed: the certificate was
// verified when the session was made).
func verifySVID(bundle x509bundle.Source) func([][]byte, [][]*x509.Certificate) error {
	return func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
		if len(rawCerts) == 0 {
			return nil // no certificate: ClientIDFromRequest refuses the requests
		}
		_, chains, err := x509svid.ParseAndVerify(rawCerts, bundle)
		if err != nil {
			return fmt.Errorf("the client certificate is not an X.509-SVID: %w", err)
		}
		if reason := leafProblem(chains[0][0]); reason != "" {
			return errors.New("the client certificate is not an X.509-SVID: " + reason)
		}
		return nil
	}
}

// anyTrustDomain is an x509bundle.Source that serves the same authorities
// for every trust domain: the trust bundle is configured as one set of CAs,
// and whether a trust domain is this WFM's is Config.ClientID's decision.
type anyTrustDomain []*x509.Certificate

// GetX509BundleForTrustDomain implements x509bundle.Source; it never fails.
func (a anyTrustDomain) GetX509BundleForTrustDomain(td spiffeid.TrustDomain) (*x509bundle.Bundle, error) {
	return x509bundle.FromX509Authorities(td, a), nil
}
