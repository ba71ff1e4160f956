package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIssueClientCertHintsAtTheDeviceAddress: the curl and simulator hints
// of issue-client-cert name the configured device listener (flag, then
// WFM_DEVICE_LISTEN, then the server's default), not a fixed address.
func TestIssueClientCertHintsAtTheDeviceAddress(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"default", nil, map[string]string{"WFM_DEVICE_LISTEN": ""}, "https://127.0.0.1:8443/api/v1/deployments"},
		{"env", nil, map[string]string{"WFM_DEVICE_LISTEN": "edge.example.com:9443"}, "https://edge.example.com:9443/api/v1/deployments"},
		{"flag wins", []string{"-device-listen", "10.1.2.3:7443"}, map[string]string{"WFM_DEVICE_LISTEN": "edge.example.com:9443"}, "https://10.1.2.3:7443/api/v1/deployments"},
		{"all interfaces", []string{"-device-listen", ":8443"}, nil, "https://localhost:8443/api/v1/deployments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			var out strings.Builder
			args := append([]string{"issue-client-cert", "-client-id", "plant", "-data-dir", dataDir}, tc.args...)
			require.NoError(t, run(t.Context(), args, envWith(tc.env), &out, &out))
			ca := filepath.Join(dataDir, "pki", "ca.pem")
			cert, key := filepath.Join(dataDir, "pki", "clients", "plant.pem"), filepath.Join(dataDir, "pki", "clients", "plant-key.pem")
			require.Contains(t, out.String(), "try: curl --cacert "+ca+" --cert "+cert+" --key "+key+" "+tc.want+"\n")
			require.Contains(t, out.String(), "simulate devices: ./bin/wfm-devicesim -server "+strings.TrimSuffix(tc.want, "/api/v1/deployments")+" -ca "+ca)
		})
	}
}

// TestIssueClientCertRefusesUnusableAddressesAndSaysWhenItCreatesACA: an
// address the hints could not use is refused; a CA created on the way (no
// server's CA in that data folder) is announced.
func TestIssueClientCertRefusesUnusableAddressesAndSaysWhenItCreatesACA(t *testing.T) {
	for _, addr := range []string{"", "bogus", "127.0.0.1:99999", "host:port"} {
		err := run(t.Context(), []string{"issue-client-cert", "-client-id", "plant", "-data-dir", t.TempDir(), "-device-listen", addr}, envWith(nil), io.Discard, io.Discard)
		assert.ErrorContains(t, err, "-device-listen", "%q", addr)
	}
	dataDir := t.TempDir()
	var stderr strings.Builder
	args := []string{"issue-client-cert", "-client-id", "plant", "-data-dir", dataDir}
	require.NoError(t, run(t.Context(), args, envWith(nil), io.Discard, &stderr))
	assert.Contains(t, stderr.String(), "created a new development CA")
	stderr.Reset()
	require.NoError(t, run(t.Context(), append(args[:1:1], "-client-id", "other", "-data-dir", dataDir), envWith(nil), io.Discard, &stderr))
	assert.NotContains(t, stderr.String(), "created a new development CA", "the CA existed")
}
