package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
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
	"github.com/wfm-dev/wfm/internal/webhook"
)

// newWebhookServer is newTestServer with webhooks (https only, no range
// allowed).
func newWebhookServer(t *testing.T) (*httptest.Server, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	acc := access.NewService(postgres.NewAccessStore(pool), time.Now)
	_, err := acc.Bootstrap(t.Context(), adminToken)
	require.NoError(t, err)
	keys, err := webhook.NewKeyring(make([]byte, webhook.KeySize))
	require.NoError(t, err)
	store, err := postgres.NewWebhookStore(pool, log)
	require.NoError(t, err)
	h, err := httpapi.NewHandler(httpapi.Config{
		Logger: log, Ready: func(context.Context) error { return nil }, Registry: prometheus.NewRegistry(), Catalog: cat,
		Fleet:  fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log),
		Access: acc, DeviceIdentity: identity.HeaderIdentity{}.ClientIDFromRequest,
		Webhooks: webhook.NewService(store, keys, webhook.Guard{}, time.Now),
	})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, pool
}

type webhookJSON struct {
	ID                       string            `json:"id"`
	URL                      string            `json:"url"`
	Description              string            `json:"description"`
	Types                    []string          `json:"types"`
	Filters                  map[string]string `json:"filters"`
	Enabled                  bool              `json:"enabled"`
	PreviousSecretValidUntil *time.Time        `json:"previousSecretValidUntil"`
}

type newWebhookJSON struct {
	Webhook webhookJSON `json:"webhook"`
	Secret  string      `json:"secret"`
}

func decodeJSON[T any](t *testing.T, res *http.Response, status int) (T, []byte) {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, status, res.StatusCode, string(b))
	var v T
	require.NoError(t, json.Unmarshal(b, &v), string(b))
	return v, b
}

// TestWebhooksAPI: create answers the secret once (never again), ETags and
// If-Match guard changes, rotation answers a new secret and the overlap,
// deliveries list, redeliver of an unknown attempt, delete.
func TestWebhooksAPI(t *testing.T) {
	srv, _ := newWebhookServer(t)
	base := srv.URL + "/mgmt/v1/webhooks"
	res := rawCall(t, "POST", base, "application/json",
		`{"url":"https://hooks.example.com/wfm","description":"ticketing","types":["rollout.","deployment.state_changed"],"filters":{"application":"svc"}}`)
	created, raw := decodeJSON[newWebhookJSON](t, res, http.StatusCreated)
	require.True(t, strings.HasPrefix(created.Secret, "whsec_"))
	require.Equal(t, "/mgmt/v1/webhooks/"+created.Webhook.ID, res.Header.Get("Location"))
	etag := res.Header.Get("ETag")
	require.NotEmpty(t, etag)
	require.True(t, created.Webhook.Enabled)
	require.Equal(t, map[string]string{"application": "svc"}, created.Webhook.Filters)
	require.NotContains(t, string(raw), "previousSecretValidUntil")

	one := base + "/" + created.Webhook.ID
	got, raw := decodeJSON[webhookJSON](t, rawCall(t, "GET", one, "", ""), http.StatusOK)
	require.NotContains(t, string(raw), created.Secret)
	require.NotContains(t, string(raw), "secret")
	require.Equal(t, created.Webhook, got)
	_, raw = decodeJSON[map[string]any](t, rawCall(t, "GET", base, "", ""), http.StatusOK)
	require.NotContains(t, string(raw), created.Secret)
	require.Contains(t, string(raw), created.Webhook.ID)

	// A stale tag is 412 and changes nothing; the current one works.
	p := readProblem(t, rawCall(t, "PATCH", one, "application/json", `{"enabled":false}`, "If-Match", `"w-0000-1"`), http.StatusPreconditionFailed)
	assert.Equal(t, httpapi.ProblemBase+"precondition-failed", p.Type)
	res = rawCall(t, "PATCH", one, "application/json", `{"enabled":false,"description":"paused"}`, "If-Match", etag)
	patched, _ := decodeJSON[webhookJSON](t, res, http.StatusOK)
	require.False(t, patched.Enabled)
	require.Equal(t, "paused", patched.Description)
	require.NotEqual(t, etag, res.Header.Get("ETag"))
	readProblem(t, rawCall(t, "PATCH", one, "application/json", `{"enabled":true}`, "If-Match", etag), http.StatusPreconditionFailed)

	rotated, _ := decodeJSON[newWebhookJSON](t, rawCall(t, "POST", one+"/rotate-secret", "", ""), http.StatusOK)
	require.NotEqual(t, created.Secret, rotated.Secret)
	require.NotNil(t, rotated.Webhook.PreviousSecretValidUntil)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), *rotated.Webhook.PreviousSecretValidUntil, time.Minute)

	list, _ := decodeJSON[map[string]any](t, rawCall(t, "GET", one+"/deliveries", "", ""), http.StatusOK)
	require.Equal(t, []any{}, list["items"])
	readProblem(t, rawCall(t, "POST", one+"/deliveries/42/redeliver", "", ""), http.StatusNotFound)

	readProblem(t, rawCall(t, "DELETE", one, "", "", "If-Match", etag), http.StatusPreconditionFailed)
	res = rawCall(t, "DELETE", one, "", "")
	res.Body.Close()
	require.Equal(t, http.StatusNoContent, res.StatusCode)
	readProblem(t, rawCall(t, "GET", one, "", ""), http.StatusNotFound)
	readProblem(t, rawCall(t, "POST", one+"/rotate-secret", "", ""), http.StatusNotFound)
}

// TestWebhookBadRequests: each bad request is a problem naming what is
// wrong, and changes nothing.
func TestWebhookBadRequests(t *testing.T) {
	srv, pool := newWebhookServer(t)
	base := srv.URL + "/mgmt/v1/webhooks"
	existing, _ := decodeJSON[newWebhookJSON](t, rawCall(t, "POST", base, "application/json", `{"url":"https://a.example.com/"}`), http.StatusCreated)
	one := base + "/" + existing.Webhook.ID
	const js = "application/json"
	for _, c := range []struct {
		name, method, url, body string
		status                  int
		typ, field              string
	}{
		{"NUL in description", "POST", base, `{"url":"https://b.example.com/","description":"a\u0000b"}`, 400, "", "/description"},
		{"NUL in URL", "POST", base, `{"url":"https://b.example.com/\u0000"}`, 400, "", "/url"},
		{"trailing bytes", "POST", base, `{"url":"https://b.example.com/"}{"x":`, 400, "malformed", ""},
		{"unknown member", "POST", base, `{"url":"https://b.example.com/","secret":"mine"}`, 422, "", ""},
		{"unknown filter", "POST", base, `{"url":"https://b.example.com/","filters":{"site":"x"}}`, 422, "", ""},
		{"oversized", "POST", base, `{"url":"https://b.example.com/","description":"` + strings.Repeat("a", 3<<20) + `"}`, 413, "", ""},
		{"description too long", "POST", base, `{"url":"https://b.example.com/","description":"` + strings.Repeat("a", 513) + `"}`, 422, "", "/description"},
		{"too many types", "POST", base, `{"url":"https://b.example.com/","types":[` + strings.Repeat(`"rollout.",`, 64) + `"rollout."]}`, 422, "", "/types"},
		{"http scheme", "POST", base, `{"url":"http://b.example.com/"}`, 422, "invalid-webhook", "/url"},
		{"ftp scheme", "POST", base, `{"url":"ftp://b.example.com/"}`, 422, "invalid-webhook", "/url"},
		{"loopback literal", "POST", base, `{"url":"https://127.0.0.1/"}`, 422, "invalid-webhook", "/url"},
		{"metadata literal", "POST", base, `{"url":"https://169.254.169.254/latest/meta-data"}`, 422, "invalid-webhook", "/url"},
		{"unknown type", "POST", base, `{"url":"https://b.example.com/","types":["nope.thing"]}`, 422, "invalid-webhook", "/types/0"},
		{"patch to a refused URL", "PATCH", one, `{"url":"https://10.0.0.1/"}`, 422, "invalid-webhook", "/url"},
		{"empty patch", "PATCH", one, `{}`, 422, "", ""},
		{"bad cursor", "GET", base + "?cursor=!!", "", 400, "", "query/cursor"},
		{"bad webhook id", "GET", base + "/not-a-uuid", "", 400, "", "path/webhookId"},
		{"bad delivery id", "POST", one + "/deliveries/0/redeliver", "", 400, "", "path/deliveryId"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot(t, pool)
			ct := ""
			if c.body != "" {
				ct = js
			}
			p := readProblem(t, rawCall(t, c.method, c.url, ct, c.body), c.status)
			if c.typ != "" {
				assert.Equal(t, httpapi.ProblemBase+c.typ, p.Type, "%+v", p)
			}
			if c.field != "" {
				require.NotEmpty(t, p.Errors, "%+v", p)
				assert.Equal(t, c.field, p.Errors[0].Field, "%+v", p)
			}
			assert.Equal(t, before, snapshot(t, pool), "nothing changed")
		})
	}
}
