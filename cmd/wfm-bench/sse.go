package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// Sizes of the sse group.
const (
	sseClients    = 100   // SSE clients of one server
	sseBurst      = 20000 // events of the fan-out figure
	sseBurstBatch = 100   // events per transaction of the fan-out figure
	sseRate       = 500   // events per second of the latency figure
)

// sseFigures measures the event stream (issue 13) against a server started
// like the other groups' (private PostgreSQL, rate limits lifted), with
// sseClients clients reading GET /mgmt/v1/events as Server-Sent Events:
//   - fan-out: sseBurst events appended to the log as fast as one writer
//     commits them (transactions of sseBurstBatch events), over the time
//     from the first commit until every client has received the last one:
//     events per second delivered to each of the clients;
//   - latency at a steady sseRate events/s (one transaction every 10 ms)
//     for -duration: from each event's commit (the writer's COMMIT returned)
//     to its arrival at a client, p50 and p99 over all clients.
//
// Events are appended directly to the server's database (as any change's
// transaction appends them), so the figures measure the stream, not the
// cost of the changes that cause events.
func sseFigures(ctx context.Context, b *bench) ([]Figure, error) {
	if b.wfm == "" { // the only group selected that needs the server
		b.wfm = filepath.Join(b.cfg.src, "bin", "wfm")
		if err := b.goCmd(ctx, "build", "-o", b.wfm, "./cmd/wfm").Run(); err != nil {
			return nil, err
		}
	}
	// info: the database's socket is logged. The 100 streams share the
	// bench's admin token: the process allows a token an eighth of
	// -event-streams, so the cap is raised to let one token hold them.
	s, err := b.startServer(ctx, "sse", "info", "-event-streams", "1024")
	if err != nil {
		return nil, err
	}
	defer s.stop()
	if s.pgSocket == "" {
		return nil, errors.New("sse: the server did not log its PostgreSQL socket")
	}
	pool, err := pgxpool.New(ctx, fmt.Sprintf("host=%s port=%s user=postgres dbname=wfm", s.pgSocket, s.pgPort))
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	commits := &commitTimes{at: map[int64]time.Time{}}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clients := make([]*sseClient, sseClients)
	for i := range clients {
		c, err := openSSEClient(sctx, s, commits)
		if err != nil {
			return nil, fmt.Errorf("sse client %d: %w", i, err)
		}
		clients[i] = c
	}
	fmt.Fprintf(b.cfg.log, "sse: %d clients connected\n", len(clients))
	var figs []Figure

	// Fan-out.
	start := time.Now()
	var last int64
	for n := 0; n < sseBurst; n += sseBurstBatch {
		ids, err := appendBenchEvents(ctx, pool, sseBurstBatch, commits)
		if err != nil {
			return figs, err
		}
		last = ids[len(ids)-1]
	}
	committed := time.Since(start)
	if err := waitReceived(ctx, clients, last, 2*time.Minute); err != nil {
		return figs, err
	}
	elapsed := time.Since(start)
	figs = append(figs, Figure{Name: "sse-fanout-100", Value: float64(sseBurst) / elapsed.Seconds(), Unit: "events/s to each client",
		Baseline: fmt.Sprintf("committed at %.0f events/s", float64(sseBurst)/committed.Seconds()),
		Notes: []string{fmt.Sprintf("%d events in transactions of %d, delivered to all of %d SSE clients in %s",
			sseBurst, sseBurstBatch, sseClients, elapsed.Round(time.Millisecond))}})
	fmt.Fprintln(b.cfg.log, figs[len(figs)-1].Line())

	// Latency at a steady rate.
	for _, c := range clients {
		c.resetLatencies()
	}
	perTick := sseRate / 100
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(b.cfg.duration)
	sent := 0
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return figs, ctx.Err()
		case <-tick.C:
		}
		ids, err := appendBenchEvents(ctx, pool, perTick, commits)
		if err != nil {
			return figs, err
		}
		last, sent = ids[len(ids)-1], sent+len(ids)
	}
	if err := waitReceived(ctx, clients, last, time.Minute); err != nil {
		return figs, err
	}
	var lat []time.Duration
	for _, c := range clients {
		lat = append(lat, c.latencies()...)
	}
	slices.Sort(lat)
	if len(lat) == 0 {
		return figs, errors.New("sse: no latency measured")
	}
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	note := fmt.Sprintf("%d events at %d/s (%d per transaction every 10 ms) for %s, %d SSE clients, %d deliveries; from the writer's COMMIT to the client",
		sent, sseRate, perTick, b.cfg.duration, sseClients, len(lat))
	figs = append(figs,
		Figure{Name: "sse-latency-p50", Value: q(0.50), Unit: "ms", Notes: []string{note}},
		Figure{Name: "sse-latency-p99", Value: q(0.99), Unit: "ms", Notes: []string{note}})
	for _, f := range figs[1:] {
		fmt.Fprintln(b.cfg.log, f.Line())
	}
	return figs, nil
}

// commitTimes records when each event's transaction committed.
type commitTimes struct {
	mu sync.RWMutex
	at map[int64]time.Time
}

func (c *commitTimes) get(id int64) (time.Time, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.at[id]
	return t, ok
}

// appendBenchEvents commits n deployment.state_changed events in one
// transaction and records their commit time.
func appendBenchEvents(ctx context.Context, pool *pgxpool.Pool, n int, commits *commitTimes) ([]int64, error) {
	now := time.Now().UTC()
	evs := make([]lifecycle.Event, n)
	for i := range evs {
		e, err := lifecycle.NewEvent(now, "bench", lifecycle.Ref{Kind: lifecycle.SubjectDeployment, ID: "bench-" + strconv.Itoa(i)},
			lifecycle.DeploymentStateChangedBody{From: lifecycle.StatePending, To: lifecycle.StateInstalling, Cause: "report", Revision: 1},
			lifecycle.Ref{Kind: lifecycle.SubjectApplication, ID: "bench"})
		if err != nil {
			return nil, err
		}
		evs[i] = e
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return postgres.AppendEvents(ctx, tx, evs) }); err != nil {
		return nil, fmt.Errorf("sse: append events: %w", err)
	}
	done := time.Now()
	ids := make([]int64, n)
	commits.mu.Lock()
	for i, e := range evs {
		ids[i] = e.ID
		commits.at[e.ID] = done
	}
	commits.mu.Unlock()
	return ids, nil
}

// sseClient reads one stream, noting the last id received and each event's
// latency from its commit.
type sseClient struct {
	last atomic.Int64
	mu   sync.Mutex
	lat  []time.Duration
}

func openSSEClient(ctx context.Context, s *server, commits *commitTimes) (*sseClient, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.mgmt+"/mgmt/v1/events?type="+url.QueryEscape("deployment."), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		return nil, fmt.Errorf("GET /mgmt/v1/events: %s", res.Status)
	}
	c := &sseClient{}
	go func() {
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			v, ok := strings.CutPrefix(sc.Text(), "id: ")
			if !ok {
				continue
			}
			now := time.Now()
			id, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			if at, ok := commits.get(id); ok {
				c.mu.Lock()
				c.lat = append(c.lat, now.Sub(at))
				c.mu.Unlock()
			}
			c.last.Store(id)
		}
	}()
	return c, nil
}

func (c *sseClient) resetLatencies() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lat = nil
}

func (c *sseClient) latencies() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lat)
}

// waitReceived waits until every client has received the event id, with a
// bound.
func waitReceived(ctx context.Context, clients []*sseClient, id int64, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		behind := 0
		for _, c := range clients {
			if c.last.Load() < id {
				behind++
			}
		}
		if behind == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sse: %d of %d clients had not received event %d after %s", behind, len(clients), id, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}
