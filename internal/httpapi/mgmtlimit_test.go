package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/internal/ratelimit"
	"github.com/wfm-dev/wfm/internal/sampling"
	"github.com/wfm-dev/wfm/sdk"
)

// fakeClock is a settable clock shared by the limiter and the audit
// aggregation of a test server.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// limitedEnv is a test server with the management rate limit and the
// audit aggregation on, under a fake clock.
type limitedEnv struct {
	url      string
	pool     *pgxpool.Pool
	clock    *fakeClock
	refusals *access.Refusals
	logs     *syncBuffer
	admin    *sdk.ClientWithResponses
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newLimitedEnv serves the real handler with a management limit of rate
// per second and burst (rate 0: no limit), refusal audit entries beyond 5
// per kind and minute aggregated, refusal log lines beyond 3 per caller and
// minute counted, and the given trusted proxies.
func newLimitedEnv(t *testing.T, rate float64, burst int, trusted ...string) *limitedEnv {
	t.Helper()
	return newLimitedEnvWith(t, limitedOptions{rate: rate, burst: burst, trusted: trusted})
}

// limitedOptions are the settings of newLimitedEnvWith.
type limitedOptions struct {
	rate      float64
	burst     int
	trusted   []string
	forwarded string // the forwarding header read; "": X-Forwarded-For
	// anonymousMax bounds the individual anonymous refusal entries per
	// interval; 0: the default.
	anonymousMax int
	// store, if not nil, wraps the access store (to count its calls).
	store func(*postgres.AccessStore) access.Store
}

// newLimitedEnvWith is newLimitedEnv with every setting.
func newLimitedEnvWith(t *testing.T, o limitedOptions) *limitedEnv {
	t.Helper()
	rate, burst, trusted := o.rate, o.burst, o.trusted
	pool := pgtest.New(t)
	e := &limitedEnv{pool: pool, clock: &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}, logs: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(e.logs, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	var store access.Store = postgres.NewAccessStore(pool)
	if o.store != nil {
		store = o.store(postgres.NewAccessStore(pool))
	}
	acc := access.NewService(store, e.clock.now)
	_, err := acc.Bootstrap(t.Context(), adminToken)
	require.NoError(t, err)
	e.refusals = access.NewRefusals(acc, access.RefusalsConfig{First: 5, Interval: time.Minute, AnonymousMax: o.anonymousMax})
	cfg := httpapi.Config{
		Logger:          log,
		Ready:           func(context.Context) error { return nil },
		Registry:        prometheus.NewRegistry(),
		Catalog:         cat,
		Fleet:           fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log),
		Access:          acc,
		DeviceIdentity:  identity.HeaderIdentity{}.ClientIDFromRequest,
		Refusals:        e.refusals,
		ForwardedHeader: o.forwarded,
		LogSampler: sampling.New(sampling.Config[string]{First: 3, Interval: time.Minute, MaxKeys: 100, Now: e.clock.now,
			Flush: func(context.Context, string, int, time.Time, time.Time) error { return nil }}),
	}
	if rate > 0 {
		cfg.MgmtLimiter = ratelimit.New(rate, burst, 1000, e.clock.now)
	}
	for _, p := range trusted {
		cfg.TrustedProxies = append(cfg.TrustedProxies, netip.MustParsePrefix(p))
	}
	h, err := httpapi.NewHandler(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	e.admin = clientAs(t, srv.URL, adminToken)
	return e
}

// token creates a token of role and returns its id and secret.
func (e *limitedEnv) token(t *testing.T, role string) (string, string) {
	t.Helper()
	res, err := e.admin.CreateTokenWithResponse(t.Context(), sdk.CreateTokenRequest{Name: role, Role: sdk.Role(role)})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res.JSON201.Token.Id, res.JSON201.Secret
}

// call POSTs an application description with the given headers and
// returns the answer's status and Retry-After.
func (e *limitedEnv) call(t *testing.T, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+"/mgmt/v1/applications", strings.NewReader("a: b\n"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/yaml")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, res.Header.Get("Retry-After")
}

type refusalRow struct {
	status int
	detail map[string]any
}

// auditOf reads every audit entry of actor (newest first).
func (e *limitedEnv) auditOf(t *testing.T, actor string) []refusalRow {
	t.Helper()
	var rows []refusalRow
	var cursor *string
	for {
		res, err := e.admin.ListAuditWithResponse(t.Context(), &sdk.ListAuditParams{Actor: &actor, Limit: ptrTo(100), Cursor: cursor})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		for _, it := range res.JSON200.Items {
			var d map[string]any
			if it.Detail != nil {
				require.NoError(t, json.Unmarshal(*it.Detail, &d))
			}
			rows = append(rows, refusalRow{status: it.Status, detail: d})
		}
		if res.JSON200.NextCursor == nil {
			return rows
		}
		cursor = res.JSON200.NextCursor
	}
}

// counted sums the refusals the audit rows of status account for: one per
// individual entry, count per aggregate entry.
func counted(rows []refusalRow, status int) (individual, aggregates, total int) {
	for _, r := range rows {
		if r.status != status {
			continue
		}
		if r.detail["aggregate"] == true {
			aggregates++
			total += int(r.detail["count"].(float64))
		} else {
			individual++
			total++
		}
	}
	return individual, aggregates, total
}

// TestViewerFloodIsLimitedAndAggregated is the probe's viewer who made
// 3,278 refused calls in 5 s, each an audit row: past the burst the
// viewer gets 429 with Retry-After, and the audit log holds a bounded number
// of rows that still account for every refusal.
func TestViewerFloodIsLimitedAndAggregated(t *testing.T) {
	e := newLimitedEnv(t, 10, 20)
	id, secret := e.token(t, "viewer")
	auth := map[string]string{"Authorization": "Bearer " + secret}
	const n = 300
	statuses := map[int]int{}
	for i := range n {
		status, retryAfter := e.call(t, auth)
		statuses[status]++
		if status == http.StatusTooManyRequests {
			s, err := strconv.Atoi(retryAfter)
			require.NoError(t, err, "429 #%d carries Retry-After", i)
			assert.GreaterOrEqual(t, s, 1)
		}
	}
	// Buckets are per token: the admin's calls did not use the viewer's.
	assert.Equal(t, map[int]int{http.StatusForbidden: 20, http.StatusTooManyRequests: n - 20}, statuses,
		"the burst is refused by role, the rest by rate")

	// The 429 answer is a problem with the retry members.
	req, _ := http.NewRequest(http.MethodGet, e.url+"/mgmt/v1/applications", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	p := readProblem(t, res, http.StatusTooManyRequests)
	assert.Equal(t, httpapi.ProblemBase+"too-many-requests", p.Type)
	statuses[http.StatusTooManyRequests]++

	require.NoError(t, e.refusals.Flush(t.Context()), "nothing ended yet")
	e.clock.advance(61 * time.Second)
	require.NoError(t, e.refusals.Flush(t.Context()))

	rows := e.auditOf(t, id)
	ind403, agg403, total403 := counted(rows, http.StatusForbidden)
	ind429, agg429, total429 := counted(rows, http.StatusTooManyRequests)
	assert.Equal(t, 5, ind403, "the first 403s of the interval have their own entry")
	assert.Equal(t, 1, agg403, "one aggregate entry for the other 403s")
	assert.Equal(t, 20, total403)
	assert.Equal(t, 5+1, ind429, "the first 429s of each operation have their own entry (the read is another kind)")
	assert.Equal(t, 1, agg429)
	assert.Equal(t, statuses[http.StatusTooManyRequests], total429, "every 429 is accounted for")
	assert.LessOrEqual(t, len(rows), 20, "the audit log grew by a bounded number of rows, not %d", n)
	for _, r := range rows {
		if r.detail["aggregate"] == true {
			assert.NotEmpty(t, r.detail["intervalStart"])
			assert.NotEmpty(t, r.detail["intervalEnd"])
			assert.Contains(t, []any{"forbidden", "too-many-requests"}, r.detail["problemType"])
		}
	}
	// Aggregates carry the operation: the action filter finds them.
	res2, err := e.admin.ListAuditWithResponse(t.Context(), &sdk.ListAuditParams{Actor: &id, Action: ptrTo("createApplicationVersion")})
	require.NoError(t, err)
	aggs := 0
	for _, it := range res2.JSON200.Items {
		if it.Detail != nil && strings.Contains(string(*it.Detail), `"aggregate":true`) {
			aggs++
		}
	}
	assert.Equal(t, 2, aggs, "the 403 and 429 aggregates of createApplicationVersion")

	// The refusal log lines are sampled too: 3 per caller and interval.
	assert.Equal(t, 3, strings.Count(e.logs.String(), "management call refused"))

	// A minute on, the viewer has its rate again.
	status, _ := e.call(t, auth)
	assert.Equal(t, http.StatusForbidden, status)
}

// TestAnonymousFloodsFromTwoAddresses: callers without a token are limited
// per address, so one address's flood leaves another's calls alone; their
// refusals are aggregated per address.
func TestAnonymousFloodsFromTwoAddresses(t *testing.T) {
	e := newLimitedEnv(t, 1, 10, "127.0.0.1/32")
	from := func(addr string) map[string]string { return map[string]string{"X-Forwarded-For": addr} }
	for range 10 {
		status, _ := e.call(t, from("203.0.113.1"))
		require.Equal(t, http.StatusUnauthorized, status)
	}
	for range 50 {
		status, _ := e.call(t, from("203.0.113.1"))
		require.Equal(t, http.StatusTooManyRequests, status)
	}
	status, _ := e.call(t, from("203.0.113.2"))
	assert.Equal(t, http.StatusUnauthorized, status, "another address has its own bucket")
	status, _ = e.call(t, from("203.0.113.2, 198.51.100.7")) // the rightmost untrusted hop is the caller
	assert.Equal(t, http.StatusUnauthorized, status)

	// An admin's own calls are not limited by anonymous floods.
	list, err := e.admin.ListApplicationsWithResponse(t.Context(), nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, list.StatusCode())

	require.NoError(t, e.refusals.Stop(t.Context()), "shutdown writes the current interval's counts")
	rows := e.auditOf(t, "anonymous")
	byAddr := map[any]int{}
	for _, r := range rows {
		n := 1
		if r.detail["aggregate"] == true {
			n = int(r.detail["count"].(float64))
		}
		byAddr[r.detail["address"]] += n
	}
	assert.Equal(t, map[any]int{"203.0.113.1": 60, "203.0.113.2": 1, "198.51.100.7": 1}, byAddr, "every refusal is accounted for, per address")
	assert.LessOrEqual(t, len(rows), 5+1+5+1+2)
}

// TestForwardedHeaderIgnoredFromUntrustedPeer: without trusted proxies a
// caller cannot pick a fresh bucket per request by sending another
// X-Forwarded-For or Forwarded header; the audit log names the real peer.
func TestForwardedHeaderIgnoredFromUntrustedPeer(t *testing.T) {
	e := newLimitedEnv(t, 1, 5) // trusts no proxy
	e.adminCall(t)              // known before the flood: served during it
	statuses := map[int]int{}
	for i := range 20 {
		h := map[string]string{"X-Forwarded-For": "198.51.100." + strconv.Itoa(i)}
		if i%2 == 1 {
			h = map[string]string{"Forwarded": "for=198.51.100." + strconv.Itoa(i)}
		}
		status, _ := e.call(t, h)
		statuses[status]++
	}
	assert.Equal(t, map[int]int{http.StatusUnauthorized: 5, http.StatusTooManyRequests: 15}, statuses, "one bucket: the peer's")
	require.NoError(t, e.refusals.Stop(t.Context()))
	for _, r := range e.auditOf(t, "anonymous") {
		assert.Equal(t, "127.0.0.1", r.detail["address"])
	}

	// The configured header from a trusted proxy names the caller.
	e = newLimitedEnvWith(t, limitedOptions{rate: 1, burst: 5, trusted: []string{"127.0.0.0/8"}, forwarded: httpapi.HeaderForwarded})
	for i := range 20 {
		status, _ := e.call(t, map[string]string{"Forwarded": `for="198.51.100.` + strconv.Itoa(i) + `:4711"`})
		assert.Equal(t, http.StatusUnauthorized, status)
	}
}

// TestForwardedSpoofedThroughTrustedProxy: behind a trusted proxy that
// appends to X-Forwarded-For (the default header), a client's own
// Forwarded header is passed on unchanged; it must not give the client a
// fresh bucket per request, nor an address of its choice in the audit log.
func TestForwardedSpoofedThroughTrustedProxy(t *testing.T) {
	e := newLimitedEnv(t, 1, 5, "127.0.0.0/8")
	statuses := map[int]int{}
	for i := range 20 {
		status, _ := e.call(t, map[string]string{"Forwarded": "for=198.51.100." + strconv.Itoa(i), "X-Forwarded-For": "203.0.113.7"})
		statuses[status]++
	}
	assert.Equal(t, map[int]int{http.StatusUnauthorized: 5, http.StatusTooManyRequests: 15}, statuses, "one bucket: the address the proxy appended")
	require.NoError(t, e.refusals.Stop(t.Context()))
	rows := e.auditOf(t, "anonymous")
	require.NotEmpty(t, rows)
	for _, r := range rows {
		assert.Equal(t, "203.0.113.7", r.detail["address"])
	}
}

// TestLiftedLimitNeverAnswers429: with the limit lifted (-mgmt-rate 0) a
// burst of calls is served.
func TestLiftedLimitNeverAnswers429(t *testing.T) {
	e := newLimitedEnv(t, 0, 0)
	_, secret := e.token(t, "viewer")
	for range 200 {
		status, _ := e.call(t, map[string]string{"Authorization": "Bearer " + secret})
		require.Equal(t, http.StatusForbidden, status)
	}
}

// TestUnlimitedPaths: health, readiness, metrics and the contract are
// neither authenticated nor rate limited.
func TestUnlimitedPaths(t *testing.T) {
	e := newLimitedEnv(t, 1, 1)
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml", "/docs/"} {
		for range 5 {
			res, err := http.Get(e.url + path)
			require.NoError(t, err)
			res.Body.Close()
			assert.Equal(t, http.StatusOK, res.StatusCode, path)
		}
	}
}

// TestOneIPv6NetworkIsOneCaller: 1,000 addresses of one /64 (one host can
// hold them all) share one anonymous bucket and one refusal kind: past
// the burst they get 429, and the audit log grows by a bounded number of
// rows that still account for every refusal.
func TestOneIPv6NetworkIsOneCaller(t *testing.T) {
	e := newLimitedEnv(t, 1, 10, "127.0.0.1/32")
	statuses := map[int]int{}
	for i := range 1000 {
		addr := fmt.Sprintf("2001:db8:1:2:%x:%x::1", i/256, i%256)
		status, _ := e.call(t, map[string]string{"X-Forwarded-For": addr})
		statuses[status]++
	}
	assert.Equal(t, map[int]int{http.StatusUnauthorized: 10, http.StatusTooManyRequests: 990}, statuses, "one bucket for the /64")
	require.NoError(t, e.refusals.Stop(t.Context()))
	rows := e.auditOf(t, "anonymous")
	assert.LessOrEqual(t, len(rows), 2*(5+1), "5 individual entries and one aggregate per status")
	_, _, total401 := counted(rows, http.StatusUnauthorized)
	_, _, total429 := counted(rows, http.StatusTooManyRequests)
	assert.Equal(t, 10, total401)
	assert.Equal(t, 990, total429)
	for _, r := range rows {
		if r.detail["aggregate"] == true {
			assert.Equal(t, "2001:db8:1:2::/64", r.detail["address"], "an aggregate names the network")
		}
	}
	// Refusal log lines are sampled per network too.
	assert.Equal(t, 3, strings.Count(e.logs.String(), "management call refused"))
}

// TestAnonymousRefusalEntriesAreBoundedOverAllNetworks: callers from many
// networks do not each bring their own allowance of individual audit
// entries: beyond AnonymousMax an interval, refusals are only counted.
func TestAnonymousRefusalEntriesAreBoundedOverAllNetworks(t *testing.T) {
	e := newLimitedEnvWith(t, limitedOptions{rate: 1, burst: 10, trusted: []string{"127.0.0.1/32"}, anonymousMax: 20})
	for i := range 200 {
		status, _ := e.call(t, map[string]string{"X-Forwarded-For": fmt.Sprintf("2001:db8:%x::1", i)})
		require.Equal(t, http.StatusUnauthorized, status)
	}
	require.NoError(t, e.refusals.Stop(t.Context()))
	individual, _, total := counted(e.auditOf(t, "anonymous"), http.StatusUnauthorized)
	assert.Equal(t, 20, individual, "individual entries of anonymous callers, over all networks")
	assert.Equal(t, 200, total, "every refusal is accounted for")
}

// countingStore is the real access store, counting token lookups.
type countingStore struct {
	*postgres.AccessStore
	lookups atomic.Int64
}

func (c *countingStore) Token(ctx context.Context, id string) (access.Token, string, error) {
	c.lookups.Add(1)
	return c.AccessStore.Token(ctx, id)
}

// TestMadeUpTokenFloodStopsBeforeTheDatabase: once a caller's network has
// used up its anonymous budget, its calls are refused (429) before the
// token is looked up, so a flood of made-up tokens does not reach
// PostgreSQL at full rate.
func TestMadeUpTokenFloodStopsBeforeTheDatabase(t *testing.T) {
	var counter *countingStore
	e := newLimitedEnvWith(t, limitedOptions{rate: 1, burst: 10, store: func(s *postgres.AccessStore) access.Store {
		counter = &countingStore{AccessStore: s}
		return counter
	}})
	e.adminCall(t) // a token that authenticated before the flood
	_, viewer := e.token(t, "viewer")
	before := counter.lookups.Load()
	statuses := map[int]int{}
	for i := range 200 {
		id, _ := access.NewSecret()
		status, _ := e.call(t, map[string]string{"Authorization": fmt.Sprintf("Bearer wfm_%s_%064d", id, i)})
		statuses[status]++
	}
	assert.Equal(t, map[int]int{http.StatusUnauthorized: 10, http.StatusTooManyRequests: 190}, statuses)
	lookups := counter.lookups.Load() - before
	assert.Positive(t, lookups)
	assert.LessOrEqual(t, lookups, int64(2*10), "token lookups only for the calls within the burst, not %d", lookups)

	// A token that authenticated before on this server is still served
	// from the flooded network; one never seen waits for the budget.
	e.adminCall(t)
	status, _ := e.call(t, map[string]string{"Authorization": "Bearer " + viewer})
	assert.Equal(t, http.StatusTooManyRequests, status, "a valid token never used on this server waits with the network")

	// The budget comes back with time.
	e.clock.advance(time.Second)
	status, _ = e.call(t, map[string]string{"Authorization": "Bearer wfm_nosuchtoken_x"})
	assert.Equal(t, http.StatusUnauthorized, status)
}

// adminCall makes one call as the admin and requires it to succeed.
func (e *limitedEnv) adminCall(t *testing.T) {
	t.Helper()
	res, err := e.admin.ListApplicationsWithResponse(t.Context(), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
}

// TestRefusalLogLevels: a 401 or a 429, which anyone on the network can
// cause, is logged at INFO; a 403, a known token asking for more than its
// role, at WARN.
func TestRefusalLogLevels(t *testing.T) {
	e := newLimitedEnv(t, 1, 3)
	_, viewer := e.token(t, "viewer")
	refused := func(status int) string {
		t.Helper()
		for _, l := range strings.Split(e.logs.String(), "\n") {
			if strings.Contains(l, `msg="management call refused"`) && strings.Contains(l, "status="+strconv.Itoa(status)+" ") {
				return l
			}
		}
		t.Fatalf("no refusal line of status %d in:\n%s", status, e.logs.String())
		return ""
	}
	status, _ := e.call(t, map[string]string{"Authorization": "Bearer wfm_not-a-token-at-all"})
	require.Equal(t, http.StatusUnauthorized, status)
	assert.Contains(t, refused(http.StatusUnauthorized), "level=INFO ")
	status, _ = e.call(t, map[string]string{"Authorization": "Bearer " + viewer})
	require.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, refused(http.StatusForbidden), "level=WARN ")
	// Another viewer's reads (allowed: no refusal line) up to its burst.
	_, reader := e.token(t, "viewer")
	for range 5 {
		req, err := http.NewRequest(http.MethodGet, e.url+"/mgmt/v1/applications", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+reader)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		if status = res.StatusCode; status == http.StatusTooManyRequests {
			break
		}
	}
	require.Equal(t, http.StatusTooManyRequests, status, "past the burst")
	assert.Contains(t, refused(http.StatusTooManyRequests), "level=INFO ")
}
