package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/pglaunch"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// records is a slog handler that keeps every record.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// count returns how many records at level or above were kept since from (an
// index) and the index of the last one matching msg (-1: none).
func (r *records) count(from int, level slog.Level, msg string) (n, last int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last = -1
	for i := from; i < len(r.recs); i++ {
		if r.recs[i].Level >= level {
			n++
		}
		if strings.Contains(r.recs[i].Message, msg) {
			last = i
		}
	}
	return n, last
}

func (r *records) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.recs)
}

// TestWebhooksLogOncePerOutage: with no subscription, a database outage
// makes the webhook machinery (dispatcher every 100 ms, rescuer, River
// retrying every second) log one WARN, and its end one INFO, not a line per
// retry. The outage lasts 4 s of real time: the claim is about how many
// lines retries make over time, so time must pass (before, about 40 WARN
// lines of the dispatcher and 4 ERROR lines of River).
func TestWebhooksLogOncePerOutage(t *testing.T) {
	bin, err := pglaunch.FindBinaries(os.Getenv)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	opts := pglaunch.Options{BinDir: bin, DataDir: filepath.Join(dir, "pg"),
		Settings: map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}}
	ctx := t.Context()
	pg, err := pglaunch.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })
	opts.Port = pg.Port()
	pool, err := postgres.Open(ctx, pg.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, postgres.Migrate(ctx, pool))

	recs := &records{}
	log := slog.New(recs)
	h, err := startWebhooks(ctx, config{dataDir: t.TempDir(), webhooks: webhookConfig{timeout: 10 * time.Second, workers: 2}}, pool, log)
	require.NoError(t, err)
	t.Cleanup(func() { h.stop(log) })

	start := recs.len()
	require.NoError(t, pg.Stop())
	require.Eventually(t, func() bool {
		n, _ := recs.count(start, slog.LevelWarn, "")
		return n > 0
	}, 20*time.Second, 10*time.Millisecond, "the outage is logged: %v", recs.messages(0))
	time.Sleep(4 * time.Second) // the outage goes on: retries must not log
	// One WARN of the webhook machinery, and at most one line of the job
	// queue, which may learn of the outage first.
	n, _ := recs.count(start, slog.LevelWarn, "")
	require.LessOrEqual(t, n, 2, "warnings and errors during the outage: %v", recs.messages(start))

	pg2, err := pglaunch.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg2.Stop() })
	require.Eventually(t, func() bool {
		_, i := recs.count(start, slog.LevelInfo, "webhooks: working again")
		return i >= 0
	}, 30*time.Second, 10*time.Millisecond, "the end of the outage is logged: %v", recs.messages(start))
	n, _ = recs.count(start, slog.LevelWarn, "")
	require.LessOrEqual(t, n, 2, "warnings and errors of the whole outage: %v", recs.messages(start))
}

func (r *records) messages(from int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs[from:] {
		out = append(out, rec.Level.String()+" "+rec.Message)
	}
	return out
}
