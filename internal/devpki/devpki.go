// Package devpki is wfm's development certificate authority: a self-signed
// CA that issues server certificates and WFM client X.509-SVIDs, kept as
// files in the data folder. The server uses it when the device listener has
// TLS but no certificates are configured ("wfm run" in development), and
// "wfm issue-client-cert" issues client certificates from it; tests use it
// for the same PKI (internal/testpki adds the odd certificates only tests
// need).
//
// It is not a production CA: keys are stored unencrypted, there is no
// revocation, and the URI SAN of a client certificate is written as given,
// not checked against the SPIFFE rules: callers issuing real client
// certificates build the SPIFFE ID with identity.Config.ClientSPIFFEID
// first.
//
// All keys are ECDSA P-256, so minting is fast (well under a millisecond per
// certificate). Serial numbers are random. A CA is immutable and safe for
// concurrent use.
//
// Errors that concern the caller's input are *lifecycle.Error values
// (EINVALID, EMALFORMED); failures of the system (randomness, files) are
// returned wrapped as they are.
package devpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Validity periods. Certificates start an hour in the past so that a peer
// whose clock runs a little behind still accepts them.
const (
	CAValidity      = 10 * 365 * 24 * time.Hour
	DefaultValidity = 365 * 24 * time.Hour
	Backdate        = time.Hour
)

// CA is a certificate authority: a self-signed certificate and its key.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

// NewCA creates a self-signed ECDSA P-256 CA whose subject common name is
// name ("wfm test CA" if empty), valid from an hour ago for CAValidity. It
// may sign leaf certificates only (path length 0).
//
// Returns an error only if the system cannot produce randomness.
func NewCA(name string) (*CA, error) {
	if name == "" {
		name = "wfm test CA"
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devpki: generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("devpki: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devpki: parse CA certificate: %w", err)
	}
	return &CA{cert: cert, key: key, certPEM: encodeCert(der)}, nil
}

// LoadCA reloads a CA saved with KeyPEM and CertPEM (or WriteFiles). The key
// may be PKCS #8 ("PRIVATE KEY"), SEC 1 ("EC PRIVATE KEY") or PKCS #1 ("RSA
// PRIVATE KEY"); certPEM's first certificate is the CA's.
//
// Returns EMALFORMED if either PEM block is missing or cannot be parsed, and
// EINVALID if the certificate is not a CA certificate allowed to sign
// certificates or the key does not belong to it.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, lifecycle.Errorf(lifecycle.EMALFORMED, "the CA certificate file holds no PEM CERTIFICATE block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, lifecycle.Errorf(lifecycle.EMALFORMED, "the CA certificate cannot be parsed: %v", err)
	}
	if !cert.BasicConstraintsValid || !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, lifecycle.Errorf(lifecycle.EINVALID, "certificate %q is not a CA certificate allowed to sign certificates", cert.Subject.CommonName)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, lifecycle.Errorf(lifecycle.EINVALID, "the CA key does not belong to certificate %q", cert.Subject.CommonName)
	}
	return &CA{cert: cert, key: key, certPEM: encodeCert(block.Bytes)}, nil
}

// Certificate returns the CA certificate. The caller must not modify it.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Pool returns a new certificate pool holding only the CA certificate: the
// trust bundle of servers (client CAs) and clients (root CAs).
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

// CertPEM returns the CA certificate, PEM encoded.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// KeyPEM returns the CA's private key, PEM encoded as PKCS #8. It is a
// secret: store it readable by its owner only (WriteFiles does).
//
// Returns an error only if the key type cannot be encoded.
func (ca *CA) KeyPEM() ([]byte, error) {
	return encodeKey(ca.key)
}

// IssueServer issues a server certificate (extended key usage server
// authentication) for dnsNames and ips, valid from an hour ago for
// DefaultValidity. With neither names nor addresses it is issued for
// "localhost", 127.0.0.1 and ::1.
//
// Returns an error only if the system cannot produce randomness.
func (ca *CA) IssueServer(dnsNames []string, ips []net.IP) (tls.Certificate, error) {
	if len(dnsNames) == 0 && len(ips) == 0 {
		dnsNames = []string{"localhost"}
		ips = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	cn := "wfm server"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		NotBefore:   now.Add(-Backdate),
		NotAfter:    ca.clamp(now.Add(DefaultValidity)),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dnsNames,
		IPAddresses: ips,
	}
	return ca.Sign(tmpl)
}

// IssueClient issues a WFM client certificate, an X.509-SVID: extended key
// usage client authentication, key usage digital signature, not a CA, an
// empty subject, and spiffeID as its one URI SAN (a critical extension, as
// RFC 5280 4.2.1.6 asks with an empty subject), valid from an hour ago for
// validity (DefaultValidity if zero; a default never runs beyond the CA's
// own expiry). The URI SAN is written byte for byte as given. The
// certificate's Leaf is set.
//
// Returns EINVALID if validity is negative, or if spiffeID is not ASCII
// (IA5String) or is a URI crypto/x509 cannot parse back (for example an
// invalid percent escape).
func (ca *CA) IssueClient(spiffeID string, validity time.Duration) (tls.Certificate, error) {
	if validity < 0 {
		return tls.Certificate{}, lifecycle.Errorf(lifecycle.EINVALID, "validity %s is negative", validity)
	}
	now := time.Now()
	notAfter := ca.clamp(now.Add(DefaultValidity))
	if validity > 0 {
		notAfter = now.Add(validity)
	}
	san, err := URISANExtension([]string{spiffeID}, true)
	if err != nil {
		return tls.Certificate{}, err
	}
	return ca.Sign(&x509.Certificate{
		NotBefore:       now.Add(-Backdate),
		NotAfter:        notAfter,
		KeyUsage:        x509.KeyUsageDigitalSignature,
		ExtKeyUsage:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		ExtraExtensions: []pkix.Extension{san},
	})
}

// IssueClientPEM issues a client certificate for spiffeID as IssueClient
// does and returns it and its key PEM encoded (the key as PKCS #8), ready
// for files. Returns IssueClient's errors.
func (ca *CA) IssueClientPEM(spiffeID string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	cert, err := ca.IssueClient(spiffeID, validity)
	if err != nil {
		return nil, nil, err
	}
	return EncodePEM(cert)
}

// Sign completes tmpl with a fresh P-256 key, a random serial number and
// valid basic constraints, signs it with the CA's key as it is otherwise
// (validity, usages and extensions are the caller's), and returns it with
// its parsed Leaf. IssueServer and IssueClient build on it; tests mint
// certificates the server must refuse with it (internal/testpki).
//
// Returns EINVALID if the signed certificate cannot be parsed back (for
// example a malformed extension); other errors are failures of the system.
func (ca *CA) Sign(tmpl *x509.Certificate) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("devpki: generate key: %w", err)
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return tls.Certificate{}, err
	}
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("devpki: sign certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, lifecycle.Errorf(lifecycle.EINVALID, "the certificate would be unreadable: %v", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// clamp keeps a default expiry within the CA's own.
func (ca *CA) clamp(notAfter time.Time) time.Time {
	if notAfter.After(ca.cert.NotAfter) {
		return ca.cert.NotAfter
	}
	return notAfter
}

var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// URISANExtension returns a subject alternative name extension holding uris
// as uniformResourceIdentifier names, byte for byte (crypto/x509 would
// normalize them), marked critical as asked.
//
// Returns EINVALID if a URI is not ASCII (IA5String).
func URISANExtension(uris []string, critical bool) (pkix.Extension, error) {
	names := make([]asn1.RawValue, 0, len(uris))
	for _, u := range uris {
		for i := 0; i < len(u); i++ {
			if u[i] >= 0x80 {
				return pkix.Extension{}, lifecycle.Errorf(lifecycle.EINVALID, "URI SAN %+q is not ASCII", u)
			}
		}
		names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte(u)})
	}
	der, err := asn1.Marshal(names)
	if err != nil {
		return pkix.Extension{}, fmt.Errorf("devpki: encode URI SANs: %w", err)
	}
	return pkix.Extension{Id: oidSubjectAltName, Critical: critical, Value: der}, nil
}

// serialLimit bounds serial numbers to 128 random bits (RFC 5280 allows 20
// octets; CA/Browser Forum asks for at least 64 random bits).
var serialLimit = new(big.Int).Lsh(big.NewInt(1), 128)

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, serialLimit)
	if err != nil {
		return nil, fmt.Errorf("devpki: generate serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil // positive, never 0
}
