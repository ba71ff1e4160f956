package devicesim_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/devicesim"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/internal/ratelimit"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Sleep returns at once, the clock d later: time passes only while someone
// waits. With one sleeper at a time that is exactly how far the wait asked.
func (c *clock) Sleep(_ context.Context, d time.Duration) error {
	if d > 0 {
		c.Advance(d)
	}
	return nil
}

// counter records, on the server side, what the device API answered.
type counter struct {
	mu        sync.Mutex
	refused   int            // 429 answers
	documents map[string]int // GETs of a deployment document, by path (which holds its digest)
}

func (c *counter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		c.mu.Lock()
		defer c.mu.Unlock()
		if rec.status == http.StatusTooManyRequests {
			c.refused++
		}
		if r.Method == http.MethodGet && strings.Count(r.URL.Path, "/") == 5 && strings.HasPrefix(r.URL.Path, "/api/v1/deployments/") {
			c.documents[r.URL.Path]++
		}
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// simEnv is the real device API (router, middleware, rate limiter) on a
// fresh database, in the development header mode.
type simEnv struct {
	cat   *catalog.Service
	fleet *fleet.Service
	sched *fleet.Scheduler
	url   string
	count *counter
}

func newSimEnv(t *testing.T, limiter *ratelimit.Limiter) *simEnv {
	t.Helper()
	pool := pgtest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	fl := fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log)
	acc := access.NewService(postgres.NewAccessStore(pool), time.Now)
	h, err := httpapi.NewHandler(httpapi.Config{Logger: log, Ready: func(context.Context) error { return nil }, Registry: prometheus.NewRegistry(),
		Catalog: cat, Fleet: fl, Access: acc, DeviceIdentity: identity.HeaderIdentity{}.ClientIDFromRequest, DeviceLimiter: limiter})
	require.NoError(t, err)
	_, device := httpapi.Split(h)
	c := &counter{documents: map[string]int{}}
	srv := httptest.NewServer(c.wrap(device))
	t.Cleanup(srv.Close)
	return &simEnv{cat: cat, fleet: fl, sched: fleet.NewScheduler(fl, time.Hour), url: srv.URL, count: c}
}

func (e *simEnv) publish(t *testing.T, app, version string) {
	t.Helper()
	d := strings.Replace(string(describe(version, "")), "id: sim\n", "id: "+app+"\n", 1)
	_, _, err := e.cat.Add(t.Context(), []byte(d), catalog.MediaYAML)
	require.NoError(t, err)
}

// TestA429WhileFetchingDoesNotStallTheDevice: the real rate limiter refuses
// the document fetch after the manifest poll passed. The device retries
// after the Retry-After the server gives (doubling it), pausing its client's
// budget; when the refusals last beyond its retries, the next poll reads
// the manifest again (it was not adopted) and the device converges. Before,
// the device adopted the manifest's ETag first, so every later poll was a
// 304 and it never installed.
func TestA429WhileFetchingDoesNotStallTheDevice(t *testing.T) {
	ctx := t.Context()
	clk := &clock{t: time.Now()}
	lim := ratelimit.New(ratelimit.DefaultDeviceRate, ratelimit.DefaultDeviceBurst, 100, clk.Now)
	e := newSimEnv(t, lim)
	e.publish(t, "sim", "1.0.0")

	// While the device waits, the rest of its client uses up the budget.
	var mu sync.Mutex
	busy := true
	var slept []time.Duration
	drain := func() {
		for {
			if ok, _ := lim.Allow("plant"); !ok {
				return
			}
		}
	}
	cfg := &devicesim.Config{BaseURL: e.url, HTTP: http.DefaultClient, ClientID: "plant", Poll: time.Hour, Now: clk.Now,
		Retry: devicesim.Retry{Attempts: 3},
		Sleep: func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			slept = append(slept, d)
			clk.Advance(d)
			if busy {
				drain()
			}
			return nil
		}}
	dev := devicesim.NewDevice(cfg, "edge-1")
	require.NoError(t, dev.Register(ctx))
	dep, err := e.fleet.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "sim", Version: "1.0.0", ClientID: "plant", DeviceID: "edge-1"})
	require.NoError(t, err)

	drain()
	clk.Advance(50 * time.Millisecond) // one request: the manifest poll
	_, err = dev.Sync(ctx)
	var se *devicesim.StatusError
	require.True(t, errors.As(err, &se), "the fetch fails for now: %v", err)
	assert.Equal(t, http.StatusTooManyRequests, se.Status)
	assert.Equal(t, int64(3), cfg.Stats.Refused.Load(), "sent three times")
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second}, slept, "Retry-After 1 s, then doubled")

	mu.Lock()
	busy = false
	mu.Unlock()
	clk.Advance(10 * time.Second)
	changed, err := dev.Sync(ctx)
	require.NoError(t, err)
	assert.True(t, changed, "the manifest was read again, not answered 304")
	got, err := e.fleet.Deployment(ctx, dep.ID)
	require.NoError(t, err)
	assert.Equal(t, lifecycle.StateInstalled, got.State)
	changed, err = dev.Sync(ctx)
	require.NoError(t, err)
	assert.False(t, changed, "adopted now: 304")
}

// TestTenDevicesOfOneClientStayWithinTheDefaultRateLimit is the README's
// demo at the server's default device rate limit: 10 devices of one client
// with 3 deployments each install them and follow two upgrades of all 30
// without a single 429, and every deployment document is fetched once per
// digest for all the devices.
//
// The server's limiter and the devices share one simulated clock whose
// Sleep moves it on, so no wall time passes and the result does not depend
// on the machine's speed: each request reaches the limiter at the time the
// client's budget planned it. The devices take turns (each runs its step,
// then the next): concurrent sleepers would each move the shared clock by
// their whole wait, making time run faster than the budget planned and the
// limiter lenient, so the test could no longer fail.
func TestTenDevicesOfOneClientStayWithinTheDefaultRateLimit(t *testing.T) {
	ctx := t.Context()
	start := time.Now()
	clk := &clock{t: start}
	lim := ratelimit.New(ratelimit.DefaultDeviceRate, ratelimit.DefaultDeviceBurst, 100, clk.Now)
	e := newSimEnv(t, lim)
	apps := []string{"sim-a", "sim-b", "sim-c"}
	for _, app := range apps {
		for _, v := range []string{"1.0.0", "2.0.0", "3.0.0"} {
			e.publish(t, app, v)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := &devicesim.Config{BaseURL: e.url, HTTP: http.DefaultClient, ClientID: "plant", Poll: time.Hour, Log: log,
		Now: clk.Now, Sleep: clk.Sleep}
	devs := make([]*devicesim.Device, 10)
	for i := range devs {
		devs[i] = devicesim.NewDevice(cfg, fmt.Sprintf("edge-%d", i+1))
	}
	all := func(f func(d *devicesim.Device) error) {
		t.Helper()
		errs := make([]error, len(devs))
		for i, d := range devs {
			errs[i] = f(d)
		}
		require.NoError(t, errors.Join(errs...))
	}
	all(func(d *devicesim.Device) error { return d.Register(ctx) })
	var ids []string
	for _, d := range devs {
		for _, app := range apps {
			dep, err := e.fleet.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: app, Version: "1.0.0", ClientID: "plant", DeviceID: d.ID})
			require.NoError(t, err)
			ids = append(ids, dep.ID)
		}
	}
	converge := func(version string) {
		t.Helper()
		for round := 0; round < 10; round++ {
			all(func(d *devicesim.Device) error { _, err := d.Sync(ctx); return err })
			_, err := e.sched.RunOnce(ctx)
			require.NoError(t, err)
			done := true
			for _, id := range ids {
				dep, err := e.fleet.Deployment(ctx, id)
				require.NoError(t, err)
				done = done && dep.State == lifecycle.StateInstalled && dep.Version.String() == version
			}
			if done {
				return
			}
		}
		t.Fatalf("the devices did not converge on %s", version)
	}
	converge("1.0.0")
	for _, version := range []string{"2.0.0", "3.0.0"} { // two manifest changes
		for _, id := range ids {
			_, _, err := e.fleet.Upgrade(ctx, id, fleet.UpgradeRequest{TargetVersion: version}, fleet.Actor{ID: "test"}, false, fleet.Precondition{})
			require.NoError(t, err)
		}
		_, err := e.sched.RunOnce(ctx) // publishes the upgrades
		require.NoError(t, err)
		converge(version)
	}

	e.count.mu.Lock()
	defer e.count.mu.Unlock()
	assert.Zero(t, e.count.refused, "429 answers")
	assert.Zero(t, cfg.Stats.Refused.Load(), "429 answers the devices saw")
	assert.Len(t, e.count.documents, 90, "one document per deployment and version")
	for path, n := range e.count.documents {
		assert.Equal(t, 1, n, "%s fetched %d times", path, n)
	}
	assert.Equal(t, int64(90), cfg.Stats.Fetched.Load())
	assert.Greater(t, clk.Now().Sub(start), 5*time.Second, "the budget paced the devices (simulated time)")
}
