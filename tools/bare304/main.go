// Command bare304 is the baseline of the device-poll benchmarks
// (cmd/wfm-bench, groups poll and poll-mtls): a bare net/http server that
// answers every request with a constant 304, as design section 11 defines
// it. It prints its address and serves until killed.
//
// With -tls-cert, -tls-key and -client-ca it serves TLS 1.3 only and
// requires a client certificate that chains to -client-ca (the bare
// counterpart of wfm's device listener: the same certificates, the standard
// verification, nothing else).
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
)

func main() {
	certFile := flag.String("tls-cert", "", "server certificate (PEM): serve mutual TLS 1.3")
	keyFile := flag.String("tls-key", "", "server private key (PEM)")
	caFile := flag.String("client-ca", "", "CA of the client certificates (PEM), required with -tls-cert")
	flag.Parse()
	if err := run(*certFile, *keyFile, *caFile); err != nil {
		fmt.Fprintln(os.Stderr, "bare304:", err)
		os.Exit(1)
	}
}

func run(certFile, keyFile, caFile string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"sha256:0000000000000000000000000000000000000000000000000000000000000000"`)
		w.WriteHeader(http.StatusNotModified)
	})}
	if certFile == "" {
		fmt.Println(ln.Addr().String())
		return srv.Serve(ln)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
	fmt.Println(ln.Addr().String())
	return srv.ServeTLS(ln, "", "")
}
