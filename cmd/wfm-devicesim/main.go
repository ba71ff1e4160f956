// Command wfm-devicesim simulates Margo device agents against a wfm server's
// device API, for demos, end-to-end runs and load: N devices of one WFM
// client register, poll the state manifest, install what is deployed to
// them, drain when a revision asks for it, and report status.
//
//	./bin/wfm issue-client-cert -client-id plant          # with make run's development CA
//	./bin/wfm-devicesim -devices 10 -cert .data/pki/clients/plant.pem -key .data/pki/clients/plant-key.pem
//
// Once every device has registered it prints their ids on one line to
// stdout ("registered 10 devices: sim-1 … sim-10"); logs go to stderr.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wfm-dev/wfm/internal/devicesim"
	"github.com/wfm-dev/wfm/internal/ratelimit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "wfm-devicesim:", err)
		os.Exit(1)
	}
}

// run simulates the devices until ctx ends. Once every device has
// registered (or given up), it prints one line to stdout naming the devices
// registered: "registered 3 devices: sim-1 sim-2 sim-3" (the ids to use in
// deployments); logs go to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("wfm-devicesim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", "https://localhost:8443", "device API base URL")
	caFile := fs.String("ca", ".data/pki/ca.pem", "CA that signed the server certificate (PEM)")
	certFile := fs.String("cert", "", "client certificate (PEM) from 'wfm issue-client-cert'")
	keyFile := fs.String("key", "", "client key (PEM)")
	headerID := fs.String("dev-client-id", "", "development header identity: send this client id in X-WFM-Client-ID instead of a certificate")
	n := fs.Int("devices", 3, "how many devices to simulate")
	prefix := fs.String("prefix", "sim-", "device id prefix")
	poll := fs.Duration("poll", 5*time.Second, "manifest poll interval")
	install := fs.Duration("install-time", 2*time.Second, "how long applying a revision takes")
	drain := fs.Duration("drain-time", 3*time.Second, "how long in-flight work takes to finish when a drain is asked")
	neverDrain := fs.Bool("never-drain", false, "never finish draining (to see a drain timeout)")
	failRate := fs.Float64("fail-rate", 0, "probability that applying a revision fails")
	seed := fs.Uint64("seed", 1, "seed of the failure decisions")
	clientRate := fs.Float64("client-rate", ratelimit.DefaultDeviceRate, "requests a second the server allows this client (its -device-rate); all devices share this budget")
	clientBurst := fs.Int("client-burst", ratelimit.DefaultDeviceBurst, "requests the server allows this client at once (its -device-burst); a quarter is kept in reserve")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *clientRate <= 0 || *clientBurst < 1 {
		return errors.New("-client-rate must be > 0 and -client-burst >= 1")
	}
	client := &http.Client{Timeout: 30 * time.Second}
	if *headerID == "" {
		if *certFile == "" || *keyFile == "" {
			return errors.New("-cert and -key are required (or -dev-client-id with a server in the development header mode)")
		}
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return err
		}
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s holds no certificate", *caFile)
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}}
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cfg := &devicesim.Config{BaseURL: *server, HTTP: client, ClientID: *headerID, Poll: *poll, InstallTime: *install,
		DrainTime: *drain, NeverDrain: *neverDrain, FailRate: *failRate, Log: log, Rand: rand.New(rand.NewPCG(*seed, *seed)),
		Budget: devicesim.NewBudget(*clientRate, *clientBurst)}
	ids := make([]string, *n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", *prefix, i+1)
	}
	reg := newRegistrations(ids, stdout)
	cfg.Registered = func(id string) { reg.done(id, true) }
	var wg sync.WaitGroup
	errs := make(chan error, *n)
	for _, id := range ids {
		d := devicesim.NewDevice(cfg, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.Run(ctx); err != nil {
				errs <- fmt.Errorf("device %s: %w", d.ID, err)
			}
			reg.done(d.ID, false) // no effect once registered
		}()
	}
	log.Info("simulating devices", "count", *n, "server", *server, "clientRate", *clientRate, "clientBurst", *clientBurst)
	wg.Wait()
	log.Info("stopped", "requests", cfg.Stats.Requests.Load(), "refused429", cfg.Stats.Refused.Load(),
		"unavailable503", cfg.Stats.Unavailable.Load(), "documentsFetched", cfg.Stats.Fetched.Load(), "documentsFromCache", cfg.Stats.Cached.Load())
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// registrations waits for every device's registration to conclude and then
// prints the one summary line.
type registrations struct {
	mu      sync.Mutex
	ids     []string        // in creation order
	outcome map[string]bool // id -> registered, for the devices concluded
	out     io.Writer
}

func newRegistrations(ids []string, out io.Writer) *registrations {
	return &registrations{ids: ids, outcome: map[string]bool{}, out: out}
}

// done records the outcome of id's registration (the first one counts) and
// prints the summary when it was the last one.
func (r *registrations) done(id string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.outcome[id]; seen {
		return
	}
	r.outcome[id] = ok
	if len(r.outcome) != len(r.ids) {
		return
	}
	var got []string
	for _, id := range r.ids {
		if r.outcome[id] {
			got = append(got, id)
		}
	}
	noun := "devices"
	if len(r.ids) == 1 {
		noun = "device"
	}
	if len(got) == len(r.ids) {
		fmt.Fprintf(r.out, "registered %d %s: %s\n", len(got), noun, strings.Join(got, " "))
	} else {
		fmt.Fprintf(r.out, "registered %d of %d %s: %s\n", len(got), len(r.ids), noun, strings.Join(got, " "))
	}
}
