package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/sdk"
)

// crashSwitch, when on, makes the management face fail its answer as a
// process that dies right after its change committed would: the first
// write of the answer abandons the handler (nothing after it runs, the
// connection is dropped).
type crashSwitch struct{ on atomic.Bool }

type crashWriter struct{ http.ResponseWriter }

func (crashWriter) WriteHeader(int)           { panic(http.ErrAbortHandler) }
func (crashWriter) Write([]byte) (int, error) { panic(http.ErrAbortHandler) }

func (c *crashSwitch) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.on.Load() {
			w = crashWriter{w}
		}
		h.ServeHTTP(w, r)
	})
}

// auditRecord is one row of the audit log as a test reads it.
type auditRecord struct {
	ID      int64
	At      time.Time
	Action  string
	Status  int
	Outcome string
	Detail  string
}

// auditCursor reads the audit rows appended since its last read.
type auditCursor struct {
	e    *opsEnv
	last int64
}

func (c *auditCursor) next(t *testing.T) []auditRecord {
	t.Helper()
	rows, _ := c.e.pool.Query(t.Context(), `SELECT id, at, action, status, outcome, detail::text FROM audit_log WHERE id > $1 ORDER BY id`, c.last)
	rs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[auditRecord])
	require.NoError(t, err)
	if len(rs) > 0 {
		c.last = rs[len(rs)-1].ID
	}
	return rs
}

// TestEveryChangeIsAuditedOnceInItsTransaction makes one call of every
// kind of change of the management API and checks that each leaves exactly
// one audit row, with the status the call answers and the change's time.
// Run again with every answer dropped right after the change (a crash
// between the commit and the answer), each change still has its success
// row: it was written in the change's own transaction. Calls that change
// nothing (a refusal inside the transaction, which rolls back; a repeated
// revocation) get one row written after the answer, never a success row
// of a change that did not happen.
func TestEveryChangeIsAuditedOnceInItsTransaction(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := "answered"
		if crash {
			name = "answer dropped after the commit"
		}
		t.Run(name, func(t *testing.T) {
			sw := &crashSwitch{}
			clk := &clock{t: time.Now().UTC()}
			fe := newEnv(t, envOptions{policy: fleet.Policy{AcceptAll: true, AllowOverrides: true}, now: clk.Now, wrap: sw.wrap})
			e := &opsEnv{fleetEnv: fe, clock: clk, pool: fe.pool, sched: fleet.NewScheduler(fe.fleet, time.Hour), url: fe.mgmtURL}
			// A fresh connection per call: a dropped answer breaks its connection.
			tr := &http.Transport{DisableKeepAlives: true}
			t.Cleanup(tr.CloseIdleConnections)
			admin := &http.Client{Transport: bearer{token: adminToken, next: tr}, Timeout: 10 * time.Second}
			rows := &auditCursor{e: e}
			rows.next(t)

			send := func(method, path, contentType, body string) (*http.Response, []byte, error) {
				req, err := http.NewRequestWithContext(t.Context(), method, e.mgmtURL+path, strings.NewReader(body))
				require.NoError(t, err)
				if contentType != "" {
					req.Header.Set("Content-Type", contentType)
				}
				res, err := admin.Do(req)
				if err != nil {
					return nil, nil, err
				}
				defer res.Body.Close()
				b, err := io.ReadAll(res.Body)
				require.NoError(t, err)
				return res, b, nil
			}
			// change makes a call that changes something (crashing its
			// answer in the second run) and checks its one audit row.
			change := func(action string, want int, method, path, contentType, body string) []byte {
				t.Helper()
				clk.Advance(time.Second) // every change at its own time
				sw.on.Store(crash)
				res, b, err := send(method, path, contentType, body)
				sw.on.Store(false)
				if crash {
					require.Error(t, err, "%s: the answer is dropped", action)
				} else {
					require.NoError(t, err)
					require.Equal(t, want, res.StatusCode, "%s: %s", action, b)
				}
				rs := rows.next(t)
				require.Len(t, rs, 1, "%s: exactly one audit row", action)
				assert.Equal(t, action, rs[0].Action)
				assert.Equal(t, want, rs[0].Status, action)
				assert.Equal(t, "success", rs[0].Outcome, action)
				assert.WithinDuration(t, clk.Now(), rs[0].At, time.Millisecond, "%s: at the change's time", action)
				return b
			}
			// unchanged makes a call that changes nothing, never crashed,
			// and checks its one audit row (written after the answer).
			unchanged := func(action string, want int, outcome, method, path, contentType, body string) {
				t.Helper()
				res, b, err := send(method, path, contentType, body)
				require.NoError(t, err)
				require.Equal(t, want, res.StatusCode, "%s: %s", action, b)
				rs := rows.next(t)
				require.Len(t, rs, 1, "%s: exactly one audit row", action)
				assert.Equal(t, action, rs[0].Action)
				assert.Equal(t, want, rs[0].Status, action)
				assert.Equal(t, outcome, rs[0].Outcome, action)
			}
			const yaml, js = "application/yaml", "application/json"

			// The catalog.
			for _, v := range []string{"1.0.0", "2.0.0", "9.0.0"} {
				change("createApplicationVersion", http.StatusCreated, "POST", "/mgmt/v1/applications", yaml, string(describe(v, "")))
			}
			unchanged("createApplicationVersion", http.StatusOK, "success", "POST", "/mgmt/v1/applications", yaml, string(describe("1.0.0", "")))
			change("yankApplicationVersion", http.StatusOK, "POST", "/mgmt/v1/applications/svc/versions/2.0.0/yank", js, `{"reason":"bad build"}`)
			change("unyankApplicationVersion", http.StatusOK, "POST", "/mgmt/v1/applications/svc/versions/2.0.0/unyank", "", "")
			change("deleteApplicationVersion", http.StatusNoContent, "DELETE", "/mgmt/v1/applications/svc/versions/9.0.0", "", "")

			// Clients and devices.
			change("acceptClient", http.StatusCreated, "POST", "/mgmt/v1/clients", js, `{"id":"other"}`)
			change("retireClient", http.StatusOK, "POST", "/mgmt/v1/clients/other/retire", "", "")
			unchanged("retireClient", http.StatusOK, "success", "POST", "/mgmt/v1/clients/other/retire", "", "")
			change("acceptClient", http.StatusOK, "POST", "/mgmt/v1/clients", js, `{"id":"other"}`)
			unchanged("acceptClient", http.StatusOK, "success", "POST", "/mgmt/v1/clients", js, `{"id":"other"}`)
			dev := e.client(t, "plant")
			res, body := dev.do("PUT", "/api/v1/capabilities/edge", capabilities("edge", "compose"))
			require.Equal(t, http.StatusCreated, res.StatusCode, string(body))
			change("putDeviceLabels", http.StatusOK, "PUT", "/mgmt/v1/clients/plant/devices/edge/labels", js, `{"labels":{"tier":"gold"}}`)
			d, err := e.mgmt.GetDeviceWithResponse(t.Context(), "plant", "edge")
			require.NoError(t, err)
			assert.Equal(t, "gold", d.JSON200.OperatorLabels["tier"], "the change happened")

			// A deployment and its operations.
			change("createDeployment", http.StatusCreated, "POST", "/mgmt/v1/deployments", js,
				`{"applicationId":"svc","version":"1.0.0","clientId":"plant","deviceId":"edge"}`)
			list, err := e.mgmt.ListDeploymentsWithResponse(t.Context(), &sdk.ListDeploymentsParams{})
			require.NoError(t, err)
			require.Len(t, list.JSON200.Items, 1, "the change happened")
			id := list.JSON200.Items[0].Id.String()
			dev.installAll()
			queued := func() string {
				t.Helper()
				ops, err := e.mgmt.ListOperationsWithResponse(t.Context(), &sdk.ListOperationsParams{State: ptrTo(sdk.OperationStateQueued)})
				require.NoError(t, err)
				require.Len(t, ops.JSON200.Items, 1, "the operation was created")
				return ops.JSON200.Items[0].Id.String()
			}
			settle := func() {
				e.tick(t)
				dev.installAll()
				e.tick(t)
			}
			change("upgradeDeployment", http.StatusAccepted, "POST", "/mgmt/v1/deployments/"+id+"/upgrade", js, `{"targetVersion":"2.0.0"}`)
			queued()
			settle()
			change("reconfigureDeployment", http.StatusAccepted, "POST", "/mgmt/v1/deployments/"+id+"/reconfigure", js, `{"parameters":{"greeting":"hi"}}`)
			queued()
			settle()
			unchanged("rollbackDeployment", http.StatusOK, "success", "POST", "/mgmt/v1/deployments/"+id+"/rollback", js, `{"dryRun":true}`)
			change("rollbackDeployment", http.StatusAccepted, "POST", "/mgmt/v1/deployments/"+id+"/rollback", js, `{}`)
			change("cancelOperation", http.StatusOK, "POST", "/mgmt/v1/operations/"+queued()+"/cancel", "", "")
			// Refused inside its transaction (a deployment's history
			// refers to the version): rolled back, one failure row.
			unchanged("deleteApplicationVersion", http.StatusConflict, "failure", "DELETE", "/mgmt/v1/applications/svc/versions/1.0.0", "", "")
			change("deleteDeployment", http.StatusAccepted, "DELETE", "/mgmt/v1/deployments/"+id, "", "")
			assert.True(t, e.deployment(t, id).State == "removing" || e.deployment(t, id).State == "removed", "the change happened")

			// Tokens.
			change("createToken", http.StatusCreated, "POST", "/mgmt/v1/tokens", js, `{"name":"ci","role":"viewer"}`)
			toks, err := e.mgmt.ListTokensWithResponse(t.Context(), &sdk.ListTokensParams{})
			require.NoError(t, err)
			var tokenID string
			for _, tok := range toks.JSON200.Items {
				if tok.Name == "ci" {
					tokenID = tok.Id
				}
			}
			require.NotEmpty(t, tokenID, "the change happened")
			change("revokeToken", http.StatusOK, "DELETE", "/mgmt/v1/tokens/"+tokenID, "", "")
			unchanged("revokeToken", http.StatusOK, "success", "DELETE", "/mgmt/v1/tokens/"+tokenID, "", "")
			unchanged("revokeToken", http.StatusNotFound, "failure", "DELETE", "/mgmt/v1/tokens/nosuchtoken", "", "")

			// The token's creation and its audit row carry the same time.
			var same bool
			require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM api_tokens k JOIN audit_log a
ON a.action = 'createToken' AND a.at = k.created_at WHERE k.id = $1)`, tokenID).Scan(&same))
			assert.True(t, same)
		})
	}
}

// TestBreakGlassDetailIsInTheChangesRow: a forced rollback's audit row,
// written in the operation's transaction, carries the override, its reason
// and whether the plan needed it, even when the answer is lost.
func TestBreakGlassDetailIsInTheChangesRow(t *testing.T) {
	sw := &crashSwitch{}
	clk := &clock{t: time.Now().UTC()}
	fe := newEnv(t, envOptions{policy: fleet.Policy{AcceptAll: true, AllowOverrides: true}, now: clk.Now, wrap: sw.wrap})
	e := &opsEnv{fleetEnv: fe, clock: clk, pool: fe.pool, sched: fleet.NewScheduler(fe.fleet, time.Hour), url: fe.mgmtURL}
	const noDowngrade = "  rollback:\n    allowed: false\n    reason: \"2.0 migrates the schema\"\n"
	dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": noDowngrade}, "1.0.0")
	up := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
	require.Equal(t, http.StatusAccepted, up.StatusCode(), string(up.Body))
	e.tick(t)
	dev.installAll()
	e.tick(t)
	require.Equal(t, "2.0.0", e.deployment(t, id).Version)

	rows := &auditCursor{e: e}
	rows.next(t)
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	req, err := http.NewRequestWithContext(t.Context(), "POST", e.mgmtURL+"/mgmt/v1/deployments/"+id+"/rollback",
		strings.NewReader(`{"force":true,"reason":"incident 42"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	sw.on.Store(true)
	_, err = (&http.Client{Transport: bearer{token: adminToken, next: tr}}).Do(req)
	sw.on.Store(false)
	require.Error(t, err, "the answer is dropped")
	rs := rows.next(t)
	require.Len(t, rs, 1)
	assert.Equal(t, "rollbackDeployment", rs[0].Action)
	assert.Equal(t, http.StatusAccepted, rs[0].Status)
	var detail map[string]any
	require.NoError(t, json.Unmarshal([]byte(rs[0].Detail), &detail))
	assert.Equal(t, map[string]any{"force": true, "reason": "incident 42", "forced": true}, detail)
}
