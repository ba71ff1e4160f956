package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// pollFigures: the device poll answered 304 from the cache through the
// whole server, against a bare net/http server answering a constant 304,
// under the same generator (wrk, one thread, 64 connections), one after the
// other (design section 11: >= 50%, raised to >= 70%).
func pollFigures(ctx context.Context, b *bench) ([]Figure, error) {
	if _, err := exec.LookPath("wrk"); err != nil {
		return []Figure{{Name: "poll-304", Absent: "wrk not found: apt-get install wrk"}}, nil
	}
	bare, stopBare, err := b.startBare304(ctx, "http")
	if err != nil {
		return nil, err
	}
	defer stopBare()
	s, err := b.startServer(ctx, "poll", "error")
	if err != nil {
		return nil, err
	}
	defer s.stop()
	a := newAPI(s, 4)
	defer a.close()
	// One client with one deployment, as a device polls: its manifest is
	// cached after the first poll.
	const client, device = "bench-poll", "bench-poll-1"
	etag, err := a.seedPollClient(ctx, client, device)
	if err != nil {
		return nil, err
	}
	h := deviceHeader(client)
	h.Set("If-None-Match", etag)
	if _, _, err := a.do(ctx, http.MethodGet, s.device+"/api/v1/deployments", h, nil, http.StatusNotModified); err != nil {
		return nil, fmt.Errorf("the poll with the manifest's ETag: %w", err)
	}
	dur := wrkDuration(b.cfg.duration)
	rBare, err := b.wrk(ctx, "-t1", "-c64", "-d"+dur, "-H", "X-WFM-Client-ID: "+client, "-H", "If-None-Match: "+etag, bare+"/api/v1/deployments")
	if err != nil {
		return nil, err
	}
	rWFM, err := b.wrk(ctx, "-t1", "-c64", "-d"+dur, "-H", "X-WFM-Client-ID: "+client, "-H", "If-None-Match: "+etag, s.device+"/api/v1/deployments")
	if err != nil {
		return nil, err
	}
	gen := "wrk -t1 -c64 -d" + dur
	return []Figure{
		{Name: "bare-304", Value: rBare, Unit: "req/s", Baseline: "baseline: a bare net/http handler answering 304, " + gen},
		{Name: "poll-304", Value: rWFM, Unit: "req/s", Ratio: rWFM / rBare, Baseline: "bare-304",
			Target: ">= 50%, raised >= 70%", Notes: []string{"GET /api/v1/deployments with If-None-Match, one client with one deployment, " + gen}},
	}, nil
}

// startBare304 builds and starts tools/bare304 of the source tree with args
// and returns its base URL (scheme "http", or "https" with its TLS flags).
func (b *bench) startBare304(ctx context.Context, scheme string, args ...string) (string, func(), error) {
	bin := filepath.Join(b.tmp, "bare304")
	if err := b.goCmd(ctx, "build", "-o", bin, "./tools/bare304").Run(); err != nil {
		return "", nil, fmt.Errorf("build tools/bare304: %w", err)
	}
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("bare304 printed no address: %w", err)
	}
	return scheme + "://" + strings.TrimSpace(line), stop, nil
}

// wrkDuration is d in wrk's syntax (whole seconds, at least 1).
func wrkDuration(d time.Duration) string {
	return strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))) + "s"
}

var wrkRate = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)

// wrk runs wrk and returns its request rate; any non-2xx/3xx answer is an
// error (the rate would measure failures).
func (b *bench) wrk(ctx context.Context, args ...string) (float64, error) {
	fmt.Fprintf(b.cfg.log, "wrk %s\n", strings.Join(args, " "))
	out, err := exec.CommandContext(ctx, "wrk", args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("wrk: %w: %s", err, out)
	}
	if strings.Contains(string(out), "Non-2xx") {
		return 0, fmt.Errorf("wrk: the server refused requests:\n%s", out)
	}
	m := wrkRate.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("wrk printed no Requests/sec:\n%s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// statusFigures: status-report ingestion (POST /api/v1/deployments/{id}/
// status: validate, store, transition, retention) through the whole server
// under wrk, against the single-row INSERT rate pgbench reaches on the same
// PostgreSQL (the server's private one, fsync on), one after the other,
// with the same number of connections (design section 11: >= 30%, raised
// to >= 100%).
func statusFigures(ctx context.Context, b *bench) ([]Figure, error) {
	if _, err := exec.LookPath("wrk"); err != nil {
		return []Figure{{Name: "status-ingest", Absent: "wrk not found: apt-get install wrk"}}, nil
	}
	s, err := b.startServer(ctx, "status", "info")
	if err != nil {
		return nil, err
	}
	defer s.stop()
	if s.pgSocket == "" {
		return nil, errors.New("the server did not log its private PostgreSQL's socket")
	}
	a := newAPI(s, b.cfg.workers)
	defer a.close()
	if err := a.uploadApp(ctx); err != nil {
		return nil, err
	}
	// Reports spread over the deployments of many devices, as in a fleet.
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
		return nil, err
	}
	m, _, err := a.poll(ctx, client)
	if err != nil {
		return nil, err
	}
	report := func(id string) string {
		return fmt.Sprintf(`{"deploymentId":"%s","adoptedManifestVersion":%d,"status":{"state":"installed"},"components":[{"name":"hello-world","state":"installed"}]}`, id, m.ManifestVersion)
	}
	if _, _, err := a.do(ctx, http.MethodPost, s.device+"/api/v1/deployments/"+ids[0]+"/status", deviceHeader(client), []byte(report(ids[0])), http.StatusOK, http.StatusCreated); err != nil {
		return nil, err
	}
	if v, err := b.psql(ctx, s, "SHOW server_version"); err == nil {
		b.pgVersion = "PostgreSQL " + v
	}

	if _, err := b.psql(ctx, s, "CREATE TABLE bench_insert (id bigserial PRIMARY KEY, v text, at timestamptz DEFAULT now())"); err != nil {
		return nil, err
	}
	insert := filepath.Join(s.dir, "insert.sql")
	if err := os.WriteFile(insert, []byte("INSERT INTO bench_insert (v) VALUES ('x');\n"), 0o644); err != nil {
		return nil, err
	}
	secs := strings.TrimSuffix(wrkDuration(b.cfg.duration), "s")
	conns := strconv.Itoa(b.cfg.conns)
	pgArgs := []string{"-n", "-h", s.pgSocket, "-p", s.pgPort, "-U", "postgres", "-c", conns, "-j", "2", "-T", secs, "-f", insert, "wfm"}
	fmt.Fprintf(b.cfg.log, "pgbench %s\n", strings.Join(pgArgs, " "))
	out, err := exec.CommandContext(ctx, b.pgTool("pgbench"), pgArgs...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pgbench: %w: %s", err, out)
	}
	tps := regexp.MustCompile(`(?m)^tps = ([0-9.]+)`).FindSubmatch(out)
	if tps == nil {
		return nil, fmt.Errorf("pgbench printed no tps:\n%s", out)
	}
	rPG, _ := strconv.ParseFloat(string(tps[1]), 64)
	if _, err := b.psql(ctx, s, "DROP TABLE bench_insert"); err != nil {
		return nil, err
	}

	script, err := statusReportScript(s.dir, "post.lua", ids, m.ManifestVersion, client)
	if err != nil {
		return nil, err
	}
	dur := wrkDuration(b.cfg.duration)
	rWFM, p50, p99, err := b.wrkLatencies(ctx, "-t1", "-c"+conns, "-d"+dur, "-s", script, s.device)
	if err != nil {
		return nil, err
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return []Figure{
		{Name: "pgbench-insert", Value: rPG, Unit: "tps", Baseline: fmt.Sprintf("baseline: pgbench single-row INSERTs on the server's database, -c %s -j 2 -T %s", conns, secs)},
		{Name: "status-ingest", Value: rWFM, Unit: "req/s", Ratio: rWFM / rPG, Baseline: "pgbench-insert",
			Target: ">= 30%, raised >= 100%", Notes: []string{fmt.Sprintf("POST /api/v1/deployments/{id}/status over %d deployments, wrk -t1 -c%s -d%s", n, conns, dur)}},
		{Name: "status-latency-p50", Value: ms(p50), Unit: "ms", Baseline: "median report latency under that load (wrk --latency)",
			Target: "at most 5 ms above the single-row path's"},
		{Name: "status-latency-p99", Value: ms(p99), Unit: "ms", Baseline: "99th percentile report latency under that load (wrk --latency)"},
	}, nil
}

// psql runs one statement on the server's private database and returns its
// output.
func (b *bench) psql(ctx context.Context, s *server, sql string) (string, error) {
	out, err := exec.CommandContext(ctx, b.pgTool("psql"), "-qAt", "-h", s.pgSocket, "-p", s.pgPort, "-U", "postgres", "-d", "wfm", "-c", sql).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql %q: %w: %s", sql, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// statusReportScript writes, as file name in dir, the wrk script that posts an
// "installed" status report of the deployments ids, round robin, as client
// (development header identity) at manifest version.
func statusReportScript(dir, name string, ids []string, version uint64, client string) (string, error) {
	var lua strings.Builder
	lua.WriteString("local ids = {\n")
	for _, id := range ids {
		fmt.Fprintf(&lua, "  %q,\n", id)
	}
	fmt.Fprintf(&lua, `}
local n = 0
request = function()
  n = n + 1
  local id = ids[(n %% #ids) + 1]
  local body = '{"deploymentId":"' .. id .. '","adoptedManifestVersion":%d,"status":{"state":"installed"},"components":[{"name":"hello-world","state":"installed"}]}'
  return wrk.format("POST", "/api/v1/deployments/" .. id .. "/status", {["Content-Type"] = "application/json", ["X-WFM-Client-ID"] = "%s"}, body)
end
`, version, client)
	script := filepath.Join(dir, name)
	return script, os.WriteFile(script, []byte(lua.String()), 0o644)
}
