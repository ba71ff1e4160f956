package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// gateKey is the advisory lock a gate holds while the request it catches
// waits for it.
const gateKey = 4242

// gate makes every insert or update of table wait on an advisory lock the
// test holds, in a trigger that runs before the COMMIT (deferred false) or
// at it (deferred: a deferred constraint trigger, which runs when the
// COMMIT is under way), and returns kill: it waits until a backend waits on
// the lock, terminates that backend (the request's connection breaks at
// that point) and removes the gate.
func gate(t *testing.T, pool *pgxpool.Pool, table string, deferred bool) (kill func()) {
	t.Helper()
	ctx := t.Context()
	held, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = held.Exec(ctx, `SELECT pg_advisory_lock($1)`, gateKey)
	require.NoError(t, err)
	when := ""
	if deferred {
		when = "CONSTRAINT"
	}
	_, err = pool.Exec(ctx, `CREATE OR REPLACE FUNCTION test_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_advisory_xact_lock_shared(`+fmt.Sprint(gateKey)+`); RETURN NULL; END $$`)
	require.NoError(t, err)
	trigger := fmt.Sprintf(`CREATE %s TRIGGER test_gate AFTER INSERT OR UPDATE ON %s `, when, table)
	if deferred {
		trigger += `DEFERRABLE INITIALLY DEFERRED `
	}
	_, err = pool.Exec(ctx, trigger+`FOR EACH ROW EXECUTE FUNCTION test_gate()`)
	require.NoError(t, err)
	return func() {
		t.Helper()
		defer held.Release()
		var pid int
		deadline := time.Now().Add(30 * time.Second)
		for pid == 0 { // the request's backend, once it waits on the gate
			require.True(t, time.Now().Before(deadline), "no backend waited on the gate of %s", table)
			err := held.QueryRow(ctx, `SELECT coalesce((SELECT pid FROM pg_stat_activity WHERE datname = current_database()
AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND wait_event = 'advisory' LIMIT 1), 0)`).Scan(&pid)
			require.NoError(t, err)
		}
		var ok bool
		require.NoError(t, held.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok))
		require.True(t, ok)
		_, err := held.Exec(ctx, `SELECT pg_advisory_unlock($1)`, gateKey)
		require.NoError(t, err)
		_, err = held.Exec(ctx, `DROP TRIGGER test_gate ON `+table)
		require.NoError(t, err)
	}
}

// problemMap decodes a problem answer.
func problemMap(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var p map[string]any
	require.NoError(t, json.Unmarshal(body, &p), string(body))
	return p
}

// TestCommitOfUnknownOutcome: a change whose connection breaks while its
// COMMIT is under way answers 503 outcome-unknown (Retry-After, the retry
// advice in detail), never "unavailable; nothing was changed": a status
// report (a statement that commits by itself), a capabilities PUT (an
// explicit transaction) and a creation with an Idempotency-Key (a batch of
// creations), whose key stays reserved so that a retry with it is not run
// a second time. A connection that breaks before the COMMIT still answers
// unavailable.
func TestCommitOfUnknownOutcome(t *testing.T) {
	pool := pgtest.New(t)
	e := newEnv(t, envOptions{policy: fleet.Policy{AcceptAll: true}, pool: pool})
	ops := &opsEnv{fleetEnv: e, url: e.mgmtURL, pool: pool}
	ops.publish(t, "1.0.0", "")
	dev := e.client(t, "plant")
	res, body := dev.do("PUT", "/api/v1/capabilities/edge", capabilities("edge", "compose"))
	require.Equal(t, http.StatusCreated, res.StatusCode, string(body))
	d := e.deploy(t, "plant", "edge", "svc", "1.0.0")
	m, _ := dev.manifest()
	check := contractValidator(t)

	// device sends a device API request without the rc.3 check (rc.3
	// declares no 503) and checks it against openapi.yaml.
	device := func(method, path string, body []byte) (*http.Response, []byte) {
		req, err := http.NewRequestWithContext(t.Context(), method, e.deviceURL+path, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		res, err := dev.http.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		req.Body = io.NopCloser(bytes.NewReader(body))
		check(req, res, raw)
		return res, raw
	}
	// during runs call while kill breaks its connection at the gate.
	during := func(kill func(), call func() (*http.Response, []byte)) (*http.Response, []byte) {
		type answer struct {
			res  *http.Response
			body []byte
		}
		done := make(chan answer, 1)
		go func() {
			res, body := call()
			done <- answer{res, body}
		}()
		kill()
		select {
		case a := <-done:
			return a.res, a.body
		case <-time.After(30 * time.Second):
			t.Fatal("no answer after the connection broke")
			return nil, nil
		}
	}
	unknown := func(what string, res *http.Response, body []byte) {
		t.Helper()
		require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "%s: %s", what, body)
		p := problemMap(t, body)
		assert.Equal(t, httpapi.ProblemBase+"outcome-unknown", p["type"], what)
		assert.Equal(t, "5", res.Header.Get("Retry-After"), what)
		assert.Equal(t, true, p["retryable"], what)
		assert.EqualValues(t, 5, p["retryAfterSeconds"], what)
		assert.Equal(t, "exponential", p["backoffStrategy"], what)
		assert.NotContains(t, p["detail"], "nothing was changed", what)
		for _, advice := range []string{"status report", "capabilities PUT", "DELETE (a 404 then means it was done)", "Idempotency-Key", "read the resource first"} {
			assert.Contains(t, p["detail"], advice, what)
		}
	}

	report, _ := json.Marshal(map[string]any{"deploymentId": d.Id.String(), "adoptedManifestVersion": m.ManifestVersion,
		"status": map[string]any{"state": "installing"}, "components": []any{}})
	res, body = during(gate(t, pool, "status_reports", true), func() (*http.Response, []byte) {
		return device("POST", "/api/v1/deployments/"+d.Id.String()+"/status", report)
	})
	unknown("status report", res, body)

	res, body = during(gate(t, pool, "devices", true), func() (*http.Response, []byte) {
		return device("PUT", "/api/v1/capabilities/edge", capabilities("edge", "compose", "helm"))
	})
	unknown("capabilities at the commit", res, body)

	// The same break before the COMMIT: nothing was changed, and it says so.
	res, body = during(gate(t, pool, "devices", false), func() (*http.Response, []byte) {
		return device("PUT", "/api/v1/capabilities/edge", capabilities("edge", "compose", "helm"))
	})
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, string(body))
	p := problemMap(t, body)
	assert.Equal(t, httpapi.ProblemBase+"unavailable", p["type"])
	assert.Contains(t, p["detail"], "nothing was changed")

	// A creation with an Idempotency-Key: the key stays reserved.
	res, body = dev.do("PUT", "/api/v1/capabilities/edge-2", capabilities("edge-2", "compose"))
	require.Less(t, res.StatusCode, 300, string(body))
	create := `{"applicationId":"svc","version":"1.0.0","clientId":"plant","deviceId":"edge-2"}`
	post := func() (*http.Response, []byte) {
		res := rawCall(t, "POST", e.mgmtURL+"/mgmt/v1/deployments", "application/json", create, "Idempotency-Key", "k-1")
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, raw
	}
	res, body = during(gate(t, pool, "deployments", true), post)
	unknown("creation", res, body)
	// It did not commit (the backend was terminated before its commit
	// record), so its key was released: the retry makes it, once.
	res, body = post()
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", body)
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM deployments WHERE device_id = 'edge-2'`).Scan(&n))
	assert.Equal(t, 1, n)
}

// lostAnswers is an idempotency store whose answers are never remembered,
// as when the database goes away right after a change committed.
type lostAnswers struct{ *postgres.AccessStore }

func (lostAnswers) CompleteIdempotent(context.Context, string, string, time.Time, access.IdempotentResponse) error {
	return errors.New("the database went away")
}

// TestIdempotencyKeyOfAMadeChange: the transaction of a change made for a
// request with an Idempotency-Key marks its key made, so that when its
// answer is lost a retry with the key is never run again: 409
// idempotency-key-in-use while the first request may still run, then 409
// idempotency-answer-lost, which says to read the resource.
func TestIdempotencyKeyOfAMadeChange(t *testing.T) {
	pool := pgtest.New(t)
	e := newEnv(t, envOptions{policy: fleet.Policy{AcceptAll: true}, pool: pool,
		idem: func(s *postgres.AccessStore) httpapi.IdempotencyStore { return lostAnswers{s} }})
	ops := &opsEnv{fleetEnv: e, url: e.mgmtURL, pool: pool}
	ops.publish(t, "1.0.0", "")
	dev := e.client(t, "plant")
	res, body := dev.do("PUT", "/api/v1/capabilities/edge", capabilities("edge", "compose"))
	require.Equal(t, http.StatusCreated, res.StatusCode, string(body))
	create := `{"applicationId":"svc","version":"1.0.0","clientId":"plant","deviceId":"edge"}`
	post := func() (*http.Response, map[string]any) {
		res := rawCall(t, "POST", e.mgmtURL+"/mgmt/v1/deployments", "application/json", create, "Idempotency-Key", "k-1")
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m), string(raw))
		return res, m
	}
	res, _ = post()
	require.Equal(t, http.StatusCreated, res.StatusCode)
	var status int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT status FROM idempotency_keys WHERE key = 'k-1'`).Scan(&status))
	assert.Equal(t, access.IdempotentMade, status, "marked made with the change")

	res, p := post()
	assert.Equal(t, http.StatusConflict, res.StatusCode)
	assert.Equal(t, httpapi.ProblemBase+"idempotency-key-in-use", p["type"], "the first request may still run")
	_, err := pool.Exec(t.Context(), `UPDATE idempotency_keys SET created_at = created_at - interval '6 minutes'`)
	require.NoError(t, err)
	res, p = post()
	assert.Equal(t, http.StatusConflict, res.StatusCode)
	assert.Equal(t, httpapi.ProblemBase+"idempotency-answer-lost", p["type"], "its request is over")
	assert.Contains(t, p["detail"], "read the resource")
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM deployments`).Scan(&n))
	assert.Equal(t, 1, n, "made once")
}
