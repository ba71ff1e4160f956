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
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/feed"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/sdk"
)

// streamEnv is a server with event streams whose shared reader the test
// drives (pump), on its own database.
func streamEnv(t *testing.T, cfg feed.Config, o envOptions) *fleetEnv {
	t.Helper()
	o.policy = fleet.Policy{AcceptAll: true}
	o.streams = &cfg
	if o.heartbeat == 0 {
		o.heartbeat = time.Hour // tests that need heartbeats set it
	}
	e := newEnv(t, o)
	_, err := e.hub.RunOnce(t.Context()) // start: the shared reader's position
	require.NoError(t, err)
	return e
}

// event returns an event about subject at now.
func event(t *testing.T, subject lifecycle.Ref, body lifecycle.EventBody, related ...lifecycle.Ref) lifecycle.Event {
	t.Helper()
	e, err := lifecycle.NewEvent(time.Now().UTC(), "tester", subject, body, related...)
	require.NoError(t, err)
	return e
}

// commit appends events in one transaction of pool: another writer, as a
// replica's change would.
func commit(t *testing.T, pool *pgxpool.Pool, events ...lifecycle.Event) []lifecycle.Event {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		return postgres.AppendEvents(context.Background(), tx, events)
	}))
	return events
}

// pump runs the hub's shared reader until it has read through id: events
// become readable once every older transaction of the PostgreSQL server
// ended (other tests' included), so it polls, with a bound.
func pump(t *testing.T, hub *feed.Hub, id int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for hub.Stats().Head < id {
		_, err := hub.RunOnce(t.Context())
		require.NoError(t, err)
		require.True(t, time.Now().Before(deadline), "event %d not read within 20 s (head %d)", id, hub.Stats().Head)
		time.Sleep(2 * time.Millisecond) // not a wait for our own work: for other transactions of the server to end
	}
}

// waitFor polls cond with a bound: for state the server reaches on its own
// goroutine (a handler returning) that no signal reports.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 2*time.Millisecond, what)
}

// Test fixtures: refs and a mix of events of both visibilities.
var (
	appSvc  = lifecycle.Ref{Kind: lifecycle.SubjectApplication, ID: "svc"}
	client1 = lifecycle.Ref{Kind: lifecycle.SubjectClient, ID: "plant-1"}
	client2 = lifecycle.Ref{Kind: lifecycle.SubjectClient, ID: "plant-2"}
	dev1    = lifecycle.DeviceRef("plant-1", "press-1")
	dep1    = lifecycle.Ref{Kind: lifecycle.SubjectDeployment, ID: "00000000-0000-4000-8000-0000000000d1"}
	dep2    = lifecycle.Ref{Kind: lifecycle.SubjectDeployment, ID: "00000000-0000-4000-8000-0000000000d2"}
	op1     = lifecycle.Ref{Kind: lifecycle.SubjectOperation, ID: "o1"}
	tok1    = lifecycle.Ref{Kind: lifecycle.SubjectToken, ID: "t1"}
	roll1   = lifecycle.Ref{Kind: lifecycle.SubjectRollout, ID: "00000000-0000-4000-8000-0000000000a1"}
)

func mixedEvents(t *testing.T) []lifecycle.Event {
	return []lifecycle.Event{
		event(t, dep1, lifecycle.DeploymentStateChangedBody{From: lifecycle.StateInstalling, To: lifecycle.StateFailed, Cause: "report", Revision: 1}, appSvc, client1, dev1),
		event(t, client2, lifecycle.ClientAcceptedBody{}),
		event(t, op1, lifecycle.OperationFailedBody{Operation: "upgrade", Reason: "StepFailed"}, dep2, appSvc),
		event(t, tok1, lifecycle.TokenCreatedBody{Name: "ci", Role: "viewer"}),
		event(t, dep2, lifecycle.RevisionPublishedBody{Revision: 2, Version: "2.0.0", Operation: "upgrade", ManifestVersion: 3}, appSvc, client2),
		event(t, roll1, lifecycle.RolloutWaveSettledBody{Wave: 1, Succeeded: 3}, appSvc),
	}
}

// eventJSON is an event as the API answers it.
type eventJSON struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	At      string `json:"at"`
	Subject struct {
		Kind string `json:"kind"`
		ID   string `json:"id"`
	} `json:"subject"`
	Related []struct {
		Kind string `json:"kind"`
		ID   string `json:"id"`
	} `json:"related"`
	Actor string          `json:"actor"`
	Data  json.RawMessage `json:"data"`
}

// get calls the management API with a bearer token (none when empty) and
// extra headers (name, value, …).
func get(t *testing.T, base, token, pathQuery string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+pathQuery, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return res
}

// listPage reads one JSON page.
func listPage(t *testing.T, base, token, query string) ([]eventJSON, string) {
	t.Helper()
	res := get(t, base, token, "/mgmt/v1/events"+query, "Accept", "application/json")
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	var page struct {
		Items      []eventJSON `json:"items"`
		NextCursor string      `json:"nextCursor"`
	}
	require.NoError(t, json.Unmarshal(body, &page))
	return page.Items, page.NextCursor
}

func typesOf(evs []eventJSON) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// tokenOf creates a token of role and returns its secret.
func tokenOf(t *testing.T, e *fleetEnv, role string) (id, secret string) {
	t.Helper()
	res, err := e.mgmt.CreateTokenWithResponse(t.Context(), sdk.CreateTokenRequest{Name: role, Role: sdk.Role(role)})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode())
	return res.JSON201.Token.Id, res.JSON201.Secret
}

func TestEventListFiltersVisibilityAndPages(t *testing.T) {
	t.Parallel()
	e := streamEnv(t, feed.Config{}, envOptions{})
	_, viewer := tokenOf(t, e, "viewer")
	_, operator := tokenOf(t, e, "operator")
	evs := commit(t, e.pool, mixedEvents(t)...)
	pump(t, e.hub, evs[len(evs)-1].ID)

	all := []string{"deployment.state_changed", "client.accepted", "operation.failed", "token.created", "revision.published", "rollout.wave_settled"}
	fleetOnly := []string{"deployment.state_changed", "operation.failed", "revision.published", "rollout.wave_settled"}
	tests := []struct {
		name, token, query string
		want               []string
	}{
		{"admin sees every event", adminToken, "", all},
		{"viewer sees the fleet's", viewer, "", fleetOnly},
		{"operator sees the fleet's", operator, "", fleetOnly},
		{"type", viewer, "?type=operation.failed", []string{"operation.failed"}},
		{"prefix and type, comma list", viewer, "?type=rollout.,revision.published", []string{"revision.published", "rollout.wave_settled"}},
		{"repeated type", viewer, "?type=rollout.&type=operation.", []string{"operation.failed", "rollout.wave_settled"}},
		{"admin prefix for an admin", adminToken, "?type=token.,client.", []string{"client.accepted", "token.created"}},
		{"application (subject or related)", viewer, "?application=svc", fleetOnly},
		{"client: related", adminToken, "?client=plant-2", []string{"client.accepted", "revision.published"}},
		{"device", viewer, "?device=plant-1/press-1", []string{"deployment.state_changed"}},
		{"deployment: subject or related", viewer, "?deployment=00000000-0000-4000-8000-0000000000d2", []string{"operation.failed", "revision.published"}},
		{"rollout", viewer, "?rollout=00000000-0000-4000-8000-0000000000a1", []string{"rollout.wave_settled"}},
		{"filters combine", viewer, "?application=svc&type=deployment.,revision.", []string{"deployment.state_changed", "revision.published"}},
		{"after", adminToken, "?after=" + strconv.FormatInt(evs[3].ID, 10), all[4:]},
		{"nothing", viewer, "?client=nobody", []string{}},
	}
	for _, tt := range tests {
		// From the fixtures on: the tokens made above have their events too.
		q := tt.query
		if !strings.Contains(q, "after=") {
			sep := "?"
			if q != "" {
				sep = "&"
			}
			q += sep + "after=" + strconv.FormatInt(evs[0].ID-1, 10)
		}
		got, next := listPage(t, e.mgmtURL, tt.token, q)
		assert.Equal(t, tt.want, typesOf(got), "GET /mgmt/v1/events%s", q)
		assert.Empty(t, next, "%s: one page", tt.name)
	}

	// One event in full: the contract's Event.
	got, _ := listPage(t, e.mgmtURL, viewer, "?device=plant-1/press-1")
	require.Len(t, got, 1)
	assert.Equal(t, strconv.FormatInt(evs[0].ID, 10), got[0].ID)
	assert.Equal(t, "deployment", got[0].Subject.Kind)
	assert.Equal(t, dep1.ID, got[0].Subject.ID)
	assert.Len(t, got[0].Related, 3)
	assert.Equal(t, "tester", got[0].Actor)
	assert.JSONEq(t, string(evs[0].Body), string(got[0].Data))

	// Pages of two walk the log exactly once, in id order.
	var walked []string
	cursor := ""
	for range 10 {
		q := "?limit=2&after=" + strconv.FormatInt(evs[0].ID-1, 10)
		if cursor != "" {
			q = "?limit=2"
			q += "&cursor=" + cursor
		}
		items, next := listPage(t, e.mgmtURL, adminToken, q)
		walked = append(walked, typesOf(items)...)
		if cursor = next; cursor == "" {
			break
		}
	}
	assert.Equal(t, all, walked, "pages of 2")
}

// sse is a client of one event stream: frames are parsed as they come.
type sse struct {
	res    *http.Response
	frames chan sseFrame
	cancel context.CancelFunc
	ended  chan struct{}
}

type sseFrame struct {
	id, event, data string
	comment         string
}

// openSSE opens a stream; header is name, value pairs.
func openSSE(t *testing.T, base, token, query string, header ...string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/mgmt/v1/events"+query, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		cancel()
		require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	}
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	s := &sse{res: res, frames: make(chan sseFrame, 10_000), cancel: cancel, ended: make(chan struct{})}
	go func() {
		defer close(s.ended)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var f sseFrame
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if f != (sseFrame{}) {
					s.frames <- f
				}
				f = sseFrame{}
			case strings.HasPrefix(line, ":"):
				f.comment = strings.TrimSpace(line[1:])
			default:
				k, v, _ := strings.Cut(line, ": ")
				switch k {
				case "id":
					f.id = v
				case "event":
					f.event = v
				case "data":
					f.data = v
				}
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *sse) close() {
	s.cancel()
	_ = s.res.Body.Close()
}

// next returns the next event frame (skipping comments and retry), with a
// bound.
func (s *sse) next(t *testing.T) sseFrame {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case f := <-s.frames:
			if f.id != "" {
				return f
			}
		case <-s.ended:
			require.Fail(t, "the stream ended")
		case <-timeout:
			require.Fail(t, "no event within 10 s")
		}
	}
}

// events reads n event frames.
func (s *sse) events(t *testing.T, n int) []sseFrame {
	t.Helper()
	out := make([]sseFrame, n)
	for i := range out {
		out[i] = s.next(t)
	}
	return out
}

// waitEnd waits for the server to end the stream, with a bound.
func (s *sse) waitEnd(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.ended:
	case <-time.After(10 * time.Second):
		require.Fail(t, "the stream did not end: "+what)
	}
}

func frameTypes(fs []sseFrame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.event
	}
	return out
}

func TestEventStreamFiltersAndVisibility(t *testing.T) {
	t.Parallel()
	e := streamEnv(t, feed.Config{}, envOptions{})
	_, viewer := tokenOf(t, e, "viewer")
	before := commit(t, e.pool, event(t, dep1, lifecycle.DeploymentStateChangedBody{To: lifecycle.StatePending, Cause: "operator"}))
	pump(t, e.hub, before[0].ID)

	// Without after: only what is committed from now on.
	admin := openSSE(t, e.mgmtURL, adminToken, "")
	view := openSSE(t, e.mgmtURL, viewer, "")
	ops := openSSE(t, e.mgmtURL, viewer, "?type=operation.,rollout.&application=svc")
	evs := commit(t, e.pool, mixedEvents(t)...)
	pump(t, e.hub, evs[len(evs)-1].ID)

	got := admin.events(t, 6)
	assert.Equal(t, []string{"deployment.state_changed", "client.accepted", "operation.failed", "token.created", "revision.published", "rollout.wave_settled"},
		frameTypes(got))
	for i, f := range got {
		assert.Equal(t, strconv.FormatInt(evs[i].ID, 10), f.id, "id: line")
		var ev eventJSON
		require.NoError(t, json.Unmarshal([]byte(f.data), &ev), "data: one line of JSON")
		assert.Equal(t, f.id, ev.ID)
		assert.Equal(t, f.event, ev.Type)
	}
	assert.Equal(t, []string{"deployment.state_changed", "operation.failed", "revision.published", "rollout.wave_settled"}, frameTypes(view.events(t, 4)))
	assert.Equal(t, []string{"operation.failed", "rollout.wave_settled"}, frameTypes(ops.events(t, 2)))

	// Nothing more came to the viewer: the next one is the next fleet event.
	last := commit(t, e.pool, event(t, tok1, lifecycle.TokenRevokedBody{Name: "ci"}), event(t, dep2, lifecycle.DeploymentStateChangedBody{To: lifecycle.StateRemoved, Cause: "operator"}))
	pump(t, e.hub, last[1].ID)
	assert.Equal(t, strconv.FormatInt(last[1].ID, 10), view.next(t).id)
	assert.Equal(t, strconv.FormatInt(last[0].ID, 10), admin.next(t).id)

	// A viewer asking for admin-only types is refused.
	res := get(t, e.mgmtURL, viewer, "/mgmt/v1/events?type=token.", "Accept", "text/event-stream")
	readProblem(t, res, http.StatusForbidden)
}

func TestEventStreamResumesAcrossReplicasWhileAnotherWrites(t *testing.T) {
	t.Parallel()
	a := streamEnv(t, feed.Config{Buffer: 10_000}, envOptions{})
	b := streamEnv(t, feed.Config{Buffer: 10_000}, envOptions{pool: a.pool}) // a second replica on the same database

	// A third writer (its own pool) commits events while streams read:
	// concurrent transactions of one to three events, some held open so
	// that later ones commit first.
	writer, err := pgxpool.New(t.Context(), a.pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(writer.Close)
	start := commit(t, writer, event(t, dep1, lifecycle.DeploymentStateChangedBody{To: lifecycle.StatePending, Cause: "operator"}))
	pump(t, a.hub, start[0].ID)
	pump(t, b.hub, start[0].ID)
	stream := openSSE(t, a.mgmtURL, adminToken, "?after="+strconv.FormatInt(start[0].ID, 10))

	const writers, perWriter = 4, 30
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				n := 1 + (w+i)%3
				evs := make([]lifecycle.Event, n)
				for k := range evs {
					evs[k] = event(t, lifecycle.Ref{Kind: lifecycle.SubjectDeployment, ID: fmt.Sprintf("w%d-%d-%d", w, i, k)},
						lifecycle.DeploymentStateChangedBody{To: lifecycle.StateInstalling, Cause: "report"})
				}
				err := pgx.BeginFunc(context.Background(), writer, func(tx pgx.Tx) error {
					if err := postgres.AppendEvents(context.Background(), tx, evs); err != nil {
						return err
					}
					if i%7 == 0 {
						_, err := tx.Exec(context.Background(), "SELECT pg_sleep(0.02)") // commit after younger transactions
						return err
					}
					return nil
				})
				assert.NoError(t, err)
			}
		}()
	}
	// Both replicas' shared readers run while the writers write.
	stop := make(chan struct{})
	var pumps sync.WaitGroup
	for _, h := range []*feed.Hub{a.hub, b.hub} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := h.RunOnce(context.Background())
				assert.NoError(t, err)
				time.Sleep(time.Millisecond)
			}
		}()
	}
	t.Cleanup(func() { close(stop); pumps.Wait() })

	// Read some on replica a, then go; resume on replica b with
	// Last-Event-ID, as EventSource does.
	var got []string
	for _, f := range stream.events(t, 25) {
		got = append(got, f.id)
	}
	stream.close()
	resumed := openSSE(t, b.mgmtURL, adminToken, "", "Last-Event-ID", got[len(got)-1])
	wg.Wait()

	var want []string
	rows, err := a.pool.Query(t.Context(), `SELECT e.id::text FROM events e WHERE e.id > $1 ORDER BY e.id`, start[0].ID)
	require.NoError(t, err)
	want, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, want, writers*perWriter*2) // 1, 2, 3 events per transaction, evenly
	for len(got) < len(want) {
		got = append(got, resumed.next(t).id)
	}
	assert.Equal(t, want, got, "every event once, in id order, across the resume")
}

func TestEventStreamBeyondRetentionIsGone(t *testing.T) {
	t.Parallel()
	e := streamEnv(t, feed.Config{}, envOptions{})
	old := commit(t, e.pool, event(t, dep1, lifecycle.DeploymentStateChangedBody{To: lifecycle.StatePending, Cause: "operator"}),
		event(t, dep1, lifecycle.DeploymentStateChangedBody{To: lifecycle.StateInstalling, Cause: "report"}))
	pump(t, e.hub, old[1].ID)
	n, err := postgres.NewEventLog(e.pool).PruneEvents(t.Context(), time.Now().Add(48*time.Hour), postgres.EventRetention{MaxAge: time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	kept := commit(t, e.pool, event(t, dep2, lifecycle.DeploymentStateChangedBody{To: lifecycle.StatePending, Cause: "operator"}))
	pump(t, e.hub, kept[0].ID)

	for _, accept := range []string{"text/event-stream", "application/json"} {
		res := get(t, e.mgmtURL, adminToken, "/mgmt/v1/events?after="+strconv.FormatInt(old[0].ID, 10), "Accept", accept)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusGone, res.StatusCode, string(body))
		var p struct {
			Type        string `json:"type"`
			ResumeAfter string `json:"resumeAfter"`
		}
		require.NoError(t, json.Unmarshal(body, &p))
		assert.Equal(t, "events-gone", strings.TrimPrefix(p.Type, "https://github.com/wfm-dev/wfm/blob/main/docs/problems.md#"))
		assert.Equal(t, strconv.FormatInt(old[1].ID, 10), p.ResumeAfter, "%s: the id to resume after", accept)
	}
	// Resuming where the problem says works; the JSON list starts at the
	// oldest event kept.
	s := openSSE(t, e.mgmtURL, adminToken, "?after="+strconv.FormatInt(old[1].ID, 10))
	assert.Equal(t, strconv.FormatInt(kept[0].ID, 10), s.next(t).id)
	items, _ := listPage(t, e.mgmtURL, adminToken, "")
	require.Len(t, items, 1)
	assert.Equal(t, strconv.FormatInt(kept[0].ID, 10), items[0].ID)
	// after=0 (and Last-Event-ID: 0) is the oldest event kept too, as the
	// contract says, not 410.
	items, _ = listPage(t, e.mgmtURL, adminToken, "?after=0")
	require.Len(t, items, 1)
	assert.Equal(t, strconv.FormatInt(kept[0].ID, 10), items[0].ID)
	s = openSSE(t, e.mgmtURL, adminToken, "?after=0")
	assert.Equal(t, strconv.FormatInt(kept[0].ID, 10), s.next(t).id)
	s = openSSE(t, e.mgmtURL, adminToken, "", "Last-Event-ID", "0")
	assert.Equal(t, strconv.FormatInt(kept[0].ID, 10), s.next(t).id)
}

func TestSlowConsumerIsDisconnected(t *testing.T) {
	// Not parallel: it writes megabytes. Under load it once failed one run
	// in two: its stream, having caught up ahead of the shared reader,
	// overflowed with events it had delivered and waited for its heartbeat
	// (an hour here) instead of reading on (see
	// TestStreamJoinedAheadOfTheSharedReaderKeepsDelivering).
	const buffer = 8
	e := streamEnv(t, feed.Config{Buffer: buffer}, envOptions{writeTimeout: 200 * time.Millisecond})
	// A consumer that reads the answer's head, then nothing, with a small
	// receive buffer (else the kernel's autotuning, up to tcp_rmem's
	// maximum, could hold every event this test writes).
	dialer := &net.Dialer{}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(16 << 10)
		}
		return c, err
	}}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.mgmtURL+"/mgmt/v1/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Accept", "text/event-stream")
	stalled, err := hc.Do(req)
	require.NoError(t, err)
	defer stalled.Body.Close()
	require.Equal(t, http.StatusOK, stalled.StatusCode)
	waitFor(t, "the stream caught up and joined the fan-out", func() bool { return e.hub.Stats().Live == 1 })

	// Far more than the kernel's socket buffers hold: 3.5 KiB bodies.
	big := strings.Repeat("x", 3500)
	var last lifecycle.Event
	for range 10 {
		evs := make([]lifecycle.Event, 500)
		for i := range evs {
			evs[i] = event(t, dep1, lifecycle.DeploymentStateChangedBody{To: lifecycle.StateFailed, Cause: "report", Message: big})
		}
		last = commit(t, e.pool, evs...)[len(evs)-1]
	}
	maxQueued := 0
	deadline := time.Now().Add(20 * time.Second)
	for e.hub.Stats().Head < last.ID {
		_, err := e.hub.RunOnce(t.Context())
		require.NoError(t, err)
		maxQueued = max(maxQueued, e.hub.Stats().Queued)
		require.True(t, time.Now().Before(deadline), "events not read")
	}
	assert.LessOrEqual(t, maxQueued, buffer, "the server queues at most Buffer events per stream")
	// Its writes stall: it is disconnected at its write deadline.
	require.Eventually(t, func() bool { return e.hub.Stats().Streams == 0 }, 30*time.Second, 5*time.Millisecond,
		"the slow stream was ended") // a longer bound: it writes megabytes first, slow on a loaded machine
	assert.Equal(t, 0, e.hub.Stats().Queued)
}

func TestEventStreamEndsWhenItsTokenIsRevoked(t *testing.T) {
	t.Parallel()
	e := streamEnv(t, feed.Config{}, envOptions{heartbeat: 20 * time.Millisecond})
	id1, viewer1 := tokenOf(t, e, "viewer")
	id2, viewer2 := tokenOf(t, e, "viewer")
	s1 := openSSE(t, e.mgmtURL, viewer1, "")
	s2 := openSSE(t, e.mgmtURL, viewer2, "")

	// Revoked through this server: its streams end at once.
	res, err := e.mgmt.RevokeTokenWithResponse(t.Context(), id1)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode())
	s1.waitEnd(t, "revoked through this server")

	// Revoked by another replica (here: in the database): the stream ends at
	// its next check (each heartbeat).
	_, err = e.pool.Exec(t.Context(), `UPDATE api_tokens SET revoked_at = now() WHERE id = $1`, id2)
	require.NoError(t, err)
	s2.waitEnd(t, "revoked elsewhere")
	waitFor(t, "no stream left", func() bool { return e.hub.Stats().Streams == 0 })
}

func TestStreamTicketWorksOnceAndExpires(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Now().UTC()}
	e := streamEnv(t, feed.Config{}, envOptions{now: clk.Now})
	_, viewer := tokenOf(t, e, "viewer")
	ticket := func(token string) string {
		t.Helper()
		c := clientAs(t, e.mgmtURL, token)
		res, err := c.CreateStreamTicketWithResponse(t.Context())
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
		assert.True(t, strings.HasPrefix(res.JSON201.Ticket, "wfmt_"))
		assert.WithinDuration(t, clk.Now().Add(time.Minute), res.JSON201.ExpiresAt, time.Second)
		return res.JSON201.Ticket
	}

	// A ticket opens a stream, once, as its token (a viewer).
	tk := ticket(viewer)
	s := openSSE(t, e.mgmtURL, "", "?ticket="+url.QueryEscape(tk))
	evs := commit(t, e.pool, event(t, tok1, lifecycle.TokenCreatedBody{Name: "x", Role: "viewer"}),
		event(t, dep1, lifecycle.DeploymentStateChangedBody{To: lifecycle.StatePending, Cause: "operator"}))
	pump(t, e.hub, evs[1].ID)
	assert.Equal(t, strconv.FormatInt(evs[1].ID, 10), s.next(t).id, "the ticket's viewer role: no token events")
	readProblem(t, get(t, e.mgmtURL, "", "/mgmt/v1/events?ticket="+url.QueryEscape(tk), "Accept", "text/event-stream"), http.StatusUnauthorized)

	// Only its hash is stored.
	var stored int
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT count(*) FROM stream_tickets WHERE hash = $1`, tk).Scan(&stored))
	assert.Zero(t, stored)

	// It expires after a minute.
	tk = ticket(viewer)
	clk.Advance(61 * time.Second)
	readProblem(t, get(t, e.mgmtURL, "", "/mgmt/v1/events?ticket="+url.QueryEscape(tk), "Accept", "text/event-stream"), http.StatusUnauthorized)

	// Within its minute it works, for the JSON list too.
	tk = ticket(viewer)
	clk.Advance(59 * time.Second)
	res := get(t, e.mgmtURL, "", "/mgmt/v1/events?ticket="+url.QueryEscape(tk), "Accept", "application/json")
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)

	// A HEAD does not spend a ticket: refused (400, no body), and the
	// ticket then opens its stream.
	tk = ticket(viewer)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, e.mgmtURL+"/mgmt/v1/events?ticket="+url.QueryEscape(tk), nil)
	require.NoError(t, err)
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusBadRequest, res.StatusCode)
	res = get(t, e.mgmtURL, "", "/mgmt/v1/events?ticket="+url.QueryEscape(tk))
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode, "the ticket was not used up by the HEAD")

	// A ticket with an Authorization header is refused, and not used up.
	tk = ticket(viewer)
	p := readProblem(t, get(t, e.mgmtURL, viewer, "/mgmt/v1/events?ticket="+url.QueryEscape(tk)), http.StatusBadRequest)
	require.Len(t, p.Errors, 1)
	assert.Equal(t, "query/ticket", p.Errors[0].Field)
	res = get(t, e.mgmtURL, "", "/mgmt/v1/events?ticket="+url.QueryEscape(tk))
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)

	// Made-up tickets are 401.
	readProblem(t, get(t, e.mgmtURL, "", "/mgmt/v1/events?ticket=wfmt_nothing"), http.StatusUnauthorized)
}

func TestEventRequestsAreCheckedPrecisely(t *testing.T) {
	t.Parallel()
	e := streamEnv(t, feed.Config{}, envOptions{})
	tests := []struct {
		name, query string
		header      []string
		status      int
		field       string
	}{
		{"unknown type", "?type=rollout.exploded", nil, 400, "query/type"},
		{"unknown prefix", "?type=nothing.", nil, 400, "query/type"},
		{"empty type", "?type=", nil, 400, "query/type"},
		{"after not a number", "?after=abc", nil, 400, "query/after"},
		{"after with a leading zero", "?after=012", nil, 400, "query/after"},
		{"after negative", "?after=-1", nil, 400, "query/after"},
		{"after and Last-Event-ID differ", "?after=5", []string{"Last-Event-ID", "6"}, 400, "header/Last-Event-ID"},
		{"Last-Event-ID not a number", "", []string{"Last-Event-ID", "x"}, 400, "header/Last-Event-ID"},
		{"unknown parameter", "?since=2026-01-01", nil, 400, "query/since"},
		{"device without its client", "?device=press-1", nil, 400, "query/device"},
		{"cursor on a stream", "?cursor=MTA", []string{"Accept", "text/event-stream"}, 400, "query/cursor"},
		{"cursor not ours", "?cursor=!!", []string{"Accept", "application/json"}, 400, "query/cursor"},
		{"cursor and after", "?cursor=MTA&after=3", []string{"Accept", "application/json"}, 400, "query/cursor"},
		{"limit out of range", "?limit=501", []string{"Accept", "application/json"}, 400, "query/limit"},
		{"not acceptable", "", []string{"Accept", "text/html"}, 406, ""},
	}
	for _, tt := range tests {
		header := tt.header
		if !slices.Contains(header, "Accept") {
			header = append(slices.Clone(header), "Accept", "text/event-stream")
		}
		res := get(t, e.mgmtURL, adminToken, "/mgmt/v1/events"+tt.query, header...)
		p := readProblem(t, res, tt.status)
		if tt.field != "" {
			require.NotEmpty(t, p.Errors, tt.name)
			assert.Equal(t, tt.field, p.Errors[0].Field, tt.name)
		}
	}
	assert.Equal(t, 0, e.hub.Stats().Streams, "no stream was opened")

	// Same after and Last-Event-ID: fine.
	s := openSSE(t, e.mgmtURL, adminToken, "?after=0", "Last-Event-ID", "0")
	s.close()
}

func TestEventStreamsAreBoundedAndEndAtShutdown(t *testing.T) {
	t.Parallel()
	e := streamEnv(t, feed.Config{MaxStreams: 2, MaxStreamsPerToken: 2}, envOptions{
		// Short server timeouts: a stream outlives them.
		server: func(s *http.Server) { s.WriteTimeout, s.ReadTimeout = 200*time.Millisecond, 200*time.Millisecond },
		// Heartbeats every 50 ms: the stream writes after the timeouts passed.
		heartbeat: 50 * time.Millisecond,
	})
	s1 := openSSE(t, e.mgmtURL, adminToken, "")
	s2 := openSSE(t, e.mgmtURL, adminToken, "")
	p := readProblem(t, get(t, e.mgmtURL, adminToken, "/mgmt/v1/events", "Accept", "text/event-stream"), http.StatusServiceUnavailable)
	assert.Equal(t, httpapiProblem("too-many-streams"), p.Type)
	// Other calls are served meanwhile.
	res := get(t, e.mgmtURL, adminToken, "/mgmt/v1/events", "Accept", "application/json")
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)

	// Past the server's write and read timeouts, the stream still delivers.
	heartbeats := 0
	timeout := time.After(10 * time.Second)
	for heartbeats < 8 { // 8 × 50 ms > 200 ms
		select {
		case f := <-s1.frames:
			if f.comment == "heartbeat" {
				heartbeats++
			}
		case <-s1.ended:
			require.Fail(t, "the stream ended after the server's timeouts")
		case <-timeout:
			require.Fail(t, "no heartbeats")
		}
	}
	evs := commit(t, e.pool, event(t, dep1, lifecycle.DeploymentStateChangedBody{To: lifecycle.StatePending, Cause: "operator"}))
	pump(t, e.hub, evs[0].ID)
	assert.Equal(t, strconv.FormatInt(evs[0].ID, 10), s1.next(t).id)

	// Shutdown: streams end at once, new ones are refused.
	e.hub.CloseStreams()
	s1.waitEnd(t, "shutdown")
	s2.waitEnd(t, "shutdown")
	readProblem(t, get(t, e.mgmtURL, adminToken, "/mgmt/v1/events", "Accept", "text/event-stream"), http.StatusServiceUnavailable)
}

func httpapiProblem(slug string) string {
	return "https://github.com/wfm-dev/wfm/blob/main/docs/problems.md#" + slug
}

func TestBurstBeyondTheQueueIsReadFromTheLog(t *testing.T) {
	t.Parallel()
	e := streamEnv(t, feed.Config{Buffer: 4}, envOptions{})
	s := openSSE(t, e.mgmtURL, adminToken, "")
	waitFor(t, "the stream joined the fan-out", func() bool { return e.hub.Stats().Live == 1 })
	// 300 events in one batch of the shared reader: its queue of 4 fills,
	// and the stream reads the rest on its own, then joins again.
	evs := make([]lifecycle.Event, 300)
	for i := range evs {
		evs[i] = event(t, dep1, lifecycle.DeploymentStateChangedBody{To: lifecycle.StateInstalling, Cause: "report", Revision: i})
	}
	commit(t, e.pool, evs...)
	pump(t, e.hub, evs[len(evs)-1].ID)
	for i, f := range s.events(t, len(evs)) {
		require.Equal(t, strconv.FormatInt(evs[i].ID, 10), f.id, "event %d", i)
	}
	more := commit(t, e.pool, event(t, dep2, lifecycle.DeploymentStateChangedBody{To: lifecycle.StatePending, Cause: "operator"}))
	pump(t, e.hub, more[0].ID)
	assert.Equal(t, strconv.FormatInt(more[0].ID, 10), s.next(t).id)
	assert.Equal(t, 1, e.hub.Stats().Streams, "still connected")
}

// TestStreamJoinedAheadOfTheSharedReaderKeepsDelivering: a stream whose own
// read went past the shared reader joins the fan-out ahead of it, so the
// shared reader then queues it events it has delivered already. When those
// overflow its queue, it must read the log on its own again, not wait for
// its next heartbeat on a queue that no longer receives anything.
func TestStreamJoinedAheadOfTheSharedReaderKeepsDelivering(t *testing.T) {
	t.Parallel()
	// A queue of 1 and batches of 10: one pass of the shared reader over
	// the events below overflows it. Heartbeats are an hour apart.
	e := streamEnv(t, feed.Config{Buffer: 1, Batch: 10}, envOptions{})
	start := e.hub.Stats().Head
	evs := make([]lifecycle.Event, 10)
	for i := range evs {
		evs[i] = event(t, dep1, lifecycle.DeploymentStateChangedBody{To: lifecycle.StateInstalling, Cause: "report", Revision: i})
	}
	commit(t, e.pool, evs...)
	// Readable (past the log's gate) but not read by the shared reader: the
	// stream reads them on its own when it opens, and joins ahead of it.
	log := postgres.NewEventLog(e.pool)
	waitFor(t, "the events are readable", func() bool {
		got, err := log.EventsAfter(t.Context(), start, lifecycle.EventFilter{}, 100)
		return err == nil && len(got) == len(evs)
	})
	s := openSSE(t, e.mgmtURL, adminToken, "?after="+strconv.FormatInt(start, 10))
	for i, f := range s.events(t, len(evs)) {
		require.Equal(t, strconv.FormatInt(evs[i].ID, 10), f.id, "event %d", i)
	}
	st := e.hub.Stats()
	require.Equal(t, 1, st.Live, "the stream joined")
	require.Equal(t, start, st.Head, "ahead of the shared reader")

	// The shared reader reads them: duplicates for the stream, more than its
	// queue holds. Then a new event, which the shared reader no longer
	// queues for the overflowed stream.
	pump(t, e.hub, evs[len(evs)-1].ID)
	more := commit(t, e.pool, event(t, dep2, lifecycle.DeploymentStateChangedBody{To: lifecycle.StatePending, Cause: "operator"}))
	pump(t, e.hub, more[0].ID)
	assert.Equal(t, strconv.FormatInt(more[0].ID, 10), s.next(t).id, "delivered long before the next heartbeat")
}

func TestImportantEventsAreLoggedFromTheLog(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	e := streamEnv(t, feed.Config{}, envOptions{log: slog.New(slog.NewTextHandler(&out, nil))})
	evs := commit(t, e.pool,
		event(t, dep1, lifecycle.DeploymentStateChangedBody{From: lifecycle.StatePending, To: lifecycle.StateInstalling, Cause: "report", Revision: 1}, appSvc),
		event(t, dep1, lifecycle.DeploymentStateChangedBody{From: lifecycle.StateInstalling, To: lifecycle.StateFailed, Cause: "report", Reason: "InstallFailed", Revision: 1}, appSvc),
		event(t, op1, lifecycle.OperationFailedBody{Operation: "upgrade", Reason: "StepFailed"}, dep1),
		event(t, roll1, lifecycle.RolloutStateChangedBody{From: "running", To: "paused", Cause: "threshold"}, appSvc),
		event(t, tok1, lifecycle.TokenRevokedBody{Name: "ci"}),
	)
	pump(t, e.hub, evs[len(evs)-1].ID)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.Contains(l, "event_id=") {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 4, "at INFO, one line per important event, none for a move to installing (DEBUG):\n%s", out.String())
	for i, want := range []struct{ level, msg, id, detail string }{
		{"WARN", `msg="deployment failed"`, strconv.FormatInt(evs[1].ID, 10), "data.reason=InstallFailed"},
		{"WARN", `msg="operation failed"`, strconv.FormatInt(evs[2].ID, 10), "data.reason=StepFailed"},
		{"WARN", `msg="rollout paused"`, strconv.FormatInt(evs[3].ID, 10), "data.cause=threshold"},
		{"INFO", `msg="token revoked"`, strconv.FormatInt(evs[4].ID, 10), "subject=token:t1"},
	} {
		assert.Contains(t, lines[i], "level="+want.level+" "+want.msg)
		assert.Contains(t, lines[i], "event_id="+want.id)
		assert.Contains(t, lines[i], want.detail)
	}
}

// TestStreamsPerToken: one token cannot take every stream of a process:
// beyond its share it is refused (409 too-many-streams), while another
// token still opens one.
func TestStreamsPerToken(t *testing.T) {
	t.Parallel()
	e := streamEnv(t, feed.Config{MaxStreams: 8, MaxStreamsPerToken: 2}, envOptions{})
	_, viewer := tokenOf(t, e, "viewer")
	open := func(token string) *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.mgmtURL+"/mgmt/v1/events", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "text/event-stream")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { _ = res.Body.Close() })
		return res
	}
	for range 2 {
		require.Equal(t, http.StatusOK, open(viewer).StatusCode)
	}
	p := readProblem(t, open(viewer), http.StatusConflict)
	assert.Equal(t, httpapiProblem("too-many-streams"), p.Type)
	assert.Equal(t, http.StatusOK, open(adminToken).StatusCode, "another token still gets a stream")
}

// TestHeadOfTheEventStreamEnds: HEAD of the stream answers the stream's
// headers and ends (a stream that went on, its writes discarded, would
// hold the connection and a stream slot); the connection then serves the
// next request.
func TestHeadOfTheEventStreamEnds(t *testing.T) {
	t.Parallel()
	e := streamEnv(t, feed.Config{}, envOptions{})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	for range 3 { // one connection: each HEAD must end before the next is read
		req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, e.mgmtURL+"/mgmt/v1/events", nil)
		require.NoError(t, err)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Authorization", "Bearer "+adminToken)
		res, err := client.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		assert.Equal(t, http.StatusOK, res.StatusCode)
		assert.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.mgmtURL+"/mgmt/v1/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := client.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode, "the page after the HEADs, on the same connection")
}
