package main

// The webhooks group (issue 13):
//   - webhook-throughput: deliveries per second of a backlog of events (one
//     subscription, a local receiver answering 204), from the commit of the
//     events to the receiver's last request;
//   - webhook-latency-p50 / -p99: from an event's commit to the receiver,
//     at a steady rate of committed events (pgbench -R, one event per
//     transaction, -webhook-rate per second, 1,000 by default);
//   - status-ingest with and without a subscription, alternated on one
//     server: the cost of webhooks on the status-report path.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// receiver is the benchmark's webhook receiver: it answers 204 and notes,
// per delivery, how long after the event's time it arrived.
type receiver struct {
	srv  *http.Server
	url  string
	mu   sync.Mutex
	lat  []time.Duration
	last time.Time
	n    int
	done chan struct{} // closed when want deliveries arrived
	want int
}

func startReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{url: "http://" + ln.Addr().String() + "/hook"}
	r.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		now := time.Now()
		var e struct {
			At time.Time `json:"at"`
		}
		_ = json.Unmarshal(body, &e)
		w.WriteHeader(http.StatusNoContent)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.n++
		r.last = now
		if !e.At.IsZero() {
			r.lat = append(r.lat, now.Sub(e.At))
		}
		if r.done != nil && r.n >= r.want {
			close(r.done)
			r.done = nil
		}
	})}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// expect resets the counts and returns a channel closed once n deliveries
// arrived.
func (r *receiver) expect(n int) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n, r.lat, r.want = 0, nil, n
	r.done = make(chan struct{})
	return r.done
}

func (r *receiver) snapshot() (int, []time.Duration, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, slices.Clone(r.lat), r.last
}

// sqlBenchEvent is one event as AppendEvents writes it (id from the
// transaction id), about one of 1,000 deployments, timed at the insert.
const sqlBenchEvent = `INSERT INTO events (id, type, at, subject_kind, subject_id, refs, actor, body)
SELECT (pg_current_xact_id()::text::bigint << 20) + g, 'deployment.state_changed', clock_timestamp(), 'deployment',
    'bench-' || (g %% 1000), ARRAY['deployment:bench-' || (g %% 1000)], 'wfm-bench',
    '{"from":"installing","to":"installed","cause":"report","revision":1}'
FROM generate_series(0, %d) g`

func webhookFigures(ctx context.Context, b *bench) ([]Figure, error) {
	if _, err := exec.LookPath("wrk"); err != nil {
		return []Figure{{Name: "webhook-throughput", Absent: "wrk not found: apt-get install wrk"}}, nil
	}
	s, err := b.startServer(ctx, "webhooks", "info", "-webhook-allow-http", "-webhook-allow-cidr", "127.0.0.0/8")
	if err != nil {
		return nil, err
	}
	defer s.stop()
	if s.pgSocket == "" {
		return nil, errors.New("the server did not log its private PostgreSQL's socket")
	}
	rcv, err := startReceiver()
	if err != nil {
		return nil, err
	}
	defer rcv.srv.Close()
	a := newAPI(s, b.cfg.workers)
	defer a.close()

	// Status ingest without a subscription, then with one (receiving every
	// deployment event), alternated twice.
	script, err := statusScript(ctx, b, a, s)
	if err != nil {
		return nil, err
	}
	conns := strconv.Itoa(b.cfg.conns)
	dur := wrkDuration(b.cfg.duration / 2)
	var without, with []float64
	hookID := ""
	for round := 0; round < 2; round++ {
		if hookID != "" {
			if _, _, err := a.do(ctx, http.MethodDelete, s.mgmt+"/mgmt/v1/webhooks/"+hookID, a.mgmtHeader("application/json"), nil, http.StatusNoContent); err != nil {
				return nil, err
			}
		}
		r, err := b.wrk(ctx, "-t1", "-c"+conns, "-d"+dur, "-s", script, s.device)
		if err != nil {
			return nil, err
		}
		without = append(without, r)
		if hookID, err = subscribe(ctx, a, s, rcv.url, `["deployment."]`); err != nil {
			return nil, err
		}
		r, err = b.wrk(ctx, "-t1", "-c"+conns, "-d"+dur, "-s", script, s.device)
		if err != nil {
			return nil, err
		}
		with = append(with, r)
	}
	if _, _, err := a.do(ctx, http.MethodDelete, s.mgmt+"/mgmt/v1/webhooks/"+hookID, a.mgmtHeader("application/json"), nil, http.StatusNoContent); err != nil {
		return nil, err
	}
	avg := func(v []float64) float64 { return (v[0] + v[1]) / 2 }
	figs := []Figure{
		{Name: "status-ingest-no-webhook", Value: avg(without), Unit: "req/s",
			Notes: []string{fmt.Sprintf("status reports, wrk -t1 -c%s -d%s, mean of 2 runs alternated with the next figure (%s, %s)", conns, dur, number(without[0]), number(without[1]))}},
		{Name: "status-ingest-webhook", Value: avg(with), Unit: "req/s", Ratio: avg(with) / avg(without), Baseline: "status-ingest-no-webhook",
			Notes: []string{fmt.Sprintf("the same, with a subscription to deployment.* (%s, %s); repeated reports of an unchanged state append no event", number(with[0]), number(with[1]))}},
	}

	// Throughput: a backlog of events committed at once.
	if _, err := subscribe(ctx, a, s, rcv.url, `["deployment.state_changed"]`); err != nil {
		return figs, err
	}
	const backlog = 20000
	done := rcv.expect(backlog)
	start := time.Now()
	if _, err := b.psql(ctx, s, fmt.Sprintf(sqlBenchEvent, backlog-1)); err != nil {
		return figs, err
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		n, _, _ := rcv.snapshot()
		return figs, fmt.Errorf("webhooks: %d of %d deliveries after 5 minutes", n, backlog)
	case <-ctx.Done():
		return figs, ctx.Err()
	}
	_, _, last := rcv.snapshot()
	took := last.Sub(start)
	figs = append(figs, Figure{Name: "webhook-throughput", Value: float64(backlog) / took.Seconds(), Unit: "deliveries/s",
		Notes: []string{fmt.Sprintf("%d events committed in one transaction, one subscription, receiver on loopback answering 204; %s from the commit to the last delivery", backlog, took.Round(time.Millisecond))}})

	// Latency at a steady rate of one event per transaction.
	rate := 1000
	insert := filepath.Join(s.dir, "event.sql")
	if err := os.WriteFile(insert, []byte(fmt.Sprintf(sqlBenchEvent, 0)+";\n"), 0o644); err != nil {
		return figs, err
	}
	secs := strings.TrimSuffix(wrkDuration(b.cfg.duration), "s")
	n, _ := strconv.Atoi(secs)
	rcv.expect(1 << 30)
	pgArgs := []string{"-n", "-h", s.pgSocket, "-p", s.pgPort, "-U", "postgres", "-c", "4", "-j", "2", "-R", strconv.Itoa(rate), "-T", secs, "-f", insert, "wfm"}
	fmt.Fprintf(b.cfg.log, "pgbench %s\n", strings.Join(pgArgs, " "))
	out, err := exec.CommandContext(ctx, b.pgTool("pgbench"), pgArgs...).CombinedOutput()
	if err != nil {
		return figs, fmt.Errorf("pgbench: %w: %s", err, out)
	}
	var committed float64
	if m := regexp.MustCompile(`(?m)number of transactions actually processed: (\d+)`).FindSubmatch(out); m != nil {
		committed, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	// Let the deliveries of the last events arrive (up to 30 s).
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if got, _, _ := rcv.snapshot(); float64(got) >= committed {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	got, lat, _ := rcv.snapshot()
	if len(lat) == 0 {
		return figs, errors.New("webhooks: no delivery at the steady rate")
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
	note := fmt.Sprintf("%d events committed at %d/s (pgbench -R %d -T %s, %.0f/s reached), %d delivered; from the event's commit-time clock to the receiver",
		int(committed), rate, rate, secs, committed/float64(max(n, 1)), got)
	figs = append(figs,
		Figure{Name: "webhook-latency-p50", Value: pct(0.50), Unit: "ms", Notes: []string{note}},
		Figure{Name: "webhook-latency-p99", Value: pct(0.99), Unit: "ms", Notes: []string{"the same run"}})
	return figs, nil
}

// subscribe creates a subscription of types to url and returns its id.
func subscribe(ctx context.Context, a *api, s *server, url, types string) (string, error) {
	_, body, err := a.do(ctx, http.MethodPost, s.mgmt+"/mgmt/v1/webhooks", a.mgmtHeader("application/json"),
		fmt.Appendf(nil, `{"url":%q,"types":%s}`, url, types), http.StatusCreated)
	if err != nil {
		return "", err
	}
	var w struct {
		Webhook struct {
			ID string `json:"id"`
		} `json:"webhook"`
	}
	if err := json.Unmarshal(body, &w); err != nil || w.Webhook.ID == "" {
		return "", fmt.Errorf("create webhook: no id in %.200s", body)
	}
	return w.Webhook.ID, nil
}

// statusScript seeds deployments as the status group does and returns the
// wrk script that posts their status reports.
func statusScript(ctx context.Context, b *bench, a *api, s *server) (string, error) {
	if err := a.uploadApp(ctx); err != nil {
		return "", err
	}
	const client = "bench"
	n := b.cfg.devices
	ids := make([]string, n)
	if _, err := runPhase(ctx, n, b.cfg.workers, time.Minute, func(ctx context.Context, i int) error {
		dev := fmt.Sprintf("edge-%d", i+1)
		if err := a.register(ctx, client, dev); err != nil {
			return err
		}
		id, err := a.create(ctx, client, dev)
		ids[i] = id
		return err
	}); err != nil {
		return "", err
	}
	m, _, err := a.poll(ctx, client)
	if err != nil {
		return "", err
	}
	return statusReportScript(s.dir, "webhooks-post.lua", ids, m.ManifestVersion, client)
}
