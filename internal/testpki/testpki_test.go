package testpki_test

import (
	"crypto/ecdsa"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/devpki"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/testpki"
)

const spiffeID = "spiffe://example.org/margo/wfm/wfm-1/client/device-1"

func newCA(t *testing.T) *devpki.CA {
	t.Helper()
	ca, err := devpki.NewCA("test CA")
	require.NoError(t, err)
	return ca
}

func TestIssueClient(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	past := time.Now().Add(-48 * time.Hour)

	tests := []struct {
		name      string
		opts      []testpki.ClientOption
		wantURIs  []string
		verifyErr x509.InvalidReason // -1: verifies
	}{
		{name: "default", wantURIs: []string{spiffeID}, verifyErr: -1},
		{name: "extra URI SANs", opts: []testpki.ClientOption{testpki.WithExtraURISANs("https://example.org/x", "spiffe://example.org/y")},
			wantURIs: []string{spiffeID, "https://example.org/x", "spiffe://example.org/y"}, verifyErr: -1},
		{name: "no URI SAN", opts: []testpki.ClientOption{testpki.WithoutURISAN()}, verifyErr: -1},
		{name: "common name", opts: []testpki.ClientOption{testpki.WithCommonName("device 1")}, wantURIs: []string{spiffeID}, verifyErr: -1},
		{name: "expired", opts: []testpki.ClientOption{testpki.WithValidity(past, past.Add(time.Hour))},
			wantURIs: []string{spiffeID}, verifyErr: x509.Expired},
		{name: "server auth only", opts: []testpki.ClientOption{testpki.WithExtKeyUsage(x509.ExtKeyUsageServerAuth)},
			wantURIs: []string{spiffeID}, verifyErr: x509.IncompatibleUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cert, err := testpki.IssueClient(ca, spiffeID, tt.opts...)
			require.NoError(t, err)
			require.NotNil(t, cert.Leaf)
			leaf := cert.Leaf

			var got []string
			for _, u := range leaf.URIs {
				got = append(got, u.String())
			}
			require.Equal(t, tt.wantURIs, got, "URI SANs")
			if leaf.IsCA || leaf.KeyUsage != x509.KeyUsageDigitalSignature {
				t.Errorf("IsCA=%v KeyUsage=%v, want a leaf with digital signature only", leaf.IsCA, leaf.KeyUsage)
			}
			if _, ok := cert.PrivateKey.(*ecdsa.PrivateKey); !ok {
				t.Errorf("private key = %T, want *ecdsa.PrivateKey", cert.PrivateKey)
			}
			_, err = leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			var invalid x509.CertificateInvalidError
			switch {
			case tt.verifyErr == -1 && err != nil:
				t.Errorf("Verify = %v, want success", err)
			case tt.verifyErr != -1 && (!errors.As(err, &invalid) || invalid.Reason != tt.verifyErr):
				t.Errorf("Verify = %v, want reason %v", err, tt.verifyErr)
			}
		})
	}
}

func TestIssueClientRefusals(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	now := time.Now()
	tests := []struct {
		name string
		id   string
		opts []testpki.ClientOption
	}{
		{name: "non-ASCII URI", id: "spiffe://example.org/dévice"},
		{name: "unparsable extra URI", id: spiffeID, opts: []testpki.ClientOption{testpki.WithExtraURISANs("spiffe://example.org/a%zz")}},
		{name: "validity ends before it starts", id: spiffeID, opts: []testpki.ClientOption{testpki.WithValidity(now, now.Add(-time.Second))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := testpki.IssueClient(ca, tt.id, tt.opts...)
			if got := lifecycle.ErrorCode(err); got != lifecycle.EINVALID {
				t.Errorf("IssueClient(%q) = %v, want code %s", tt.id, err, lifecycle.EINVALID)
			}
		})
	}
}
