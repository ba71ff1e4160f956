package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// server is the wfm process the demo started.
type server struct {
	bin                   string
	args                  []string // the arguments besides folder and addresses
	cmd                   *exec.Cmd
	mgmtAddr, devAddr     string
	mgmt, device, dataDir string
	log                   string
	done                  chan error
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// newServer prepares a server in tmp on free loopback ports; start starts it.
func newServer(bin, tmp string) (*server, error) {
	p1, err := freePort()
	if err != nil {
		return nil, err
	}
	p2, err := freePort()
	if err != nil {
		return nil, err
	}
	return &server{bin: bin, dataDir: filepath.Join(tmp, "data"), log: filepath.Join(tmp, "server.log"),
		mgmtAddr: "127.0.0.1:" + strconv.Itoa(p1), devAddr: "127.0.0.1:" + strconv.Itoa(p2)}, nil
}

// start starts bin/wfm with its private PostgreSQL in the data folder and
// extra arguments, and waits (bounded) until it listens.
func (s *server) start(ctx context.Context, extra []string) error {
	s.done, s.args = make(chan error, 1), extra
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	args := append([]string{"-data-dir", s.dataDir, "-listen", s.mgmtAddr, "-device-listen", s.devAddr}, extra...)
	s.cmd = exec.Command(s.bin, args...)
	s.cmd.Env = append(os.Environ(), "WFM_ADMIN_TOKEN=", "WFM_ADMIN_TOKEN_FILE=", "DATABASE_URL=")
	s.cmd.Stderr = logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s (run make build first): %w", s.bin, err)
	}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		once := sync.Once{}
		mgmt := ""
		for sc.Scan() {
			l := sc.Text()
			fmt.Fprintln(logf, l)
			if u, ok := strings.CutPrefix(l, "wfm listening on "); ok {
				mgmt, _, _ = strings.Cut(u, " ")
			}
			if strings.HasPrefix(l, "wfm device API") {
				once.Do(func() { listening <- mgmt })
			}
		}
		s.done <- s.cmd.Wait()
		logf.Close()
	}()
	select {
	case mgmt := <-listening:
		s.mgmt, s.device = mgmt, "https://"+s.devAddr
		if s.mgmt == "" {
			s.mgmt = "http://" + s.mgmtAddr
		}
		return nil
	case err := <-s.done:
		s.done <- err
		return fmt.Errorf("the server exited before listening (%v); its log is %s", err, s.log)
	case <-time.After(waitFor):
		s.stop()
		return fmt.Errorf("the server did not listen within %s", waitFor)
	case <-ctx.Done():
		s.stop()
		return ctx.Err()
	}
}

// stop ends the server (SIGTERM, then SIGKILL after 20 s) and waits for it.
func (s *server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		s.done <- <-s.done
	}
}

// tail prints the end of the server's log, for a failed demo.
func (s *server) tail(w io.Writer) {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return
	}
	ls := lines(string(b))
	fmt.Fprintln(w, "--- the server's log (last 20 lines)")
	for _, l := range ls[max(0, len(ls)-20):] {
		fmt.Fprintln(w, "  "+l)
	}
}

// removeAll removes the demo's folder and the private PostgreSQL cluster:
// run as root, wfm places the cluster outside the data folder (in
// /var/lib/wfm, see internal/pglaunch) and links it as <data>/postgres.
func removeAll(tmp string) {
	if target, err := os.Readlink(filepath.Join(tmp, "data", "postgres")); err == nil && filepath.IsAbs(target) {
		_ = os.RemoveAll(target)
	}
	_ = os.RemoveAll(tmp)
}
