// Package pglaunch runs a private PostgreSQL server as a foreground child
// process, so that wfm and its tests need nothing but the server binaries when
// no DATABASE_URL is given. It is meant for development and tests; production
// runs against its own PostgreSQL through DATABASE_URL.
//
// The server is a plain child: never pg_ctl, never a daemon. It runs in its own
// process group, so that a terminal's Ctrl-C reaches only the parent, which
// then stops postgres in order; and on Linux the kernel sends it SIGKILL when
// the parent dies, so a crashed or killed parent never leaves a server behind.
//
// # Who may connect
//
// Only the OS user that started it (and the server's own OS user). The server
// has no TCP listener at all (listen_addresses is empty); it listens on a Unix
// socket in a folder of mode 0700 owned by the server's OS user: the data dir
// itself when the socket's path fits in the 107 bytes a socket address holds,
// otherwise a private folder under the temporary folder that Stop removes.
// The socket file itself is 0700 too. Behind that, pg_hba.conf, which Start
// writes on every start, allows nothing but "local" connections as the
// superuser "postgres" with peer authentication, through a pg_ident.conf map
// that names only those two OS users: the kernel, not a secret, tells the
// server who connects. A password (scram-sha-256 with a random password in a
// 0600 file) was considered and left out: the only users able to read such a
// file are the ones peer authentication already admits, and a password file
// is one more secret that a copy of the data dir would carry. Because the
// files are rewritten on every start, a data dir made by an earlier build
// (trust authentication on 127.0.0.1) is converted on its next start; its
// data stays.
//
// # Running as root
//
// PostgreSQL refuses to run as root, so a root process runs it as the OS user
// "postgres", which must be able to enter every folder above the data dir. A
// clone under /root or in a `mktemp -d` folder (mode 0700) is out of its reach.
// Rather than open the user's folders (chmod, or a POSIX ACL on /root), Start
// then places a new cluster in a fresh folder under Options.FallbackDir
// (/var/lib/wfm by default, the system's place for state) and makes DataDir a
// symbolic link to it, so the next start finds the same cluster and `ls -l`
// shows where the data lives; Server.DataDir returns that real folder so the
// caller can say so. Deleting DataDir (the link) leaves the cluster behind; it
// is removed with the folder the link points to.
//
// # Supervision
//
// A Supervisor restarts a server that stopped under it (see Supervisor).
package pglaunch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrExited is wrapped by the errors that report a postgres process that
// ended on its own: Start returns it when the server dies before it accepts
// connections, Server.Err after an unexpected exit. The message carries the
// last lines of the server log, which almost always name the cause.
var ErrExited = errors.New("postgres exited")

const (
	defaultReadyTimeout = 30 * time.Second
	// stopTimeout bounds a fast shutdown; postgres needs well under a second
	// unless a checkpoint of a large dirty buffer pool is due.
	stopTimeout = 10 * time.Second
	// startAttempts bounds the retries for start failures that a second try
	// fixes (see retryable).
	startAttempts = 5
	// serverUser is the OS account PostgreSQL runs as when we are root; it
	// refuses to run as root itself. Debian's postgresql package creates it.
	serverUser = "postgres"
	// defaultPort numbers the socket when Options.Port is 0. There is no TCP
	// listener, so it cannot clash with another server: the socket folder
	// belongs to this cluster alone.
	defaultPort = 5432
	// defaultFallbackDir is where a root process places clusters that the
	// server's OS user could not reach where they were asked for.
	defaultFallbackDir = "/var/lib/wfm"
)

// Options configures Start.
type Options struct {
	// BinDir holds initdb and postgres; FindBinaries finds it.
	BinDir string
	// DataDir is the cluster folder. It is created (with parents) and
	// initialized on first use and reused afterwards, so data survives
	// restarts. When running as root, folders that Start creates are made
	// world-searchable (0755) because the server runs as the OS user
	// "postgres" and must reach DataDir; existing folders are never changed:
	// when one of them blocks the way, a new cluster goes to FallbackDir and
	// DataDir becomes a symbolic link to it (see the package comment).
	DataDir string
	// FallbackDir holds clusters that the server's OS user cannot reach at
	// DataDir (root only); empty means /var/lib/wfm.
	FallbackDir string
	// Port numbers the Unix socket (.s.PGSQL.<Port>); there is no TCP
	// listener. 0 means 5432.
	Port int
	// SocketDir is the folder of the Unix socket. Empty means the data dir
	// when the socket's path fits, else a private folder under os.TempDir()
	// that Stop removes. A folder given here must exist and is the caller's
	// to protect and remove.
	SocketDir string
	// Settings are extra server settings, passed as -c name=value: for
	// example fsync=off for a throwaway test cluster. fsync=off also makes
	// initdb skip its final sync, since such a cluster is disposable anyway.
	Settings map[string]string
	// Log receives the output of initdb and postgres; nil appends it to
	// DataDir/postgres.log. Start never closes it.
	Log io.Writer
	// ReadyTimeout bounds the wait for the first accepted connection after
	// the process started; 0 means 30 s.
	ReadyTimeout time.Duration

	// lookupID replaces user.LookupId in tests.
	lookupID func(uid string) (*user.User, error)
}

// Server is a running postgres child process. Its methods are safe for
// concurrent use.
type Server struct {
	port      int
	socketDir string
	dataDir   string
	// ownsSocketDir says Stop removes socketDir (a private temporary one).
	ownsSocketDir atomic.Bool
	pid           int
	process       *os.Process
	tail          *tailBuffer

	done     chan struct{}
	stopping atomic.Bool
	exitErr  error // written before done is closed

	stopOnce sync.Once
	stopErr  error
}

// Start initializes opts.DataDir if it holds no cluster yet, starts postgres
// on it and returns once the server accepts connections. ctx bounds the
// start only; the server runs until Stop (or until this process dies).
//
// A postmaster.pid left behind by a killed server is handled by postgres
// itself, which ignores it once that process is gone, and by Start when that
// process is a zombie nobody reaped (see removeZombieLock). An initdb that
// was interrupted leaves a half-made DataDir that Start cannot repair:
// remove it.
//
// Returns an error wrapping ErrExited, with the tail of the server log, if
// postgres exits before it accepts connections.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.BinDir == "" {
		return nil, errors.New("start postgres: Options.BinDir is empty (see FindBinaries)")
	}
	if opts.DataDir == "" {
		return nil, errors.New("start postgres: Options.DataDir is empty")
	}
	asked, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("start postgres: data dir: %w", err)
	}
	lookupID := opts.lookupID
	if lookupID == nil {
		lookupID = user.LookupId
	}
	me, err := processUser(lookupID, os.Getuid())
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	dataDir, err := prepareDataDir(asked, cmp.Or(opts.FallbackDir, defaultFallbackDir), cred)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}

	var initOutput []byte
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); errors.Is(err, fs.ErrNotExist) {
		initOutput, err = initdb(ctx, opts.BinDir, dataDir, cred, opts.Settings["fsync"] == "off")
		if err != nil {
			return nil, fmt.Errorf("start postgres: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	logw, closeLog, err := openLog(opts.Log, dataDir)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	_, _ = logw.Write(initOutput)
	_ = closeLog()
	if err := writeAccessRules(dataDir, me, cred); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	port := cmp.Or(opts.Port, defaultPort)
	socketDir, ownSocketDir, err := prepareSocketDir(opts.SocketDir, dataDir, port, cred)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	removeSocketDir := func() {
		if ownSocketDir {
			_ = os.RemoveAll(socketDir)
		}
	}

	timeout := opts.ReadyTimeout
	if timeout <= 0 {
		timeout = defaultReadyTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		if err := removeZombieLocks(dataDir, socketDir, port); err != nil {
			removeSocketDir()
			return nil, fmt.Errorf("start postgres: %w", err)
		}
		s, err := launch(opts, dataDir, socketDir, port, cred)
		if err != nil {
			removeSocketDir()
			return nil, fmt.Errorf("start postgres: %w", err)
		}
		err = s.waitReady(ctx)
		if err == nil {
			s.ownsSocketDir.Store(ownSocketDir)
			return s, nil
		}
		s.kill()
		if attempt < startAttempts && ctx.Err() == nil && retryable(s.tail.String()) {
			if werr := sleepCtx(ctx, time.Duration(attempt)*100*time.Millisecond); werr == nil {
				continue
			}
		}
		removeSocketDir()
		return nil, fmt.Errorf("start postgres on %s: %w", dataDir, err)
	}
}

// removeZombieLocks removes postmaster.pid and the socket's lock file when
// the postmaster they name is a zombie (see removeZombieLock).
func removeZombieLocks(dataDir, socketDir string, port int) error {
	if err := removeZombieLock(filepath.Join(dataDir, "postmaster.pid")); err != nil {
		return err
	}
	return removeZombieLock(filepath.Join(socketDir, socketName(port)+".lock"))
}

// removeZombieLock removes a lock file (postmaster.pid, or the socket's) whose
// postmaster is a zombie.
// After our process is SIGKILLed the kernel kills postgres too (Pdeathsig),
// but it is reparented to PID 1 first, and the PID 1 of many containers
// reaps late or never (on the machine this was written on, the zombie was
// still there when the restart came). postgres probes the old pid with kill(pid, 0), which
// succeeds on a zombie, so it would refuse to start ("lock file
// "postmaster.pid" already exists") until the container restarts. Removing
// the file is what postgres's own hint asks of an operator; it stays safe
// because postgres also finds shared memory still used by old backends
// through a key derived from the data dir, not from this file.
func removeZombieLock(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read stale lock file: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 || !isZombie(pid) {
		return nil // postgres judges this one itself
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove lock file of dead postmaster %d: %w", pid, err)
	}
	return nil
}

// retryable reports whether a start failed for a reason a second attempt
// fixes: backends of a killed server were still attached to the old shared
// memory. The log is matched as text because it is the only channel postgres
// reports this on; LC_ALL=C keeps the messages English.
func retryable(logTail string) bool {
	return strings.Contains(logTail, "pre-existing shared memory block")
}

// launch starts the postgres process and the goroutine that waits for it.
func launch(opts Options, dataDir, socketDir string, port int, cred *syscall.Credential) (*Server, error) {
	args := []string{
		"-D", dataDir,
		"-p", strconv.Itoa(port),
		// No TCP at all: the socket folder's permissions decide who reaches
		// the server (see the package comment).
		"-c", "listen_addresses=",
		"-c", "unix_socket_directories=" + quoteListItem(socketDir),
		"-c", "unix_socket_permissions=0700",
	}
	for _, name := range slices.Sorted(maps.Keys(opts.Settings)) {
		args = append(args, "-c", name+"="+opts.Settings[name])
	}
	logw, closeLog, err := openLog(opts.Log, dataDir)
	if err != nil {
		return nil, err
	}
	s := &Server{port: port, socketDir: socketDir, dataDir: dataDir, tail: &tailBuffer{}, done: make(chan struct{})}
	out := io.MultiWriter(s.tail, logw)

	cmd := exec.Command(filepath.Join(opts.BinDir, "postgres"), args...)
	cmd.Env = childEnv(opts.BinDir)
	cmd.Dir = dataDir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr(cred)
	// Backends inherit the output pipe; if one outlives a killed postmaster,
	// Wait must still return.
	cmd.WaitDelay = 2 * time.Second

	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the OS thread that forked the child exits,
		// not when the process does, and the Go runtime ends a thread when a
		// goroutine exits while locked to it. Keeping the forking thread
		// locked to this goroutine until postgres is gone means no other
		// goroutine can end it early (golang/go#27505).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			_ = closeLog()
			started <- err
			return
		}
		s.process = cmd.Process
		s.pid = cmd.Process.Pid
		started <- nil
		err := cmd.Wait()
		_ = closeLog()
		s.exitErr = s.describeExit(err)
		close(s.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("run %s: %w", cmd.Path, err)
	}
	return s, nil
}

// describeExit turns the result of Wait into the error Err reports.
func (s *Server) describeExit(waitErr error) error {
	if waitErr == nil && s.stopping.Load() {
		return nil
	}
	if waitErr == nil {
		waitErr = errors.New("exit status 0")
	}
	return fmt.Errorf("%w (pid %d, %w); last log lines:\n%s", ErrExited, s.pid, waitErr, s.tail.String())
}

// waitReady returns once a connection succeeds, the process exits or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	url := s.URL("postgres")
	delay := 10 * time.Millisecond
	var lastErr error
	for {
		lastErr = ping(ctx, url)
		if lastErr == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("before accepting connections: %w", s.exitErr)
		default:
		}
		if err := sleepCtx(ctx, delay); err != nil {
			select {
			case <-s.done:
				return fmt.Errorf("before accepting connections: %w", s.exitErr)
			default:
			}
			return fmt.Errorf("no connection accepted: %w (last attempt: %v); last log lines:\n%s", err, lastErr, s.tail.String())
		}
		delay = min(delay*2, 200*time.Millisecond)
	}
}

func ping(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// Port returns the number in the name of the server's Unix socket
// (.s.PGSQL.<port>); the server has no TCP listener.
func (s *Server) Port() int { return s.port }

// SocketDir returns the folder that holds the server's Unix socket.
func (s *Server) SocketDir() string { return s.socketDir }

// DataDir returns the folder the cluster really lives in: Options.DataDir
// made absolute, or the folder it links to (see the package comment).
func (s *Server) DataDir() string { return s.dataDir }

// PID returns the process id of the postmaster, for diagnostics and for
// tests that check the process is gone.
func (s *Server) PID() int { return s.pid }

// URL returns a connection URL for database as the superuser "postgres",
// through the Unix socket. It needs no password: the server admits only the
// OS user that started it (peer authentication, see the package comment).
// libpq's tools (psql, pgbench) accept it as it is.
func (s *Server) URL(database string) string {
	return socketURL(s.socketDir, s.port, database)
}

// Done returns a channel that is closed when the postgres process has
// exited, whether through Stop or on its own, so that the owner can notice a
// server dying under it.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err returns nil while postgres runs and after Stop shut it down cleanly.
// Otherwise, once Done is closed, it returns an error wrapping ErrExited that
// says how the process ended and shows the tail of its log.
func (s *Server) Err() error {
	select {
	case <-s.done:
		return s.exitErr
	default:
		return nil
	}
}

// Stop shuts postgres down and waits for the process to end. It asks for a
// fast shutdown (SIGINT: roll back open transactions, checkpoint, exit),
// escalates to an immediate one (SIGQUIT) after 10 s and to SIGKILL after
// 5 s more, and removes the socket folder if Start made one. Calling Stop
// again returns the first result.
//
// Returns nil after a clean fast shutdown; an error wrapping ErrExited if
// postgres had already died; an error if it had to be forced.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.stopErr = s.stop()
		if s.ownsSocketDir.Load() {
			if err := os.RemoveAll(s.socketDir); err != nil {
				s.stopErr = errors.Join(s.stopErr, fmt.Errorf("remove socket folder: %w", err))
			}
		}
	})
	return s.stopErr
}

func (s *Server) stop() error {
	select {
	case <-s.done:
		if s.exitErr != nil {
			return fmt.Errorf("stop postgres: it had already exited: %w", s.exitErr)
		}
		return nil
	default:
	}
	s.stopping.Store(true)
	// An error here means the process just exited; done reports that.
	_ = s.process.Signal(syscall.SIGINT)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-s.done:
		if s.exitErr != nil {
			return fmt.Errorf("stop postgres: %w", s.exitErr)
		}
		return nil
	case <-timer.C:
	}
	// SIGQUIT is the immediate shutdown: the postmaster kills its backends
	// and exits without a checkpoint (the next start runs crash recovery).
	_ = s.process.Signal(syscall.SIGQUIT)
	timer.Reset(stopTimeout / 2)
	select {
	case <-s.done:
		return fmt.Errorf("stop postgres: no fast shutdown within %v, did an immediate one; last log lines:\n%s",
			stopTimeout, s.tail.String())
	case <-timer.C:
	}
	s.kill()
	return fmt.Errorf("stop postgres: no shutdown within %v, killed it; last log lines:\n%s",
		stopTimeout+stopTimeout/2, s.tail.String())
}

// kill sends SIGKILL to the postmaster and waits for it to end. Its
// backends (each in a session of its own) notice and exit by themselves.
func (s *Server) kill() {
	select {
	case <-s.done:
		return
	default:
	}
	s.stopping.Store(true)
	_ = s.process.Kill()
	<-s.done
}

// processUser returns the name of this process's OS user, uid, as the user
// database (/etc/passwd, NSS) has it. PostgreSQL needs that entry: initdb
// refuses to run without it and peer authentication names the connecting
// user by it. Containers started with an arbitrary uid (OpenShift,
// docker run --user 1234) often have none. It looks the uid up rather than
// calling user.Current, which without cgo makes a name up from $USER.
//
// Returns an error wrapping the lookup's (user.UnknownUserIdError when
// there is no entry) that says what to do.
func processUser(lookupID func(uid string) (*user.User, error), uid int) (string, error) {
	u, err := lookupID(strconv.Itoa(uid))
	if err != nil {
		return "", fmt.Errorf("this process's uid %d has no entry in the user database (/etc/passwd), which the private "+
			"PostgreSQL needs (initdb and peer authentication look the user up); add a passwd entry for uid %d "+
			"(in a container: write one to /etc/passwd at start, or use nss_wrapper), or set DATABASE_URL to use a "+
			"PostgreSQL of your own: %w", uid, uid, err)
	}
	return u.Username, nil
}

// serverCredential returns the account to run initdb and postgres as: nil
// (this process's own) unless we are root, which PostgreSQL refuses.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		return nil, fmt.Errorf("running as root, so PostgreSQL must run as the OS user %q (it refuses root), "+
			"but that user was not found: %w; create it (the Debian/Ubuntu postgresql package does, or: "+
			"useradd --system --user-group %s), run as a non-root user, or set DATABASE_URL", serverUser, err, serverUser)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid of OS user %q: %w", serverUser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid of OS user %q: %w", serverUser, err)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	// Supplementary groups matter for reading files such as TLS keys (the
	// ssl-cert group on Debian); root's own groups must not leak through.
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("groups of OS user %q: %w", serverUser, err)
	}
	for _, g := range gids {
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("group of OS user %q: %w", serverUser, err)
		}
		cred.Groups = append(cred.Groups, uint32(n))
	}
	return cred, nil
}

// initdb creates the cluster and returns its output.
func initdb(ctx context.Context, binDir, dataDir string, cred *syscall.Credential, noSync bool) ([]byte, error) {
	// Nothing is admitted until writeAccessRules has written its rules.
	args := []string{"-A", "reject", "-E", "UTF8", "--locale=C", "-U", "postgres", "-D", dataDir}
	if noSync {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), args...)
	cmd.Env = childEnv(binDir)
	cmd.Dir = dataDir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = sysProcAttr(cred)
	// See launch: Pdeathsig is tied to the forking thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("initdb %s: %w\n%s", dataDir, err, lastLines(out.String(), 20))
	}
	return out.Bytes(), nil
}

// childEnv is the whole environment of initdb and postgres: nothing of ours
// leaks in (PGDATA, PGPORT, LANG…), and the C locale keeps server messages
// and collation identical on every machine.
func childEnv(binDir string) []string {
	return []string{"LC_ALL=C", "PATH=" + binDir + ":/usr/bin:/bin"}
}

// openLog returns where server output goes and how to release it.
func openLog(w io.Writer, dataDir string) (io.Writer, func() error, error) {
	if w != nil {
		return ignoreErrors{w}, func() error { return nil }, nil
	}
	f, err := os.OpenFile(filepath.Join(dataDir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open server log: %w", err)
	}
	return ignoreErrors{f}, f.Close, nil
}

// ignoreErrors keeps a failing log (a full disk) from stopping the copy of
// the server's output: postgres would block writing to a full pipe.
type ignoreErrors struct{ w io.Writer }

func (w ignoreErrors) Write(p []byte) (int, error) {
	_, _ = w.w.Write(p)
	return len(p), nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// tailBuffer keeps the last few KiB of the server output for error messages.
type tailBuffer struct {
	mu      sync.Mutex
	b       []byte
	trimmed bool
}

const tailBytes = 4 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - tailBytes; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
		t.trimmed = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := string(t.b)
	if t.trimmed {
		if _, rest, ok := strings.Cut(s, "\n"); ok {
			s = rest // drop the partial first line
		}
	}
	return lastLines(s, 20)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
