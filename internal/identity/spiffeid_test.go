package identity_test

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/identity"
)

// withRawURISAN is a certificate, built in memory, whose one URI SAN is
// exactly s (bytes a CA could sign, whatever crypto/x509 would make of them).
func withRawURISAN(t *testing.T, s string) *x509.Certificate {
	t.Helper()
	der, err := asn1.Marshal([]asn1.RawValue{{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte(s)}})
	require.NoError(t, err)
	return &x509.Certificate{
		KeyUsage:   x509.KeyUsageDigitalSignature,
		Extensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: der}},
	}
}

// TestSPIFFEIDSyntax checks that the URI SAN is read as signed and held to
// go-spiffe's SPIFFE ID rules plus the specification's length bounds.
func TestSPIFFEIDSyntax(t *testing.T) {
	t.Parallel()
	for _, s := range []string{prefix + clientID, prefix + "...", prefix + "Dev_1.a-b"} {
		if _, err := cfg.ClientID(withRawURISAN(t, s)); err != nil {
			t.Errorf("ClientID(%q) = %v, want accepted", s, err)
		}
	}
	longTD := strings.Repeat("a", identity.MaxTrustDomainLength+1)
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"other scheme", "https://example.org/margo/wfm/wfm-1/client/device-1"},
		{"no authority", "spiffe:example.org/margo/wfm/wfm-1/client/device-1"},
		{"uppercase scheme", "SPIFFE://example.org/margo/wfm/wfm-1/client/device-1"},
		{"mixed-case scheme", "Spiffe://example.org/margo/wfm/wfm-1/client/device-1"},
		{"no trust domain", "spiffe:///margo/wfm/wfm-1/client/device-1"},
		{"uppercase trust domain", "spiffe://Example.org/margo/wfm/wfm-1/client/device-1"},
		{"port", "spiffe://example.org:8443/margo/wfm/wfm-1/client/device-1"},
		{"userinfo", "spiffe://u@example.org/margo/wfm/wfm-1/client/device-1"},
		{"query", prefix + "device-1?x=1"},
		{"fragment", prefix + "device-1#x"},
		{"percent-encoded path", prefix + "device%2D1"},
		{"dot segment", "spiffe://example.org/margo/wfm/./wfm-1/client/device-1"},
		{"dot-dot segment", "spiffe://example.org/margo/wfm/x/../wfm-1/client/device-1"},
		{"dot client id", prefix + "."},
		{"dot-dot client id", prefix + ".."},
		{"empty segment", "spiffe://example.org/margo//wfm/wfm-1/client/device-1"},
		{"trailing slash", prefix + "device-1/"},
		{"space", prefix + "device 1"},
		{"control byte", prefix + "device\n1"},
		{"non-ASCII", prefix + "dévice"},
		{"too long", prefix + strings.Repeat("a", identity.MaxSPIFFEIDLength-len(prefix)+1)},
		{"trust domain too long", "spiffe://" + longTD + "/margo/wfm/wfm-1/client/device-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := cfg.ClientID(withRawURISAN(t, tt.in))
			wantRefusal(t, "ClientID("+tt.name+")", got, err, identity.TypeInvalidClientIdentity)
			// The message may repeat the input, but bounded and without raw
			// control bytes.
			if msg := err.Error(); len(msg) > 600 || strings.ContainsAny(msg, "\n\r") {
				t.Errorf("message is %d bytes or holds a line break: %.100q", len(msg), msg)
			}
		})
	}
}
