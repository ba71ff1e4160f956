package identity_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/devpki"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/testpki"
)

var cfg = identity.Config{TrustDomain: "example.org", WFMID: "wfm-1"}

const (
	prefix   = "spiffe://example.org/margo/wfm/wfm-1/client/"
	clientID = "device-1"
)

func newCA(t *testing.T) *devpki.CA {
	t.Helper()
	ca, err := devpki.NewCA("identity test CA")
	require.NoError(t, err)
	return ca
}

func issue(t *testing.T, ca *devpki.CA, spiffeID string, opts ...testpki.ClientOption) *x509.Certificate {
	t.Helper()
	cert, err := testpki.IssueClient(ca, spiffeID, opts...)
	require.NoError(t, err)
	return cert.Leaf
}

// wantRefusal fails t unless err is an EUNAUTHORIZED refusal of type typ
// whose message mentions every one of hints.
func wantRefusal(t *testing.T, call string, id string, err error, typ string, hints ...string) {
	t.Helper()
	if lifecycle.ErrorCode(err) != lifecycle.EUNAUTHORIZED || lifecycle.ErrorType(err) != typ {
		t.Fatalf("%s = %q, %v; want EUNAUTHORIZED %s", call, id, err, typ)
	}
	if id != "" {
		t.Errorf("%s returned client id %q with its error, want \"\"", call, id)
	}
	for _, h := range hints {
		if !strings.Contains(err.Error(), h) {
			t.Errorf("%s message %q does not mention %q", call, err.Error(), h)
		}
	}
}

func TestClientID(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	long := strings.Repeat("x", identity.MaxClientIDLength)

	accepted := []struct{ san, want string }{
		{prefix + clientID, clientID},
		{prefix + "Dev_1.a-b", "Dev_1.a-b"},
		{prefix + "...", "..."},
		{prefix + long, long},
	}
	for _, tt := range accepted {
		got, err := cfg.ClientID(issue(t, ca, tt.san))
		if err != nil || got != tt.want {
			t.Errorf("ClientID(%.80s) = %q, %v; want %q", tt.san, got, err, tt.want)
		}
	}

	refused := []struct {
		name  string
		san   string
		opts  []testpki.ClientOption
		hints []string
	}{
		{name: "wrong trust domain", san: "spiffe://other.org/margo/wfm/wfm-1/client/device-1",
			hints: []string{"spiffe://other.org/margo/wfm/wfm-1/client/device-1", "trust domain other.org", "trusts example.org"}},
		{name: "trust domain with a suffix", san: "spiffe://example.org.evil/margo/wfm/wfm-1/client/device-1", hints: []string{"example.org.evil"}},
		{name: "wrong WFM id", san: "spiffe://example.org/margo/wfm/wfm-2/client/device-1", hints: []string{"wfm-2", "wfm-1"}},
		{name: "device instead of client", san: "spiffe://example.org/margo/wfm/wfm-1/device/device-1", hints: []string{"/client/<client-id>"}},
		{name: "other device path", san: "spiffe://example.org/margo/wfm/x/device/y", hints: []string{"/client/<client-id>"}},
		{name: "extra segments", san: prefix + "device-1/extra", hints: []string{"after the client id"}},
		{name: "missing client id", san: "spiffe://example.org/margo/wfm/wfm-1/client", hints: []string{"no client id"}},
		{name: "short path", san: "spiffe://example.org/margo/wfm", hints: []string{"not a WFM client identity"}},
		{name: "no path", san: "spiffe://example.org"},
		{name: "not margo", san: "spiffe://example.org/other/wfm/wfm-1/client/device-1"},
		{name: "two URI SANs", san: prefix + clientID, opts: []testpki.ClientOption{testpki.WithExtraURISANs(prefix + "device-2")}, hints: []string{"2 URI SANs"}},
		{name: "SPIFFE ID and another URI", san: prefix + clientID, opts: []testpki.ClientOption{testpki.WithExtraURISANs("https://example.org/")}},
		{name: "non-SPIFFE URI SAN", san: "https://example.org/margo/wfm/wfm-1/client/device-1", hints: []string{"not a SPIFFE ID"}},
		{name: "URN URI SAN", san: "urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66", hints: []string{"not a SPIFFE ID"}},
		{name: "no URI SAN", san: prefix + clientID, opts: []testpki.ClientOption{testpki.WithoutURISAN()}, hints: []string{"no URI SAN"}},
		{name: "uppercase trust domain", san: "spiffe://EXAMPLE.org/margo/wfm/wfm-1/client/device-1", hints: []string{"lowercase"}},
		{name: "uppercase scheme", san: "SPIFFE://example.org/margo/wfm/wfm-1/client/device-1", hints: []string{"lowercase"}},
		{name: "port", san: "spiffe://example.org:8443/margo/wfm/wfm-1/client/device-1", hints: []string{"trust domain characters"}},
		{name: "userinfo", san: "spiffe://device-1@example.org/margo/wfm/wfm-1/client/device-1", hints: []string{"trust domain characters"}},
		{name: "query", san: prefix + "device-1?admin=true", hints: []string{"path segment characters"}},
		{name: "fragment", san: prefix + "device-1#x", hints: []string{"path segment characters"}},
		{name: "percent-encoding", san: prefix + "device%2D1", hints: []string{"path segment characters"}},
		{name: "percent-encoded slash", san: prefix + "device-1%2Fx", hints: []string{"path segment characters"}},
		{name: "dot segments", san: "spiffe://example.org/margo/wfm/wfm-2/../wfm-1/client/device-1", hints: []string{"dot segments"}},
		{name: "dot client id", san: prefix + ".", hints: []string{"dot segments"}},
		{name: "trailing slash", san: prefix + "device-1/", hints: []string{"trailing slash"}},
		{name: "client id too long", san: prefix + long + "x", hints: []string{"129 characters"}},
		{name: "client id with a space", san: prefix + "device 1", hints: []string{"path segment characters"}},
		{name: "client id with a bad char", san: prefix + "device~1", hints: []string{"path segment characters"}},
		{name: "CA:TRUE leaf", san: prefix + clientID, opts: []testpki.ClientOption{testpki.WithCA()}, hints: []string{"CA:TRUE"}},
		{name: "keyCertSign leaf", san: prefix + clientID, opts: []testpki.ClientOption{testpki.WithKeyUsage(x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign)}, hints: []string{"keyCertSign"}},
		{name: "cRLSign leaf", san: prefix + clientID, opts: []testpki.ClientOption{testpki.WithKeyUsage(x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign)}, hints: []string{"cRLSign"}},
		{name: "leaf without digitalSignature", san: prefix + clientID, opts: []testpki.ClientOption{testpki.WithKeyUsage(x509.KeyUsageKeyAgreement)}, hints: []string{"digitalSignature"}},
		{name: "client id with a colon", san: prefix + "device:1", hints: []string{"path segment characters"}},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := cfg.ClientID(issue(t, ca, tt.san, tt.opts...))
			wantRefusal(t, "ClientID("+tt.san+")", got, err, identity.TypeInvalidClientIdentity, tt.hints...)
		})
	}
}

func TestClientIDWithoutParsedExtensions(t *testing.T) {
	t.Parallel()
	// A certificate assembled in memory has URIs but no raw extensions.
	cert := &x509.Certificate{KeyUsage: x509.KeyUsageDigitalSignature, URIs: []*url.URL{{Scheme: "spiffe", Host: "example.org", Path: "/margo/wfm/wfm-1/client/device-1"}}}
	got, err := cfg.ClientID(cert)
	if err != nil || got != clientID {
		t.Errorf("ClientID(in-memory certificate) = %q, %v; want %q", got, err, clientID)
	}
	cert.URIs[0].Host = "other.org"
	got, err = cfg.ClientID(cert)
	wantRefusal(t, "ClientID(in-memory certificate of other.org)", got, err, identity.TypeInvalidClientIdentity)

	got, err = cfg.ClientID(nil)
	wantRefusal(t, "ClientID(nil)", got, err, identity.TypeClientCertificateRequired)
}

func TestClientIDFromRequest(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	good := issue(t, ca, prefix+clientID)
	foreign := issue(t, ca, "spiffe://other.org/margo/wfm/wfm-1/client/device-1")

	request := func(state *tls.ConnectionState) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "https://wfm.example.org/api/v1/deployments", nil)
		r.TLS = state
		return r
	}

	got, err := cfg.ClientIDFromRequest(request(&tls.ConnectionState{
		PeerCertificates: []*x509.Certificate{good},
		VerifiedChains:   [][]*x509.Certificate{{good, ca.Certificate()}},
	}))
	if err != nil || got != clientID {
		t.Errorf("ClientIDFromRequest(verified chain) = %q, %v; want %q", got, err, clientID)
	}

	tests := []struct {
		name  string
		state *tls.ConnectionState
		typ   string
		hints []string
	}{
		{name: "no TLS", state: nil, typ: identity.TypeClientCertificateRequired, hints: []string{"TLS"}},
		{name: "no client certificate", state: &tls.ConnectionState{}, typ: identity.TypeClientCertificateRequired, hints: []string{"no client certificate"}},
		{name: "certificate not verified", state: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{good}},
			typ: identity.TypeClientCertificateRequired, hints: []string{"not verified"}},
		{name: "empty verified chain", state: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{good}, VerifiedChains: [][]*x509.Certificate{{}}},
			typ: identity.TypeClientCertificateRequired},
		{name: "verified chain of another identity", state: &tls.ConnectionState{
			PeerCertificates: []*x509.Certificate{foreign},
			VerifiedChains:   [][]*x509.Certificate{{foreign, ca.Certificate()}},
		}, typ: identity.TypeInvalidClientIdentity, hints: []string{"other.org"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := cfg.ClientIDFromRequest(request(tt.state))
			wantRefusal(t, "ClientIDFromRequest", got, err, tt.typ, tt.hints...)
		})
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v, want nil", cfg, err)
	}
	bad := []identity.Config{
		{TrustDomain: "", WFMID: "wfm-1"},
		{TrustDomain: "Example.org", WFMID: "wfm-1"},
		{TrustDomain: "example.org:443", WFMID: "wfm-1"},
		{TrustDomain: "example.org", WFMID: ""},
		{TrustDomain: "example.org", WFMID: ".."},
		{TrustDomain: "example.org", WFMID: "wfm/1"},
	}
	for _, c := range bad {
		err := c.Validate()
		if lifecycle.ErrorCode(err) != lifecycle.EINVALID || lifecycle.ErrorType(err) != "invalid-identity-config" {
			t.Errorf("Validate(%+v) = %v, want EINVALID invalid-identity-config", c, err)
		}
	}
}

func TestClientSPIFFEID(t *testing.T) {
	t.Parallel()
	got, err := cfg.ClientSPIFFEID(clientID)
	if err != nil || got != prefix+clientID {
		t.Errorf("ClientSPIFFEID(%q) = %q, %v; want %q", clientID, got, err, prefix+clientID)
	}
	// What ClientSPIFFEID names, ClientID accepts.
	got2, err := cfg.ClientID(issue(t, newCA(t), got))
	if err != nil || got2 != clientID {
		t.Errorf("ClientID(ClientSPIFFEID(%q)) = %q, %v; want %q", clientID, got2, err, clientID)
	}

	if _, err := cfg.ClientSPIFFEID("a/b"); lifecycle.ErrorType(err) != "invalid-client-id" {
		t.Errorf("ClientSPIFFEID(%q) = %v, want invalid-client-id", "a/b", err)
	}
	if _, err := (identity.Config{TrustDomain: "Example.org", WFMID: "w"}).ClientSPIFFEID(clientID); lifecycle.ErrorType(err) != "invalid-identity-config" {
		t.Errorf("ClientSPIFFEID with an invalid config = %v, want invalid-identity-config", err)
	}
}

func TestCheckClientID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"a", "device-1", "Dev_1.a-b", "...", strings.Repeat("z", identity.MaxClientIDLength)} {
		if err := identity.CheckClientID(id); err != nil {
			t.Errorf("CheckClientID(%.40q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", ".", "..", "a b", "a/b", "a%41", "dévice", "a\nb", strings.Repeat("z", identity.MaxClientIDLength+1)} {
		err := identity.CheckClientID(id)
		if lifecycle.ErrorCode(err) != lifecycle.EINVALID || lifecycle.ErrorType(err) != "invalid-client-id" {
			t.Errorf("CheckClientID(%.40q) = %v, want EINVALID invalid-client-id", id, err)
		}
	}
}
