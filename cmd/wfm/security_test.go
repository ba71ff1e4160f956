package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/devpki"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
)

// lockedBuffer collects the server's log lines while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the JSON log lines written so far.
func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		out = append(out, m)
	}
	return out
}

// line returns the one log line with message msg, nil if there is none.
func (l *lockedBuffer) line(t *testing.T, msg string) map[string]any {
	t.Helper()
	var found map[string]any
	for _, m := range l.lines(t) {
		if m["msg"] == msg {
			require.Nil(t, found, "more than one %q line", msg)
			found = m
		}
	}
	return found
}

// startLogged runs the server against a fresh database with JSON logs and
// returns its management base URL (http or https) and its log. The log
// lines written before the server prints its address (the security posture,
// the listener warning) are complete when it returns.
func startLogged(t *testing.T, args ...string) (string, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	getenv := envWith(map[string]string{"DATABASE_URL": pgtest.URL(t), "WFM_ADMIN_TOKEN": "test-admin-token-0123456789"})
	url, _ := startServerLogging(t, append([]string{"-log-format", "json"}, args...), getenv, logs)
	return url, logs
}

// getWith GETs url with a client that trusts roots and speaks at most TLS
// version maxVersion (0: any); it returns the status and the TLS version.
func getWith(t *testing.T, url string, roots *x509.CertPool, maxVersion uint16) (int, uint16) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MaxVersion: maxVersion}}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	require.NotNil(t, res.TLS, "answered over TLS")
	return res.StatusCode, res.TLS.Version
}

// TestManagementTLSWithConfiguredCertificate: with -mgmt-tls-cert and
// -mgmt-tls-key the management API (bearer tokens) is served over HTTPS
// only, TLS 1.3 preferred, TLS 1.2 accepted, no client certificate asked.
func TestManagementTLSWithConfiguredCertificate(t *testing.T) {
	ca, err := devpki.NewCA("operator CA")
	require.NoError(t, err)
	cert, err := ca.IssueServer([]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	require.NoError(t, err)
	certPEM, keyPEM, err := devpki.EncodePEM(cert)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "mgmt.pem"), filepath.Join(dir, "mgmt-key.pem")
	require.NoError(t, devpki.WriteKeyPairFiles(certFile, keyFile, certPEM, keyPEM))

	base, logs := startLogged(t, "-mgmt-tls-cert", certFile, "-mgmt-tls-key", keyFile)
	require.True(t, strings.HasPrefix(base, "https://"), "printed URL %s says https", base)

	status, version := getWith(t, base+"/readyz", ca.Pool(), 0)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, uint16(tls.VersionTLS13), version, "TLS 1.3 when the client speaks it")
	status, version = getWith(t, base+"/readyz", ca.Pool(), tls.VersionTLS12)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, uint16(tls.VersionTLS12), version, "TLS 1.2 for older operator tools")

	// A bearer token works over TLS.
	req, _ := http.NewRequest("GET", base+"/mgmt/v1/applications", nil)
	req.Header.Set("Authorization", "Bearer test-admin-token-0123456789")
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)

	// Plain HTTP gets no management answer.
	plain, err := http.Get("http://" + strings.TrimPrefix(base, "https://") + "/readyz")
	if err == nil {
		plain.Body.Close()
		assert.Equal(t, http.StatusBadRequest, plain.StatusCode, "Go's TLS server refuses a plain HTTP request")
	}

	p := logs.line(t, "security posture")
	require.NotNil(t, p)
	assert.Equal(t, false, p["management_plain_http"])
	assert.True(t, strings.HasPrefix(p["management"].(string), "https://127.0.0.1:"), "%v", p["management"])
	assert.Nil(t, logs.line(t, warnPlainMgmt))
}

// TestManagementTLSDev: -mgmt-tls-dev serves the management API with the
// development CA's server certificate, trusted through <data-dir>/pki/ca.pem.
func TestManagementTLSDev(t *testing.T) {
	dataDir := t.TempDir()
	base, logs := startLogged(t, "-mgmt-tls-dev", "-data-dir", dataDir)
	require.True(t, strings.HasPrefix(base, "https://"), "printed URL %s says https", base)

	caPEM, err := os.ReadFile(filepath.Join(dataDir, "pki", "ca.pem"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	status, _ := getWith(t, base+"/readyz", roots, 0)
	assert.Equal(t, http.StatusOK, status)

	p := logs.line(t, "security posture")
	require.NotNil(t, p)
	assert.Equal(t, false, p["management_plain_http"])
	assert.Equal(t, "dev-pki,mgmt-tls-dev", p["relaxed"])
}

const warnPlainMgmt = "the management listener is plain HTTP on a non-loopback address: bearer tokens cross the network in clear; serve it over TLS (-mgmt-tls-cert and -mgmt-tls-key) or keep it on loopback"

// TestPlainManagementBeyondLoopbackWarns: plain HTTP on every interface is
// allowed (behind a TLS-terminating proxy) but said loudly; on loopback it
// is not.
func TestPlainManagementBeyondLoopbackWarns(t *testing.T) {
	_, logs := startLogged(t, "-listen", "0.0.0.0:0")
	w := logs.line(t, warnPlainMgmt)
	require.NotNil(t, w, "warning logged")
	assert.Equal(t, "WARN", w["level"])
	assert.NotEmpty(t, w["addr"])
	p := logs.line(t, "security posture")
	require.NotNil(t, p)
	assert.Equal(t, true, p["management_plain_http"])
	assert.Equal(t, false, p["management_loopback"])

	_, logs = startLogged(t)
	assert.Nil(t, logs.line(t, warnPlainMgmt), "no warning on loopback")
}

// TestSecurityPostureLine: one line at start says who may call, how the
// management listener is reached, that /metrics needs no token, the rate
// limits, whose forwarding header names a caller, where webhook receivers
// may be beyond the default guard, and every development or relaxed
// setting (the webhook relaxations among them).
func TestSecurityPostureLine(t *testing.T) {
	_, logs := startLogged(t, "-accept-clients", "listed", "-device-tls12", "-allow-rollback-override=false")
	p := logs.line(t, "security posture")
	require.NotNil(t, p)
	assert.Equal(t, "INFO", p["level"])
	assert.Equal(t, "listed", p["accept_clients"])
	assert.Equal(t, "mtls", p["device_auth"])
	assert.True(t, strings.HasPrefix(p["management"].(string), "http://127.0.0.1:"), "%v", p["management"])
	assert.Equal(t, true, p["management_plain_http"])
	assert.Equal(t, true, p["management_loopback"])
	assert.Equal(t, "unauthenticated on the management listener", p["metrics"])
	assert.EqualValues(t, 50, p["mgmt_rate"], "the default management limit")
	assert.EqualValues(t, 100, p["mgmt_burst"])
	assert.Equal(t, "none", p["trusted_proxies"])
	assert.Equal(t, "none (no trusted proxies)", p["forwarded_header"])
	assert.Equal(t, "none", p["cors_origins"], "CORS is off by default")
	assert.Equal(t, "none", p["webhook_allow_cidr"], "the SSRF guard is whole by default")
	assert.EqualValues(t, 20, p["device_rate"])
	assert.EqualValues(t, 40, p["device_burst"])
	assert.Equal(t, false, p["rollback_override"])
	assert.Equal(t, "dev-pki,device-tls12", p["relaxed"])

	// Defaults with the development PKI: the override is on, and is not a
	// relaxation.
	_, logs = startLogged(t)
	p = logs.line(t, "security posture")
	require.NotNil(t, p)
	assert.Equal(t, true, p["rollback_override"])
	assert.Equal(t, "dev-pki", p["relaxed"])

	_, logs = startLogged(t, "-dev-header-identity", "-mgmt-rate", "0", "-device-rate", "1e9",
		"-trusted-proxies", "10.0.0.0/8,192.0.2.10", "-forwarded-header", "forwarded",
		"-cors-origins", "https://console.example.com,http://localhost:5173",
		"-webhook-allow-http", "-webhook-allow-cidr", "10.20.0.0/16,fd00::/8")
	p = logs.line(t, "security posture")
	require.NotNil(t, p)
	assert.Equal(t, "all", p["accept_clients"])
	assert.Contains(t, p["device_auth"], "INSECURE")
	assert.Equal(t, "unlimited", p["mgmt_rate"])
	assert.Equal(t, "unlimited", p["mgmt_burst"])
	assert.Equal(t, "10.0.0.0/8,192.0.2.10/32", p["trusted_proxies"])
	assert.Equal(t, "forwarded", p["forwarded_header"])
	assert.Equal(t, "https://console.example.com,http://localhost:5173", p["cors_origins"])
	assert.EqualValues(t, 1e9, p["device_rate"])
	assert.Equal(t, "10.20.0.0/16,fd00::/8", p["webhook_allow_cidr"])
	assert.Equal(t, "dev-header-identity,mgmt-rate-unlimited,device-rate-raised,webhook-allow-http,webhook-allow-cidr", p["relaxed"])
}

func TestManagementTLSConfigErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-mgmt-tls-cert", "x.pem"},
		{"-mgmt-tls-key", "x-key.pem"},
		{"-mgmt-tls-dev", "-mgmt-tls-cert", "x.pem", "-mgmt-tls-key", "x-key.pem"},
	} {
		_, err := parseConfig(args, envWithout(), io.Discard)
		assert.Error(t, err, "%v", args)
	}
}

// TestIssueClientCertRefusesDotSegments: issue-client-cert uses the one
// client-id check (identity.CheckClientID) that certificates and the
// management API use, so it never writes a certificate no server accepts.
func TestIssueClientCertRefusesDotSegments(t *testing.T) {
	for _, id := range []string{".", ".."} {
		dataDir := t.TempDir()
		err := run(t.Context(), []string{"issue-client-cert", "-client-id", id, "-data-dir", dataDir}, envWithout(), io.Discard, io.Discard)
		require.Error(t, err, id)
		assert.Equal(t, "invalid-client-id", lifecycle.ErrorType(err), id)
		assert.NoDirExists(t, filepath.Join(dataDir, "pki", "clients"), "nothing issued for %q", id)
	}
	dataDir := t.TempDir()
	require.NoError(t, run(t.Context(), []string{"issue-client-cert", "-client-id", "...", "-data-dir", dataDir}, envWithout(), io.Discard, io.Discard))
	assert.FileExists(t, filepath.Join(dataDir, "pki", "clients", "....pem"))
}
