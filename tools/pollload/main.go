// Command pollload is the load generator of the device-poll benchmark over
// mutual TLS (cmd/wfm-bench, group poll-mtls): a closed loop, like wrk, of
// kept-alive HTTP/1.1 connections, each sending one request, reading its
// answer, and sending the next, for a fixed duration; TLS 1.3 with a client
// certificate when the URL is https.
//
//	pollload -url https://127.0.0.1:8443/api/v1/deployments -cert c.pem -key c-key.pem -ca ca.pem \
//	  -H 'If-None-Match: "sha256:…"' -want 304 -c 64 -d 10s
//
// It prints one line, "requests=N seconds=S rate=R", and fails (exit 1) when
// a connection fails or a status other than -want comes back (the rate
// would then measure refusals).
//
// Why our own: wrk, the generator of the plain-HTTP figure, cannot present a
// client certificate. General Go generators that can (bombardier on
// fasthttp, vegeta on net/http) parse whole responses into client objects
// and record a latency per request; on two cores the generator's CPU is
// taken from the server under test, so this one does the least a client
// can: it writes the same prepared request bytes and reads only the status
// line and headers (and a Content-Length body) of each answer. GOMAXPROCS is
// 1 by default (-procs), the counterpart of wrk -t1.
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type headers []string

func (h *headers) String() string     { return strings.Join(*h, ", ") }
func (h *headers) Set(v string) error { *h = append(*h, v); return nil }

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pollload:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("pollload", flag.ContinueOnError)
	target := fs.String("url", "", "the URL to GET (http or https)")
	certFile := fs.String("cert", "", "client certificate (PEM), for https")
	keyFile := fs.String("key", "", "client private key (PEM)")
	caFile := fs.String("ca", "", "the server's CA (PEM); empty: the system roots")
	var hdrs headers
	fs.Var(&hdrs, "H", "a request header 'Name: value' (repeatable)")
	want := fs.Int("want", 304, "the status every answer must have")
	conns := fs.Int("c", 64, "connections, each one request at a time")
	dur := fs.Duration("d", 10*time.Second, "how long to measure, after every connection is open")
	procs := fs.Int("procs", 1, "GOMAXPROCS of the generator")
	if err := fs.Parse(args); err != nil {
		return err
	}
	runtime.GOMAXPROCS(*procs)
	u, err := url.Parse(*target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-url %q: want http://host:port/path or https://…", *target)
	}
	var tc *tls.Config
	if u.Scheme == "https" {
		if tc, err = clientTLS(u.Hostname(), *certFile, *keyFile, *caFile); err != nil {
			return err
		}
	}
	req := request(u, hdrs)

	// Every connection is opened (and its handshake done) before the clock
	// starts: the figure is the kept-alive poll, not the handshake.
	cs := make([]net.Conn, *conns)
	defer func() {
		for _, c := range cs {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i := range cs {
		if cs[i], err = dial(u.Host, tc); err != nil {
			return err
		}
	}
	var (
		count   atomic.Int64
		stop    atomic.Bool
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
	)
	start := time.Now()
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loop(c, req, *want, &stop, &count); err != nil {
				errOnce.Do(func() { first = err })
				stop.Store(true)
			}
		}()
	}
	t := time.NewTimer(*dur)
	<-t.C
	n := count.Load()
	elapsed := time.Since(start)
	stop.Store(true)
	for _, c := range cs {
		// Unblocks a connection waiting for an answer.
		_ = c.SetDeadline(time.Now())
	}
	wg.Wait()
	if first != nil {
		return first
	}
	fmt.Fprintf(stdout, "requests=%d seconds=%.3f rate=%.1f\n", n, elapsed.Seconds(), float64(n)/elapsed.Seconds())
	return nil
}

// clientTLS is TLS 1.3 only, HTTP/1.1 by ALPN, with the client certificate.
func clientTLS(host, certFile, keyFile, caFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}, ServerName: host}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
		}
	}
	return tc, nil
}

// request is the request's bytes, sent again and again.
func request(u *url.URL, hdrs []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: pollload\r\n", u.RequestURI(), u.Host)
	for _, h := range hdrs {
		b.WriteString(h)
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

func dial(addr string, tc *tls.Config) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if tc == nil {
		return c, nil
	}
	tl := tls.Client(c, tc)
	_ = tl.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tl.Handshake(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	_ = tl.SetDeadline(time.Time{})
	if v := tl.ConnectionState().Version; v != tls.VersionTLS13 {
		_ = c.Close()
		return nil, fmt.Errorf("%s negotiated TLS version %#x, not 1.3", addr, v)
	}
	return tl, nil
}

// loop sends req on c and reads each answer until stop; a failure after stop
// (the deadline that unblocks a waiting read) is no error.
func loop(c net.Conn, req []byte, want int, stop *atomic.Bool, count *atomic.Int64) error {
	br := bufio.NewReaderSize(c, 16<<10)
	for !stop.Load() {
		if _, err := c.Write(req); err != nil {
			return ignoreAfterStop(stop, err)
		}
		status, err := readResponse(br)
		if err != nil {
			return ignoreAfterStop(stop, err)
		}
		if status != want {
			return fmt.Errorf("status %d, want %d", status, want)
		}
		count.Add(1)
	}
	return nil
}

func ignoreAfterStop(stop *atomic.Bool, err error) error {
	if stop.Load() {
		return nil
	}
	return err
}

// readResponse reads one HTTP/1.1 answer (status line, headers, and a body
// of Content-Length bytes) and returns its status. A chunked body is refused:
// the poll's answers are 304s or carry a length.
func readResponse(br *bufio.Reader) (int, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	// "HTTP/1.1 304 Not Modified\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	length := 0
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(h) <= 2 { // the empty line
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(bytes.TrimSpace(value))); err != nil {
				return 0, fmt.Errorf("bad Content-Length %q", h)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, errors.New("chunked answers are not supported")
		}
	}
	if status == 304 || status == 204 || status/100 == 1 {
		length = 0
	}
	if length > 0 {
		if _, err := br.Discard(length); err != nil {
			return 0, err
		}
	}
	return status, nil
}
