package postgres_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// lockedBuffer is a log destination the test reads while the listener writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestListenerLogsAnOutageOnce: while its database refuses connections the
// listener retries without a line per attempt: one WARN when the
// connection is lost, one INFO when LISTEN is back. It reports the loss
// once too (Lost), with the moment the connection was last known alive, and
// lets its consumer catch up each time LISTEN is in place (Listening).
func TestListenerLogsAnOutageOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.URL(t))
	require.NoError(t, err)
	defer pool.Close()
	db := pool.Config().ConnConfig.Database
	admin := pgtest.New(t) // another database of the same server

	var log lockedBuffer
	ready := make(chan struct{}, 1)
	var attempts atomic.Int32
	failing := make(chan struct{})
	var once sync.Once
	var lost []time.Time // the listener's goroutine writes, the test reads after Ready or the end
	var listenings atomic.Int32
	clock := time.Date(2026, 12, 8, 1, 0, 0, 0, time.UTC)
	var ticks atomic.Int64 // each reading of the clock is a second later
	l := &postgres.Listener{Pool: pool, Channel: postgres.NotifyChannel, Log: slog.New(slog.NewTextHandler(&log, nil)),
		Ready: ready, Notify: func(string) {},
		Now:       func() time.Time { return clock.Add(time.Duration(ticks.Add(1)) * time.Second) },
		Lost:      func(since time.Time) { lost = append(lost, since) },
		Listening: func(context.Context) error { listenings.Add(1); return nil },
		After: func(time.Duration) <-chan time.Time {
			if attempts.Add(1) == 5 {
				once.Do(func() { close(failing) })
			}
			return time.After(time.Millisecond) // no backoff: many attempts
		}}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	wait := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(20 * time.Second):
			t.Fatal(what)
		}
	}
	wait(ready, "the listener did not start")
	require.Equal(t, int32(1), listenings.Load())
	alive := clock.Add(time.Duration(ticks.Load()) * time.Second) // LISTEN in place

	// The outage: no connection is accepted, the listener's is cut.
	_, err = admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" ALLOW_CONNECTIONS false")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", db)
	require.NoError(t, err)
	wait(failing, "the listener did not retry")
	_, err = admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" ALLOW_CONNECTIONS true")
	require.NoError(t, err)
	wait(ready, "the listener did not listen again")
	cancel()
	<-done

	out := log.String()
	require.GreaterOrEqual(t, attempts.Load(), int32(5))
	require.Equal(t, 1, strings.Count(out, "level=WARN"), "one WARN for the outage:\n%s", out)
	require.Equal(t, 1, strings.Count(out, "level=INFO"), "one INFO when back:\n%s", out)
	require.Contains(t, out, "listening again")
	require.Equal(t, []time.Time{alive}, lost, "one loss, since LISTEN was in place")
	require.Equal(t, int32(2), listenings.Load(), "caught up after each LISTEN")
}
