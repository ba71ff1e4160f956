package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// shell is one bash that runs a document's blocks one after the other, as
// a terminal would: variables a block sets are there for the next ones.
// Each block is written to a file and sourced with stdin from /dev/null;
// after it, a marker line on stdout and stderr ends its output and says
// how many of its commands failed (an ERR trap counts them: a command
// that fails in a condition, as `while`'s, does not count).
type shell struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    chan string // stdout lines
	errs   chan string // stderr lines
	dir    string
	marker string
	n      int
}

func startShell(root, dir string, env []string) (*shell, error) {
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	s := &shell{dir: dir, marker: "__wfm_demo_" + hex.EncodeToString(tok[:]), out: make(chan string, 4096), errs: make(chan string, 4096)}
	s.cmd = exec.Command("bash", "--noprofile", "--norc")
	s.cmd.Dir = root
	s.cmd.Env = env
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		r  io.Reader
		ch chan string
	}{{stdout, s.out}, {stderr, s.errs}} {
		go func() {
			sc := bufio.NewScanner(p.r)
			sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
			for sc.Scan() {
				p.ch <- sc.Text()
			}
			close(p.ch)
		}()
	}
	_, err = io.WriteString(s.stdin, "set -o pipefail\n__wfm_failed=0\ntrap '__wfm_failed=$((__wfm_failed+1))' ERR\n")
	return s, err
}

// stop ends the shell and everything it started in the background.
func (s *shell) stop() {
	if s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
}

// write writes a block's text to a file of its own and returns its path.
func (s *shell) write(body string) (string, error) {
	s.n++
	f := filepath.Join(s.dir, "block-"+strconv.Itoa(s.n)+".sh")
	return f, os.WriteFile(f, []byte(body), 0o600)
}

// run runs body and returns its stdout and stderr, or an error when one of
// its commands failed or it did not end within limit.
func (s *shell) run(ctx context.Context, body string, limit time.Duration) (string, string, error) {
	f, err := s.write(body)
	if err != nil {
		return "", "", err
	}
	cmd := fmt.Sprintf("__wfm_failed=0; source %s </dev/null; printf '\\n%s %%d\\n' \"$__wfm_failed\"; printf '\\n%s\\n' >&2\n",
		shellQuote(f), s.marker, s.marker)
	if _, err := io.WriteString(s.stdin, cmd); err != nil {
		return "", "", err
	}
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	var out, errOut strings.Builder
	failed, outDone, errDone := -1, false, false
	for !outDone || !errDone {
		select {
		case l, ok := <-s.out:
			if !ok {
				return out.String(), errOut.String(), errors.New("the shell exited")
			}
			if rest, found := strings.CutPrefix(l, s.marker+" "); found {
				failed, _ = strconv.Atoi(rest)
				outDone = true
				continue
			}
			out.WriteString(l + "\n")
		case l, ok := <-s.errs:
			if !ok {
				return out.String(), errOut.String(), errors.New("the shell exited")
			}
			if l == s.marker {
				errDone = true
				continue
			}
			errOut.WriteString(l + "\n")
		case <-deadline.C:
			return out.String(), errOut.String(), fmt.Errorf("it did not end within %s", limit)
		case <-ctx.Done():
			return out.String(), errOut.String(), ctx.Err()
		}
	}
	// The marker starts on a line of its own: take back the newline that
	// put it there.
	o := strings.TrimSuffix(out.String(), "\n")
	e := strings.TrimSuffix(errOut.String(), "\n")
	if failed > 0 {
		return o, e, fmt.Errorf("%d of its commands failed", failed)
	}
	return o, e, nil
}

// background starts body in the background (a second terminal), its
// stdout going to a file that the demo reads as it grows.
func (s *shell) background(name, body string) (*background, error) {
	f, err := s.write(body)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(s.dir, "bg-"+name+".out")
	if err := os.WriteFile(out, nil, 0o600); err != nil {
		return nil, err
	}
	cmd := fmt.Sprintf("source %s </dev/null >%s 2>%s &\n", shellQuote(f), shellQuote(out), shellQuote(out+".err"))
	if _, err := io.WriteString(s.stdin, cmd); err != nil {
		return nil, err
	}
	return &background{file: out}, nil
}

// background is a command running in the background and what it printed.
type background struct {
	file string
	read int // how much of its output earlier expectations consumed
}

func (b *background) output() string {
	out, _ := os.ReadFile(b.file)
	return string(out)
}

func (b *background) unread() string {
	out := b.output()
	if b.read > len(out) {
		return ""
	}
	return out[b.read:]
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
