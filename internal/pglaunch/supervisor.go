package pglaunch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotReady is wrapped by Supervisor.Ready while the server is not
// accepting new connections (shutting down, restarting, recovering) and
// after the Supervisor gave up.
var ErrNotReady = errors.New("private PostgreSQL not ready")

const (
	defaultProbeInterval   = 2 * time.Second
	defaultShutdownGrace   = 5 * time.Second
	defaultRestartAttempts = 5
	probeTimeout           = 5 * time.Second
)

// SupervisorOptions configures StartSupervisor.
type SupervisorOptions struct {
	// Options is the server to run. Its Port and SocketDir are fixed by the
	// first start, so that a restarted server is found where the old one
	// was and a connection pool on URL reconnects by itself.
	Options
	// Log receives one line per loss, restart attempt and recovery; nil
	// discards them.
	Log *slog.Logger
	// ProbeInterval is how often a fresh connection checks the server;
	// 0 means 2 s.
	ProbeInterval time.Duration
	// ShutdownGrace is how long a shutdown that waits for sessions to end
	// (a smart shutdown: SIGTERM to the postmaster) may wait before the
	// Supervisor turns it into a fast one; 0 means 5 s.
	ShutdownGrace time.Duration
	// RestartAttempts bounds the starts tried after a loss before the
	// Supervisor gives up; 0 means 5. They are 1, 2, 4, 8… s apart (at
	// most 10 s).
	RestartAttempts int
}

// Supervisor keeps a private server running for a process that has no
// supervisor of its own (a person who typed `make run`). It notices a server
// that exited or started a shutdown (someone ran pg_ctl stop, or sent the
// postmaster SIGTERM or SIGINT), reports not-ready meanwhile, lets the old
// server finish, and starts it again on the same socket, a bounded number of
// times; only when that fails does Failed close.
//
// How a loss is seen: the postmaster's exit closes Server.Done; a shutdown
// in progress is seen by a fresh connection every ProbeInterval that fails
// while postmaster.pid says "stopping" (the status line pg_ctl reads). Open
// sessions keep a smart shutdown waiting, so the Supervisor first asks its
// owner to drop pooled connections (the reset function given to Supervise),
// then, after ShutdownGrace, stops the server fast itself.
type Supervisor struct {
	opts    SupervisorOptions
	log     *slog.Logger
	backoff func(attempt int) time.Duration

	mu       sync.Mutex
	server   *Server
	handled  *Server // a server whose exit the loop dealt with
	status   status
	detail   error // why not ready, for Ready's message
	changed  chan struct{}
	failErr  error
	failed   chan struct{}
	started  bool
	cancel   context.CancelFunc
	loopDone chan struct{}
	ownsDir  string // a socket folder to remove at Stop

	// Test hooks: ticks replaces the probe ticker, probed is signalled
	// after each probe.
	ticks  <-chan time.Time
	probed chan struct{}
}

// StartSupervisor starts the server (see Start) and returns a Supervisor
// that owns it; supervision begins with Supervise. Returns Start's errors.
func StartSupervisor(ctx context.Context, opts SupervisorOptions) (*Supervisor, error) {
	s, err := Start(ctx, opts.Options)
	if err != nil {
		return nil, err
	}
	sv := &Supervisor{
		opts:    opts,
		log:     opts.Log,
		backoff: restartBackoff,
		server:  s,
		changed: make(chan struct{}),
		failed:  make(chan struct{}),
	}
	if sv.log == nil {
		sv.log = slog.New(slog.DiscardHandler)
	}
	// Later starts reuse the socket; the folder, if Start made one, is now
	// the Supervisor's to remove.
	sv.opts.Port, sv.opts.SocketDir = s.Port(), s.SocketDir()
	if s.ownsSocketDir.Swap(false) {
		sv.ownsDir = s.SocketDir()
	}
	return sv, nil
}

// status is the Supervisor's view of the server.
type status int

const (
	statusReady        status = iota
	statusRefusing            // new connections fail, no shutdown in progress
	statusShuttingDown        // postmaster.pid says "stopping"
	statusRestarting          // the postmaster exited; starting it again
	statusFailed              // restarts failed; Failed is closed
)

func (st status) String() string {
	return [...]string{"ready", "refusing connections", "shutting down", "restarting", "failed"}[st]
}

func restartBackoff(attempt int) time.Duration {
	return min(time.Second<<(attempt-1), 10*time.Second)
}

// Supervise starts watching the server in a goroutine that Stop ends. reset
// is called when the server is lost and again when it is back: it should
// drop pooled connections (pgxpool.Pool.Reset), so that a smart shutdown
// can finish and no request uses a connection to the old server. Calling
// Supervise again does nothing.
func (sv *Supervisor) Supervise(reset func()) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.started {
		return
	}
	sv.started = true
	ctx, cancel := context.WithCancel(context.Background())
	sv.cancel = cancel
	sv.loopDone = make(chan struct{})
	ticks := sv.ticks
	var ticker *time.Ticker
	if ticks == nil {
		ticker = time.NewTicker(cmp.Or(sv.opts.ProbeInterval, defaultProbeInterval))
		ticks = ticker.C
	}
	go func() {
		defer close(sv.loopDone)
		if ticker != nil {
			defer ticker.Stop()
		}
		sv.loop(ctx, ticks, reset)
	}()
}

// URL returns the connection URL of database on the server; it stays the
// same across restarts.
func (sv *Supervisor) URL(database string) string {
	return socketURL(sv.opts.SocketDir, sv.opts.Port, database)
}

// Server returns the server currently running (or the last one).
func (sv *Supervisor) Server() *Server {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.server
}

// Ready returns nil while the server accepts connections, as far as the
// last probe saw and as long as its postmaster.pid does not say it is
// stopping (a shutdown asked since the last probe: pooled connections may
// still answer, new ones are refused); otherwise an error wrapping
// ErrNotReady that says why.
func (sv *Supervisor) Ready() error {
	sv.mu.Lock()
	st, detail, s := sv.status, sv.detail, sv.server
	sv.mu.Unlock()
	if st == statusReady {
		if s != nil && postmasterStatus(s.DataDir()) == "stopping" {
			return fmt.Errorf("%w: %v", ErrNotReady, statusShuttingDown)
		}
		return nil
	}
	if detail != nil {
		return fmt.Errorf("%w: %v: %w", ErrNotReady, st, detail)
	}
	return fmt.Errorf("%w: %v", ErrNotReady, st)
}

// Failed is closed when the Supervisor gave up restarting the server; Err
// then says why.
func (sv *Supervisor) Failed() <-chan struct{} { return sv.failed }

// Err returns nil, or after Failed closed, the reason, which wraps the last
// start's error.
func (sv *Supervisor) Err() error {
	select {
	case <-sv.failed:
		return sv.failErr
	default:
		return nil
	}
}

// Stop ends the supervision and stops the server (see Server.Stop). Returns
// the error of stopping a running server; a server whose loss the
// Supervisor already reported is not an error again.
func (sv *Supervisor) Stop() error {
	sv.mu.Lock()
	cancel, loopDone := sv.cancel, sv.loopDone
	sv.mu.Unlock()
	if cancel != nil {
		cancel()
		<-loopDone
	}
	sv.mu.Lock()
	s, handled := sv.server, sv.handled
	sv.mu.Unlock()
	err := s.Stop()
	if s == handled && errors.Is(err, ErrExited) {
		err = nil
	}
	if sv.ownsDir != "" {
		if rerr := os.RemoveAll(sv.ownsDir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove socket folder: %w", rerr))
		}
	}
	return err
}

// setStatus records the server's status; a change closes the channel that
// watch handed out.
func (sv *Supervisor) setStatus(st status, detail error) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	sv.detail = detail
	if st == sv.status {
		return
	}
	sv.status = st
	close(sv.changed)
	sv.changed = make(chan struct{})
}

func (sv *Supervisor) currentStatus() status {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.status
}

// watch returns the current status and a channel closed at its next change
// (for tests).
func (sv *Supervisor) watch() (status, <-chan struct{}) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.status, sv.changed
}

func (sv *Supervisor) loop(ctx context.Context, ticks <-chan time.Time, reset func()) {
	var grace <-chan time.Time
	for {
		s := sv.Server()
		select {
		case <-ctx.Done():
			return
		case <-s.Done():
			grace = nil
			sv.mu.Lock()
			sv.handled = s
			sv.mu.Unlock()
			if err := s.Err(); err != nil {
				sv.log.Warn("private PostgreSQL stopped; restarting it", "error", err)
			} else {
				sv.log.Warn("private PostgreSQL stopped; restarting it")
			}
			sv.setStatus(statusRestarting, s.Err())
			reset()
			if err := sv.restart(ctx); err != nil {
				if ctx.Err() == nil {
					sv.fail(err)
				}
				return
			}
			reset()
		case <-ticks:
			if sv.probe(ctx, s) && grace == nil {
				sv.log.Warn("private PostgreSQL is shutting down; dropping pooled connections so that it can finish, then restarting it",
					"grace", cmp.Or(sv.opts.ShutdownGrace, defaultShutdownGrace))
				reset()
				grace = time.After(cmp.Or(sv.opts.ShutdownGrace, defaultShutdownGrace))
			}
			if sv.probed != nil {
				sv.probed <- struct{}{}
			}
		case <-grace:
			grace = nil
			sv.log.Warn("private PostgreSQL still shutting down after the grace period; asking for a fast shutdown")
			_ = s.Stop() // its exit closes Done: handled above
		}
	}
}

// probe opens a fresh connection and updates the readiness. It returns
// true when the server is shutting down.
func (sv *Supervisor) probe(ctx context.Context, s *Server) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err == nil {
		_ = conn.Close(ctx)
		if sv.currentStatus() != statusReady {
			sv.log.Info("private PostgreSQL accepts connections again")
		}
		sv.setStatus(statusReady, nil)
		return false
	}
	if ctx.Err() != nil {
		return false
	}
	if postmasterStatus(s.DataDir()) == "stopping" {
		sv.setStatus(statusShuttingDown, err)
		return true
	}
	if sv.currentStatus() == statusReady {
		sv.log.Warn("private PostgreSQL refuses new connections", "error", err)
	}
	sv.setStatus(statusRefusing, err)
	return false
}

// restart starts the server again, up to RestartAttempts times.
func (sv *Supervisor) restart(ctx context.Context) error {
	attempts := cmp.Or(sv.opts.RestartAttempts, defaultRestartAttempts)
	var err error
	for attempt := 1; attempt <= attempts; attempt++ {
		sv.log.Info("starting private PostgreSQL again", "attempt", attempt, "attempts", attempts)
		var s *Server
		s, err = Start(ctx, sv.opts.Options)
		if err == nil {
			sv.mu.Lock()
			sv.server = s
			sv.mu.Unlock()
			sv.setStatus(statusReady, nil)
			sv.log.Info("private PostgreSQL restarted", "pid", s.PID(), "attempt", attempt)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sv.log.Warn("restart of private PostgreSQL failed", "attempt", attempt, "attempts", attempts, "error", err)
		if attempt < attempts {
			if serr := sleepCtx(ctx, sv.backoff(attempt)); serr != nil {
				return serr
			}
		}
	}
	return fmt.Errorf("private PostgreSQL could not be restarted (%d attempts): %w", attempts, err)
}

func (sv *Supervisor) fail(err error) {
	sv.log.Error("giving up on the private PostgreSQL", "error", err)
	sv.failErr = err
	sv.setStatus(statusFailed, err)
	close(sv.failed)
}

// postmasterStatus returns the status line of dataDir/postmaster.pid
// ("starting", "stopping", "ready", "standby"), or "" when there is none.
// postgres writes it since version 10; pg_ctl reads it the same way.
func postmasterStatus(dataDir string) string {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return ""
	}
	lines := bytes.Split(b, []byte("\n"))
	const statusLine = 8 // LOCK_FILE_LINE_PM_STATUS in pidfile.h
	if len(lines) < statusLine {
		return ""
	}
	return string(bytes.TrimSpace(lines[statusLine-1]))
}
