package pglaunch

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// supervised starts a Supervisor whose probes run when the test sends a
// tick, and a pool on it whose Reset the Supervisor calls.
type supervised struct {
	sv     *Supervisor
	pool   *pgxpool.Pool
	ticks  chan time.Time
	probed chan struct{}
}

func supervise(t *testing.T, opts SupervisorOptions) *supervised {
	t.Helper()
	opts.Options = Options{BinDir: binDir(t), DataDir: dataDir(t), Settings: fastSettings}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sv, err := StartSupervisor(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, sv.Stop(), "Stop") })
	pool, err := pgxpool.New(ctx, sv.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, pool.Ping(ctx), "a pooled connection exists")
	s := &supervised{sv: sv, pool: pool, ticks: make(chan time.Time), probed: make(chan struct{})}
	sv.ticks, sv.probed = s.ticks, s.probed
	sv.backoff = func(int) time.Duration { return 0 }
	sv.Supervise(pool.Reset)
	return s
}

// probeUntil runs probes until the status is want, for at most 20 s: the
// postmaster handles a signal asynchronously, so the first probes may still
// find it accepting connections.
func (s *supervised) probeUntil(t *testing.T, want status) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for s.sv.currentStatus() != want {
		select {
		case s.ticks <- time.Now():
		case <-deadline:
			t.Fatalf("status %v, want %v", s.sv.currentStatus(), want)
		}
		select {
		case <-s.probed:
		case <-deadline:
			t.Fatalf("no probe; status %v, want %v", s.sv.currentStatus(), want)
		}
	}
}

// waitRestarted waits, at most 30 s, until a server other than old is ready.
func (s *supervised) waitRestarted(t *testing.T, old *Server) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		st, changed := s.sv.watch()
		if st == statusReady && s.sv.Server() != old {
			break
		}
		select {
		case <-changed:
		case <-s.sv.Failed():
			t.Fatalf("supervisor gave up: %v", s.sv.Err())
		case <-deadline:
			t.Fatalf("not restarted within 30 s; status %v", st)
		}
	}
	require.NoError(t, s.sv.Ready())
	assert.NotEqual(t, old.PID(), s.sv.Server().PID(), "a new postmaster")
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(), "SELECT 1").Scan(&n), "the pool reconnects on the same URL")
}

// TestSupervisorSmartShutdown: a smart shutdown (SIGTERM to the postmaster)
// is noticed, readiness fails, pooled connections are dropped so that the
// shutdown can finish once the last other session ends, and the server is
// started again.
func TestSupervisorSmartShutdown(t *testing.T) {
	t.Parallel()
	s := supervise(t, SupervisorOptions{ShutdownGrace: time.Hour})
	ctx := context.Background()
	held, err := pgx.Connect(ctx, s.sv.URL("postgres")) // keeps the smart shutdown waiting
	require.NoError(t, err)
	require.NoError(t, s.sv.Ready())
	old := s.sv.Server()

	require.NoError(t, syscall.Kill(old.PID(), syscall.SIGTERM))
	s.probeUntil(t, statusShuttingDown)
	require.ErrorIs(t, s.sv.Ready(), ErrNotReady)
	select {
	case <-old.Done():
		t.Fatal("the smart shutdown did not wait for the open session")
	default:
	}

	require.NoError(t, held.Close(ctx)) // the last session ends: the shutdown completes
	s.waitRestarted(t, old)
}

// TestSupervisorNotReadyBeforeTheProbe: readiness fails as soon as the
// postmaster says it is stopping, before the next probe saw it (pooled
// connections still answer during a smart shutdown).
func TestSupervisorNotReadyBeforeTheProbe(t *testing.T) {
	t.Parallel()
	s := supervise(t, SupervisorOptions{ShutdownGrace: time.Hour})
	ctx := context.Background()
	held, err := pgx.Connect(ctx, s.sv.URL("postgres")) // keeps the smart shutdown waiting
	require.NoError(t, err)
	defer held.Close(ctx)
	require.NoError(t, s.sv.Ready())
	old := s.sv.Server()
	require.NoError(t, syscall.Kill(old.PID(), syscall.SIGTERM))
	require.Eventually(t, func() bool { return postmasterStatus(old.DataDir()) == "stopping" }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, statusReady, s.sv.currentStatus(), "no probe ran yet")
	require.ErrorIs(t, s.sv.Ready(), ErrNotReady)
}

// TestSupervisorSmartShutdownGrace: sessions that do not end (the server's
// own LISTEN connections) make the Supervisor turn a smart shutdown into a
// fast one after the grace period.
func TestSupervisorSmartShutdownGrace(t *testing.T) {
	t.Parallel()
	s := supervise(t, SupervisorOptions{ShutdownGrace: time.Nanosecond})
	ctx := context.Background()
	held, err := pgx.Connect(ctx, s.sv.URL("postgres"))
	require.NoError(t, err)
	defer held.Close(ctx)
	old := s.sv.Server()

	require.NoError(t, syscall.Kill(old.PID(), syscall.SIGTERM))
	s.probeUntil(t, statusShuttingDown)
	s.waitRestarted(t, old)
}

// TestSupervisorFastShutdown: a fast shutdown (SIGINT) ends the postmaster;
// the Supervisor starts it again on the same socket.
func TestSupervisorFastShutdown(t *testing.T) {
	t.Parallel()
	s := supervise(t, SupervisorOptions{})
	old := s.sv.Server()
	url := s.sv.URL("postgres")
	require.NoError(t, syscall.Kill(old.PID(), syscall.SIGINT))
	s.waitRestarted(t, old)
	assert.Equal(t, url, s.sv.URL("postgres"))
	assert.Equal(t, url, s.sv.Server().URL("postgres"), "same socket")
}

// TestSupervisorGivesUp: when the server cannot be started again, the
// Supervisor tries a bounded number of times, then reports the failure.
func TestSupervisorGivesUp(t *testing.T) {
	t.Parallel()
	s := supervise(t, SupervisorOptions{RestartAttempts: 2})
	old := s.sv.Server()
	// A setting postgres refuses at start.
	f, err := os.OpenFile(filepath.Join(old.DataDir(), "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("shared_buffers = 'plenty'\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	require.NoError(t, syscall.Kill(old.PID(), syscall.SIGINT))
	select {
	case <-s.sv.Failed():
	case <-time.After(60 * time.Second):
		t.Fatal("supervisor did not give up within 60 s")
	}
	require.ErrorIs(t, s.sv.Err(), ErrExited)
	assert.Contains(t, s.sv.Err().Error(), "2 attempts")
	require.ErrorIs(t, s.sv.Ready(), ErrNotReady)
}
