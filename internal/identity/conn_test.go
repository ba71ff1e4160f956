package identity_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/testpki"
)

// TestConnContextMemo: on a connection's context (ConnContext) the
// certificate is checked once; later requests with the same verified leaf
// get the same answer without the work (no allocation at all), and a
// different leaf or configuration is checked anew, never answered from the
// memo. (Not parallel: testing.AllocsPerRun refuses parallel tests.)
func TestConnContextMemo(t *testing.T) {
	ca := newCA(t)
	good := issue(t, ca, prefix+clientID)
	other := issue(t, ca, prefix+"device-2")
	foreign := issue(t, ca, "spiffe://other.org/margo/wfm/wfm-1/client/device-1")

	conn := identity.ConnContext(context.Background(), nil)
	request := func(ctx context.Context, leaf *x509.Certificate) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "https://wfm.example.org/api/v1/deployments", nil)
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf, ca.Certificate()}}}
		return r.WithContext(ctx)
	}
	check := func(r *http.Request, c identity.Config, want string) {
		t.Helper()
		if got, err := c.ClientIDFromRequest(r); err != nil || got != want {
			t.Fatalf("ClientIDFromRequest = %q, %v; want %q", got, err, want)
		}
	}

	r := request(conn, good)
	check(r, cfg, clientID)
	if n := testing.AllocsPerRun(100, func() { check(r, cfg, clientID) }); n != 0 {
		t.Errorf("ClientIDFromRequest on the same connection allocates %v times per call, want 0 (answered from the memo)", n)
	}
	// Without a connection memo, every call does the work.
	plain := request(context.Background(), good)
	if n := testing.AllocsPerRun(100, func() { check(plain, cfg, clientID) }); n == 0 {
		t.Error("ClientIDFromRequest without ConnContext allocates nothing: the memo test above proves nothing")
	}

	// Another leaf on the same memo: its own answer, then the first again.
	check(request(conn, other), cfg, "device-2")
	check(r, cfg, clientID)
	// Another configuration: checked under it.
	c2 := identity.Config{TrustDomain: "example.org", WFMID: "wfm-2"}
	got, err := c2.ClientIDFromRequest(r)
	wantRefusal(t, "ClientIDFromRequest(other WFM id)", got, err, identity.TypeInvalidClientIdentity, "wfm-2")
	check(r, cfg, clientID)

	// A refusal is remembered as a refusal.
	f := request(identity.ConnContext(context.Background(), nil), foreign)
	for range 2 {
		got, err := cfg.ClientIDFromRequest(f)
		wantRefusal(t, "ClientIDFromRequest(foreign)", got, err, identity.TypeInvalidClientIdentity, "other.org")
	}
}

// TestConnContextOverTLS: a real server with ConnContext answers each
// connection with its own certificate's identity, over several requests
// of one kept-alive connection.
func TestConnContextOverTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := cfg.ClientIDFromRequest(r)
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(id))
	}))
	srv.TLS = identity.ServerTLSConfig(p.server, p.bundle())
	srv.Config.ConnContext = identity.ConnContext
	srv.StartTLS()
	t.Cleanup(srv.Close)

	other, err := testpki.IssueClient(p.ca, prefix+"device-2")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cert *tls.Certificate
		want string
	}{{&p.good, clientID}, {&other, "device-2"}, {&p.good, clientID}} {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(p, c.cert, 0, false)}}
		for i := range 3 {
			resp, err := client.Get(srv.URL + "/api/v1/deployments")
			if err != nil {
				t.Fatal(err)
			}
			var b [64]byte
			n, _ := resp.Body.Read(b[:])
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(b[:n]) != c.want {
				t.Fatalf("request %d as %s: %d %q, want 200 %q", i, c.want, resp.StatusCode, b[:n], c.want)
			}
		}
		client.CloseIdleConnections()
	}
	// A connection without a certificate is refused on every request.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(p, nil, 0, false)}}
	defer client.CloseIdleConnections()
	for i := range 2 {
		resp, err := client.Get(srv.URL + "/api/v1/deployments")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("request %d without a certificate: %d, want 401", i, resp.StatusCode)
		}
	}
}
