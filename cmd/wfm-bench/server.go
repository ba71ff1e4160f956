package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// bench is the state of one run.
type bench struct {
	cfg      config
	deadline time.Time
	tmp      string
	wfm      string // server binary
	pgBin    string // folder of the PostgreSQL binaries (pgbench, psql, postgres)
	// pgVersion is the server version of a private PostgreSQL, once asked.
	pgVersion string
}

// prepare finds or builds what every group needs: the server binary.
func (b *bench) prepare(ctx context.Context) error {
	b.pgBin = findPGBin(ctx, b.cfg.getenv)
	if b.cfg.bin != "" {
		p, err := filepath.Abs(b.cfg.bin)
		if err != nil {
			return err
		}
		b.wfm = p
		return nil
	}
	if !b.needsServer() {
		return nil
	}
	b.wfm = filepath.Join(b.cfg.src, "bin", "wfm")
	fmt.Fprintf(b.cfg.log, "== building %s\n", b.wfm)
	return b.goCmd(ctx, "build", "-o", b.wfm, "./cmd/wfm").Run()
}

// needsServer reports whether a selected group starts the server under
// test.
func (b *bench) needsServer() bool {
	for _, g := range allGroups() {
		if g.server && b.cfg.selected(g.name) {
			return true
		}
	}
	return false
}

// goCmd is the go tool run in the source tree, its output on the log.
func (b *bench) goCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = b.cfg.src
	cmd.Stdout, cmd.Stderr = b.cfg.log, b.cfg.log
	return cmd
}

// findPGBin finds the PostgreSQL binaries as the server does: $PG_BIN,
// `pg_config --bindir`, else the newest /usr/lib/postgresql/<N>/bin; empty
// when none is found (pgbench and psql are then looked up in PATH).
func findPGBin(ctx context.Context, getenv func(string) string) string {
	if d := getenv("PG_BIN"); d != "" {
		return d
	}
	if out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); d != "" {
			if _, err := os.Stat(filepath.Join(d, "pgbench")); err == nil {
				return d
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if len(dirs) == 0 {
		return ""
	}
	return dirs[len(dirs)-1]
}

// pgTool is the path of a PostgreSQL client program.
func (b *bench) pgTool(name string) string {
	if b.pgBin != "" {
		if p := filepath.Join(b.pgBin, name); fileExists(p) {
			return p
		}
	}
	return name
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// server is one wfm process under test, with its private PostgreSQL.
type server struct {
	cmd    *exec.Cmd
	dir    string
	mgmt   string // http://host:port of the management listener
	device string // http://host:port of the device listener (https:// with mutual TLS)
	token  string // admin bearer token
	// pgSocket and pgPort reach its private PostgreSQL (logged at level info).
	pgSocket, pgPort string
	stderr           string // file receiving the server's log
	done             chan struct{}
	waitErr          error
}

var (
	mgmtLine   = regexp.MustCompile(`wfm listening on (http://\S+)`)
	deviceLine = regexp.MustCompile(`device API \(Margo\) on (https?://[^/\s]+)`)
	pgReady    = regexp.MustCompile(`private PostgreSQL ready.* socket=(\S+) port=(\d+)`)
)

// startServer starts the server under test in a fresh folder: private
// PostgreSQL, development header identity, rate limits lifted, an admin
// token of its own. logLevel "info" is needed to learn the database socket.
// extra are further server arguments.
func (b *bench) startServer(ctx context.Context, name, logLevel string, extra ...string) (*server, error) {
	if b.wfm == "" {
		return nil, errors.New("no server binary")
	}
	dir := filepath.Join(b.tmp, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	// Running as root, the private PostgreSQL runs as the OS user postgres,
	// which must be able to enter the folder (else the server places the
	// cluster under /var/lib/wfm, which this run would leave behind).
	if err := os.Chmod(b.tmp, 0o755); err != nil {
		return nil, err
	}
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	s := &server{dir: dir, token: hex.EncodeToString(tok[:]), stderr: filepath.Join(dir, "wfm.log"), done: make(chan struct{})}
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(s.token+"\n"), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(s.stderr)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.Command(b.wfm,
		"-listen", "127.0.0.1:0", "-device-listen", "127.0.0.1:0",
		"-data-dir", filepath.Join(dir, "data"), "-admin-token-file", tokenFile,
		"-dev-header-identity", "-mgmt-rate", "0", "-device-rate", "1e9", "-device-burst", "1000000000",
		"-log-level", logLevel)
	s.cmd.Args = append(s.cmd.Args, extra...)
	// The server dies with this process (and its PostgreSQL with it).
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s.cmd.Stderr = logf
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", b.wfm, err)
	}
	ready := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // reads the server's stdout until it exits
		defer wg.Done()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := mgmtLine.FindStringSubmatch(sc.Text()); m != nil {
				s.mgmt = strings.TrimSuffix(m[1], "/")
			}
			if m := deviceLine.FindStringSubmatch(sc.Text()); m != nil {
				s.device = m[1]
				once.Do(func() { close(ready) })
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		wg.Wait()
		s.waitErr = s.cmd.Wait()
		close(s.done)
	}()
	timer := time.NewTimer(90 * time.Second)
	defer timer.Stop()
	select {
	case <-ready:
	case <-s.done:
		return nil, fmt.Errorf("server exited at start (%v): %s", s.waitErr, tail(s.stderr))
	case <-timer.C:
		s.stop()
		return nil, fmt.Errorf("server not ready after 90 s: %s", tail(s.stderr))
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
	if s.mgmt == "" {
		s.stop()
		return nil, errors.New("server did not print its management address")
	}
	if logLevel == "info" {
		log, _ := os.ReadFile(s.stderr)
		if m := pgReady.FindSubmatch(log); m != nil {
			s.pgSocket, s.pgPort = string(m[1]), string(m[2])
		}
	}
	return s, nil
}

// stop ends the server (SIGTERM, then SIGKILL after 20 s) and waits for it.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(20 * time.Second)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// memory reads the server process's resident set (VmRSS) and its peak
// (VmHWM), in bytes, from /proc/<pid>/status.
func (s *server) memory() (rss, hwm int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	return parseMemory(data)
}

// parseMemory reads VmRSS and VmHWM (kB) from a /proc/<pid>/status file.
func parseMemory(status []byte) (rss, hwm int64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		var dst *int64
		switch f[0] {
		case "VmRSS:":
			dst = &rss
		case "VmHWM:":
			dst = &hwm
		default:
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s %q: %w", f[0], f[1], err)
		}
		*dst = kb * 1024
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, errors.New("no VmRSS or VmHWM in /proc/<pid>/status")
	}
	return rss, hwm, nil
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return strings.TrimSpace(string(data))
}
