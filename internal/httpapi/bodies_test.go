package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/margo"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// newBodiesHandler is the real handler (router, middleware, validator)
// with the given decoding bounds (0: the defaults), served in process.
func newBodiesHandler(t *testing.T, perCaller, total int64) http.Handler {
	t.Helper()
	pool := pgtest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	acc := access.NewService(postgres.NewAccessStore(pool), time.Now)
	_, err := acc.Bootstrap(t.Context(), adminToken)
	require.NoError(t, err)
	h, err := httpapi.NewHandler(httpapi.Config{
		Logger:               log,
		Ready:                func(context.Context) error { return nil },
		Registry:             prometheus.NewRegistry(),
		Catalog:              cat,
		Fleet:                fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log),
		Access:               acc,
		DeviceIdentity:       identity.HeaderIdentity{}.ClientIDFromRequest,
		DecodeBytesPerCaller: perCaller,
		DecodeBytes:          total,
	})
	require.NoError(t, err)
	return h
}

// bodyRequest is a request with body, as the admin on the management API
// or as client "c1" on the device API.
func bodyRequest(method, path, contentType string, body io.Reader) *http.Request {
	req := httptest.NewRequest(method, path, body)
	req.Header.Set("Content-Type", contentType)
	if strings.HasPrefix(path, "/api/v1/") {
		req.Header.Set(identity.DevHeader, "c1")
	} else {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	return req
}

// recordedProblem decodes a recorded problem answer.
func recordedProblem(t *testing.T, rec *httptest.ResponseRecorder) problemBody {
	t.Helper()
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), rec.Body.String())
	var p problemBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	return p
}

// TestDescriptionsOverOneMiBAreTooLarge: over 1 MiB, a description is 413
// description-too-large, YAML and JSON alike, whether the parser's bound
// or the route's body bound (1 MiB and a little) meets it first, and
// whether Content-Length declares it or not; the contract's maxLength on
// the YAML string is never what answers.
func TestDescriptionsOverOneMiBAreTooLarge(t *testing.T) {
	h := newBodiesHandler(t, 0, 0)
	yamlOf := func(n int) string {
		head := "apiVersion: v1\n# "
		return head + strings.Repeat("x", n-len(head)-1) + "\n"
	}
	jsonOf := func(n int) string {
		head, tail := `{"apiVersion":"v1","pad":"`, `"}`
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}
	for _, tt := range []struct {
		name, contentType, body string
		unknownLength           bool
	}{
		{"YAML 1 MiB + 1", "application/yaml", yamlOf(margo.MaxDescriptionSize + 1), false},
		{"JSON 1 MiB + 1", "application/json", jsonOf(margo.MaxDescriptionSize + 1), false},
		{"YAML 1.5 MiB", "application/yaml", yamlOf(margo.MaxDescriptionSize * 3 / 2), false},
		{"JSON 1.5 MiB", "application/json", jsonOf(margo.MaxDescriptionSize * 3 / 2), false},
		{"YAML 1.5 MiB, length unknown", "application/yaml", yamlOf(margo.MaxDescriptionSize * 3 / 2), true},
		{"JSON 1.5 MiB, length unknown", "application/json", jsonOf(margo.MaxDescriptionSize * 3 / 2), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(tt.body)
			if tt.unknownLength {
				body = io.MultiReader(body) // hides the length
			}
			req := bodyRequest(http.MethodPost, "/mgmt/v1/applications", tt.contentType, body)
			if tt.unknownLength {
				req.ContentLength = -1
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, rec.Body.String())
			p := recordedProblem(t, rec)
			assert.Equal(t, httpapi.ProblemBase+"description-too-large", p.Type)
			assert.Contains(t, p.Detail, "at most 1048576 are accepted")
		})
	}
	// At exactly 1 MiB the description is read, and judged on its content.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, bodyRequest(http.MethodPost, "/mgmt/v1/applications", "application/yaml", strings.NewReader(yamlOf(margo.MaxDescriptionSize))))
	assert.Equal(t, http.StatusUnprocessableEntity, rec.Code, rec.Body.String())
	assert.Equal(t, httpapi.ProblemBase+"invalid-description", recordedProblem(t, rec).Type)
}

// allocatedBy returns the bytes the process allocates while f runs
// (runtime.MemStats.TotalAlloc: every goroutine's, the server's included).
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHostileBodiesAreRefusedWithBoundedAllocation sends each hostile
// shape, at the largest size its route accepts, through the real handler
// on both APIs, and checks that it is refused at its limit having cost at
// most a few times its size: decoded whole (a yaml.Node per item, a Go
// value per JSON value) a 1 MiB list of 500,000 items costs hundreds of
// MiB.
func TestHostileBodiesAreRefusedWithBoundedAllocation(t *testing.T) {
	h := newBodiesHandler(t, 0, 0)
	fill := func(size int, prefix, item, sep, suffix string) string {
		n := (size - len(prefix) - len(suffix)) / (len(item) + len(sep))
		return prefix + strings.Repeat(item+sep, n-1) + item + suffix
	}
	keys := func(size int, format, open, closing string) string {
		var b strings.Builder
		b.WriteString(open)
		for i := 0; b.Len() < size-40; i++ {
			fmt.Fprintf(&b, format, i)
		}
		return strings.TrimSuffix(b.String(), ",") + closing
	}
	const desc = margo.MaxDescriptionSize
	const small = 64 << 10
	const caps = margo.MaxCapabilitiesSize
	apps, tokens, capabilities := "/mgmt/v1/applications", "/mgmt/v1/tokens", "/api/v1/capabilities/d1"
	const y, j = "application/yaml", "application/json"
	for _, tt := range []struct {
		name, path, contentType, body string
		status                        int
		typ                           string
	}{
		{"description: YAML flat list", apps, y, fill(desc, "big: [", "1", ",", "]\n"), 413, "description-too-large"},
		{"description: YAML block list", apps, y, fill(desc, "big:\n", "- 1", "\n", "\n"), 413, "description-too-large"},
		{"description: YAML many keys", apps, y, keys(desc, "k%d: 1\n", "", ""), 413, "description-too-large"},
		{"description: YAML deep nesting", apps, y, "a: " + strings.Repeat("[", desc/2-10) + strings.Repeat("]", desc/2-10), 400, "malformed-description"},
		{"description: YAML alias bomb", apps, y, billionLaughsYAML(), 413, "description-too-large"},
		{"description: YAML long string", apps, y, "s: " + strings.Repeat("x", desc), 413, "description-too-large"},
		{"description: JSON long string", apps, j, `{"s":"` + strings.Repeat("x", desc) + `"}`, 413, "description-too-large"},
		{"management: JSON long string", tokens, j, `{"name":"` + strings.Repeat("x", small) + `"}`, 413, "too-large"},
		{"description: JSON flat list", apps, j, fill(desc, `{"big":[`, "1", ",", "]}"), 413, "description-too-large"},
		{"description: JSON many keys", apps, j, keys(desc, `"k%d":1,`, "{", "}"), 413, "description-too-large"},
		{"description: JSON deep nesting", apps, j, `{"a":` + strings.Repeat("[", desc/2-10) + strings.Repeat("]", desc/2-10) + "}", 400, "malformed-description"},
		{"management: JSON deep nesting", tokens, j, `{"name":` + strings.Repeat("[", small/2-20) + strings.Repeat("]", small/2-20) + "}", 400, "malformed"},
		{"management: JSON flat list", tokens, j, fill(small, `{"name":"x","role":"viewer","x":[`, "1", ",", "]}"), 413, "too-large"},
		{"device: JSON flat list", capabilities, j, fill(caps, `{"properties":{"x":[`, "1", ",", "]}}"), 413, "capabilities-too-large"},
		{"device: JSON deep nesting", capabilities, j, `{"properties":` + strings.Repeat("[", caps/2-20) + strings.Repeat("]", caps/2-20) + "}", 400, "malformed-capabilities"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			got := allocatedBy(func() {
				h.ServeHTTP(rec, bodyRequest(http.MethodPost, tt.path, tt.contentType, strings.NewReader(tt.body)))
			})
			if strings.HasPrefix(tt.path, "/api/") {
				rec = httptest.NewRecorder()
				got = allocatedBy(func() {
					h.ServeHTTP(rec, bodyRequest(http.MethodPut, tt.path, tt.contentType, strings.NewReader(tt.body)))
				})
			}
			require.Equal(t, tt.status, rec.Code, rec.Body.String())
			assert.True(t, strings.HasSuffix(recordedProblem(t, rec).Type, "#"+tt.typ), "type %s, want %s", recordedProblem(t, rec).Type, tt.typ)
			// Reading the body costs about twice its size; decoding what is
			// refused must add little.
			bound := uint64(8*len(tt.body)) + 2<<20
			if tt.name == "description: YAML alias bomb" {
				bound = 64 << 20 // the reader expands aliases up to MaxNodes
			}
			assert.LessOrEqual(t, got, bound, "allocated %.1f MiB for %d bytes", float64(got)/(1<<20), len(tt.body))
			t.Logf("%d bytes: %d %s; allocated %.2f MiB", len(tt.body), rec.Code, recordedProblem(t, rec).Detail, float64(got)/(1<<20))
		})
	}
}

// billionLaughsYAML is the classic alias bomb: a few hundred bytes, 10^9
// strings once expanded.
func billionLaughsYAML() string {
	var b strings.Builder
	b.WriteString("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	prev := "a"
	for i := range 8 {
		name := string(rune('b' + i))
		fmt.Fprintf(&b, "%s: &%s [%s]\n", name, name, strings.TrimSuffix(strings.Repeat("*"+prev+", ", 10), ", "))
		prev = name
	}
	return b.String()
}

// heldBody is a request body whose first Read says so and then waits for
// release: the request holds its place in the decoding bounds until then.
type heldBody struct {
	reading chan struct{}
	release chan struct{}
	once    sync.Once
	rest    io.Reader
}

func newHeldBody(content string, release chan struct{}) *heldBody {
	return &heldBody{reading: make(chan struct{}), release: release, rest: strings.NewReader(content)}
}

func (b *heldBody) Read(p []byte) (int, error) {
	b.once.Do(func() { close(b.reading) })
	<-b.release
	return b.rest.Read(p)
}

// TestDecodingIsBoundedPerCallerAndOverall holds request bodies in flight
// and checks that a caller beyond its bound gets 429 and a server beyond its
// own 503, both at once and with Retry-After, and that the places come back
// when the bodies are done.
func TestDecodingIsBoundedPerCallerAndOverall(t *testing.T) {
	// Bounds of two descriptions for the caller, and a byte more for the
	// server.
	h := newBodiesHandler(t, 2*httpapi.DefaultDecodeBytesPerCaller, 2*httpapi.DefaultDecodeBytesPerCaller+1)
	release := make(chan struct{})
	var wg sync.WaitGroup
	held := func(method, path, contentType string) {
		body := newHeldBody("a: b\n", release)
		req := bodyRequest(method, path, contentType, body)
		req.ContentLength = -1 // counted at its route's bound
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.ServeHTTP(httptest.NewRecorder(), req)
		}()
		select {
		case <-body.reading:
		case <-time.After(10 * time.Second):
			t.Fatal("the request never read its body")
		}
	}
	// The admin has two descriptions in flight: its bound.
	held(http.MethodPost, "/mgmt/v1/applications", "application/yaml")
	held(http.MethodPost, "/mgmt/v1/applications", "application/yaml")

	start := time.Now()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, bodyRequest(http.MethodPost, "/mgmt/v1/applications", "application/yaml", strings.NewReader("a: b\n")))
	require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
	assert.Equal(t, httpapi.ProblemBase+"too-many-requests", recordedProblem(t, rec).Type)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))

	// Another caller (a device client) finds the server at its bound.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, bodyRequest(http.MethodPut, "/api/v1/capabilities/d1", "application/json", strings.NewReader(`{"properties":{}}`)))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	assert.Equal(t, httpapi.ProblemBase+"server-busy", recordedProblem(t, rec).Type)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.Less(t, time.Since(start), time.Second, "refusals are immediate")

	// A request without a body is not counted.
	rec = httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/mgmt/v1/applications", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	close(release)
	wg.Wait()
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, bodyRequest(http.MethodPost, "/mgmt/v1/applications", "application/yaml", strings.NewReader("a: b\n")))
	assert.Equal(t, http.StatusUnprocessableEntity, rec.Code, rec.Body.String())
}

// TestDeclaredLengthOverTheBoundIsAnsweredAtOnce: a request whose
// Content-Length is over its route's bound gets its 413 before any of the
// body is sent, whatever the declared length. net/http reads what is left
// of a small unread body (up to 256 KiB) before it writes an answer, so
// without closing the connection a client that declares 70,000 bytes and
// waits for the answer before sending them would wait for the read
// timeout.
func TestDeclaredLengthOverTheBoundIsAnsweredAtOnce(t *testing.T) {
	srv := httptest.NewServer(newBodiesHandler(t, 0, 0))
	t.Cleanup(srv.Close)
	for _, tt := range []struct{ path, contentType string }{
		{"/mgmt/v1/deployments", "application/json"},
		{"/mgmt/v1/applications", "application/yaml"},
	} {
		declared := 70_000
		if tt.path == "/mgmt/v1/applications" {
			declared = margo.MaxDescriptionSize + descriptionSlackForTest + 1
		}
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() }) // before srv.Close, which waits for it
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
			tt.path, adminToken, tt.contentType, declared)
		require.NoError(t, err)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err, "%s: no answer before the body was sent", tt.path)
		assert.Equal(t, http.StatusRequestEntityTooLarge, res.StatusCode, tt.path)
		res.Body.Close()
	}
}

// descriptionSlackForTest is the bytes a description upload may carry
// beyond margo.MaxDescriptionSize (the route's bound is their sum).
const descriptionSlackForTest = 4 << 10
