package identity

import (
	"crypto/tls"
	"crypto/x509"
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
// serverCert and authenticates WFM clients against the trust bundle
// clientCAs.
//
// Defaults: TLS 1.3 minimum (the Margo MIAF default; see AllowTLS12) and
// tls.VerifyClientCertIfGiven. A client certificate, when presented, is
// fully verified during the handshake by the standard verifier: chain to
// clientCAs, validity period, and the client-authentication extended key
// usage; a certificate that fails any of these fails the handshake. A
// connection without a certificate is accepted, and the HTTP layer must call
// Config.ClientIDFromRequest on every device API request, which refuses it
// with 401 client-certificate-required. That default lets one listener also
// serve callers without certificates (the management API with bearer tokens,
// /openapi.yaml, /docs, health) and lets a device that forgot its certificate
// learn why in a problem+json body rather than from a TLS alert. Use
// RequireClientCert where the listener serves only the device API.
//
// A nil clientCAs is replaced by an empty pool, so that every client
// certificate is refused: crypto/tls would otherwise verify client
// certificates against the host's public roots. The returned configuration is
// new on every call; the caller may change it.
func ServerTLSConfig(serverCert tls.Certificate, clientCAs *x509.CertPool, opts ...TLSOption) *tls.Config {
	o := tlsOptions{clientAuth: tls.VerifyClientCertIfGiven, minVersion: tls.VersionTLS13}
	for _, opt := range opts {
		opt(&o)
	}
	if clientCAs == nil {
		clientCAs = x509.NewCertPool()
	}
	return &tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientCAs:    clientCAs,
		ClientAuth:   o.clientAuth,
		MinVersion:   o.minVersion,
	}
}
