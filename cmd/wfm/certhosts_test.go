package main

import (
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeviceCertHosts: the development server certificate carries the
// configured names besides localhost, is issued again (by the same CA) when
// they change, and is kept by "wfm issue-client-cert", which needs the CA
// only.
func TestDeviceCertHosts(t *testing.T) {
	c, err := parseConfig(nil, func(k string) string {
		return map[string]string{"WFM_DEVICE_CERT_HOSTS": "wfm, WFM.example.com,10.1.2.3,wfm"}[k]
	}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"wfm", "wfm.example.com", "10.1.2.3"}, c.deviceCertHosts)

	dir := t.TempDir()
	ca, cert, created, err := devPKIHosts(dir, c.deviceCertHosts)
	require.NoError(t, err)
	assert.True(t, created)
	assert.ElementsMatch(t, []string{"localhost", "wfm", "wfm.example.com"}, cert.Leaf.DNSNames)
	assert.True(t, cert.Leaf.IPAddresses[2].Equal(net.ParseIP("10.1.2.3")))
	require.NoError(t, cert.Leaf.VerifyHostname("wfm"))

	_, kept, _, err := devPKI(dir)
	require.NoError(t, err)
	assert.Equal(t, cert.Leaf.SerialNumber, kept.Leaf.SerialNumber, "issue-client-cert keeps the server certificate")
	_, same, _, err := devPKIHosts(dir, []string{"wfm.example.com", "10.1.2.3", "wfm"})
	require.NoError(t, err)
	assert.Equal(t, cert.Leaf.SerialNumber, same.Leaf.SerialNumber, "the same names in another order: kept")

	ca2, other, created, err := devPKIHosts(dir, nil)
	require.NoError(t, err)
	assert.False(t, created)
	assert.NotEqual(t, cert.Leaf.SerialNumber, other.Leaf.SerialNumber, "other names: issued again")
	assert.Equal(t, []string{"localhost"}, other.Leaf.DNSNames)
	assert.Equal(t, ca.Certificate().Raw, ca2.Certificate().Raw, "by the same CA")

	for _, bad := range []string{"a b", "-x.example", "x..y", "ex_ample"} {
		_, err := parseConfig([]string{"-device-cert-hosts", bad}, func(string) string { return "" }, io.Discard)
		assert.ErrorContains(t, err, "-device-cert-hosts", bad)
	}
	_, err = parseConfig([]string{"-device-cert-hosts", "wfm", "-tls-cert", "a", "-tls-key", "b", "-client-ca", "c"}, func(string) string { return "" }, io.Discard)
	assert.ErrorContains(t, err, "-device-cert-hosts")
}
