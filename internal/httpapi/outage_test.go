package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm"
	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/pglaunch"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/internal/sampling"
)

// lockedBuffer is a log destination that concurrent handlers may share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ownPostgres starts a PostgreSQL server of the test's own (one it may
// stop), with wfm's schema.
func ownPostgres(t *testing.T) (*pglaunch.Server, pglaunch.Options) {
	t.Helper()
	bin, err := pglaunch.FindBinaries(os.Getenv)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	opts := pglaunch.Options{BinDir: bin, DataDir: filepath.Join(dir, "pg"),
		Settings: map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}}
	pg, err := pglaunch.Start(t.Context(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })
	opts.Port = pg.Port() // a restart comes back where the pool looks
	return pg, opts
}

// contractValidator checks responses against openapi.yaml.
func contractValidator(t *testing.T) func(req *http.Request, res *http.Response, body []byte) {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	return func(req *http.Request, res *http.Response, body []byte) {
		t.Helper()
		route, params, err := router.FindRoute(req)
		require.NoError(t, err)
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
			Status:                 res.StatusCode, Header: res.Header,
			Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
		}
		in.SetBodyBytes(body)
		assert.NoError(t, openapi3filter.ValidateResponse(context.Background(), in), "%s %s → %d: %s", req.Method, req.URL.Path, res.StatusCode, body)
	}
}

// TestDatabaseOutageAnswers503: with the database stopped, management and
// device calls get a 503 problem with Retry-After and retryable (the device
// API with Margo's retry members, as the contract declares); the device
// poll still answers from memory, and /readyz says degraded; the failures
// are logged at WARN, a bounded number of times; once the database is back,
// calls succeed.
func TestDatabaseOutageAnswers503(t *testing.T) {
	pg, opts := ownPostgres(t)
	ctx := t.Context()
	pool, err := postgres.Open(ctx, pg.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, postgres.Migrate(ctx, pool))
	logs := &lockedBuffer{}
	outage := newOutageLog()
	e := newEnv(t, envOptions{policy: fleet.Policy{AcceptAll: true}, pool: pool,
		ready:     func(ctx context.Context) error { return postgres.Check(ctx, pool) },
		log:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		outageLog: outage.sampler})
	ops := &opsEnv{fleetEnv: e, url: e.mgmtURL, pool: pool}
	ops.publish(t, "1.0.0", "")
	dev := e.client(t, "plant")
	res, body := dev.do("PUT", "/api/v1/capabilities/edge", capabilities("edge", "compose"))
	require.Equal(t, http.StatusCreated, res.StatusCode, string(body))
	d := e.deploy(t, "plant", "edge", "svc", "1.0.0")
	m, etag := dev.manifest()
	require.Len(t, m.Deployments, 1)
	yamlURL := m.Deployments[0].URL
	check := contractValidator(t)

	require.NoError(t, pg.Stop())

	for range 20 { // many calls, a bounded number of log lines
		res := rawCall(t, "GET", e.mgmtURL+"/mgmt/v1/applications", "", "")
		res.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/mgmt/v1/deployments/" + d.Id.String(), ""},
		{"POST", "/mgmt/v1/tokens", `{"name":"ci","role":"viewer"}`},
	} {
		res := rawCall(t, c.method, e.mgmtURL+c.path, "application/json", c.body)
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, string(raw))
		assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
		secs, err := strconv.Atoi(res.Header.Get("Retry-After"))
		assert.NoError(t, err, "Retry-After %q", res.Header.Get("Retry-After"))
		assert.Positive(t, secs)
		var p map[string]any
		require.NoError(t, json.Unmarshal(raw, &p))
		assert.Equal(t, httpapi.ProblemBase+"unavailable", p["type"])
		assert.Equal(t, true, p["retryable"])
		assert.EqualValues(t, secs, p["retryAfterSeconds"])
		assert.NotContains(t, string(raw), "connect", "no internals")
	}

	// The device API: a call that needs the database gets Margo's members.
	req, err := http.NewRequestWithContext(ctx, "GET", e.deviceURL+yamlURL, nil)
	require.NoError(t, err)
	res, err = dev.http.Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, string(raw))
	check(req, res, raw)
	var p map[string]any
	require.NoError(t, json.Unmarshal(raw, &p))
	assert.Equal(t, true, p["retryable"])
	assert.EqualValues(t, 5, p["retryAfterSeconds"])
	assert.Equal(t, "exponential", p["backoffStrategy"])
	assert.Equal(t, "5", res.Header.Get("Retry-After"))
	// The poll answers from memory.
	res, _ = dev.do("GET", "/api/v1/deployments", nil, "If-None-Match", etag)
	assert.Equal(t, http.StatusNotModified, res.StatusCode)

	// No listener has noticed the outage: the cache is current, and the
	// replica stays in its load balancer.
	assert.Equal(t, "degraded", readyz(t, e.mgmtURL, http.StatusOK, check)["status"])

	out := logs.String()
	assert.NotContains(t, out, "level=ERROR", "an outage is not an internal error")
	const answered = "database unavailable: answered 503 (unavailable)"
	assert.Equal(t, 1, strings.Count(out, `level=WARN msg="database unavailable: answered 503"`+" method=GET path=/mgmt/v1/applications"),
		"the first 503 of the interval is logged: %s", out)
	// When the interval ends, the count of the rest is reported, down to
	// the outage's last request.
	outage.clock.advance(10 * time.Second)
	require.NoError(t, outage.sampler.Flush(ctx, false))
	assert.Equal(t, map[string]int{answered: 20 + 2 + 1 - 1}, outage.flushed(), "every other 503 counted")

	// The database comes back: calls succeed again.
	pg2, err := pglaunch.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg2.Stop() })
	res = rawCall(t, "GET", e.mgmtURL+"/mgmt/v1/applications", "", "")
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	res, body = dev.do("GET", yamlURL, nil)
	assert.Equal(t, http.StatusOK, res.StatusCode, string(body))
	assert.Equal(t, "ready", readyz(t, e.mgmtURL, http.StatusOK, check)["status"])
}

// readyz calls /readyz, checks its status and the answer's contract, and
// returns its body.
func readyz(t *testing.T, mgmtURL string, status int, check func(*http.Request, *http.Response, []byte)) map[string]any {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", mgmtURL+"/readyz", nil)
	require.NoError(t, err)
	res, err := adminHTTP.Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, status, res.StatusCode, string(raw))
	check(req, res, raw)
	var body map[string]any
	require.NoError(t, json.Unmarshal(raw, &body))
	return body
}

// TestCachedPollsDuringOutage: a server whose change listener runs, as
// wfm's does, keeps answering cached polls (304 and 200) while its database
// is stopped, and /readyz says degraded (200, so a load balancer keeps it);
// once the staleness bound has passed since the listener lost its
// connection, polls answer 503 unavailable with Margo's retry members and
// /readyz 503; when the database is back the cache is checked, not
// emptied: the unchanged client's poll is a hit again.
func TestCachedPollsDuringOutage(t *testing.T) {
	pg, opts := ownPostgres(t)
	ctx := t.Context()
	pool, err := postgres.Open(ctx, pg.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, postgres.Migrate(ctx, pool))
	clock := &fakeClock{t: time.Now()}
	e := newEnv(t, envOptions{policy: fleet.Policy{AcceptAll: true}, pool: pool, now: clock.now,
		ready: func(ctx context.Context) error { return postgres.Check(ctx, pool) }})
	lost, ready, marked := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	notify := func(payload string) {
		e.fleet.Invalidate(payload)
		if payload == "test-marker" {
			marked <- struct{}{}
		}
	}
	l := &postgres.Listener{Pool: pool, Channel: postgres.NotifyChannel, Notify: notify, Ready: ready, Now: clock.now,
		Lost:      func(since time.Time) { e.fleet.ManifestCacheLost(since); lost <- struct{}{} },
		Listening: func(ctx context.Context) error { _, _, err := e.fleet.ResyncManifestCache(ctx); return err },
		Log:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		After:     func(time.Duration) <-chan time.Time { return time.After(20 * time.Millisecond) }}
	lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(lctx) }()
	t.Cleanup(func() { stop(); <-done })
	wait := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(30 * time.Second):
			t.Fatal(what)
		}
	}
	wait(ready, "the listener did not start")

	ops := &opsEnv{fleetEnv: e, url: e.mgmtURL, pool: pool}
	ops.publish(t, "1.0.0", "")
	dev := e.client(t, "plant")
	res, body := dev.do("PUT", "/api/v1/capabilities/edge", capabilities("edge", "compose"))
	require.Equal(t, http.StatusCreated, res.StatusCode, string(body))
	e.deploy(t, "plant", "edge", "svc", "1.0.0")
	// Notifications arrive in order: once the marker sent after the
	// deployment is handled, so is the deployment's own, which would
	// otherwise drop the entry cached below if it came late.
	_, err = pool.Exec(ctx, "SELECT pg_notify($1, 'test-marker')", postgres.NotifyChannel)
	require.NoError(t, err)
	wait(marked, "the marker notification did not arrive")
	_, etag := dev.manifest()
	check := contractValidator(t)

	require.NoError(t, pg.Stop())
	wait(lost, "the listener did not notice the outage")
	clock.advance(fleet.DefaultManifestStaleBound - time.Second)
	res, _ = dev.do("GET", "/api/v1/deployments", nil, "If-None-Match", etag)
	assert.Equal(t, http.StatusNotModified, res.StatusCode, "a cached poll is answered from memory")
	res, body = dev.do("GET", "/api/v1/deployments", nil)
	assert.Equal(t, http.StatusOK, res.StatusCode, string(body))
	assert.Equal(t, etag, res.Header.Get("ETag"))
	r := readyz(t, e.mgmtURL, http.StatusOK, check)
	assert.Equal(t, "degraded", r["status"])
	assert.Contains(t, r["detail"], "answered from memory until")

	clock.advance(time.Second) // the bound has passed
	// Checked against wfm's contract: rc.3 declares no 503 (erratum B20).
	req, err := http.NewRequestWithContext(ctx, "GET", e.deviceURL+"/api/v1/deployments", nil)
	require.NoError(t, err)
	req.Header.Set("If-None-Match", etag)
	res, err = dev.http.Do(req)
	require.NoError(t, err)
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, string(body))
	check(req, res, body)
	var p map[string]any
	require.NoError(t, json.Unmarshal(body, &p))
	assert.Equal(t, httpapi.ProblemBase+"unavailable", p["type"])
	assert.Equal(t, true, p["retryable"])
	assert.Equal(t, "exponential", p["backoffStrategy"])
	assert.Equal(t, "5", res.Header.Get("Retry-After"))
	assert.Equal(t, httpapi.ProblemBase+"not-ready", readyz(t, e.mgmtURL, http.StatusServiceUnavailable, check)["type"])

	// The database comes back: the listener checks the cache, which keeps
	// the unchanged manifest.
	pg2, err := pglaunch.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg2.Stop() })
	wait(ready, "the listener did not listen again")
	hits, misses := e.fleet.ManifestCacheStats()
	res, _ = dev.do("GET", "/api/v1/deployments", nil, "If-None-Match", etag)
	assert.Equal(t, http.StatusNotModified, res.StatusCode)
	hits2, misses2 := e.fleet.ManifestCacheStats()
	assert.Equal(t, [2]uint64{hits + 1, misses}, [2]uint64{hits2, misses2}, "a hit: the cache was checked, not emptied")
	assert.Equal(t, "ready", readyz(t, e.mgmtURL, http.StatusOK, check)["status"])
}

// TestEveryOperationDeclaresRetryAnswers: every management operation may
// answer 429 (rate limit) and 503 (database unavailable), every device
// operation both too, each with its API's shared response that requires Retry-After.
func TestEveryOperationDeclaresRetryAnswers(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	n := 0
	for path, item := range doc.Paths.Map() {
		mgmt, device := strings.HasPrefix(path, "/mgmt/"), strings.HasPrefix(path, "/api/v1/")
		for method, op := range item.Operations() {
			want := map[string]string{}
			switch {
			case mgmt:
				want["503"] = "#/components/responses/ServiceUnavailable"
				want["429"] = "#/components/responses/TooManyRequests"
				n++
			case device:
				want["503"] = "#/components/responses/DeviceServiceUnavailable"
				want["429"] = "#/components/responses/DeviceTooManyRequests"
				n++
			}
			for status, ref := range want {
				r := op.Responses.Value(status)
				if assert.NotNil(t, r, "%s %s declares no %s", method, path, status) {
					assert.Equal(t, ref, r.Ref, "%s %s %s", method, path, status)
					assert.True(t, r.Value.Headers["Retry-After"].Value.Required, "%s %s %s: Retry-After", method, path, status)
				}
			}
		}
	}
	assert.GreaterOrEqual(t, n, 41)
}

// outageLog is an outage log sampler under a fake clock (one line per kind
// and 10 s, as cmd/wfm sets it) that collects the counts it reports.
type outageLog struct {
	clock   *fakeClock
	sampler *sampling.Sampler[string]
	mu      sync.Mutex
	counts  map[string]int
}

func newOutageLog() *outageLog {
	o := &outageLog{clock: &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}, counts: map[string]int{}}
	o.sampler = sampling.New(sampling.Config[string]{First: 1, Interval: 10 * time.Second, MaxKeys: 100, Now: o.clock.now,
		Flush: func(_ context.Context, key string, n int, _, _ time.Time) error {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.counts[key] += n
			return nil
		}})
	return o
}

func (o *outageLog) flushed() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.counts)
}

// stopAfterReserve is the real idempotency store; once armed, it stops
// PostgreSQL right after a key is reserved, so that the database drops in
// the middle of the request.
type stopAfterReserve struct {
	*postgres.AccessStore
	mu   sync.Mutex
	stop func() error
}

func (s *stopAfterReserve) ReserveIdempotent(ctx context.Context, actor, key, hash string, now time.Time) (access.IdempotentResponse, bool, error) {
	prev, reserved, err := s.AccessStore.ReserveIdempotent(ctx, actor, key, hash, now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if reserved && s.stop != nil {
		if serr := s.stop(); serr != nil {
			return prev, reserved, serr
		}
		s.stop = nil
	}
	return prev, reserved, err
}

// TestIdempotencyKeyFreedAfterOutage: the database drops after a request
// reserved its Idempotency-Key; the request answers 503 and the key cannot
// be released then (WARN, sampled, no ERROR). A retry with the same key once
// the database is back runs, instead of being told for 5 minutes that the
// first request is still running.
func TestIdempotencyKeyFreedAfterOutage(t *testing.T) {
	pg, opts := ownPostgres(t)
	ctx := t.Context()
	pool, err := postgres.Open(ctx, pg.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, postgres.Migrate(ctx, pool))
	logs := &lockedBuffer{}
	outage := newOutageLog()
	var store *stopAfterReserve
	e := newEnv(t, envOptions{policy: fleet.Policy{AcceptAll: true}, pool: pool,
		ready:     func(ctx context.Context) error { return postgres.Check(ctx, pool) },
		log:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		outageLog: outage.sampler,
		idem: func(s *postgres.AccessStore) httpapi.IdempotencyStore {
			store = &stopAfterReserve{AccessStore: s}
			return store
		}})
	accept := func() (int, string) {
		res := rawCall(t, "POST", e.mgmtURL+"/mgmt/v1/clients", "application/json", `{"id":"plant-9"}`, "Idempotency-Key", "k-1")
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode, string(raw)
	}

	store.mu.Lock()
	store.stop = pg.Stop
	store.mu.Unlock()
	status, body := accept()
	require.Equal(t, http.StatusServiceUnavailable, status, body)

	pg2, err := pglaunch.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg2.Stop() })

	status, body = accept()
	assert.Equal(t, http.StatusCreated, status, "the retry runs: %s", body)
	status, body = accept()
	assert.Equal(t, http.StatusCreated, status, "and is remembered: %s", body)

	out := logs.String()
	assert.NotContains(t, out, "level=ERROR", "an outage is not an internal error: %s", out)
	assert.Equal(t, 1, strings.Count(out, `level=WARN msg="database unavailable: idempotency key not released"`), out)
}
