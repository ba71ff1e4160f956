package devpki_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/devpki"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

const spiffeID = "spiffe://example.org/margo/wfm/wfm-1/client/device-1"

func newCA(t *testing.T) *devpki.CA {
	t.Helper()
	ca, err := devpki.NewCA("test CA")
	require.NoError(t, err)
	return ca
}

func TestNewCA(t *testing.T) {
	t.Parallel()
	before := time.Now()
	ca := newCA(t)
	c := ca.Certificate()

	if !c.IsCA || !c.BasicConstraintsValid || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA certificate: IsCA=%v BasicConstraintsValid=%v KeyUsage=%v, want a CA allowed to sign", c.IsCA, c.BasicConstraintsValid, c.KeyUsage)
	}
	if c.Subject.CommonName != "test CA" {
		t.Errorf("CommonName = %q, want %q", c.Subject.CommonName, "test CA")
	}
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key = %T, want ECDSA P-256", c.PublicKey)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("CA is not self-signed: %v", err)
	}
	if !c.NotBefore.Before(before.Add(-devpki.Backdate + time.Minute)) {
		t.Errorf("NotBefore = %v, want backdated by %v from %v", c.NotBefore, devpki.Backdate, before)
	}
	if got := c.NotAfter.Sub(before); got < devpki.CAValidity-time.Minute {
		t.Errorf("CA valid for %v, want about %v", got, devpki.CAValidity)
	}
	block, _ := pem.Decode(ca.CertPEM())
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("CertPEM() holds no CERTIFICATE block")
	}
	if !c.Equal(mustParse(t, block.Bytes)) {
		t.Errorf("CertPEM() is not the CA certificate")
	}
	if !ca.Pool().Equal(ca.Pool()) {
		t.Errorf("Pool() differs between calls")
	}
}

func TestIssueServer(t *testing.T) {
	t.Parallel()
	ca := newCA(t)

	defaults, err := ca.IssueServer(nil, nil)
	require.NoError(t, err)
	for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
		if _, err := defaults.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: ca.Pool()}); err != nil {
			t.Errorf("default server certificate does not verify for %s: %v", name, err)
		}
	}
	if _, err := defaults.Leaf.Verify(x509.VerifyOptions{
		Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err == nil {
		t.Errorf("server certificate verifies for client authentication, want refused")
	}

	named, err := ca.IssueServer([]string{"wfm.example.org"}, []net.IP{net.ParseIP("192.0.2.1")})
	require.NoError(t, err)
	for _, name := range []string{"wfm.example.org", "192.0.2.1"} {
		if _, err := named.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: ca.Pool()}); err != nil {
			t.Errorf("server certificate does not verify for %s: %v", name, err)
		}
	}
	if _, err := named.Leaf.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: ca.Pool()}); err == nil {
		t.Errorf("certificate for wfm.example.org verifies for localhost")
	}
}

func TestIssueClientDetails(t *testing.T) {
	t.Parallel()
	ca := newCA(t)

	a, err := ca.IssueClient(spiffeID, 0)
	require.NoError(t, err)
	b, err := ca.IssueClient(spiffeID, 0)
	require.NoError(t, err)
	if a.Leaf.SerialNumber.Cmp(b.Leaf.SerialNumber) == 0 {
		t.Errorf("two certificates share serial number %v", a.Leaf.SerialNumber)
	}
	if a.Leaf.SerialNumber.Sign() <= 0 {
		t.Errorf("serial number %v is not positive", a.Leaf.SerialNumber)
	}
	if len(a.Leaf.Subject.Names) != 0 {
		t.Errorf("subject = %v, want empty", a.Leaf.Subject)
	}
	var critical bool
	for _, ext := range a.Leaf.Extensions {
		if ext.Id.String() == "2.5.29.17" {
			critical = ext.Critical
		}
	}
	if !critical {
		t.Errorf("SAN extension of a certificate with an empty subject is not critical (RFC 5280 4.2.1.6)")
	}
	if got := a.Leaf.NotAfter.Sub(a.Leaf.NotBefore); got != devpki.DefaultValidity+devpki.Backdate {
		t.Errorf("validity = %v, want %v", got, devpki.DefaultValidity+devpki.Backdate)
	}

	// The URI SAN is written byte for byte: crypto/x509 would lowercase the
	// scheme and escape the space.
	raw := "SPIFFE://example.org/margo/wfm/wfm-1/client/a b"
	c, err := ca.IssueClient(raw, 0)
	require.NoError(t, err)
	if !bytes.Contains(c.Leaf.Raw, []byte(raw)) {
		t.Errorf("certificate does not hold the URI SAN %q byte for byte", raw)
	}
}

func TestIssueClientRefusals(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	tests := []struct {
		name     string
		id       string
		validity time.Duration
	}{
		{name: "non-ASCII URI", id: "spiffe://example.org/dévice"},
		{name: "unparsable URI", id: "spiffe://example.org/a%zz"},
		{name: "negative validity", id: spiffeID, validity: -time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ca.IssueClient(tt.id, tt.validity)
			if got := lifecycle.ErrorCode(err); got != lifecycle.EINVALID {
				t.Errorf("IssueClient(%q) = %v, want code %s", tt.id, err, lifecycle.EINVALID)
			}
		})
	}
}

func TestIssueClientPEM(t *testing.T) {
	t.Parallel()
	ca := newCA(t)

	certPEM, keyPEM, err := ca.IssueClientPEM(spiffeID, 2*time.Hour)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	if got := pair.Leaf.NotAfter.Sub(pair.Leaf.NotBefore); got != 2*time.Hour+devpki.Backdate {
		t.Errorf("validity = %v, want %v", got, 2*time.Hour+devpki.Backdate)
	}
	if len(pair.Leaf.URIs) != 1 || pair.Leaf.URIs[0].String() != spiffeID {
		t.Errorf("URIs = %v, want [%s]", pair.Leaf.URIs, spiffeID)
	}
	if block, _ := pem.Decode(keyPEM); block == nil || block.Type != "PRIVATE KEY" {
		t.Errorf("key PEM is not a PKCS #8 PRIVATE KEY block")
	}

	_, _, err = ca.IssueClientPEM(spiffeID, 0)
	require.NoError(t, err, "zero validity means the default")
	_, _, err = ca.IssueClientPEM(spiffeID, -time.Hour)
	if got := lifecycle.ErrorCode(err); got != lifecycle.EINVALID {
		t.Errorf("IssueClientPEM(negative) = %v, want code %s", err, lifecycle.EINVALID)
	}
}

func TestEncodePEM(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	server, err := ca.IssueServer(nil, nil)
	require.NoError(t, err)

	certPEM, keyPEM, err := devpki.EncodePEM(server)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	if !pair.Leaf.Equal(server.Leaf) {
		t.Errorf("EncodePEM round trip changed the certificate")
	}

	_, _, err = devpki.EncodePEM(tls.Certificate{})
	if got := lifecycle.ErrorCode(err); got != lifecycle.EINVALID {
		t.Errorf("EncodePEM(empty) = %v, want code %s", err, lifecycle.EINVALID)
	}
}

func TestLoadCA(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	keyPEM, err := ca.KeyPEM()
	require.NoError(t, err)

	loaded, err := devpki.LoadCA(ca.CertPEM(), keyPEM)
	require.NoError(t, err)
	if !loaded.Certificate().Equal(ca.Certificate()) {
		t.Errorf("LoadCA returned another certificate")
	}
	// A certificate issued by the reloaded CA verifies against the original.
	cert, err := loaded.IssueClient(spiffeID, 0)
	require.NoError(t, err)
	_, err = cert.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)

	// SEC 1 keys, as openssl writes them, load too.
	block, _ := pem.Decode(keyPEM)
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	require.NoError(t, err)
	sec1, err := x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
	require.NoError(t, err)
	_, err = devpki.LoadCA(ca.CertPEM(), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}))
	require.NoError(t, err)
}

func TestLoadCARefusals(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	other := newCA(t)
	keyPEM, err := ca.KeyPEM()
	require.NoError(t, err)
	otherKeyPEM, err := other.KeyPEM()
	require.NoError(t, err)
	leafCert, leafKey, err := ca.IssueClientPEM(spiffeID, 0)
	require.NoError(t, err)

	tests := []struct {
		name            string
		certPEM, keyPEM []byte
		want            lifecycle.Code
	}{
		{name: "no certificate", certPEM: nil, keyPEM: keyPEM, want: lifecycle.EMALFORMED},
		{name: "garbage certificate", certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")}), keyPEM: keyPEM, want: lifecycle.EMALFORMED},
		{name: "no key", certPEM: ca.CertPEM(), keyPEM: []byte("not PEM"), want: lifecycle.EMALFORMED},
		{name: "certificate in key file", certPEM: ca.CertPEM(), keyPEM: ca.CertPEM(), want: lifecycle.EMALFORMED},
		{name: "garbage key", certPEM: ca.CertPEM(), keyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("junk")}), want: lifecycle.EMALFORMED},
		{name: "key of another CA", certPEM: ca.CertPEM(), keyPEM: otherKeyPEM, want: lifecycle.EINVALID},
		{name: "leaf certificate", certPEM: leafCert, keyPEM: leafKey, want: lifecycle.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := devpki.LoadCA(tt.certPEM, tt.keyPEM)
			if got := lifecycle.ErrorCode(err); got != tt.want {
				t.Errorf("LoadCA = %v, want code %s", err, tt.want)
			}
		})
	}
}

func TestWriteFiles(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")

	// A key file left world-readable is replaced, not reused with its mode.
	require.NoError(t, os.WriteFile(keyFile, []byte("old"), 0o644))
	require.NoError(t, ca.WriteFiles(certFile, keyFile))
	assertMode(t, certFile, devpki.CertFileMode)
	assertMode(t, keyFile, devpki.KeyFileMode)

	loaded, err := devpki.LoadCAFiles(certFile, keyFile)
	require.NoError(t, err)
	if !loaded.Certificate().Equal(ca.Certificate()) {
		t.Errorf("LoadCAFiles returned another certificate")
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	if len(entries) != 2 {
		t.Errorf("directory holds %d entries, want 2 (no temporary files left)", len(entries))
	}

	_, err = devpki.LoadCAFiles(filepath.Join(dir, "missing.crt"), keyFile)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadCAFiles(missing) = %v, want fs.ErrNotExist", err)
	}

	// Leaf certificates go through WriteKeyPairFiles.
	certPEM, keyPEM, err := ca.IssueClientPEM(spiffeID, 0)
	require.NoError(t, err)
	clientCert, clientKey := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	require.NoError(t, devpki.WriteKeyPairFiles(clientCert, clientKey, certPEM, keyPEM))
	assertMode(t, clientKey, devpki.KeyFileMode)
	_, err = tls.LoadX509KeyPair(clientCert, clientKey)
	require.NoError(t, err)
}

func TestLoadOrCreateCA(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data", "pki")
	certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")

	first, created, err := devpki.LoadOrCreateCA(certFile, keyFile, "dev CA")
	require.NoError(t, err)
	if !created {
		t.Errorf("LoadOrCreateCA in an empty directory: created = false, want true")
	}
	assertMode(t, keyFile, devpki.KeyFileMode)

	second, created, err := devpki.LoadOrCreateCA(certFile, keyFile, "dev CA")
	require.NoError(t, err)
	if created {
		t.Errorf("LoadOrCreateCA with existing files: created = true, want false")
	}
	if !second.Certificate().Equal(first.Certificate()) {
		t.Errorf("LoadOrCreateCA replaced an existing CA")
	}

	require.NoError(t, os.Remove(keyFile))
	_, _, err = devpki.LoadOrCreateCA(certFile, keyFile, "dev CA")
	if got := lifecycle.ErrorCode(err); got != lifecycle.EINVALID {
		t.Errorf("LoadOrCreateCA with the key missing = %v, want code %s", err, lifecycle.EINVALID)
	}
	after, err := os.ReadFile(certFile)
	require.NoError(t, err)
	if string(after) != string(first.CertPEM()) {
		t.Errorf("LoadOrCreateCA overwrote the certificate whose key was missing")
	}
}

// TestHandshake checks that the certificates work in a real mutual TLS 1.3
// handshake with the standard library alone (internal/identity tests the
// server configuration wfm uses).
func TestHandshake(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	server, err := ca.IssueServer(nil, nil)
	require.NoError(t, err)
	client, err := ca.IssueClient(spiffeID, 0)
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	type result struct {
		state tls.ConnectionState
		err   error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Server(conn, &tls.Config{
			Certificates: []tls.Certificate{server},
			ClientCAs:    ca.Pool(),
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS13,
		})
		err = tc.Handshake()
		done <- result{state: tc.ConnectionState(), err: err}
	}()

	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), &tls.Config{
		RootCAs:      ca.Pool(),
		Certificates: []tls.Certificate{client},
	})
	require.NoError(t, err)
	defer conn.Close()

	select {
	case r := <-done:
		require.NoError(t, r.err, "server handshake")
		if r.state.Version != tls.VersionTLS13 {
			t.Errorf("version = %x, want TLS 1.3", r.state.Version)
		}
		if len(r.state.VerifiedChains) == 0 || r.state.VerifiedChains[0][0].URIs[0].String() != spiffeID {
			t.Errorf("server did not verify the client certificate for %s", spiffeID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server handshake did not finish within 10s")
	}
}

func mustParse(t *testing.T, der []byte) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return c
}

func assertMode(t *testing.T, name string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(name)
	require.NoError(t, err)
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("mode of %s = %v, want %v", filepath.Base(name), got, want)
	}
}
