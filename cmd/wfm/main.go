// Command wfm is the Workload Fleet Manager server.
//
// With no DATABASE_URL it starts its own PostgreSQL from the machine's
// installed server binaries, keeps the data in a local folder and stops it on
// shutdown; see README.md for every setting.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/buildinfo"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/devpki"
	"github.com/wfm-dev/wfm/internal/feed"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pglaunch"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/internal/ratelimit"
	"github.com/wfm-dev/wfm/internal/sampling"
	"github.com/wfm-dev/wfm/internal/telemetry"
	"github.com/wfm-dev/wfm/internal/webhook"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "wfm:", err)
		os.Exit(1)
	}
}

// defaultGCPercent is the Go garbage collector's target (GOGC) when the
// environment sets none: the heap may grow to three times what is live
// between collections, rather than twice. On 2 cores a collection takes one
// of the two processors for its marking while it runs, and the creation
// lane's one goroutine waits behind it: 16 concurrent creations over
// 10,000 clients, four alternated pairs (wfm-bench -only fleet
// -fleet-clients 10000): 757/711, 910/878, 864/851, 738/804 creations/s
// (10,000 x 1 / 1 x 10,000) with GOGC 100, 973/869, 1,144/1,052,
// 921/1,051, 810/852 with 200. The price is memory: rss-fleet (design §11
// scenario) 154 -> 203 MiB, its peak while seeding 389 -> 555 MiB
// (docs/benchmarks.md). GOGC=100 (or any value) in the environment wins;
// GOMEMLIMIT bounds the heap where memory is tight.
const defaultGCPercent = 200

// tuneGC sets the collector's target to defaultGCPercent unless GOGC is
// set.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// config is every setting of the server; flags win over environment variables.
type config struct {
	listen          string
	deviceListen    string
	trustDomain     string
	wfmID           string
	tlsCert         string
	tlsKey          string
	clientCA        string
	mgmtTLSCert     string
	mgmtTLSKey      string
	mgmtTLSDev      bool
	acceptClients   string
	devHeaderID     bool
	deviceTLS12     bool
	reportRetention int
	eventRetention  time.Duration // how long the event log keeps an event
	eventStreams    int           // event streams served at once (GET /mgmt/v1/events as SSE)
	bundleRetention time.Duration // how long a superseded manifest's bundle stays fetchable
	staleBound      time.Duration // how long the manifest cache is served after notifications stopped
	allowOverrides  bool
	debugListen     string
	deviceRate      float64
	deviceBurst     int
	mgmtRate        float64        // management API requests per second per caller; 0: unlimited
	mgmtBurst       int            // management API burst per caller
	trustedProxies  []netip.Prefix // peers whose forwarding header names the caller
	forwardedHeader string         // the one forwarding header read from them
	corsOrigins     []string       // browser origins allowed to call the management API (CORS); none: CORS off
	adminToken      string
	adminTokenFile  string
	adminTokenNew   bool     // create the admin token file when missing, also with DATABASE_URL
	deviceCertHosts []string // extra names of the development server certificate
	databaseURL     string
	dataDir         string
	logLevel        slog.Level
	logFormat       string
	shutdownTimeout time.Duration
	webhooks        webhookConfig
}

// webhookConfig are the webhook settings.
type webhookConfig struct {
	keyFile           string         // the key that seals signing secrets; "": <data-dir>/webhook-key, created once
	allowHTTP         bool           // subscriptions may use http:// URLs
	allowCIDRs        []netip.Prefix // receivers allowed in otherwise forbidden ranges
	timeout           time.Duration  // per request
	disableAfter      int            // consecutive failed attempts that disable a subscription
	deliveryRetention time.Duration  // how long delivery attempts are kept
	workers           int            // concurrent deliveries per server process
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	env := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("wfm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(fs) }
	var c config
	var level, mgmtRate, mgmtBurst, trustedProxies, eventRetention, eventStreams string
	var bundleRetention, deviceCertHosts, corsOrigins, staleBound string
	var whAllowCIDR, whTimeout, whDisableAfter, whRetention, whWorkers string
	var deviceRate, deviceBurst, reportRetention, shutdownTimeout string
	fs.StringVar(&c.listen, "listen", env("WFM_LISTEN", "127.0.0.1:8080"), "address of the HTTP listener (env WFM_LISTEN)")
	fs.StringVar(&c.deviceListen, "device-listen", env("WFM_DEVICE_LISTEN", "127.0.0.1:8443"), "address of the device API listener (mTLS) (env WFM_DEVICE_LISTEN)")
	fs.StringVar(&c.trustDomain, "trust-domain", env("WFM_TRUST_DOMAIN", "wfm.local"), "SPIFFE trust domain of WFM clients (env WFM_TRUST_DOMAIN)")
	fs.StringVar(&c.wfmID, "wfm-id", env("WFM_ID", "dev"), "this WFM's id in client SPIFFE IDs spiffe://<trust-domain>/margo/wfm/<wfm-id>/client/<client-id> (env WFM_ID)")
	fs.StringVar(&c.tlsCert, "tls-cert", getenv("WFM_TLS_CERT"), "device listener certificate (PEM); empty: a development PKI in <data-dir>/pki (env WFM_TLS_CERT)")
	fs.StringVar(&c.tlsKey, "tls-key", getenv("WFM_TLS_KEY"), "device listener private key (PEM) (env WFM_TLS_KEY)")
	fs.StringVar(&c.clientCA, "client-ca", getenv("WFM_CLIENT_CA"), "trust bundle for client certificates (PEM) (env WFM_CLIENT_CA)")
	fs.StringVar(&c.mgmtTLSCert, "mgmt-tls-cert", getenv("WFM_MGMT_TLS_CERT"), "management listener certificate (PEM, with -mgmt-tls-key): serve the management API over HTTPS, TLS 1.2 or later; use it whenever the listener is not on loopback (env WFM_MGMT_TLS_CERT)")
	fs.StringVar(&c.mgmtTLSKey, "mgmt-tls-key", getenv("WFM_MGMT_TLS_KEY"), "management listener private key (PEM) (env WFM_MGMT_TLS_KEY)")
	fs.BoolVar(&c.mgmtTLSDev, "mgmt-tls-dev", getenv("WFM_MGMT_TLS_DEV") == "true", "development: serve the management API over HTTPS with the development CA's server certificate in <data-dir>/pki (for localhost; curl --cacert <data-dir>/pki/ca.pem) (env WFM_MGMT_TLS_DEV=true)")
	fs.StringVar(&c.acceptClients, "accept-clients", env("WFM_ACCEPT_CLIENTS", "all"), "all: accept every client of the trust domain on first contact; listed: only clients accepted through the management API (env WFM_ACCEPT_CLIENTS)")
	fs.BoolVar(&c.devHeaderID, "dev-header-identity", getenv("WFM_DEV_HEADER_IDENTITY") == "true", "INSECURE, development only: serve the device API over plain HTTP and take the client id from the X-WFM-Client-ID header (env WFM_DEV_HEADER_IDENTITY=true)")
	fs.StringVar(&c.debugListen, "debug-listen", getenv("WFM_DEBUG_LISTEN"), "address of a profiling listener (/debug/pprof/); empty: none. Keep it on loopback (env WFM_DEBUG_LISTEN)")
	fs.BoolVar(&c.allowOverrides, "allow-rollback-override", getenv("WFM_ALLOW_ROLLBACK_OVERRIDE") != "false", "let admins override a supplier's rollback policy with force (audited); false disables break-glass overrides (env WFM_ALLOW_ROLLBACK_OVERRIDE=false)")
	fs.StringVar(&deviceRate, "device-rate", env("WFM_DEVICE_RATE", strconv.FormatFloat(ratelimit.DefaultDeviceRate, 'g', -1, 64)), "device API requests per second allowed per client, on average (per server process) (env WFM_DEVICE_RATE)")
	fs.StringVar(&deviceBurst, "device-burst", env("WFM_DEVICE_BURST", strconv.Itoa(ratelimit.DefaultDeviceBurst)), "device API requests a client may make at once above its rate (env WFM_DEVICE_BURST)")
	fs.StringVar(&mgmtRate, "mgmt-rate", env("WFM_MGMT_RATE", "50"), "management API requests per second allowed per token (per client address without a valid token), on average (per server process); 0: unlimited (env WFM_MGMT_RATE)")
	fs.StringVar(&mgmtBurst, "mgmt-burst", env("WFM_MGMT_BURST", "100"), "management API requests a caller may make at once above its rate (env WFM_MGMT_BURST)")
	fs.StringVar(&trustedProxies, "trusted-proxies", getenv("WFM_TRUSTED_PROXIES"), "comma-separated addresses or CIDRs of proxies whose forwarding header (-forwarded-header) names the caller; empty: none; 0.0.0.0/0 and ::/0 are refused (env WFM_TRUSTED_PROXIES)")
	fs.StringVar(&c.forwardedHeader, "forwarded-header", env("WFM_FORWARDED_HEADER", httpapi.HeaderXForwardedFor), "the one header read from trusted proxies: x-forwarded-for or forwarded (RFC 7239); the other is ignored. Choose the one your proxy appends to (env WFM_FORWARDED_HEADER)")
	fs.StringVar(&corsOrigins, "cors-origins", getenv("WFM_CORS_ORIGINS"), "comma-separated browser origins (scheme://host[:port]) of web consoles allowed to call the management API across origins (CORS); empty: none (env WFM_CORS_ORIGINS)")
	fs.BoolVar(&c.deviceTLS12, "device-tls12", getenv("WFM_DEVICE_TLS12") == "true", "also accept TLS 1.2 on the device listener (Margo allows it only as a non-default fallback) (env WFM_DEVICE_TLS12=true)")
	fs.StringVar(&reportRetention, "report-retention", env("WFM_REPORT_RETENTION", "100"), "status reports kept per deployment, at least 1 (env WFM_REPORT_RETENTION)")
	fs.StringVar(&eventRetention, "event-retention", env("WFM_EVENT_RETENTION", postgres.DefaultEventRetention.String()), "how long the event log keeps an event, a duration from 1h to 87600h (10 years); pruned hourly (env WFM_EVENT_RETENTION)")
	fs.StringVar(&eventStreams, "event-streams", env("WFM_EVENT_STREAMS", strconv.Itoa(feed.DefaultMaxStreams)), "event streams (GET /mgmt/v1/events as Server-Sent Events) this process serves at once, 1 to 100000; beyond, 503 too-many-streams; one token holds at most an eighth of them. Each queues up to 1024 events (env WFM_EVENT_STREAMS)")
	fs.StringVar(&bundleRetention, "bundle-retention", env("WFM_BUNDLE_RETENTION", postgres.DefaultBundleRetention.String()), "how long a superseded manifest version's bundle stays fetchable, a duration from 1h to 8760h (1 year); collected hourly (env WFM_BUNDLE_RETENTION)")
	fs.StringVar(&staleBound, "manifest-stale-bound", env("WFM_MANIFEST_STALE_BOUND", "5m"), "how long device API requests are still answered from the manifest cache once its change notifications stopped (the database is away), counted from when the cache was last known current (its listener's last notification or check, at most 30 s before), a duration from 0 (not at all) to 24h; past it they need the database, and /readyz answers 503 while the database is away (env WFM_MANIFEST_STALE_BOUND)")
	fs.StringVar(&c.webhooks.keyFile, "webhook-key-file", getenv("WFM_WEBHOOK_KEY_FILE"), "file holding the key that encrypts webhook signing secrets in the database: 32 bytes as base64 (openssl rand -base64 32); empty: <data-dir>/webhook-key, created once at mode 0600 (development) (env WFM_WEBHOOK_KEY_FILE)")
	fs.BoolVar(&c.webhooks.allowHTTP, "webhook-allow-http", getenv("WFM_WEBHOOK_ALLOW_HTTP") == "true", "let webhook subscriptions use plain http:// URLs (https only otherwise) (env WFM_WEBHOOK_ALLOW_HTTP=true)")
	fs.StringVar(&whAllowCIDR, "webhook-allow-cidr", getenv("WFM_WEBHOOK_ALLOW_CIDR"), "comma-separated CIDRs where webhook receivers may be although the range is refused by default (loopback, private, link-local, unique-local, CGNAT, metadata), e.g. 10.20.0.0/16 for an on-premises receiver (env WFM_WEBHOOK_ALLOW_CIDR)")
	fs.StringVar(&whTimeout, "webhook-timeout", env("WFM_WEBHOOK_TIMEOUT", "10s"), "timeout of one webhook request, connection included, from 1s to 60s (env WFM_WEBHOOK_TIMEOUT)")
	fs.StringVar(&whDisableAfter, "webhook-disable-after", env("WFM_WEBHOOK_DISABLE_AFTER", strconv.Itoa(webhook.DefaultDisableAfter)), "consecutive failed delivery attempts that, once their run also lasted 6 hours, disable a webhook subscription, from 1 to 100000 (env WFM_WEBHOOK_DISABLE_AFTER)")
	fs.StringVar(&whRetention, "webhook-delivery-retention", env("WFM_WEBHOOK_DELIVERY_RETENTION", webhook.DefaultDeliveryRetention.String()), "how long webhook delivery attempts are kept, a duration from 1h to 8760h (1 year); pruned hourly (env WFM_WEBHOOK_DELIVERY_RETENTION)")
	fs.StringVar(&whWorkers, "webhook-workers", env("WFM_WEBHOOK_WORKERS", "50"), "concurrent webhook deliveries per server process, from 1 to 1000 (env WFM_WEBHOOK_WORKERS)")
	c.adminToken = getenv("WFM_ADMIN_TOKEN")
	fs.StringVar(&c.adminTokenFile, "admin-token-file", getenv("WFM_ADMIN_TOKEN_FILE"), "file holding the bootstrap admin token (env WFM_ADMIN_TOKEN_FILE; or the token itself in WFM_ADMIN_TOKEN); empty with the private PostgreSQL: <data-dir>/admin-token, created once")
	fs.BoolVar(&c.adminTokenNew, "admin-token-create", getenv("WFM_ADMIN_TOKEN_CREATE") == "true", "with DATABASE_URL too: when no admin token is configured, create <data-dir>/admin-token (or -admin-token-file) once with a fresh token, as the private PostgreSQL mode does; for one-server set-ups such as docker compose (read it with: wfm print-admin-token) (env WFM_ADMIN_TOKEN_CREATE=true)")
	fs.StringVar(&deviceCertHosts, "device-cert-hosts", getenv("WFM_DEVICE_CERT_HOSTS"), "comma-separated DNS names and IP addresses the development server certificate carries besides localhost, 127.0.0.1 and ::1 (the names devices and other containers reach the server by); the development CA reissues it when the list changes. Only with the development PKI (no -tls-cert) (env WFM_DEVICE_CERT_HOSTS)")
	fs.StringVar(&c.databaseURL, "database-url", getenv("DATABASE_URL"), "PostgreSQL URL; empty: start a private PostgreSQL (env DATABASE_URL)")
	fs.StringVar(&c.dataDir, "data-dir", env("WFM_DATA_DIR", ".data"), "folder for the private PostgreSQL's data and other local state (env WFM_DATA_DIR)")
	fs.StringVar(&level, "log-level", env("WFM_LOG_LEVEL", "info"), "debug, info, warn or error (env WFM_LOG_LEVEL)")
	fs.StringVar(&c.logFormat, "log-format", env("WFM_LOG_FORMAT", "text"), "text or json (env WFM_LOG_FORMAT)")
	fs.StringVar(&shutdownTimeout, "shutdown-timeout", env("WFM_SHUTDOWN_TIMEOUT", "20s"), "how long to let requests finish on shutdown (SIGINT, SIGTERM) before their connections are closed (env WFM_SHUTDOWN_TIMEOUT)")
	err := fs.Parse(args)
	if err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if err := c.logLevel.UnmarshalText([]byte(level)); err != nil {
		return c, fmt.Errorf("-log-level %q: want debug, info, warn or error", level)
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return c, fmt.Errorf("-log-format %q: want text or json", c.logFormat)
	}
	if c.acceptClients != "all" && c.acceptClients != "listed" {
		return c, fmt.Errorf("-accept-clients %q: want all or listed", c.acceptClients)
	}
	if (c.tlsCert == "") != (c.tlsKey == "") || (c.tlsCert != "" && c.clientCA == "") {
		return c, errors.New("-tls-cert, -tls-key and -client-ca go together (or none, for the development PKI)")
	}
	if (c.mgmtTLSCert == "") != (c.mgmtTLSKey == "") {
		return c, errors.New("-mgmt-tls-cert and -mgmt-tls-key go together")
	}
	if c.deviceCertHosts, err = parseCertHosts(deviceCertHosts); err != nil {
		return c, err
	}
	if len(c.deviceCertHosts) > 0 && c.tlsCert != "" {
		return c, errors.New("-device-cert-hosts names the development certificate's hosts; with -tls-cert the certificate is yours")
	}
	if c.mgmtTLSDev && c.mgmtTLSCert != "" {
		return c, errors.New("-mgmt-tls-dev and -mgmt-tls-cert exclude each other: the development certificate or yours")
	}
	if c.deviceRate, err = strconv.ParseFloat(deviceRate, 64); err != nil || !(c.deviceRate > 0) || math.IsInf(c.deviceRate, 0) {
		return c, fmt.Errorf("-device-rate %q: want a number > 0", deviceRate)
	}
	if c.deviceBurst, err = strconv.Atoi(deviceBurst); err != nil || c.deviceBurst < 1 {
		return c, fmt.Errorf("-device-burst %q: want an integer >= 1", deviceBurst)
	}
	if err := parseMgmtLimit(&c, mgmtRate, mgmtBurst, trustedProxies); err != nil {
		return c, err
	}
	if c.reportRetention, err = strconv.Atoi(reportRetention); err != nil || c.reportRetention < 1 {
		return c, fmt.Errorf("-report-retention %q: want an integer >= 1", reportRetention)
	}
	if c.shutdownTimeout, err = time.ParseDuration(shutdownTimeout); err != nil || c.shutdownTimeout < 0 {
		return c, fmt.Errorf("-shutdown-timeout %q: want a duration >= 0 (0: close connections at once)", shutdownTimeout)
	}
	if c.eventRetention, err = time.ParseDuration(eventRetention); err != nil || c.eventRetention < minEventRetention || c.eventRetention > maxEventRetention {
		return c, fmt.Errorf("-event-retention %q: want a duration from %s to %s", eventRetention, minEventRetention, maxEventRetention)
	}
	if c.eventStreams, err = strconv.Atoi(eventStreams); err != nil || c.eventStreams < 1 || c.eventStreams > 100_000 {
		return c, fmt.Errorf("-event-streams %q: want an integer from 1 to 100000", eventStreams)
	}
	if c.bundleRetention, err = time.ParseDuration(bundleRetention); err != nil || c.bundleRetention < minBundleRetention || c.bundleRetention > maxBundleRetention {
		return c, fmt.Errorf("-bundle-retention %q: want a duration from %s to %s", bundleRetention, minBundleRetention, maxBundleRetention)
	}
	if c.staleBound, err = time.ParseDuration(staleBound); err != nil || c.staleBound < 0 || c.staleBound > maxStaleBound {
		return c, fmt.Errorf("-manifest-stale-bound %q: want a duration from 0 to %s", staleBound, maxStaleBound)
	}
	if c.corsOrigins, err = parseCORSOrigins(corsOrigins); err != nil {
		return c, err
	}
	if err := parseWebhookConfig(&c.webhooks, whAllowCIDR, whTimeout, whDisableAfter, whRetention, whWorkers); err != nil {
		return c, err
	}
	if err := (identity.Config{TrustDomain: c.trustDomain, WFMID: c.wfmID}).Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// parseWebhookConfig reads the webhook settings given as text.
func parseWebhookConfig(w *webhookConfig, allowCIDR, timeout, disableAfter, retention, workers string) error {
	var err error
	if w.allowCIDRs, err = webhook.ParseCIDRs(allowCIDR); err != nil {
		return fmt.Errorf("-webhook-allow-cidr: %w", err)
	}
	if w.timeout, err = time.ParseDuration(timeout); err != nil || w.timeout < time.Second || w.timeout > time.Minute {
		return fmt.Errorf("-webhook-timeout %q: want a duration from 1s to 60s", timeout)
	}
	if w.disableAfter, err = strconv.Atoi(disableAfter); err != nil || w.disableAfter < 1 || w.disableAfter > 100_000 {
		return fmt.Errorf("-webhook-disable-after %q: want a number from 1 to 100000", disableAfter)
	}
	if w.deliveryRetention, err = time.ParseDuration(retention); err != nil || w.deliveryRetention < time.Hour || w.deliveryRetention > 365*24*time.Hour {
		return fmt.Errorf("-webhook-delivery-retention %q: want a duration from 1h to 8760h", retention)
	}
	if w.workers, err = strconv.Atoi(workers); err != nil || w.workers < 1 || w.workers > 1000 {
		return fmt.Errorf("-webhook-workers %q: want a number from 1 to 1000", workers)
	}
	return nil
}

// parseCertHosts reads -device-cert-hosts: DNS names (letters, digits,
// '-', '.'; a leading "*." for a wildcard) and IP addresses, duplicates
// dropped.
func parseCertHosts(list string) ([]string, error) {
	var hosts []string
	for _, h := range strings.Split(list, ",") {
		if h = strings.ToLower(strings.TrimSpace(h)); h == "" || slices.Contains(hosts, h) {
			continue
		}
		if net.ParseIP(h) == nil && !validDNSName(h) {
			return nil, fmt.Errorf("-device-cert-hosts: %q is neither a DNS name nor an IP address", h)
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// validDNSName reports whether name is a DNS name a certificate may carry.
func validDNSName(name string) bool {
	name = strings.TrimPrefix(name, "*.")
	if name == "" || len(name) > 253 {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// parseCORSOrigins reads -cors-origins: comma-separated origins, each as a
// browser sends it in Origin (httpapi.CheckCORSOrigin), duplicates dropped.
func parseCORSOrigins(list string) ([]string, error) {
	var origins []string
	seen := map[string]bool{}
	for _, o := range strings.Split(list, ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		if err := httpapi.CheckCORSOrigin(o); err != nil {
			return nil, fmt.Errorf("-cors-origins: %w", err)
		}
		if k := strings.ToLower(o); !seen[k] {
			seen[k] = true
			origins = append(origins, o)
		}
	}
	return origins, nil
}

// The range of -bundle-retention: below an hour (the collection interval)
// an agent that just read a manifest could find its bundle gone; above a
// year superseded versions only accumulate.
const (
	minBundleRetention = time.Hour
	maxBundleRetention = 365 * 24 * time.Hour
)

// maxStaleBound caps -manifest-stale-bound: a replica cut off from the
// database for a day is broken, not degraded.
const maxStaleBound = 24 * time.Hour

// The range of -event-retention: below an hour (the pruning interval) a
// consumer restarting loses events; above ten years the log only grows.
const (
	minEventRetention = time.Hour
	maxEventRetention = 10 * 365 * 24 * time.Hour
)

// parseMgmtLimit reads the management rate limit and the trusted proxies.
func parseMgmtLimit(c *config, rate, burst, proxies string) error {
	var err error
	if c.mgmtRate, err = strconv.ParseFloat(rate, 64); err != nil || c.mgmtRate < 0 || math.IsInf(c.mgmtRate, 0) || math.IsNaN(c.mgmtRate) {
		return fmt.Errorf("-mgmt-rate %q: want a number >= 0 (0: unlimited)", rate)
	}
	if c.mgmtBurst, err = strconv.Atoi(burst); err != nil || c.mgmtBurst < 1 {
		return fmt.Errorf("-mgmt-burst %q: want an integer >= 1", burst)
	}
	if c.forwardedHeader = strings.ToLower(c.forwardedHeader); c.forwardedHeader != httpapi.HeaderXForwardedFor && c.forwardedHeader != httpapi.HeaderForwarded {
		return fmt.Errorf("-forwarded-header %q: want %s or %s", c.forwardedHeader, httpapi.HeaderXForwardedFor, httpapi.HeaderForwarded)
	}
	for _, p := range strings.Split(proxies, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			a, aerr := netip.ParseAddr(p)
			if aerr != nil {
				return fmt.Errorf("-trusted-proxies: %q is neither an address nor a CIDR", p)
			}
			prefix = netip.PrefixFrom(a, a.BitLen())
		}
		prefix = unmapPrefix(prefix)
		if prefix.Bits() == 0 {
			// Every peer would be trusted: any client could name its own
			// address, choosing its rate-limit bucket and audit address.
			return fmt.Errorf("-trusted-proxies: %q trusts every peer; list the load balancers' addresses or networks", p)
		}
		c.trustedProxies = append(c.trustedProxies, prefix)
	}
	return nil
}

// unmapPrefix turns an IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104) into
// its IPv4 prefix (10.0.0.0/8): peer addresses are unmapped before they are
// compared, so a mapped prefix would never match. Other prefixes come back
// masked.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	a := p.Addr()
	if a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

// refusalFlushError logs an aggregate audit entry that could not be written
// (it is kept for the next interval): at WARN while the database is
// unavailable (an outage, once an interval), at ERROR otherwise.
func refusalFlushError(log *slog.Logger) func(error) {
	return func(err error) {
		if lifecycle.ErrorCode(err) == lifecycle.EUNAVAILABLE {
			log.Warn("audit: aggregate of refused calls not written, the database is unavailable; kept for the next interval", "error", err)
			return
		}
		log.Error("audit: aggregate of refused calls not written; kept for the next interval", "error", err)
	}
}

// mgmtLimiter is the management API limiter of c; nil when lifted.
func mgmtLimiter(c config) *ratelimit.Limiter {
	if c.mgmtRate == 0 {
		return nil
	}
	return ratelimit.New(c.mgmtRate, c.mgmtBurst, 100_000, time.Now)
}

func newLogger(c config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.logLevel}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.logFormat == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(telemetry.NewContextHandler(h))
}

// run is the whole server: it returns when ctx is cancelled (after a graceful
// shutdown) or when something it depends on fails.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		for _, cmd := range commands() {
			if args[0] == cmd.name || slices.Contains(cmd.flags, args[0]) {
				return cmd.run(args[1:], getenv, stdout, stderr)
			}
		}
	}
	c, err := parseConfig(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	log := newLogger(c, stderr)
	tuneGC(getenv)

	dbURL := c.databaseURL
	var pg *pglaunch.Supervisor // the private PostgreSQL, nil with DATABASE_URL
	var pgFailed <-chan struct{}
	// One process per data folder runs its private PostgreSQL (exclusive
	// lock); replicas with DATABASE_URL share a folder (shared lock), so
	// wfm remove-data, which takes the exclusive lock, refuses while any
	// server uses it.
	lockFolder := pglaunch.ShareFolder
	if dbURL == "" {
		lockFolder = pglaunch.LockFolder
	}
	lock, err := lockFolder(c.dataDir)
	if err != nil {
		return inUse(err, "stop that process, or give this one another -data-dir")
	}
	defer func() { _ = lock.Release() }()
	if dbURL == "" {
		pg, err = startPrivatePostgres(ctx, c, getenv, log)
		if err != nil {
			return err
		}
		defer func() {
			if err := pg.Stop(); err != nil {
				log.Error("stop PostgreSQL", "error", err)
			} else {
				log.Info("PostgreSQL stopped")
			}
		}()
		dbURL, pgFailed = pg.URL("wfm"), pg.Failed()
	}

	pool, err := postgres.Open(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer pool.Close()
	if pg != nil {
		// Restart the private PostgreSQL when it stops under us; the pool
		// drops its connections so that a shutdown can finish.
		pg.Supervise(pool.Reset)
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("migrate database: %w", err)
	}

	acc := access.NewService(postgres.NewAccessStore(pool), time.Now)
	if err := bootstrapAdmin(ctx, c, c.databaseURL != "" && !c.adminTokenNew, acc, stdout, log); err != nil {
		return err
	}
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	fleetStore := postgres.NewFleetStore(pool, c.reportRetention)
	fl := fleet.NewService(fleetStore, cat, fleet.Policy{AcceptAll: c.acceptClients == "all", AllowOverrides: c.allowOverrides}, time.Now, log)
	fl.SetManifestStaleBound(c.staleBound)

	ids := identity.Config{TrustDomain: c.trustDomain, WFMID: c.wfmID}
	deviceIdentity := ids.ClientIDFromRequest
	var deviceTLS *tls.Config
	if c.devHeaderID {
		deviceIdentity = identity.HeaderIdentity{}.ClientIDFromRequest
		log.Warn("INSECURE: -dev-header-identity is on: the device API is plain HTTP and trusts the " + identity.DevHeader +
			" header; anyone who reaches it can act as any client. Never use this outside development.")
	} else {
		deviceTLS, err = deviceTLSConfig(c, log)
		if err != nil {
			return err
		}
	}

	mgmtTLS, err := mgmtTLSConfig(c)
	if err != nil {
		return err
	}

	// Repeated refusal and TLS handshake log lines are sampled: the first
	// few per caller a minute, then one line with the count of the rest.
	// Each kind has its own sampler, so that a handshake flood from many
	// addresses cannot use up the keys the refusal lines need.
	// Both kinds are logged at INFO (a 403 refusal at WARN), and so are
	// their counts.
	newLogSampler := func() *sampling.Sampler[string] {
		l := sampling.New(sampling.Config[string]{First: 5, Interval: time.Minute, MaxKeys: 10_000, Now: time.Now,
			Overflow: func(string) string { return "other callers" }, Flush: telemetry.LogSuppressedAt(log, slog.LevelInfo)})
		l.Start(context.WithoutCancel(ctx))
		return l
	}
	refusalLog, handshakeLog := newLogSampler(), newLogSampler()
	defer func() { _ = refusalLog.Stop(context.Background()); _ = handshakeLog.Stop(context.Background()) }()
	// WARN lines of an unavailable database: one per kind every 10 s, the
	// count of the rest when those 10 s end (the last one of an outage too).
	outageLog := sampling.New(sampling.Config[string]{First: 1, Interval: 10 * time.Second, MaxKeys: 1_000, Now: time.Now,
		Overflow: func(string) string { return "other outage lines" }, Flush: telemetry.LogSuppressed(log)})
	outageLog.Start(context.WithoutCancel(ctx))
	defer func() { _ = outageLog.Stop(context.Background()) }()
	// Refused management calls beyond a rate are aggregated in the audit
	// log; stopped (their last counts written) after HTTP drained.
	refusals := access.NewRefusals(acc, access.RefusalsConfig{OnFlushError: refusalFlushError(log)})
	refusals.Start(context.WithoutCancel(ctx))
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := refusals.Stop(sctx); err != nil {
			log.Error("audit: aggregate of refused calls lost at shutdown", "error", err)
		}
	}()
	var mgmtLimit httpapi.MgmtLimiter
	if l := mgmtLimiter(c); l != nil {
		mgmtLimit = l
	}

	// Webhooks: subscriptions (secrets sealed with the webhook key), a
	// dispatcher that queues deliveries from the event log, and River's
	// workers that send them; stopped after HTTP drained.
	hooks, err := startWebhooks(ctx, c, pool, log)
	if err != nil {
		return err
	}
	defer hooks.stop(log)
	// Domain metrics: counts by state from one aggregate query at scrape
	// time (cached a few seconds, bounded by a timeout), counters the HTTP
	// adapter, the manifest cache and the event log's shared reader feed.
	domain := telemetry.NewDomainCollector(telemetry.DomainConfig{
		Snapshot: func(ctx context.Context) (telemetry.Snapshot, error) {
			return postgres.MetricsSnapshot(ctx, pool, time.Now())
		},
		CacheStats: fl.ManifestCacheStats,
		TTL:        5 * time.Second,
		Timeout:    2 * time.Second,
		Now:        time.Now,
	})
	// Live event streams: one shared reader of the event log per process
	// fans events out to this process's streams, and writes the log line
	// of each domain event (at its type's level). Streams end before HTTP drains; the
	// reader stops after it.
	eventLog := postgres.NewEventLog(pool)
	// A token revoked by another process is forgotten here once its event
	// is read (access.TokenCacheTTL bounds it otherwise).
	observe := func(e lifecycle.Event) {
		domain.ObserveEvent(e)
		acc.ObserveEvent(e)
	}
	hub := feed.New(feed.Config{Reader: eventLog, Logger: log, MaxStreams: c.eventStreams, Encode: httpapi.SSEFrame, Observe: observe})
	if err := hub.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	defer hub.Stop()

	// The device listener is bound before the handler is built: the answer
	// the management listener gives to a device API path names its address
	// (with -device-listen :0, the port chosen).
	dln, err := net.Listen("tcp", c.deviceListen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.deviceListen, err)
	}
	defer dln.Close() // on an early return; closing it again after Shutdown is harmless
	dscheme := "https://"
	if deviceTLS == nil {
		dscheme = "http://"
	}
	deviceURL := dscheme + displayAddr(dln.Addr())
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		telemetry.NewPoolCollector(pool), domain, telemetry.NewBuildInfo(buildinfo.Read()))
	handler, err := httpapi.NewHandler(httpapi.Config{
		Logger:          log,
		Ready:           readiness(pg, pool),
		Registry:        reg,
		Catalog:         cat,
		Fleet:           fl,
		Access:          acc,
		DeviceIdentity:  deviceIdentity,
		DeviceLimiter:   ratelimit.New(c.deviceRate, c.deviceBurst, 100_000, time.Now),
		Idempotency:     postgres.NewAccessStore(pool),
		MgmtLimiter:     mgmtLimit,
		TrustedProxies:  c.trustedProxies,
		ForwardedHeader: c.forwardedHeader,
		CORSOrigins:     c.corsOrigins,
		DeviceURL:       deviceURL,
		Refusals:        refusals,
		LogSampler:      refusalLog,
		OutageLog:       outageLog,
		Webhooks:        hooks.service,
		Events:          httpapi.EventsConfig{Log: eventLog, Hub: hub},
		Counters:        domain,
	})
	if err != nil {
		return err
	}

	mgmtHandler, deviceHandler := httpapi.Split(handler)

	// Every server process drops its cached manifests when any process
	// publishes (LISTEN/NOTIFY), so the device poll can answer from memory;
	// when notifications were missed, it keeps them for -manifest-stale-bound
	// and checks them all once it listens again.
	// The listener runs until the HTTP servers have drained (the deferred
	// stop), not just until the signal: draining requests still publish.
	listenCtx, stopListening := context.WithCancel(context.WithoutCancel(ctx))
	listenerDone := make(chan struct{})
	go func() {
		defer close(listenerDone)
		l := &postgres.Listener{Pool: pool, Channel: postgres.NotifyChannel, Notify: func(p string) { fl.Invalidate(p); hub.Wake() },
			Lost: fl.ManifestCacheLost, Listening: resyncManifests(fl), Log: log}
		_ = l.Run(listenCtx)
	}()
	schedListenerDone := make(chan struct{})
	go func() {
		defer close(schedListenerDone)
		l := &postgres.Listener{Pool: pool, Channel: postgres.SchedulerChannel, Notify: func(string) { fl.Wake(); hub.Wake() },
			Listening: func(context.Context) error { fl.Wake(); return nil }, Log: log}
		_ = l.Run(listenCtx)
	}()
	defer func() { stopListening(); <-listenerDone; <-schedListenerDone }()
	defer fl.Close() // after HTTP drained: the creations and status reports still queued are stored and answered

	// Lifecycle operations run in the background; stopped after HTTP drained.
	sched := fleet.NewScheduler(fl, time.Second)
	sched.Start(context.WithoutCancel(ctx))
	defer sched.Stop()

	// Device API contacts are noted in memory and written to
	// devices.last_seen_at once a minute; the last ones after HTTP drained.
	lastSeen := fleet.NewLastSeen(fleetStore, fleet.DefaultLastSeenInterval, time.Now, log)
	fl.RecordLastSeen(lastSeen)
	lastSeen.Start(context.WithoutCancel(ctx))
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := lastSeen.Stop(sctx); err != nil {
			log.Warn("devices: last seen instants of the last minute lost at shutdown", "error", err)
		}
	}()

	// The event log keeps events for -event-retention: pruned now and hourly.
	pruner := postgres.NewEventPruner(postgres.NewEventLog(pool), postgres.EventRetention{MaxAge: c.eventRetention},
		postgres.DefaultPruneInterval, time.Now, log)
	pruner.Start(context.WithoutCancel(ctx))
	defer pruner.Stop()

	// Superseded manifest versions (and their bundles) stay fetchable for
	// -bundle-retention: collected now and hourly.
	collector := postgres.NewBundleCollector(pool, c.bundleRetention, postgres.DefaultBundleGCInterval, log)
	collector.Start(context.WithoutCancel(ctx))
	defer collector.Stop()

	// Tables that doubled since their statistics are analyzed within
	// seconds, so sessions drop plans made while they were nearly empty.
	stats := postgres.NewStatsKeeper(pool, postgres.DefaultStatsInterval, log)
	stats.Start(context.WithoutCancel(ctx))
	defer stats.Stop()

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.listen, err)
	}
	errorLog := telemetry.NewServerErrorLog(log, handshakeLog.Allow)
	dsrv := newHTTPServer(ctx, deviceHandler, errorLog)
	dsrv.TLSConfig = deviceTLS
	// A connection's client certificate is checked once, not per request.
	dsrv.ConnContext = identity.ConnContext
	srv := newHTTPServer(ctx, mgmtHandler, errorLog)
	srv.TLSConfig = mgmtTLS
	mscheme := "http://"
	if mgmtTLS != nil {
		mscheme = "https://"
	}
	if mgmtTLS == nil && !isLoopback(ln.Addr()) {
		log.Warn("the management listener is plain HTTP on a non-loopback address: bearer tokens cross the network in clear; serve it over TLS (-mgmt-tls-cert and -mgmt-tls-key) or keep it on loopback",
			"addr", ln.Addr().String())
	}
	logPosture(log, c, mscheme+ln.Addr().String(), isLoopback(ln.Addr()), mgmtTLS != nil)
	base := mscheme + displayAddr(ln.Addr())
	fmt.Fprintf(stdout, "wfm listening on %s (Swagger UI %s/docs/, contract %s/openapi.yaml)\n", base, base, base)
	fmt.Fprintf(stdout, "wfm device API (Margo) on %s/api/v1/\n", deviceURL)
	b := buildinfo.Read()
	log.Info("listening", "management", ln.Addr().String(), "device", dln.Addr().String(), "device_tls", deviceTLS != nil,
		"version", b.Version, "revision", b.Revision)

	if c.debugListen != "" {
		dbg, err := net.Listen("tcp", c.debugListen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", c.debugListen, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		dsrvDebug := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = dsrvDebug.Serve(dbg) }()
		defer dsrvDebug.Close()
		log.Warn("profiling listener on (do not expose it)", "addr", dbg.Addr().String())
	}

	serveErr := make(chan error, 2)
	go func() {
		if mgmtTLS != nil {
			serveErr <- srv.ServeTLS(ln, "", "")
			return
		}
		serveErr <- srv.Serve(ln)
	}()
	go func() {
		if deviceTLS != nil {
			serveErr <- dsrv.ServeTLS(dln, "", "")
			return
		}
		serveErr <- dsrv.Serve(dln)
	}()

	select {
	case err := <-serveErr:
		_ = srv.Close()
		_ = dsrv.Close()
		return fmt.Errorf("http server: %w", err)
	case <-pgFailed:
		_ = srv.Close()
		_ = dsrv.Close()
		return fmt.Errorf("the private PostgreSQL stopped and could not be restarted (its log: %s): %w",
			filepath.Join(pg.Server().DataDir(), "postgres.log"), pg.Err())
	case <-ctx.Done():
	}
	log.Info("shutting down")
	hub.CloseStreams() // event streams would hold the drain until its deadline
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	for _, s := range []*http.Server{srv, dsrv} {
		if err := s.Shutdown(sctx); err != nil {
			log.Warn("graceful shutdown incomplete", "error", err)
			_ = s.Close()
		}
	}
	<-serveErr
	<-serveErr
	return nil
}

// newHTTPServer returns a server of h; errorLog receives net/http's own
// errors (TLS handshake failures among them, sampled).
func newHTTPServer(ctx context.Context, h http.Handler, errorLog *stdlog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    1 << 20, // above httpapi.MaxHeaderBytes, so that oversized headers get its 431 problem
		ErrorLog:          errorLog,
		// Requests outlive the shutdown signal: Shutdown lets them finish.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
}

// deviceTLSConfig loads the device listener's certificate and client trust
// bundle, or, when none is configured, creates (once) a development CA and
// server certificate in <data-dir>/pki. Client certificates for that CA come
// from "wfm issue-client-cert".
func deviceTLSConfig(c config, log *slog.Logger) (*tls.Config, error) {
	if c.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("load -tls-cert/-tls-key: %w", err)
		}
		bundle, err := readCertificates(c.clientCA)
		if err != nil {
			return nil, fmt.Errorf("read -client-ca: %w", err)
		}
		return identity.ServerTLSConfig(cert, bundle, tlsOptions(c)...), nil
	}
	dir := filepath.Join(c.dataDir, "pki")
	ca, cert, created, err := devPKIHosts(dir, c.deviceCertHosts)
	if err != nil {
		return nil, err
	}
	if created {
		log.Info("created a development CA for the device API; issue client certificates with: wfm issue-client-cert -client-id <id>", "dir", dir)
	}
	return identity.ServerTLSConfig(cert, []*x509.Certificate{ca.Certificate()}, tlsOptions(c)...), nil
}

// readCertificates reads every certificate of a PEM file (a trust bundle).
func readCertificates(file string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return certs, nil
}

// mgmtTLSConfig is the management listener's TLS configuration, nil for
// plain HTTP: the configured certificate, or with -mgmt-tls-dev the
// development CA's server certificate (the device listener's, for
// localhost). No client certificate is asked for (callers authenticate with
// bearer tokens); TLS 1.2 is allowed for operators' tools, and Go prefers
// TLS 1.3 whenever the client speaks it.
func mgmtTLSConfig(c config) (*tls.Config, error) {
	var cert tls.Certificate
	switch {
	case c.mgmtTLSCert != "":
		var err error
		if cert, err = tls.LoadX509KeyPair(c.mgmtTLSCert, c.mgmtTLSKey); err != nil {
			return nil, fmt.Errorf("load -mgmt-tls-cert/-mgmt-tls-key: %w", err)
		}
	case c.mgmtTLSDev:
		var err error
		if _, cert, _, err = devPKIHosts(filepath.Join(c.dataDir, "pki"), c.deviceCertHosts); err != nil {
			return nil, err
		}
	default:
		return nil, nil
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// isLoopback reports whether a listener's address is a loopback address
// (0.0.0.0 and :: are not: they listen on every interface).
func isLoopback(a net.Addr) bool {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// logPosture logs, in one line, what an attacker on the network would want
// to know: who may call the device API, how the management listener is
// reached, what answers without authentication, the rate limits, whose
// forwarding header names a caller's address, where webhook receivers may
// be beyond the default guard, and every development or
// relaxed setting that is on. The break-glass rollback override is a
// documented default (admins only, audited), so it has its own field and is
// not counted as relaxed.
func logPosture(log *slog.Logger, c config, mgmtURL string, mgmtLoopback, mgmtTLS bool) {
	var dev []string
	deviceAuth := "mtls"
	switch {
	case c.devHeaderID:
		deviceAuth = "dev-header (INSECURE: plain HTTP, " + identity.DevHeader + ")"
		dev = append(dev, "dev-header-identity")
	case c.tlsCert == "":
		dev = append(dev, "dev-pki")
	}
	if c.mgmtTLSDev {
		dev = append(dev, "mgmt-tls-dev")
	}
	if c.deviceTLS12 && !c.devHeaderID {
		dev = append(dev, "device-tls12")
	}
	var mgmtRate, mgmtBurst any = c.mgmtRate, c.mgmtBurst
	if c.mgmtRate == 0 {
		mgmtRate, mgmtBurst = "unlimited", "unlimited"
		dev = append(dev, "mgmt-rate-unlimited")
	}
	if c.deviceRate > ratelimit.DefaultDeviceRate || c.deviceBurst > ratelimit.DefaultDeviceBurst {
		dev = append(dev, "device-rate-raised")
	}
	// Webhook receivers in forbidden ranges or over plain HTTP reopen what
	// the SSRF guard closes (docs/webhooks.md): an operator auditing the
	// server must see them here.
	if c.webhooks.allowHTTP {
		dev = append(dev, "webhook-allow-http")
	}
	whCIDRs := "none"
	if len(c.webhooks.allowCIDRs) > 0 {
		dev = append(dev, "webhook-allow-cidr")
		cs := make([]string, len(c.webhooks.allowCIDRs))
		for i, p := range c.webhooks.allowCIDRs {
			cs[i] = p.String()
		}
		whCIDRs = strings.Join(cs, ",")
	}
	if c.debugListen != "" {
		dev = append(dev, "pprof")
	}
	if len(dev) == 0 {
		dev = append(dev, "none")
	}
	proxies, header := "none", "none (no trusted proxies)"
	if len(c.trustedProxies) > 0 {
		ps := make([]string, len(c.trustedProxies))
		for i, p := range c.trustedProxies {
			ps[i] = p.String()
		}
		proxies, header = strings.Join(ps, ","), c.forwardedHeader
	}
	log.Info("security posture",
		"accept_clients", c.acceptClients,
		"device_auth", deviceAuth,
		"management", mgmtURL,
		"management_plain_http", !mgmtTLS,
		"management_loopback", mgmtLoopback,
		"metrics", "unauthenticated on the management listener",
		"mgmt_rate", mgmtRate,
		"mgmt_burst", mgmtBurst,
		"trusted_proxies", proxies,
		"forwarded_header", header,
		"cors_origins", corsPosture(c.corsOrigins),
		"webhook_allow_cidr", whCIDRs,
		"device_rate", c.deviceRate,
		"device_burst", c.deviceBurst,
		"rollback_override", c.allowOverrides,
		"relaxed", strings.Join(dev, ","))
}

// corsPosture is the cors_origins field of the security posture line.
func corsPosture(origins []string) string {
	if len(origins) == 0 {
		return "none"
	}
	return strings.Join(origins, ",")
}

// tlsOptions are the device listener's TLS options: a client certificate
// is required at the handshake (the listener serves only the device API),
// TLS 1.3 unless TLS 1.2 is explicitly allowed.
func tlsOptions(c config) []identity.TLSOption {
	opts := []identity.TLSOption{identity.RequireClientCert()}
	if c.deviceTLS12 {
		opts = append(opts, identity.AllowTLS12())
	}
	return opts
}

// devPKI loads or creates the development CA and the device listener's
// server certificate in dir; an existing server certificate is kept
// whatever names it carries (for "wfm issue-client-cert", which needs the
// CA only).
func devPKI(dir string) (*devpki.CA, tls.Certificate, bool, error) {
	return loadDevPKI(dir, nil, false)
}

// devPKIHosts is devPKI for the server: the server certificate carries
// localhost, 127.0.0.1, ::1 and hosts (-device-cert-hosts), and is issued
// again by the CA when the names it carries differ.
func devPKIHosts(dir string, hosts []string) (*devpki.CA, tls.Certificate, bool, error) {
	return loadDevPKI(dir, hosts, true)
}

func loadDevPKI(dir string, hosts []string, exact bool) (*devpki.CA, tls.Certificate, bool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, tls.Certificate{}, false, err
	}
	ca, created, err := devpki.LoadOrCreateCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"), "wfm development CA")
	if err != nil {
		return nil, tls.Certificate{}, false, fmt.Errorf("development CA: %w", err)
	}
	dnsNames, ips := serverCertNames(hosts)
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	if cert, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil && !created && (!exact || certNamesEqual(cert.Leaf, dnsNames, ips)) {
		return ca, cert, false, nil
	}
	cert, err := ca.IssueServer(dnsNames, ips)
	if err != nil {
		return nil, tls.Certificate{}, false, err
	}
	certPEM, keyPEM, err := devpki.EncodePEM(cert)
	if err != nil {
		return nil, tls.Certificate{}, false, err
	}
	if err := devpki.WriteKeyPairFiles(certFile, keyFile, certPEM, keyPEM); err != nil {
		return nil, tls.Certificate{}, false, err
	}
	return ca, cert, created, nil
}

// serverCertNames are the names of the development server certificate:
// localhost, 127.0.0.1 and ::1, then hosts.
func serverCertNames(hosts []string) ([]string, []net.IP) {
	dnsNames, ips := []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		} else if !slices.Contains(dnsNames, h) {
			dnsNames = append(dnsNames, h)
		}
	}
	return dnsNames, ips
}

// certNamesEqual reports whether leaf carries exactly dnsNames and ips.
func certNamesEqual(leaf *x509.Certificate, dnsNames []string, ips []net.IP) bool {
	if leaf == nil || len(leaf.DNSNames) != len(dnsNames) || len(leaf.IPAddresses) != len(ips) {
		return false
	}
	for _, n := range dnsNames {
		if !slices.Contains(leaf.DNSNames, n) {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// bootstrapAdmin installs the first admin token from configuration, so that
// a fresh server is usable. With the private PostgreSQL (development) or
// -admin-token-create and no token configured, it creates one once in
// <data-dir>/admin-token (or -admin-token-file).
func bootstrapAdmin(ctx context.Context, c config, external bool, acc *access.Service, stdout io.Writer, log *slog.Logger) error {
	secret := strings.TrimSpace(c.adminToken)
	source := "WFM_ADMIN_TOKEN"
	file := c.adminTokenFile
	if secret == "" && (file == "" && !external || file != "" && c.adminTokenNew) {
		if file == "" {
			file = filepath.Join(c.dataDir, "admin-token")
		}
		if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
			_, s := access.NewSecret()
			if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
				return fmt.Errorf("write development admin token: %w", err)
			}
			if err := os.WriteFile(file, []byte(s+"\n"), 0o600); err != nil {
				return fmt.Errorf("write development admin token: %w", err)
			}
		}
	}
	if secret == "" && file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("read admin token file: %w", err)
		}
		secret, source = strings.TrimSpace(string(b)), file
	}
	if secret == "" {
		log.Warn("no bootstrap admin token configured (WFM_ADMIN_TOKEN or WFM_ADMIN_TOKEN_FILE); only tokens already in the database can call the management API")
		return nil
	}
	out, err := acc.Bootstrap(ctx, secret)
	if err != nil {
		return fmt.Errorf("bootstrap admin token from %s: %w", source, err)
	}
	switch out {
	case access.BootstrapRevoked:
		log.Warn("the configured bootstrap admin token was revoked and stays revoked; configure a new one to replace it", "source", source)
	case access.BootstrapReplaced:
		log.Info("the configured bootstrap admin token changed: it replaced the stored one, whose secret no longer works (audited)", "source", source)
	}
	if source == "WFM_ADMIN_TOKEN" {
		fmt.Fprintln(stdout, "admin token: from WFM_ADMIN_TOKEN")
	} else {
		fmt.Fprintf(stdout, "admin token: in %s (curl -H \"Authorization: Bearer $(cat %s)\" …)\n", source, source)
	}
	return nil
}

// readiness is the /readyz check: the private PostgreSQL (when there is one)
// is not shutting down or restarting, and the database answers, migrated.
func readiness(pg *pglaunch.Supervisor, pool *pgxpool.Pool) func(context.Context) error {
	return func(ctx context.Context) error {
		if pg != nil {
			if err := pg.Ready(); err != nil {
				return err
			}
		}
		return postgres.Check(ctx, pool)
	}
}

// resyncManifests is the manifest listener's Listening: once LISTEN is in
// place again, the manifest cache checks its entries against the database,
// within a deadline (a failure counts as a lost connection, and is retried).
func resyncManifests(fl *fleet.Service) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, _, err := fl.ResyncManifestCache(ctx)
		return err
	}
}

// startPrivatePostgres starts the server's own PostgreSQL in c.dataDir,
// under a Supervisor that restarts it, and makes sure its "wfm" database
// exists. It logs where the data lives.
func startPrivatePostgres(ctx context.Context, c config, getenv func(string) string, log *slog.Logger) (*pglaunch.Supervisor, error) {
	bin, err := pglaunch.FindBinaries(getenv)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Join(c.dataDir, "postgres"))
	if err != nil {
		return nil, err
	}
	log.Info("starting private PostgreSQL (DATABASE_URL is not set; for development and tests)", "bin", bin, "data", dir)
	pg, err := pglaunch.StartSupervisor(ctx, pglaunch.SupervisorOptions{Options: pglaunch.Options{BinDir: bin, DataDir: dir}, Log: log})
	if err != nil {
		return nil, fmt.Errorf("start private PostgreSQL: %w", err)
	}
	if real := pg.Server().DataDir(); real != dir {
		log.Warn("the private PostgreSQL's data lives in "+real+", which "+dir+" links to (wfm puts the cluster there when "+
			"the OS user postgres cannot enter a folder above "+dir+"); to delete the data, stop wfm and run: wfm remove-data -data-dir "+c.dataDir+
			" (deleting the folder alone leaves the cluster behind)", "data", real)
	}
	if err := ensureDatabase(ctx, pg.URL("postgres"), "wfm"); err != nil {
		_ = pg.Stop()
		return nil, err
	}
	log.Info("private PostgreSQL ready", "data", pg.Server().DataDir(), "socket", pg.Server().SocketDir(), "port", pg.Server().Port())
	return pg, nil
}

func ensureDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to private PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return nil
}

// displayAddr turns a listener address into something a browser can open.
func displayAddr(a net.Addr) string { return displayHostPort(a.String()) }

// displayHostPort turns a listen address (host:port) into one a client can
// dial: an empty or unspecified host (":8443", "0.0.0.0:8443") becomes
// localhost.
func displayHostPort(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// issueClientCert is "wfm issue-client-cert": it issues a WFM client
// certificate (an X.509-SVID for spiffe://<trust-domain>/margo/wfm/<wfm-id>/client/<client-id>)
// from the development CA in <data-dir>/pki, for device agents, the device
// simulator and curl.
func issueClientCert(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("wfm issue-client-cert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	clientID := fs.String("client-id", "", "client id (required)")
	dataDir := fs.String("data-dir", env("WFM_DATA_DIR", ".data"), "the server's data folder (its pki/ holds the development CA)")
	out := fs.String("out", "", "folder for <client-id>.pem and <client-id>-key.pem, and then a copy of the CA certificate, ca.pem (default <data-dir>/pki/clients, without the copy)")
	trustDomain := fs.String("trust-domain", env("WFM_TRUST_DOMAIN", "wfm.local"), "SPIFFE trust domain")
	wfmID := fs.String("wfm-id", env("WFM_ID", "dev"), "this WFM's id")
	validity := fs.Duration("validity", 365*24*time.Hour, "how long the certificate is valid")
	deviceListen := fs.String("device-listen", env("WFM_DEVICE_LISTEN", "127.0.0.1:8443"), "the server's device API address (its -device-listen), for the curl and simulator hints printed")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *clientID == "" {
		return errors.New("issue-client-cert: -client-id is required")
	}
	ids := identity.Config{TrustDomain: *trustDomain, WFMID: *wfmID}
	spiffeID, err := ids.ClientSPIFFEID(*clientID)
	if err != nil {
		return err
	}
	if _, port, err := net.SplitHostPort(*deviceListen); err != nil {
		return fmt.Errorf("issue-client-cert: -device-listen %q is not host:port: %w", *deviceListen, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("issue-client-cert: -device-listen %q: the port must be a number from 1 to 65535", *deviceListen)
	}
	dir := filepath.Join(*dataDir, "pki")
	ca, _, created, err := devPKI(dir)
	if err != nil {
		return err
	}
	if created {
		// Not the CA of a server that runs with another data folder: say so.
		abs, _ := filepath.Abs(dir)
		fmt.Fprintf(stderr, "issue-client-cert: created a new development CA in %s; only a server with -data-dir %s trusts it\n", abs, filepath.Dir(abs))
	}
	caFile := filepath.Join(dir, "ca.pem")
	copyCA := *out != ""
	if !copyCA {
		*out = filepath.Join(dir, "clients")
	}
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return err
	}
	if copyCA {
		// What a device needs, without the rest of the data folder (the CA's
		// key, the admin token): a folder another container can mount.
		b, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		caFile = filepath.Join(*out, "ca.pem")
		if err := os.WriteFile(caFile, b, 0o644); err != nil {
			return err
		}
	}
	certPEM, keyPEM, err := ca.IssueClientPEM(spiffeID, *validity)
	if err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(*out, *clientID+".pem"), filepath.Join(*out, *clientID+"-key.pem")
	if err := devpki.WriteKeyPairFiles(certFile, keyFile, certPEM, keyPEM); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "issued %s\n  certificate %s\n  key         %s\n  CA          %s\n", spiffeID, certFile, keyFile, caFile)
	server := "https://" + displayHostPort(*deviceListen)
	fmt.Fprintf(stdout, "try: curl --cacert %s --cert %s --key %s %s/api/v1/deployments\n", caFile, certFile, keyFile, server)
	fmt.Fprintf(stdout, "simulate devices: ./bin/wfm-devicesim -server %s -ca %s -cert %s -key %s\n", server, caFile, certFile, keyFile)
	return nil
}

// printAdminToken is "wfm print-admin-token": it prints the bootstrap admin
// token the server created in <data-dir>/admin-token (or the one in
// -admin-token-file), so that it can be read where there is no shell, as in
// the container image: docker compose exec wfm wfm print-admin-token.
func printAdminToken(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("wfm print-admin-token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := getenv("WFM_DATA_DIR")
	if dataDir == "" {
		dataDir = ".data"
	}
	fs.StringVar(&dataDir, "data-dir", dataDir, "the server's data folder (env WFM_DATA_DIR)")
	file := fs.String("admin-token-file", getenv("WFM_ADMIN_TOKEN_FILE"), "the admin token file; empty: <data-dir>/admin-token (env WFM_ADMIN_TOKEN_FILE)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("print-admin-token: unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if tok := getenv("WFM_ADMIN_TOKEN"); tok != "" {
		// The token the server takes before any file (it replaces the
		// stored one): the file's would no longer work.
		fmt.Fprintln(stderr, "print-admin-token: the token comes from WFM_ADMIN_TOKEN")
		fmt.Fprintln(stdout, tok)
		return nil
	}
	if *file == "" {
		*file = filepath.Join(dataDir, "admin-token")
	}
	b, err := os.ReadFile(*file)
	if err != nil {
		return fmt.Errorf("print-admin-token: %w (the server creates it with the private PostgreSQL or -admin-token-create)", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 || strings.ContainsAny(tok, "\r\n") {
		return fmt.Errorf("print-admin-token: %s does not hold an admin token (one line of at least 16 characters)", *file)
	}
	fmt.Fprintln(stdout, tok)
	return nil
}
