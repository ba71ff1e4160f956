package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/sdk"
)

// TestOneSpellingPerActor: what one token does is recorded under one name,
// its token id (the bootstrap admin's "bootstrap"), wherever it is
// recorded: the events' actor, the audit log, an operation's requestedBy,
// a rollout's createdBy and history, a token's createdBy. Other actors are
// the server's scheduler ("wfm"), a rollout driving its members
// ("rollout:<id>") and a device's client.
func TestOneSpellingPerActor(t *testing.T) {
	e := newOpsEnv(t)
	for _, v := range []string{"1.0.0", "2.0.0"} {
		e.publish(t, v, "")
	}
	dev := e.client(t, "plant")
	res, body := dev.do("PUT", "/api/v1/capabilities/edge", capabilities("edge", "compose"))
	require.Equal(t, http.StatusCreated, res.StatusCode, string(body))
	id := e.deploy(t, "plant", "edge", "svc", "1.0.0").Id.String()
	dev.installAll()
	e.tick(t)
	e.tick(t)
	tok, err := e.mgmt.CreateTokenWithResponse(t.Context(), sdk.CreateTokenRequest{Name: "ci", Role: sdk.Role("operator")})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, tok.StatusCode(), string(tok.Body))
	req, err := http.NewRequest(http.MethodPost, e.url+"/mgmt/v1/rollouts",
		strings.NewReader(`{"applicationId":"svc","action":"upgrade","upgrade":{"targetVersion":"2.0.0"},"target":{}}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	r, err := adminHTTP.Do(req)
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, http.StatusCreated, r.StatusCode)
	var rolloutID string
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT id::text FROM rollouts`).Scan(&rolloutID))
	p, err := e.mgmt.PauseRolloutWithResponse(t.Context(), rolloutID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, p.StatusCode(), string(p.Body))
	e.tick(t)
	_ = id

	distinct := func(query string) []string {
		t.Helper()
		rows, _ := e.pool.Query(t.Context(), query)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err, query)
		return got
	}
	others := func(actors []string) []string {
		var out []string
		for _, a := range actors {
			if a != access.BootstrapID && a != lifecycle.ActorScheduler && a != "plant" && !strings.HasPrefix(a, "rollout:") {
				out = append(out, a)
			}
		}
		return out
	}
	for _, q := range []string{
		`SELECT DISTINCT actor FROM events`,
		`SELECT DISTINCT actor FROM audit_log`,
		`SELECT DISTINCT requested_by FROM operations`,
		`SELECT DISTINCT created_by FROM rollouts`,
		`SELECT DISTINCT created_by FROM api_tokens WHERE id <> 'bootstrap'`,
	} {
		got := distinct(q)
		assert.Empty(t, others(got), "%s: the bootstrap admin is %q everywhere, got %q", q, access.BootstrapID, got)
	}
	assert.Contains(t, distinct(`SELECT DISTINCT actor FROM events WHERE type IN ('application.version_added', 'operation.created', 'token.created', 'rollout.created', 'rollout.state_changed')`),
		access.BootstrapID, "the bootstrap admin's own changes name it")
	hist := distinct(`SELECT DISTINCT actor FROM events WHERE type = 'rollout.state_changed' AND body->>'to' = 'paused'`)
	assert.Equal(t, []string{access.BootstrapID}, hist, "the pause")
}
