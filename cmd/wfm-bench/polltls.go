package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// pollTLSConns is the connection count of the mTLS poll figures, the same
// as wrk's in the plain-HTTP figure (-c64).
const pollTLSConns = 64

// pollTLSFigures: the device poll over the real transport, mutual TLS 1.3
// with the client's X.509-SVID (the production identity path, not the
// development header), answered 304 from the cache, against a bare Go TLS
// server (tools/bare304 -tls-cert …) that presents the same server
// certificate and requires a client certificate of the same CA. Both are
// driven by the same generator (tools/pollload: kept-alive HTTP/1.1
// connections, one request at a time each, GOMAXPROCS 1) with the same
// connections and duration, alternated bare, wfm, bare, wfm; each figure is
// the mean of its two runs (design section 11: >= 70%).
func pollTLSFigures(ctx context.Context, b *bench) ([]Figure, error) {
	load := filepath.Join(b.tmp, "pollload")
	if err := b.goCmd(ctx, "build", "-o", load, "./tools/pollload").Run(); err != nil {
		return nil, fmt.Errorf("build tools/pollload: %w", err)
	}
	// -dev-header-identity=false overrides startServer's development
	// identity: the device listener serves mTLS with the development PKI
	// of the server's data folder.
	s, err := b.startServer(ctx, "poll-mtls", "error", "-dev-header-identity=false")
	if err != nil {
		return nil, err
	}
	defer s.stop()
	if !strings.HasPrefix(s.device, "https://") {
		return nil, fmt.Errorf("the device listener is not TLS: %s", s.device)
	}
	const client, device = "bench-poll", "bench-poll-1"
	pki := filepath.Join(s.dir, "data", "pki")
	certs := filepath.Join(s.dir, "client")
	issue := exec.CommandContext(ctx, b.wfm, "issue-client-cert", "-client-id", client, "-data-dir", filepath.Join(s.dir, "data"), "-out", certs)
	if out, err := issue.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("wfm issue-client-cert: %w: %s", err, out)
	}
	cert, key, ca := filepath.Join(certs, client+".pem"), filepath.Join(certs, client+"-key.pem"), filepath.Join(certs, "ca.pem")
	tc, err := clientTLSConfig(cert, key, ca)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{TLSClientConfig: tc, MaxIdleConnsPerHost: 4, DisableCompression: true, IdleConnTimeout: time.Minute}
	a := &api{hc: &http.Client{Transport: tr, Timeout: time.Minute}, s: s}
	defer a.close()
	// One client with one deployment, its manifest cached after the first
	// poll; the device calls identify by certificate only.
	etag, err := a.seedPollClient(ctx, client, device)
	if err != nil {
		return nil, err
	}
	if _, _, err := a.do(ctx, http.MethodGet, s.device+"/api/v1/deployments", http.Header{"If-None-Match": {etag}}, nil, http.StatusNotModified); err != nil {
		return nil, fmt.Errorf("the poll with the manifest's ETag: %w", err)
	}

	bare, stopBare, err := b.startBare304(ctx, "https", "-tls-cert", filepath.Join(pki, "server.pem"), "-tls-key", filepath.Join(pki, "server-key.pem"), "-client-ca", filepath.Join(pki, "ca.pem"))
	if err != nil {
		return nil, err
	}
	defer stopBare()

	dur := max(time.Second, (b.cfg.duration / 2).Round(time.Second))
	args := []string{"-cert", cert, "-key", key, "-ca", ca, "-H", "If-None-Match: " + etag, "-want", "304",
		"-c", strconv.Itoa(pollTLSConns), "-d", dur.String(), "-procs", "1"}
	var rBare, rWFM [2]float64
	for i := range 2 {
		if rBare[i], err = b.pollLoad(ctx, load, append([]string{"-url", bare + "/api/v1/deployments"}, args...)); err != nil {
			return nil, fmt.Errorf("bare TLS server: %w", err)
		}
		if rWFM[i], err = b.pollLoad(ctx, load, append([]string{"-url", s.device + "/api/v1/deployments"}, args...)); err != nil {
			return nil, fmt.Errorf("wfm: %w", err)
		}
	}
	mBare, mWFM := (rBare[0]+rBare[1])/2, (rWFM[0]+rWFM[1])/2
	gen := fmt.Sprintf("tools/pollload -c %d -d %s -procs 1 (Go, kept-alive HTTP/1.1, TLS 1.3, client certificate), mean of 2 runs alternated with the other figure", pollTLSConns, dur)
	shared := "the generator shares the 2 cores with the server under test, the same generator on both sides"
	return []Figure{
		{Name: "bare-tls-304", Value: mBare, Unit: "req/s",
			Baseline: fmt.Sprintf("baseline: a bare Go TLS 1.3 server answering 304, same server certificate, requiring a client certificate of the same CA; %s (%.0f, %.0f); %s", gen, rBare[0], rBare[1], shared)},
		{Name: "poll-mtls-304", Value: mWFM, Unit: "req/s", Ratio: mWFM / mBare, Baseline: "bare-tls-304", Target: ">= 70%",
			Notes: []string{fmt.Sprintf("GET /api/v1/deployments with If-None-Match over mutual TLS, the client identified by its X.509-SVID, one client with one deployment, %s (%.0f, %.0f)", gen, rWFM[0], rWFM[1])}},
	}, nil
}

var pollLoadRate = regexp.MustCompile(`rate=([0-9.]+)`)

// pollLoad runs tools/pollload and returns its request rate; it fails on
// any answer other than the one asked for.
func (b *bench) pollLoad(ctx context.Context, bin string, args []string) (float64, error) {
	fmt.Fprintf(b.cfg.log, "pollload %s\n", strings.Join(args, " "))
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pollload: %w: %s", err, out)
	}
	m := pollLoadRate.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pollload printed no rate:\n%s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// clientTLSConfig presents a client certificate and trusts ca (TLS 1.3).
func clientTLSConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13}, nil
}
