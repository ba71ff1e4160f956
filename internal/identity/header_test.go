package identity_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/wfm-dev/wfm/internal/identity"
)

// clientIdentifier is the one method a server needs from an identity source;
// both sources must have it so a server can switch between them.
type clientIdentifier interface {
	ClientIDFromRequest(*http.Request) (string, error)
}

var (
	_ clientIdentifier = identity.Config{}
	_ clientIdentifier = identity.HeaderIdentity{}
)

func TestHeaderIdentity(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values []string
		want   string // "" means refused
		hints  []string
	}{
		{name: "client id", values: []string{"device-1"}, want: "device-1"},
		{name: "all allowed characters", values: []string{"Dev_1.a-b"}, want: "Dev_1.a-b"},
		{name: "longest", values: []string{strings.Repeat("d", identity.MaxClientIDLength)}, want: strings.Repeat("d", identity.MaxClientIDLength)},
		{name: "missing", values: nil, hints: []string{identity.DevHeader}},
		{name: "empty", values: []string{""}, hints: []string{"empty"}},
		{name: "repeated", values: []string{"device-1", "device-2"}, hints: []string{"2 " + identity.DevHeader}},
		{name: "too long", values: []string{strings.Repeat("d", identity.MaxClientIDLength+1)}, hints: []string{"129 characters"}},
		{name: "slash", values: []string{"device/1"}, hints: []string{"path segment characters"}},
		{name: "space", values: []string{"device 1"}},
		{name: "dot-dot", values: []string{".."}, hints: []string{"dot segments"}},
		{name: "SPIFFE ID instead of a client id", values: []string{"spiffe://example.org/margo/wfm/wfm-1/client/device-1"}},
		{name: "non-ASCII", values: []string{"dévice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodGet, "/api/v1/deployments", nil)
			for _, v := range tt.values {
				r.Header.Add(identity.DevHeader, v)
			}
			got, err := identity.HeaderIdentity{}.ClientIDFromRequest(r)
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Errorf("HeaderIdentity.ClientIDFromRequest(%q) = %q, %v; want %q", tt.values, got, err, tt.want)
				}
				return
			}
			wantRefusal(t, "HeaderIdentity.ClientIDFromRequest", got, err, identity.TypeInvalidClientIdentity, tt.hints...)
		})
	}
}

func TestHeaderIdentityIgnoresCertificates(t *testing.T) {
	t.Parallel()
	// The header source reads only the header; a certificate does not stand
	// in for it (and Config never reads the header).
	ca := newCA(t)
	leaf := issue(t, ca, prefix+clientID)
	r := httptest.NewRequest(http.MethodGet, "https://wfm.example.org/api/v1/deployments", nil)
	r.TLS.PeerCertificates = append(r.TLS.PeerCertificates, leaf)
	got, err := identity.HeaderIdentity{}.ClientIDFromRequest(r)
	wantRefusal(t, "HeaderIdentity.ClientIDFromRequest(certificate, no header)", got, err, identity.TypeInvalidClientIdentity)

	r.Header.Set(identity.DevHeader, "device-2")
	got, err = cfg.ClientIDFromRequest(r)
	wantRefusal(t, "Config.ClientIDFromRequest(header, unverified certificate)", got, err, identity.TypeClientCertificateRequired)
}
