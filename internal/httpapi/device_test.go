package httpapi_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/devpki"
	"github.com/wfm-dev/wfm/internal/feed"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/margotest"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/internal/ratelimit"
	"github.com/wfm-dev/wfm/internal/testpki"
	"github.com/wfm-dev/wfm/sdk"
)

// fleetEnv is a whole server: management API over plain HTTP, device API
// over real mutual TLS, on one database.
type fleetEnv struct {
	mgmt      *sdk.ClientWithResponses
	mgmtURL   string
	deviceURL string
	ca        *devpki.CA
	ids       identity.Config
	chk       *margotest.Checker
	fleet     *fleet.Service
	pool      *pgxpool.Pool
	hub       *feed.Hub // nil unless envOptions.streams
}

// envOptions vary the test server.
type envOptions struct {
	policy  fleet.Policy
	limiter *ratelimit.Limiter
	now     func() time.Time // the services' clock; nil: time.Now
	pool    *pgxpool.Pool    // the database; nil: a fresh pgtest one
	ready   func(context.Context) error
	log     *slog.Logger
	// outageLog samples the WARN lines of an unavailable database; nil:
	// every line.
	outageLog interface{ Allow(key string) bool }
	// idem, if not nil, wraps the idempotency store.
	idem func(*postgres.AccessStore) httpapi.IdempotencyStore
	// wrap, if not nil, wraps the management face's handler.
	wrap func(http.Handler) http.Handler
	// streams, if not nil, serves event streams with a hub of this
	// configuration (Reader and Logger filled in), which the test drives
	// with RunOnce (it is not started); heartbeat is the streams'.
	streams      *feed.Config
	heartbeat    time.Duration
	writeTimeout time.Duration
	// server, if not nil, configures the management face's server before it
	// starts (timeouts).
	server func(*http.Server)
}

func newFleetEnv(t *testing.T, policy fleet.Policy) *fleetEnv {
	t.Helper()
	return newEnv(t, envOptions{policy: policy})
}

// newFleetEnvWith is newFleetEnv with a device API rate limiter.
func newFleetEnvWith(t *testing.T, policy fleet.Policy, limiter *ratelimit.Limiter) *fleetEnv {
	t.Helper()
	return newEnv(t, envOptions{policy: policy, limiter: limiter})
}

// newEnv starts the whole server on a fresh database: the management API
// over plain HTTP, the device API over real mutual TLS.
func newEnv(t *testing.T, o envOptions) *fleetEnv {
	t.Helper()
	if o.now == nil {
		o.now = time.Now
	}
	pool := o.pool
	if pool == nil {
		pool = pgtest.New(t)
	}
	if o.ready == nil {
		o.ready = func(context.Context) error { return nil }
	}
	log := o.log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cat := catalog.NewService(postgres.NewCatalogStore(pool), o.now)
	fl := fleet.NewService(postgres.NewFleetStore(pool, 0), cat, o.policy, o.now, log)
	acc := access.NewService(postgres.NewAccessStore(pool), o.now)
	_, err := acc.Bootstrap(t.Context(), adminToken)
	require.NoError(t, err)
	ids := identity.Config{TrustDomain: "example.org", WFMID: "wfm-test"}
	events := httpapi.EventsConfig{Log: postgres.NewEventLog(pool), Heartbeat: o.heartbeat, WriteTimeout: o.writeTimeout}
	if o.streams != nil {
		cfg := *o.streams
		cfg.Reader, cfg.Logger, cfg.Encode = events.Log, log, httpapi.SSEFrame
		events.Hub = feed.New(cfg)
	}
	var idem httpapi.IdempotencyStore = postgres.NewAccessStore(pool)
	if o.idem != nil {
		idem = o.idem(postgres.NewAccessStore(pool))
	}
	// The device listener is bound first, as the server binds it: the
	// management listener's answer to a device API path names its URL.
	dev := httptest.NewUnstartedServer(nil)
	h, err := httpapi.NewHandler(httpapi.Config{Logger: log, Ready: o.ready,
		Registry: prometheus.NewRegistry(), Catalog: cat, Fleet: fl, Access: acc, DeviceIdentity: ids.ClientIDFromRequest,
		DeviceLimiter: limiterOrNil(o.limiter), Idempotency: idem, OutageLog: o.outageLog, Events: events,
		DeviceURL: "https://" + dev.Listener.Addr().String()})
	require.NoError(t, err)
	mgmtH, deviceH := httpapi.Split(h)
	if o.wrap != nil {
		mgmtH = o.wrap(mgmtH)
	}

	ca, err := devpki.NewCA("test CA")
	require.NoError(t, err)
	serverCert, err := ca.IssueServer([]string{"localhost"}, nil)
	require.NoError(t, err)
	dev.Config.Handler = deviceH
	dev.TLS = identity.ServerTLSConfig(serverCert, []*x509.Certificate{ca.Certificate()}, identity.RequireClientCert())
	dev.StartTLS()
	t.Cleanup(dev.Close)
	mgmt := httptest.NewUnstartedServer(mgmtH)
	if o.server != nil {
		o.server(mgmt.Config)
	}
	mgmt.Start()
	t.Cleanup(mgmt.Close)
	if events.Hub != nil {
		t.Cleanup(events.Hub.Stop) // before mgmt.Close, which waits for open streams
	}
	c := clientAs(t, mgmt.URL, adminToken)
	return &fleetEnv{mgmt: c, mgmtURL: mgmt.URL, deviceURL: dev.URL, ca: ca, ids: ids, chk: margotest.FromEnv(t), fleet: fl, pool: pool, hub: events.Hub}
}

// limiterOrNil keeps a nil *Limiter from becoming a non-nil interface.
func limiterOrNil(l *ratelimit.Limiter) interface {
	Allow(string) (bool, time.Duration)
} {
	if l == nil {
		return nil
	}
	return l
}

// agent is a device agent: an HTTP client with its client certificate.
type agent struct {
	t    *testing.T
	env  *fleetEnv
	http *http.Client
}

func (e *fleetEnv) agent(t *testing.T, spiffeID string, opts ...testpki.ClientOption) *agent {
	t.Helper()
	cert, err := testpki.IssueClient(e.ca, spiffeID, opts...)
	require.NoError(t, err)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool(), Certificates: []tls.Certificate{cert}, ServerName: "localhost", MinVersion: tls.VersionTLS13}}
	t.Cleanup(tr.CloseIdleConnections)
	return &agent{t: t, env: e, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

func (e *fleetEnv) client(t *testing.T, clientID string) *agent {
	id, err := e.ids.ClientSPIFFEID(clientID)
	require.NoError(t, err)
	return e.agent(t, id)
}

// do sends a device API request, checks the exchange against Margo's rc.3
// document, and returns the response with its body.
func (a *agent) do(method, path string, body []byte, header ...string) (*http.Response, []byte) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.env.deviceURL+path, bytes.NewReader(body))
	require.NoError(a.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		a.env.chk.CheckRequest(a.t, req, body)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1]) // a key given twice is sent on two lines
	}
	res, err := a.http.Do(req)
	require.NoError(a.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(a.t, err)
	a.env.chk.Check(a.t, req, res, b)
	return res, b
}

func capabilities(deviceID string, types ...string) []byte {
	b, _ := json.Marshal(map[string]any{"properties": map[string]any{
		"id": deviceID, "vendor": "Acme", "modelNumber": "A-1", "serialNumber": "S-" + deviceID,
		"cpus": []any{map[string]any{"cores": 4, "architecture": "amd64"}}, "memory": "8Gi", "storage": "64Gi",
		"supportedRuntimes": []string{"oci"}, "supportedDeploymentTypes": types,
	}, "labels": map[string]any{"site": "alfa"}})
	return b
}

type manifest struct {
	ManifestVersion uint64 `json:"manifestVersion"`
	Bundle          *struct {
		MediaType, Digest, URL string
	} `json:"bundle"`
	Deployments []struct {
		DeploymentID string `json:"deploymentId"`
		Digest       string `json:"digest"`
		URL          string `json:"url"`
	} `json:"deployments"`
}

func (a *agent) manifest() (manifest, string) {
	a.t.Helper()
	res, body := a.do("GET", "/api/v1/deployments", nil)
	require.Equal(a.t, http.StatusOK, res.StatusCode, string(body))
	var m manifest
	require.NoError(a.t, json.Unmarshal(body, &m))
	sum := sha256.Sum256(body)
	assert.Equal(a.t, `"sha256:`+hex.EncodeToString(sum[:])+`"`, res.Header.Get("ETag"), "strong ETag over the exact bytes")
	return m, res.Header.Get("ETag")
}

func (a *agent) report(deploymentID string, adopted uint64, state string, components ...string) int {
	a.t.Helper()
	comps := []map[string]any{}
	for _, c := range components {
		comps = append(comps, map[string]any{"name": c, "state": state})
	}
	body, _ := json.Marshal(map[string]any{"deploymentId": deploymentID, "adoptedManifestVersion": adopted,
		"status": map[string]any{"state": state}, "components": comps})
	res, b := a.do("POST", "/api/v1/deployments/"+deploymentID+"/status", body)
	require.Less(a.t, res.StatusCode, 300, string(b))
	return res.StatusCode
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func (e *fleetEnv) deploy(t *testing.T, clientID, deviceID, app, version string) sdk.Deployment {
	t.Helper()
	res, err := e.mgmt.CreateDeploymentWithResponse(t.Context(), nil, sdk.CreateDeploymentRequest{ApplicationId: app, Version: version, ClientId: clientID, DeviceId: deviceID})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return *res.JSON201
}

func (e *fleetEnv) deployment(t *testing.T, id string) sdk.Deployment {
	t.Helper()
	res, err := e.mgmt.GetDeploymentWithResponse(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	return *res.JSON200
}

func TestDeviceOverMutualTLS(t *testing.T) {
	e := newFleetEnv(t, fleet.Policy{AcceptAll: true})
	c := clientAs(t, e.mgmtURL, adminToken)
	require.Equal(t, http.StatusCreated, postYAML(t, c, minimal("hello", "1.0.0", "")).StatusCode())

	dev := e.client(t, "plant-alfa")

	// Capabilities: 201, then 200.
	res, body := dev.do("PUT", "/api/v1/capabilities/edge-01", capabilities("edge-01", "compose"))
	require.Equal(t, http.StatusCreated, res.StatusCode, string(body))
	res, body = dev.do("PUT", "/api/v1/capabilities/edge-01", capabilities("edge-01", "compose"))
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))

	// First manifest: version 1, nothing deployed, bundle null.
	m0, _ := dev.manifest()
	assert.Equal(t, uint64(1), m0.ManifestVersion)
	assert.Nil(t, m0.Bundle)
	assert.Empty(t, m0.Deployments)

	d := e.deploy(t, "plant-alfa", "edge-01", "hello", "1.0")
	assert.Equal(t, sdk.DeploymentState("pending"), d.State)
	assert.Equal(t, 1, d.Revision)

	// Manifest 200 with ETag, then 304.
	m1, etag := dev.manifest()
	require.Greater(t, m1.ManifestVersion, m0.ManifestVersion)
	require.Len(t, m1.Deployments, 1)
	require.NotNil(t, m1.Bundle)
	res, body = dev.do("GET", "/api/v1/deployments", nil, "If-None-Match", etag)
	assert.Equal(t, http.StatusNotModified, res.StatusCode)
	assert.Empty(t, body)
	// The 304 carries the 200's ETag and Cache-Control (RFC 9110 15.4.5); a
	// list header sent on two lines is the lines joined (RFC 9110 5.3).
	assert.Equal(t, etag, res.Header.Get("ETag"))
	assert.Equal(t, "private", res.Header.Get("Cache-Control"))
	res, _ = dev.do("GET", "/api/v1/deployments", nil, "If-None-Match", `"sha256:other"`, "If-None-Match", etag)
	assert.Equal(t, http.StatusNotModified, res.StatusCode, "If-None-Match on two lines")
	// HEAD is GET without the body (not sent through the Margo checker:
	// rc.3 declares GET only).
	head, err := http.NewRequest(http.MethodHead, e.deviceURL+"/api/v1/deployments", nil)
	require.NoError(t, err)
	res, err = dev.http.Do(head)
	require.NoError(t, err)
	body, err = io.ReadAll(res.Body)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, etag, res.Header.Get("ETag"))
	assert.Empty(t, body)
	// A media type refused with q=0 stays refused whatever */* accepts.
	res, _ = dev.do("GET", "/api/v1/deployments", nil, "Accept", "application/vnd.margo.manifest.v1+json;q=0, */*")
	assert.Equal(t, http.StatusNotAcceptable, res.StatusCode)

	// YAML and bundle by digest, sha256 verified.
	ref := m1.Deployments[0]
	assert.Equal(t, d.Id.String(), ref.DeploymentID)
	res, yml := dev.do("GET", ref.URL, nil)
	require.Equal(t, http.StatusOK, res.StatusCode, string(yml))
	assert.Equal(t, ref.Digest, sha(yml))
	assert.Contains(t, res.Header.Get("Cache-Control"), "immutable")
	assert.Contains(t, string(yml), "id: "+d.Id.String())
	res, bundle := dev.do("GET", m1.Bundle.URL, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, m1.Bundle.Digest, sha(bundle))
	files := untar(t, bundle)
	assert.Equal(t, map[string][]byte{d.Id.String() + ".yaml": yml}, files, "the bundle holds exactly the listed YAMLs")
	res, _ = dev.do("GET", m1.Bundle.URL, nil, "If-None-Match", `"`+m1.Bundle.Digest+`"`)
	assert.Equal(t, http.StatusNotModified, res.StatusCode)
	assert.Equal(t, "private, max-age=31536000, immutable", res.Header.Get("Cache-Control"), "the bundle's 304 as its 200")

	// Status: installing then installed.
	assert.Equal(t, http.StatusCreated, dev.report(ref.DeploymentID, m1.ManifestVersion, "installing", "app"))
	assert.Equal(t, sdk.DeploymentState("installing"), e.deployment(t, ref.DeploymentID).State)
	assert.Equal(t, http.StatusOK, dev.report(ref.DeploymentID, m1.ManifestVersion, "installed", "app"))
	got := e.deployment(t, ref.DeploymentID)
	assert.Equal(t, sdk.DeploymentState("installed"), got.State)
	require.NotNil(t, got.InstalledRevision)
	assert.Equal(t, 1, *got.InstalledRevision)

	hist, err := e.mgmt.ListHistoryWithResponse(t.Context(), ref.DeploymentID, nil)
	require.NoError(t, err)
	var path []string
	for _, tr := range hist.JSON200.Items {
		path = append(path, string(tr.To))
	}
	assert.Equal(t, []string{"pending", "installing", "installed"}, path)

	st, err := e.mgmt.GetDeploymentStatusWithResponse(t.Context(), ref.DeploymentID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, st.StatusCode())
	assert.Equal(t, sdk.DeviceState("installed"), st.JSON200.State)

	// A stale report (older adoptedManifestVersion) is stored and changes nothing.
	dev.report(ref.DeploymentID, m1.ManifestVersion-1, "failed", "app")
	assert.Equal(t, sdk.DeploymentState("installed"), e.deployment(t, ref.DeploymentID).State)

	// A second client sees none of the first client's resources.
	other := e.client(t, "plant-bravo")
	mo, _ := other.manifest()
	assert.Empty(t, mo.Deployments)
	res, _ = other.do("GET", ref.URL, nil)
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	res, _ = other.do("GET", m1.Bundle.URL, nil)
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	body, _ = json.Marshal(map[string]any{"deploymentId": ref.DeploymentID, "adoptedManifestVersion": 1, "status": map[string]any{"state": "failed"}, "components": []any{}})
	res, _ = other.do("POST", "/api/v1/deployments/"+ref.DeploymentID+"/status", body)
	assert.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	assert.Equal(t, sdk.DeploymentState("installed"), e.deployment(t, ref.DeploymentID).State, "another client's report changed nothing")

	// Deletion: out of the manifest, with a higher manifestVersion.
	del, err := e.mgmt.DeleteDeploymentWithResponse(t.Context(), ref.DeploymentID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, del.StatusCode(), string(del.Body))
	assert.Equal(t, sdk.DeploymentState("removing"), del.JSON202.State)
	m2, _ := dev.manifest()
	assert.Greater(t, m2.ManifestVersion, m1.ManifestVersion)
	assert.Empty(t, m2.Deployments)
	assert.Nil(t, m2.Bundle)
	res, _ = dev.do("GET", ref.URL, nil)
	assert.Equal(t, http.StatusOK, res.StatusCode, "superseded content stays retrievable by digest")
	dev.report(ref.DeploymentID, m2.ManifestVersion, "removed")
	assert.Equal(t, sdk.DeploymentState("removed"), e.deployment(t, ref.DeploymentID).State)

	// A retired client gets 403.
	ret, err := e.mgmt.RetireClientWithResponse(t.Context(), "plant-alfa", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, ret.StatusCode())
	res, body = dev.do("GET", "/api/v1/deployments", nil)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	assert.Contains(t, string(body), "https://docs.margo.org/specification/problem-types#not-authorized")
	res, _ = dev.do("PUT", "/api/v1/capabilities/edge-01", capabilities("edge-01", "compose"))
	assert.Equal(t, http.StatusForbidden, res.StatusCode)
}

func untar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		c, err := io.ReadAll(tr)
		require.NoError(t, err)
		out[h.Name] = c
	}
	return out
}

func TestDeviceIdentityRefusals(t *testing.T) {
	e := newFleetEnv(t, fleet.Policy{AcceptAll: true})
	for name, a := range map[string]*agent{
		"other trust domain": e.agent(t, "spiffe://other.org/margo/wfm/wfm-test/client/x"),
		"other wfm":          e.agent(t, "spiffe://example.org/margo/wfm/someone-else/client/x"),
		"malformed path":     e.agent(t, "spiffe://example.org/margo/wfm/wfm-test/device/x"),
	} {
		t.Run(name, func(t *testing.T) {
			res, body := a.do("GET", "/api/v1/deployments", nil)
			assert.Equal(t, http.StatusForbidden, res.StatusCode, string(body))
			assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
		})
	}
	// A certificate from another CA, or none, fails the TLS handshake.
	strange, err := devpki.NewCA("strange")
	require.NoError(t, err)
	cert, err := testpki.IssueClient(strange, "spiffe://example.org/margo/wfm/wfm-test/client/x")
	require.NoError(t, err)
	for name, certs := range map[string][]tls.Certificate{"foreign CA": {cert}, "no certificate": nil} {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool(), Certificates: certs, ServerName: "localhost"}}}
		_, err := hc.Get(e.deviceURL + "/api/v1/deployments")
		assert.Error(t, err, name)
	}
	// So does a certificate of the trusted CA that is not an X.509-SVID
	// (go-spiffe's x509svid rules): the device sees a "bad certificate"
	// alert, never an HTTP answer.
	good := "spiffe://example.org/margo/wfm/wfm-test/client/x"
	for name, opts := range map[string][]testpki.ClientOption{
		"CA:TRUE leaf":                  {testpki.WithCA()},
		"keyCertSign leaf":              {testpki.WithKeyUsage(x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign)},
		"cRLSign leaf":                  {testpki.WithKeyUsage(x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign)},
		"leaf without digitalSignature": {testpki.WithKeyUsage(x509.KeyUsageKeyAgreement)},
		"two URI SANs":                  {testpki.WithExtraURISANs("spiffe://example.org/margo/wfm/wfm-test/client/y")},
		"no URI SAN":                    {testpki.WithoutURISAN()},
	} {
		cert, err := testpki.IssueClient(e.ca, good, opts...)
		require.NoError(t, err)
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool(), Certificates: []tls.Certificate{cert}, ServerName: "localhost"}}}
		_, err = hc.Get(e.deviceURL + "/api/v1/deployments")
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), "bad certificate", name)
		}
	}
	// Nothing was created for refused callers.
	list, err := e.mgmt.ListClientsWithResponse(t.Context(), nil)
	require.NoError(t, err)
	assert.Empty(t, list.JSON200.Items)
	// The same SPIFFE ID in a proper X.509-SVID is served.
	res, body := e.agent(t, good).do("GET", "/api/v1/deployments", nil)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
}

func TestListedClientsPolicy(t *testing.T) {
	e := newFleetEnv(t, fleet.Policy{AcceptAll: false})
	dev := e.client(t, "newcomer")
	res, _ := dev.do("GET", "/api/v1/deployments", nil)
	assert.Equal(t, http.StatusForbidden, res.StatusCode)

	acc, err := e.mgmt.AcceptClientWithResponse(t.Context(), nil, sdk.AcceptClientRequest{Id: "newcomer"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, acc.StatusCode(), string(acc.Body))
	m, _ := dev.manifest()
	assert.Equal(t, uint64(1), m.ManifestVersion)
}

func TestDeviceInputIsValidated(t *testing.T) {
	e := newFleetEnv(t, fleet.Policy{AcceptAll: true})
	dev := e.client(t, "c1")
	for name, tc := range map[string]struct {
		method, path string
		body         string
		status       int
	}{
		"capabilities malformed":   {"PUT", "/api/v1/capabilities/d1", `{"properties":`, http.StatusBadRequest},
		"capabilities id mismatch": {"PUT", "/api/v1/capabilities/d1", string(capabilities("d2", "compose")), http.StatusUnprocessableEntity},
		"status malformed":         {"POST", "/api/v1/deployments/00000000-0000-4000-8000-000000000000/status", `[`, http.StatusBadRequest},
		"status with trailing bytes": {"POST", "/api/v1/deployments/00000000-0000-4000-8000-000000000000/status",
			`{"deploymentId":"00000000-0000-4000-8000-000000000000","adoptedManifestVersion":1,"status":{"state":"installed"},"components":[]} {"x":1}`, http.StatusBadRequest},
		"status unknown deployment": {"POST", "/api/v1/deployments/00000000-0000-4000-8000-000000000000/status",
			`{"deploymentId":"00000000-0000-4000-8000-000000000000","adoptedManifestVersion":1,"status":{"state":"installed"},"components":[]}`, http.StatusUnprocessableEntity},
		"status id mismatch": {"POST", "/api/v1/deployments/00000000-0000-4000-8000-000000000000/status",
			`{"deploymentId":"00000000-0000-4000-8000-000000000001","adoptedManifestVersion":1,"status":{"state":"installed"},"components":[]}`, http.StatusUnprocessableEntity},
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, e.deviceURL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			res, err := dev.http.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			assert.Equal(t, tc.status, res.StatusCode, string(b))
			assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
		})
	}
	_ = fmt.Sprint()
}

func TestCatalogVersionsInUseAndYanked(t *testing.T) {
	e := newFleetEnv(t, fleet.Policy{AcceptAll: true})
	for _, v := range []string{"1.0.0", "2.0.0"} {
		require.Equal(t, http.StatusCreated, postYAML(t, e.mgmt, minimal("used", v, "")).StatusCode())
	}
	dev := e.client(t, "c1")
	res, _ := dev.do("PUT", "/api/v1/capabilities/d1", capabilities("d1", "compose"))
	require.Equal(t, http.StatusCreated, res.StatusCode)
	e.deploy(t, "c1", "d1", "used", "1.0.0")

	del, err := e.mgmt.DeleteApplicationVersionWithResponse(t.Context(), "used", "1.0.0")
	require.NoError(t, err)
	p := problemOf(t, del.HTTPResponse, del.Body, http.StatusConflict)
	assert.Equal(t, httpapi.ProblemBase+"version-in-use", p.Type)

	_, err = e.mgmt.YankApplicationVersionWithResponse(t.Context(), "used", "2.0.0", nil, sdk.YankRequest{})
	require.NoError(t, err)
	cr, err := e.mgmt.CreateDeploymentWithResponse(t.Context(), nil, sdk.CreateDeploymentRequest{ApplicationId: "used", Version: "2.0.0", ClientId: "c1", DeviceId: "d1"})
	require.NoError(t, err)
	p = problemOf(t, cr.HTTPResponse, cr.Body, http.StatusUnprocessableEntity)
	assert.Equal(t, httpapi.ProblemBase+"version-yanked", p.Type)

	// A helm-only description has no profile this compose device can run.
	helmOnly := strings.Replace(string(minimal("helmy", "1.0.0", "")), "type: compose", "type: helm", 1)
	require.Equal(t, http.StatusCreated, postYAML(t, e.mgmt, []byte(helmOnly)).StatusCode())
	cr, err = e.mgmt.CreateDeploymentWithResponse(t.Context(), nil, sdk.CreateDeploymentRequest{ApplicationId: "helmy", Version: "1.0.0", ClientId: "c1", DeviceId: "d1"})
	require.NoError(t, err)
	p = problemOf(t, cr.HTTPResponse, cr.Body, http.StatusUnprocessableEntity)
	assert.Equal(t, httpapi.ProblemBase+"not-placeable", p.Type)
	require.NotEmpty(t, p.Errors)
	assert.Equal(t, "/deploymentProfiles/0", p.Errors[0].Field)
}

// TestAcceptClientRefusesDotSegments: "." and ".." match the contract's
// character class but can never be a SPIFFE path segment, so no certificate
// could ever name such a client. The management API refuses them with the
// same rule the certificate path uses, and creates nothing.
func TestAcceptClientRefusesDotSegments(t *testing.T) {
	e := newFleetEnv(t, fleet.Policy{AcceptAll: false})
	for _, id := range []string{".", ".."} {
		res, err := e.mgmt.AcceptClientWithResponse(t.Context(), nil, sdk.AcceptClientRequest{Id: id})
		require.NoError(t, err)
		p := problemOf(t, res.HTTPResponse, res.Body, http.StatusUnprocessableEntity)
		assert.Equal(t, httpapi.ProblemBase+"invalid-request", p.Type, id)
		require.Len(t, p.Errors, 1, id)
		assert.Equal(t, "/id", p.Errors[0].Field, id)
		assert.Contains(t, p.Errors[0].Message, "dot segments", id)
	}
	// "..." is a valid segment (only "." and ".." are dot segments).
	res, err := e.mgmt.AcceptClientWithResponse(t.Context(), nil, sdk.AcceptClientRequest{Id: "..."})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	list, err := e.mgmt.ListClientsWithResponse(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, list.JSON200.Items, 1, "nothing but the valid client was created")
	assert.Equal(t, "...", list.JSON200.Items[0].Id)
}
