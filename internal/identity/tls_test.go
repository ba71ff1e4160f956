package identity_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/devpki"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/testpki"
)

// pki is what a handshake test needs: the trust bundle's CA, the server's
// certificate, and client certificates good and bad.
type pki struct {
	ca         *devpki.CA
	server     tls.Certificate
	good       tls.Certificate // a client of this WFM, from the trusted CA
	foreignTD  tls.Certificate // trusted CA, but a client of another trust domain
	otherCA    tls.Certificate // the right SPIFFE ID, from a CA the server does not trust
	expired    tls.Certificate
	serverOnly tls.Certificate // extended key usage server authentication only

	// Trusted CA, right SPIFFE ID, but not an X.509-SVID leaf.
	caLeaf   tls.Certificate // CA:TRUE
	certSign tls.Certificate // key usage keyCertSign
	crlSign  tls.Certificate // key usage cRLSign
	noDigSig tls.Certificate // key usage without digitalSignature
	twoURIs  tls.Certificate // two URI SANs
	noURI    tls.Certificate // no URI SAN
	dotDot   tls.Certificate // client id ".."
}

// bundle is the server's trust bundle: the CA alone.
func (p pki) bundle() []*x509.Certificate { return []*x509.Certificate{p.ca.Certificate()} }

func newPKI(t *testing.T) pki {
	t.Helper()
	ca := newCA(t)
	other, err := devpki.NewCA("untrusted CA")
	require.NoError(t, err)
	p := pki{ca: ca}
	past := time.Now().Add(-48 * time.Hour)
	for _, step := range []struct {
		dst  *tls.Certificate
		ca   *devpki.CA
		id   string
		opts []testpki.ClientOption
	}{
		{&p.good, ca, prefix + clientID, nil},
		{&p.foreignTD, ca, "spiffe://other.org/margo/wfm/wfm-1/client/device-1", nil},
		{&p.otherCA, other, prefix + clientID, nil},
		{&p.expired, ca, prefix + clientID, []testpki.ClientOption{testpki.WithValidity(past, past.Add(time.Hour))}},
		{&p.serverOnly, ca, prefix + clientID, []testpki.ClientOption{testpki.WithExtKeyUsage(x509.ExtKeyUsageServerAuth)}},
		{&p.caLeaf, ca, prefix + clientID, []testpki.ClientOption{testpki.WithCA()}},
		{&p.certSign, ca, prefix + clientID, []testpki.ClientOption{testpki.WithKeyUsage(x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign)}},
		{&p.crlSign, ca, prefix + clientID, []testpki.ClientOption{testpki.WithKeyUsage(x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign)}},
		{&p.noDigSig, ca, prefix + clientID, []testpki.ClientOption{testpki.WithKeyUsage(x509.KeyUsageKeyAgreement)}},
		{&p.twoURIs, ca, prefix + clientID, []testpki.ClientOption{testpki.WithExtraURISANs(prefix + "device-2")}},
		{&p.noURI, ca, "", []testpki.ClientOption{testpki.WithoutURISAN()}},
		{&p.dotDot, ca, prefix + "..", nil},
	} {
		*step.dst, err = testpki.IssueClient(step.ca, step.id, step.opts...)
		require.NoError(t, err)
	}
	p.server, err = ca.IssueServer(nil, nil)
	require.NoError(t, err)
	return p
}

// answer is what the test handler replies.
type answer struct {
	ClientID string `json:"clientId,omitempty"`
	Version  uint16 `json:"tlsVersion,omitempty"`
	Type     string `json:"type,omitempty"`
	Resumed  bool   `json:"resumed,omitempty"`
}

// startServer serves, over real TLS on loopback, a handler that answers the
// caller's client id, or a 401 with the refusal's problem type. It counts the
// requests that reached the handler.
func startServer(t *testing.T, p pki, opts ...identity.TLSOption) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		id, err := cfg.ClientIDFromRequest(r)
		if err != nil {
			status := http.StatusInternalServerError
			if lifecycle.ErrorCode(err) == lifecycle.EUNAUTHORIZED {
				status = http.StatusUnauthorized
			}
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(answer{Type: lifecycle.ErrorType(err)})
			return
		}
		_ = json.NewEncoder(w).Encode(answer{ClientID: id, Version: r.TLS.Version, Resumed: r.TLS.DidResume})
	}))
	srv.TLS = identity.ServerTLSConfig(p.server, p.bundle(), opts...)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected here
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &calls
}

// get calls srv as a client presenting cert (none if nil), speaking at most
// TLS version maxVersion (0: any).
func get(t *testing.T, srv *httptest.Server, p pki, cert *tls.Certificate, maxVersion uint16, goSelection bool) (int, answer, error) {
	t.Helper()
	tc := clientTLS(p, cert, maxVersion, goSelection)
	client := &http.Client{
		Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true},
		Timeout:   10 * time.Second,
	}
	resp, err := client.Get(srv.URL + "/api/v1/deployments")
	if err != nil {
		return 0, answer{}, err
	}
	defer resp.Body.Close()
	var a answer
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&a))
	return resp.StatusCode, a, nil
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	const refused = -1 // the handshake fails; no HTTP answer

	tests := []struct {
		name       string
		opts       []identity.TLSOption
		cert       *tls.Certificate
		maxVersion uint16
		goSelects  bool // let crypto/tls choose whether to send cert
		wantStatus int
		want       answer
	}{
		{name: "client of this WFM", cert: &p.good, wantStatus: 200, want: answer{ClientID: clientID, Version: tls.VersionTLS13}},
		{name: "no client certificate", cert: nil, wantStatus: 401, want: answer{Type: identity.TypeClientCertificateRequired}},
		{name: "other trust domain", cert: &p.foreignTD, wantStatus: 401, want: answer{Type: identity.TypeInvalidClientIdentity}},
		{name: "certificate from another CA", cert: &p.otherCA, wantStatus: refused},
		{name: "Go client keeps a certificate from another CA to itself", cert: &p.otherCA, goSelects: true,
			wantStatus: 401, want: answer{Type: identity.TypeClientCertificateRequired}},
		{name: "Go client sends a certificate from this CA", cert: &p.good, goSelects: true,
			wantStatus: 200, want: answer{ClientID: clientID, Version: tls.VersionTLS13}},
		{name: "expired certificate", cert: &p.expired, wantStatus: refused},
		{name: "server-only certificate", cert: &p.serverOnly, wantStatus: refused},
		{name: "TLS 1.2 client", cert: &p.good, maxVersion: tls.VersionTLS12, wantStatus: refused},

		// Chained to the trust bundle, but not X.509-SVIDs: refused by
		// go-spiffe's x509svid checks at the handshake.
		{name: "CA:TRUE leaf", cert: &p.caLeaf, wantStatus: refused},
		{name: "keyCertSign leaf", cert: &p.certSign, wantStatus: refused},
		{name: "cRLSign leaf", cert: &p.crlSign, wantStatus: refused},
		{name: "leaf without digitalSignature", cert: &p.noDigSig, wantStatus: refused},
		{name: "two URI SANs", cert: &p.twoURIs, wantStatus: refused},
		{name: "no URI SAN", cert: &p.noURI, wantStatus: refused},
		{name: "dot-dot client id", cert: &p.dotDot, wantStatus: refused},
		{name: "required: CA:TRUE leaf", opts: []identity.TLSOption{identity.RequireClientCert()}, cert: &p.caLeaf, wantStatus: refused},
		{name: "TLS 1.2 allowed: CA:TRUE leaf", opts: []identity.TLSOption{identity.AllowTLS12()},
			cert: &p.caLeaf, maxVersion: tls.VersionTLS12, wantStatus: refused},

		{name: "required: client of this WFM", opts: []identity.TLSOption{identity.RequireClientCert()},
			cert: &p.good, wantStatus: 200, want: answer{ClientID: clientID, Version: tls.VersionTLS13}},
		{name: "required: no client certificate", opts: []identity.TLSOption{identity.RequireClientCert()}, cert: nil, wantStatus: refused},
		{name: "required: certificate from another CA", opts: []identity.TLSOption{identity.RequireClientCert()}, cert: &p.otherCA, wantStatus: refused},

		{name: "TLS 1.2 allowed: TLS 1.2 client", opts: []identity.TLSOption{identity.AllowTLS12()},
			cert: &p.good, maxVersion: tls.VersionTLS12, wantStatus: 200, want: answer{ClientID: clientID, Version: tls.VersionTLS12}},
		{name: "TLS 1.2 allowed: TLS 1.3 preferred", opts: []identity.TLSOption{identity.AllowTLS12()},
			cert: &p.good, wantStatus: 200, want: answer{ClientID: clientID, Version: tls.VersionTLS13}},
		{name: "TLS 1.2 allowed: certificate from another CA", opts: []identity.TLSOption{identity.AllowTLS12()},
			cert: &p.otherCA, maxVersion: tls.VersionTLS12, wantStatus: refused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, calls := startServer(t, p, tt.opts...)
			status, got, err := get(t, srv, p, tt.cert, tt.maxVersion, tt.goSelects)
			if tt.wantStatus == refused {
				if err == nil {
					t.Fatalf("GET = %d %+v, want the TLS handshake refused", status, got)
				}
				if n := calls.Load(); n != 0 {
					t.Errorf("handler ran %d times after a refused handshake, want 0", n)
				}
				return
			}
			require.NoError(t, err)
			if status != tt.wantStatus || got != tt.want {
				t.Errorf("GET = %d %+v, want %d %+v", status, got, tt.wantStatus, tt.want)
			}
		})
	}
}

// TestMutualTLSResumption checks that a resumed TLS session still carries
// the verified chain, so a device reusing its session is not refused.
func TestMutualTLSResumption(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	srv, _ := startServer(t, p)
	tc := clientTLS(p, &p.good, 0, false)
	tc.ClientSessionCache = tls.NewLRUClientSessionCache(1)
	client := &http.Client{
		Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true},
		Timeout:   10 * time.Second,
	}
	for i, wantResumed := range []bool{false, true} {
		resp, err := client.Get(srv.URL + "/api/v1/deployments")
		require.NoError(t, err)
		var got answer
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		require.NoError(t, err)
		want := answer{ClientID: clientID, Version: tls.VersionTLS13, Resumed: wantResumed}
		if resp.StatusCode != http.StatusOK || got != want {
			t.Errorf("request %d = %d %+v, want 200 %+v", i+1, resp.StatusCode, got, want)
		}
	}
}

// TestHandshakeRefusalReasons checks why the server refuses a certificate,
// from the server's side of a bare TLS handshake: the standard verifier
// enforces the trust bundle, the validity period and the client
// authentication extended key usage.
func TestHandshakeRefusalReasons(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	server := identity.ServerTLSConfig(p.server, p.bundle())

	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var verification *tls.CertificateVerificationError

	err := serverHandshake(t, server, p, &p.otherCA, 0)
	if !errors.As(err, &verification) || !errors.As(err, &unknown) {
		t.Errorf("handshake with a certificate from another CA: server error %v, want x509.UnknownAuthorityError", err)
	}
	err = serverHandshake(t, server, p, &p.expired, 0)
	if !errors.As(err, &invalid) || invalid.Reason != x509.Expired {
		t.Errorf("handshake with an expired certificate: server error %v, want x509.Expired", err)
	}
	err = serverHandshake(t, server, p, &p.serverOnly, 0)
	if !errors.As(err, &invalid) || invalid.Reason != x509.IncompatibleUsage {
		t.Errorf("handshake with a server-only certificate: server error %v, want x509.IncompatibleUsage", err)
	}
	if err := serverHandshake(t, server, p, &p.good, tls.VersionTLS12); err == nil {
		t.Errorf("handshake with a TLS 1.2 client succeeded, want refused")
	}
	if err := serverHandshake(t, identity.ServerTLSConfig(p.server, p.bundle(), identity.RequireClientCert()), p, nil, 0); err == nil {
		t.Errorf("handshake without a certificate succeeded with RequireClientCert, want refused")
	}
	if err := serverHandshake(t, server, p, &p.good, 0); err != nil {
		t.Errorf("handshake with a good certificate: %v", err)
	}
	// X.509-SVID leaf rules: the server's error says which one broke.
	for name, tt := range map[string]struct {
		cert *tls.Certificate
		hint string
	}{
		"CA:TRUE":             {&p.caLeaf, "CA flag"},
		"keyCertSign":         {&p.certSign, "KeyCertSign"},
		"cRLSign":             {&p.crlSign, "KeyCrlSign"},
		"no digitalSignature": {&p.noDigSig, "digitalSignature"},
		"two URI SANs":        {&p.twoURIs, "more than one URI SAN"},
		"no URI SAN":          {&p.noURI, "no URI SAN"},
		"dot-dot client id":   {&p.dotDot, "dot segments"},
	} {
		err := serverHandshake(t, server, p, tt.cert, 0)
		if err == nil || !strings.Contains(err.Error(), tt.hint) {
			t.Errorf("handshake with a %s certificate: server error %v, want one mentioning %q", name, err, tt.hint)
		}
	}
	// A nil trust bundle trusts nobody (not the host's roots).
	if err := serverHandshake(t, identity.ServerTLSConfig(p.server, nil), p, &p.good, 0); !errors.As(err, &unknown) {
		t.Errorf("handshake against a nil trust bundle: server error %v, want x509.UnknownAuthorityError", err)
	}
}

// serverHandshake runs one TLS handshake over loopback and returns the
// server's verdict. In TLS 1.3 the client finishes first, so only the server
// knows whether it accepted the client's certificate.
func serverHandshake(t *testing.T, server *tls.Config, p pki, cert *tls.Certificate, maxVersion uint16) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()

	verdict := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			verdict <- err
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		verdict <- tls.Server(conn, server).Handshake()
	}()

	tc := clientTLS(p, cert, maxVersion, false)
	if conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), tc); err == nil {
		defer conn.Close()
	}
	select {
	case err := <-verdict:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("server handshake did not finish within 10s")
		return nil
	}
}

// clientTLS configures a client that trusts the server's CA and presents
// cert. A Go client given Certificates sends none whose issuer is not among
// the CAs the server asks for; other clients (curl, openssl, device agents)
// send theirs anyway. So unless goSelection is set, the certificate is
// always sent, and the server's own verification is what is tested.
func clientTLS(p pki, cert *tls.Certificate, maxVersion uint16, goSelection bool) *tls.Config {
	tc := &tls.Config{RootCAs: p.ca.Pool(), MaxVersion: maxVersion}
	switch {
	case cert == nil:
	case goSelection:
		tc.Certificates = []tls.Certificate{*cert}
	default:
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return tc
}

func TestServerTLSConfigDefaults(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	pool := p.bundle()

	c := identity.ServerTLSConfig(p.server, pool)
	if c.MinVersion != tls.VersionTLS13 || c.ClientAuth != tls.VerifyClientCertIfGiven || c.ClientCAs == nil || c.VerifyPeerCertificate == nil || len(c.Certificates) != 1 {
		t.Errorf("ServerTLSConfig() = MinVersion %x, ClientAuth %v, ClientCAs set %v, SVID check set %v, %d certificates; want TLS 1.3, VerifyClientCertIfGiven, true, true, 1",
			c.MinVersion, c.ClientAuth, c.ClientCAs != nil, c.VerifyPeerCertificate != nil, len(c.Certificates))
	}
	c = identity.ServerTLSConfig(p.server, pool, identity.RequireClientCert(), identity.AllowTLS12())
	if c.MinVersion != tls.VersionTLS12 || c.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("ServerTLSConfig(RequireClientCert, AllowTLS12) = MinVersion %x, ClientAuth %v; want TLS 1.2, RequireAndVerifyClientCert", c.MinVersion, c.ClientAuth)
	}
	if a, b := identity.ServerTLSConfig(p.server, pool), identity.ServerTLSConfig(p.server, pool); a == b {
		t.Errorf("ServerTLSConfig returned a shared configuration")
	}
}
