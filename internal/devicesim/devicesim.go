// Package devicesim simulates Margo device agents (WFM clients) against the
// device API: each device registers its capabilities, polls its client's
// state manifest with If-None-Match, fetches the ApplicationDeployment YAML of
// what changed (verifying its digest), and reports status as a real agent
// would: installing, then installed (or failed), with the drain phases of
// wfm's extension when a revision asks for a drain, and removed for what left
// the manifest. It is for demos, end-to-end tests and load.
//
// The devices of one Config share one client certificate, and the server
// counts requests per client (internal/ratelimit: a token bucket per client
// id), so they share one request Budget that paces them to the server's
// budget. They honour Retry-After (and Margo's retryAfterSeconds) with
// exponential backoff, adopt a manifest (remember its ETag) only once every
// document it lists was fetched, verified and applied, so a refused request
// is retried at the next poll rather than hidden behind a 304, and fetch
// each deployment document once per digest for all of them (documents at a
// digest never change). Pacing is hand-written on golang.org/x/time/rate
// because the budget must also pause for a server-given Retry-After.
package devicesim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"

	"github.com/wfm-dev/wfm/internal/ratelimit"
)

// Config is what every simulated device of one client shares.
type Config struct {
	// BaseURL of the device API (https://host:8443, or http:// in the
	// development header mode).
	BaseURL string
	// HTTP is the client: with the client certificate for mTLS.
	HTTP *http.Client
	// ClientID, when not empty, is sent in the X-WFM-Client-ID header (the
	// server's development header mode).
	ClientID string
	// Poll is how often a device polls its manifest.
	Poll time.Duration
	// InstallTime is how long a device takes to apply a revision.
	InstallTime time.Duration
	// DrainTime is how long in-flight work takes to finish when a revision
	// asks for a drain; NeverDrain makes devices never finish draining.
	DrainTime  time.Duration
	NeverDrain bool
	// FailRate is the probability that applying a revision fails. A failed
	// revision is reported with an error in status.error: code FailureCode,
	// source FailureSource and a message naming the revision.
	FailRate float64
	// Log receives what devices do.
	Log *slog.Logger
	// Rand decides failures (nil: a fixed seed); shared by the devices.
	Rand *rand.Rand
	// Budget paces the requests of every device of this client (nil: the
	// server's default budget, ratelimit.DefaultDeviceRate and
	// DefaultDeviceBurst).
	Budget *Budget
	// Retry bounds the retries of a refused request (429, 503).
	Retry Retry
	// Now and Sleep are the clock (nil: the real one); tests inject theirs.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// Stats counts what the devices did.
	Stats Stats
	// Registered, when not nil, is called by Run once the device's first
	// registration succeeded, with its id (concurrently for the devices of
	// one Config).
	Registered func(id string)

	mu     sync.Mutex                // guards Rand and docs
	docs   map[string]*deploymentDoc // verified deployment documents by digest
	flight singleflight.Group        // one fetch per digest at a time
}

// Retry is how a device retries a request the server refused for now (429
// Too Many Requests, 503 Service Unavailable).
type Retry struct {
	// Attempts is how many times a request is sent at most (0: 5).
	Attempts int
	// Base is the first delay when the server gives none (0: 1s); each
	// further attempt doubles the delay unless the server asks for a fixed
	// backoff (Margo's backoffStrategy).
	Base time.Duration
	// Max caps one delay (0: 1m).
	Max time.Duration
}

// Stats counts requests and their outcomes; safe for concurrent use.
type Stats struct {
	Requests    atomic.Int64 // sent
	Refused     atomic.Int64 // answered 429
	Unavailable atomic.Int64 // answered 503
	Fetched     atomic.Int64 // deployment documents downloaded
	Cached      atomic.Int64 // deployment documents read from the cache
}

// Budget is the request budget of one WFM client, shared by its simulated
// devices: a token bucket like the server's (rate a second, burst at once),
// of which a quarter of the burst is kept in reserve so that the varying
// delay between sending a request and the server counting it cannot make
// the server see more than its budget. A 429 pauses the whole budget for
// its Retry-After: the server's bucket is empty for every device.
type Budget struct {
	lim *rate.Limiter

	mu        sync.Mutex
	notBefore time.Time
}

// NewBudget returns the budget of a client the server allows perSecond
// requests a second on average and burst at once (its -device-rate and
// -device-burst).
func NewBudget(perSecond float64, burst int) *Budget {
	return &Budget{lim: rate.NewLimiter(rate.Limit(perSecond), max(1, burst-burst/4))}
}

// take waits until the budget allows one request.
func (b *Budget) take(ctx context.Context, now func() time.Time, sleep func(context.Context, time.Duration) error) error {
	for {
		b.mu.Lock()
		nb := b.notBefore
		b.mu.Unlock()
		t := now()
		if !t.Before(nb) {
			break
		}
		if err := sleep(ctx, nb.Sub(t)); err != nil {
			return err
		}
	}
	t := now()
	r := b.lim.ReserveN(t, 1)
	if !r.OK() {
		return errors.New("devicesim: the request budget allows no request")
	}
	if d := r.DelayFrom(t); d > 0 {
		if err := sleep(ctx, d); err != nil {
			r.CancelAt(now())
			return err
		}
	}
	return nil
}

// pause holds every request of the budget until until.
func (b *Budget) pause(until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if until.After(b.notBefore) {
		b.notBefore = until
	}
}

// StatusError is a response the device did not expect.
type StatusError struct {
	Op     string // what the device was doing ("fetch /api/v1/…")
	Status int    // the HTTP status
	Body   string // the start of the answer's body
}

// Error says which request got which answer.
func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: %d %s", e.Op, e.Status, strings.TrimSpace(e.Body))
}

// Retryable reports whether the same request may succeed later: 429, and
// the 5xx answers.
func (e *StatusError) Retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// FailureCode and FailureSource are the code and source of the error a
// simulated failure reports.
const (
	FailureCode   = "SIMULATED"
	FailureSource = "wfm-devicesim"
)

func statusError(op string, res *http.Response, body []byte) error {
	if len(body) > 512 {
		body = body[:512]
	}
	return &StatusError{Op: op, Status: res.StatusCode, Body: string(body)}
}

// Device is one simulated device.
type Device struct {
	ID  string
	cfg *Config

	etag    string
	version uint64
	running map[string]string // deployment id -> digest the device runs
}

// NewDevice returns a simulated device with the given id. The devices of
// one Config must be created before any of them runs (NewDevice fills the
// Config's defaults).
func NewDevice(cfg *Config, id string) *Device {
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(1, 2))
	}
	if cfg.Budget == nil {
		cfg.Budget = NewBudget(ratelimit.DefaultDeviceRate, ratelimit.DefaultDeviceBurst)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Device{ID: id, cfg: cfg, running: map[string]string{}}
}

// do sends one request within the client's budget and reads the answer.
// A 429 or 503 is retried (up to Retry.Attempts sends) after the delay the
// server asks for, which pauses the whole budget; the last answer is
// returned whatever its status.
func (d *Device) do(ctx context.Context, method, path string, body any, header ...string) (*http.Response, []byte, error) {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, nil, err
		}
		payload = b
	}
	c := d.cfg
	attempts := c.Retry.Attempts
	if attempts <= 0 {
		attempts = 5
	}
	for attempt := 0; ; attempt++ {
		if err := c.Budget.take(ctx, c.Now, c.Sleep); err != nil {
			return nil, nil, err
		}
		res, b, err := d.send(ctx, method, path, payload, header)
		if err != nil {
			return nil, nil, err
		}
		switch res.StatusCode {
		case http.StatusTooManyRequests:
			c.Stats.Refused.Add(1)
		case http.StatusServiceUnavailable:
			c.Stats.Unavailable.Add(1)
		default:
			return res, b, nil
		}
		if attempt+1 >= attempts {
			return res, b, nil
		}
		wait := c.Retry.delay(res, b, attempt, c.Now())
		c.Log.Warn("request refused for now; retrying", "device", d.ID, "request", method+" "+path, "status", res.StatusCode, "retryIn", wait)
		c.Budget.pause(c.Now().Add(wait))
	}
}

func (d *Device) send(ctx context.Context, method, path string, payload []byte, header []string) (*http.Response, []byte, error) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(d.cfg.BaseURL, "/")+path, rd)
	if err != nil {
		return nil, nil, err
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if d.cfg.ClientID != "" {
		req.Header.Set("X-WFM-Client-ID", d.cfg.ClientID)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	d.cfg.Stats.Requests.Add(1)
	res, err := d.cfg.HTTP.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	return res, b, err
}

// delay is how long to wait before sending a refused request again: the
// Retry-After header (seconds or an HTTP date), else the problem's
// retryAfterSeconds (Margo), else Base; doubled for every earlier attempt
// unless the problem's backoffStrategy is "fixed"; at most Max. now is the
// device's clock (Config.Now), against which an HTTP date is counted.
func (r Retry) delay(res *http.Response, body []byte, attempt int, now time.Time) time.Duration {
	base, ceiling := r.Base, r.Max
	if base <= 0 {
		base = time.Second
	}
	if ceiling <= 0 {
		ceiling = time.Minute
	}
	var p struct {
		RetryAfterSeconds *float64 `json:"retryAfterSeconds"`
		BackoffStrategy   string   `json:"backoffStrategy"`
	}
	_ = json.Unmarshal(body, &p) // not a problem: no advice in the body
	wait := base
	if h := res.Header.Get("Retry-After"); h != "" {
		if secs, err := strconv.Atoi(h); err == nil && secs >= 0 {
			wait = time.Duration(secs) * time.Second
		} else if at, err := http.ParseTime(h); err == nil {
			wait = at.Sub(now)
		}
	} else if p.RetryAfterSeconds != nil && *p.RetryAfterSeconds >= 0 {
		wait = time.Duration(*p.RetryAfterSeconds * float64(time.Second))
	}
	wait = max(wait, base/10) // Retry-After: 0 must not become a busy loop
	if p.BackoffStrategy != "fixed" {
		for range min(attempt, 16) {
			wait *= 2
		}
	}
	return min(wait, ceiling)
}

// Register reports the device's capabilities.
func (d *Device) Register(ctx context.Context) error {
	caps := map[string]any{"properties": map[string]any{
		"id": d.ID, "vendor": "wfm-devicesim", "modelNumber": "sim-1", "serialNumber": "SIM-" + d.ID,
		"cpus": []any{map[string]any{"cores": 4, "architecture": "amd64"}}, "memory": "16Gi", "storage": "128Gi",
		"supportedRuntimes": []string{"oci"}, "supportedDeploymentTypes": []string{"helm", "compose"},
	}, "labels": map[string]any{"simulated": "true"}}
	res, b, err := d.do(ctx, http.MethodPut, "/api/v1/capabilities/"+d.ID, caps)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusCreated {
		return statusError("register "+d.ID, res, b)
	}
	return nil
}

type manifest struct {
	ManifestVersion uint64 `json:"manifestVersion"`
	Deployments     []struct {
		DeploymentID string `json:"deploymentId"`
		Digest       string `json:"digest"`
		URL          string `json:"url"`
	} `json:"deployments"`
}

// extension is what wfm tells agents in spec.x-wfm-extensions.
type extension struct {
	Revision  int    `yaml:"revision"`
	Operation string `yaml:"operation"`
	Strategy  string `yaml:"strategy"`
	Drain     *struct {
		Required  bool   `yaml:"required"`
		Timeout   string `yaml:"timeout"`
		OnTimeout string `yaml:"onTimeout"`
	} `yaml:"drain"`
}

type deploymentDoc struct {
	ID       string `yaml:"id"`
	Metadata struct {
		DeviceID string `yaml:"deviceId"`
	} `yaml:"metadata"`
	Spec struct {
		DeploymentProfile struct {
			Components []struct {
				Name string `yaml:"name"`
			} `yaml:"components"`
		} `yaml:"deploymentProfile"`
		Ext *extension `yaml:"x-wfm-extensions"`
	} `yaml:"spec"`
}

// Sync polls the manifest once and applies what changed for this device.
// It returns whether the manifest changed. The manifest is adopted (its ETag
// sent as If-None-Match from then on) only once every document it lists
// was fetched, verified and applied: after any failure, the next Sync reads
// the same manifest again and carries on where this one stopped.
func (d *Device) Sync(ctx context.Context) (bool, error) {
	var hdr []string
	if d.etag != "" {
		hdr = []string{"If-None-Match", d.etag}
	}
	res, body, err := d.do(ctx, http.MethodGet, "/api/v1/deployments", nil, hdr...)
	if err != nil {
		return false, err
	}
	switch res.StatusCode {
	case http.StatusNotModified:
		return false, nil
	case http.StatusOK:
	default:
		return false, statusError("manifest", res, body)
	}
	var m manifest
	if err := json.Unmarshal(body, &m); err != nil {
		return false, fmt.Errorf("manifest: %w", err)
	}
	if m.ManifestVersion <= d.version {
		return false, fmt.Errorf("manifest version %d is not newer than %d: refused", m.ManifestVersion, d.version)
	}
	docs := make([]*deploymentDoc, len(m.Deployments))
	for i, ref := range m.Deployments {
		if docs[i], err = d.document(ctx, ref.DeploymentID, ref.URL, ref.Digest); err != nil {
			return true, err
		}
	}
	present := map[string]bool{}
	for i, ref := range m.Deployments {
		doc := docs[i]
		if doc.Metadata.DeviceID != d.ID {
			continue // another device of this client
		}
		present[ref.DeploymentID] = true
		if d.running[ref.DeploymentID] == ref.Digest {
			continue
		}
		if err := d.apply(ctx, *doc, ref.DeploymentID, m.ManifestVersion); err != nil {
			return true, err
		}
		d.running[ref.DeploymentID] = ref.Digest
	}
	for id := range d.running {
		if !present[id] {
			if err := d.report(ctx, id, "removed", nil, nil, m.ManifestVersion); err != nil {
				return true, err
			}
			delete(d.running, id)
		}
	}
	d.etag, d.version = res.Header.Get("ETag"), m.ManifestVersion
	return true, nil
}

// document returns the deployment document at digest: from the cache the
// devices of this Config share, else fetched once (one fetch per digest at
// a time) and verified against digest.
func (d *Device) document(ctx context.Context, id, url, digest string) (*deploymentDoc, error) {
	c := d.cfg
	if doc := c.cached(digest); doc != nil {
		c.Stats.Cached.Add(1)
		return doc, nil
	}
	v, err, _ := c.flight.Do(digest, func() (any, error) {
		if doc := c.cached(digest); doc != nil {
			return doc, nil
		}
		res, yml, err := d.do(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		if res.StatusCode != http.StatusOK {
			return nil, statusError("fetch "+url, res, yml)
		}
		sum := sha256.Sum256(yml)
		if "sha256:"+hex.EncodeToString(sum[:]) != digest {
			return nil, fmt.Errorf("deployment %s: digest mismatch", id)
		}
		doc := &deploymentDoc{}
		if err := yaml.Unmarshal(yml, doc); err != nil {
			return nil, fmt.Errorf("deployment %s: %w", id, err)
		}
		c.Stats.Fetched.Add(1)
		c.remember(digest, doc)
		return doc, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*deploymentDoc), nil
}

// maxCachedDocs bounds the document cache (it is emptied when full).
const maxCachedDocs = 10_000

func (c *Config) cached(digest string) *deploymentDoc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.docs[digest]
}

func (c *Config) remember(digest string, doc *deploymentDoc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.docs == nil || len(c.docs) >= maxCachedDocs {
		c.docs = map[string]*deploymentDoc{}
	}
	c.docs[digest] = doc
}

// apply simulates applying a revision: drain (when asked), install, report.
func (d *Device) apply(ctx context.Context, doc deploymentDoc, id string, version uint64) error {
	var comps []string
	for _, c := range doc.Spec.DeploymentProfile.Components {
		comps = append(comps, c.Name)
	}
	if ext := doc.Spec.Ext; ext != nil && ext.Drain != nil && ext.Drain.Required && d.running[id] != "" {
		inFlight := 3
		if err := d.report(ctx, id, "installing", comps, map[string]any{"phase": "draining", "inFlight": inFlight}, version); err != nil {
			return err
		}
		if d.cfg.NeverDrain {
			d.cfg.Log.Info("draining forever", "device", d.ID, "deployment", id)
			return nil
		}
		if err := d.cfg.Sleep(ctx, d.cfg.DrainTime); err != nil {
			return err
		}
		if err := d.report(ctx, id, "installing", comps, map[string]any{"phase": "drained", "inFlight": 0}, version); err != nil {
			return err
		}
	} else if err := d.report(ctx, id, "installing", comps, nil, version); err != nil {
		return err
	}
	if err := d.cfg.Sleep(ctx, d.cfg.InstallTime); err != nil {
		return err
	}
	d.cfg.mu.Lock()
	fail := d.cfg.Rand.Float64() < d.cfg.FailRate
	d.cfg.mu.Unlock()
	state, problem := "installed", ""
	if fail {
		state = "failed"
		problem = "simulated failure applying the revision"
		if ext := doc.Spec.Ext; ext != nil && ext.Revision > 0 {
			problem = "simulated failure applying revision " + strconv.Itoa(ext.Revision)
		}
	}
	d.cfg.Log.Info("applied", "device", d.ID, "deployment", id, "state", state, "manifestVersion", version)
	return d.reportError(ctx, id, state, comps, nil, version, problem)
}

func (d *Device) report(ctx context.Context, id, state string, comps []string, ext map[string]any, version uint64) error {
	return d.reportError(ctx, id, state, comps, ext, version, "")
}

// reportError reports a state with problem, when not "", as the error of
// the deployment (Margo's status.error; the components carry none).
func (d *Device) reportError(ctx context.Context, id, state string, comps []string, ext map[string]any, version uint64, problem string) error {
	var failure map[string]any
	if problem != "" {
		failure = map[string]any{"code": FailureCode, "source": FailureSource, "message": problem}
	}
	cs := make([]map[string]any, 0, len(comps))
	for _, c := range comps {
		cs = append(cs, map[string]any{"name": c, "state": state})
	}
	status := map[string]any{"state": state}
	if failure != nil {
		status["error"] = failure
	}
	body := map[string]any{"deploymentId": id, "deviceId": d.ID, "adoptedManifestVersion": version,
		"status": status, "components": cs}
	if ext != nil {
		body["x-wfm-extensions"] = ext
	}
	res, b, err := d.do(ctx, http.MethodPost, "/api/v1/deployments/"+id+"/status", body)
	if err != nil {
		return err
	}
	if res.StatusCode >= 300 {
		return statusError("report "+id+" "+state, res, b)
	}
	return nil
}

// Run registers the device and syncs it every Poll until ctx ends. A
// registration the server refuses for now (429, 5xx) or that does not reach
// it is tried again every Poll; any other refusal ends Run.
func (d *Device) Run(ctx context.Context) error {
	t := time.NewTicker(d.cfg.Poll)
	defer t.Stop()
	for {
		err := d.Register(ctx)
		if err == nil {
			if d.cfg.Registered != nil {
				d.cfg.Registered(d.ID)
			}
			break
		}
		var se *StatusError
		if errors.As(err, &se) && !se.Retryable() {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		d.cfg.Log.Warn("register failed; retrying", "device", d.ID, "error", err)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	for {
		if _, err := d.Sync(ctx); err != nil && ctx.Err() == nil {
			d.cfg.Log.Warn("sync failed", "device", d.ID, "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
