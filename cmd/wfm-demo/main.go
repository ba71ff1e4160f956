// Command wfm-demo runs the README's tour ("The first ten minutes") against
// a real server and real simulated devices, and checks that every command
// answers what the README says it answers (`make demo`; CI runs it).
//
// It reads the tour from README.md itself, so the README cannot drift from
// the product. In that section, fenced blocks whose info string carries a
// demo word are the script (the first word stays the language, for
// GitHub's highlighting):
//
//	```sh demo-setup   variables every later block starts with; the demo gives
//	                   W, DEV and D its own values (its server's addresses and
//	                   data folder)
//	```sh demo         a command; the next block, an expect block, is its output
//	```sh demo poll    the same, run again (every 500 ms, up to 90 s) until its
//	                   output matches: for what the devices do in the background
//	```sh demo bg=S    a command that runs in the background (a second
//	                   terminal): the simulator, an event stream
//	```json expect     the output as JSON: members compared whatever their order
//	```text expect     the output line by line
//	```sse expect bg=S the next events of background S (text expect bg=S: its
//	                   next lines), waited for up to 90 s
//
// In expected outputs <name> is a varying part: <time>, <digest>,
// <request-id>, <event-id> and <n> match anything; any other placeholder
// (<deployment-id>) takes its value where it first appears, must have the
// same value wherever it appears again, and is replaced by it in later
// commands. An expected JSON object with the member "…": "…" may have more
// members than shown, an array ending with "…" more elements; otherwise
// everything is compared. Outputs are compared after replacing the demo's
// addresses and data folder by the README's.
//
// The demo starts bin/wfm with its own private PostgreSQL in a temporary
// folder, on free loopback ports, and runs each command with bash from the
// repository's root, with WFM_DATA_DIR and WFM_DEVICE_LISTEN set to the
// demo server's (so "wfm issue-client-cert" needs no flags). It stops
// everything it started and removes the folder (and the PostgreSQL cluster
// that wfm, run as root, keeps elsewhere and links), also on failure; on a
// mismatch it prints the README line, the command, each difference and
// the output, and exits 1.
//
// Hand-written rather than a golden-file tool: the expected outputs live in
// prose for people, with placeholders and abridged JSON, and no library
// reads that.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "wfm-demo:", err)
		os.Exit(1)
	}
}

// section is the README heading of the tour.
const section = "## The first ten minutes"

// Bounds of waiting for background progress.
const (
	pollEvery   = 500 * time.Millisecond
	waitFor     = 90 * time.Second
	commandTime = 60 * time.Second
)

// block is one fenced block of the tour.
type block struct {
	line int    // README line of the opening fence
	lang string // sh, json, text, sse
	kind string // "setup", "run", "expect"
	poll bool
	bg   string // the background command it starts or reads
	body string
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("wfm-demo", flag.ContinueOnError)
	readme := fs.String("readme", "README.md", "the README whose tour is run (its folder is the repository's root)")
	wfmBin := fs.String("wfm", "bin/wfm", "the server binary")
	timeout := fs.Duration("timeout", 5*time.Minute, "the whole demo's time limit")
	verbose := fs.Bool("v", false, "print every command's output (normalised), to write the README's expected outputs")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("the tour's commands need %s (Debian: apt-get install %s): %w", tool, tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	text, err := os.ReadFile(*readme)
	if err != nil {
		return err
	}
	blocks, err := parseTour(string(text))
	if err != nil {
		return fmt.Errorf("%s: %w", *readme, err)
	}
	root, err := filepath.Abs(filepath.Dir(*readme))
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "wfm-demo-")
	if err != nil {
		return err
	}
	defer removeAll(tmp)

	start := time.Now()
	srv, err := startServer(ctx, filepath.Join(root, *wfmBin), tmp)
	if err != nil {
		return err
	}
	defer srv.stop()
	fmt.Fprintf(stdout, "wfm-demo: server on %s (device API %s), data in %s\n", srv.mgmt, srv.device, srv.dataDir)
	d := &demo{root: root, srv: srv, stdout: stdout, bound: bindings{}, bg: map[string]*background{}, verbose: *verbose}
	defer d.stopBackground()
	if err := d.play(ctx, *readme, blocks); err != nil {
		srv.tail(stdout)
		return err
	}
	fmt.Fprintf(stdout, "wfm-demo: the tour in %s ran as written: %d commands in %s\n", *readme, d.commands, time.Since(start).Round(time.Second))
	return nil
}

var fence = regexp.MustCompile("^```(\\S*)(.*)$")

// parseTour returns the demo blocks of the tour section of a README.
func parseTour(readme string) ([]block, error) {
	lines := strings.Split(readme, "\n")
	in, found := false, false
	var out []block
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "## ") {
			in = strings.TrimSpace(l) == section
			found = found || in
			continue
		}
		m := fence.FindStringSubmatch(l)
		if !in || m == nil || m[1] == "" {
			continue
		}
		b := block{line: i + 1, lang: m[1]}
		for _, w := range strings.Fields(m[2]) {
			switch {
			case w == "demo":
				b.kind = "run"
			case w == "demo-setup":
				b.kind = "setup"
			case w == "expect":
				b.kind = "expect"
			case w == "poll":
				b.poll = true
			case strings.HasPrefix(w, "bg="):
				b.bg = strings.TrimPrefix(w, "bg=")
			default:
				return nil, fmt.Errorf("line %d: unknown word %q in the fence (known: demo, demo-setup, expect, poll, bg=NAME)", i+1, w)
			}
		}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		if i == len(lines) {
			return nil, fmt.Errorf("line %d: the block is not closed", b.line)
		}
		b.body = strings.Join(body, "\n") + "\n"
		if b.kind != "" {
			out = append(out, b)
		}
	}
	if !found {
		return nil, fmt.Errorf("no section %q", section)
	}
	if len(out) == 0 || out[0].kind != "setup" {
		return nil, errors.New("the tour must start with a `sh demo-setup` block")
	}
	return out, nil
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

// server is the wfm process the demo started.
type server struct {
	cmd                   *exec.Cmd
	mgmt, device, dataDir string
	devAddr               string
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

// startServer starts bin/wfm with a private PostgreSQL in tmp and waits
// (bounded) until it listens.
func startServer(ctx context.Context, bin, tmp string) (*server, error) {
	p1, err := freePort()
	if err != nil {
		return nil, err
	}
	p2, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &server{dataDir: filepath.Join(tmp, "data"), log: filepath.Join(tmp, "server.log"), done: make(chan error, 1),
		mgmt: "http://127.0.0.1:" + strconv.Itoa(p1), devAddr: "127.0.0.1:" + strconv.Itoa(p2)}
	s.device = "https://" + s.devAddr
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin, "-data-dir", s.dataDir, "-listen", "127.0.0.1:"+strconv.Itoa(p1), "-device-listen", s.devAddr)
	s.cmd.Env = append(os.Environ(), "WFM_ADMIN_TOKEN=", "WFM_ADMIN_TOKEN_FILE=", "DATABASE_URL=")
	s.cmd.Stderr = logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (run make build first): %w", bin, err)
	}
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		once := sync.Once{}
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if strings.HasPrefix(sc.Text(), "wfm device API") {
				once.Do(func() { close(listening) })
			}
		}
		s.done <- s.cmd.Wait()
		logf.Close()
	}()
	select {
	case <-listening:
		return s, nil
	case err := <-s.done:
		s.done <- err
		return s, fmt.Errorf("the server exited before listening (%v); its log is %s", err, s.log)
	case <-time.After(waitFor):
		s.stop()
		return nil, fmt.Errorf("the server did not listen within %s", waitFor)
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
}

// stop ends the server (SIGTERM, then SIGKILL after 20 s) and waits for it.
func (s *server) stop() {
	if s.cmd.Process == nil {
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

// background is a command running in the background and what it printed.
type background struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	read int // how much of out earlier expectations consumed
}

func (b *background) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out.Write(p)
}

func (b *background) unread() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out.String()[b.read:]
}

type demo struct {
	root     string
	srv      *server
	stdout   io.Writer
	prelude  string
	bound    bindings
	bg       map[string]*background
	commands int
	verbose  bool
	normal   *strings.Replacer // the demo's addresses and folder -> the README's
}

func (d *demo) stopBackground() {
	for _, b := range d.bg {
		if b.cmd.Process != nil {
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			_ = b.cmd.Wait()
		}
	}
}

// mismatch is a step whose output is not the README's.
type mismatch struct {
	readme string
	b      block
	cmd    string
	diffs  []string
	got    string
}

func (m *mismatch) Error() string {
	var s strings.Builder
	fmt.Fprintf(&s, "%s:%d: the output differs from the README\n", m.readme, m.b.line)
	if m.cmd != "" {
		s.WriteString("command:\n")
		for _, l := range lines(m.cmd) {
			s.WriteString("    " + l + "\n")
		}
	}
	s.WriteString("differences:\n")
	for _, d := range m.diffs {
		s.WriteString("  - " + d + "\n")
	}
	s.WriteString("output (the demo's addresses and folder replaced by the README's):\n")
	for _, l := range lines(m.got) {
		s.WriteString("    " + l + "\n")
	}
	return s.String()
}

// play runs the blocks in order.
func (d *demo) play(ctx context.Context, readme string, blocks []block) error {
	setup, err := d.setup(blocks[0])
	if err != nil {
		return fmt.Errorf("%s:%d: %w", readme, blocks[0].line, err)
	}
	d.prelude = setup
	for i := 1; i < len(blocks); i++ {
		b := blocks[i]
		var next *block
		if i+1 < len(blocks) && blocks[i+1].kind == "expect" && blocks[i+1].bg == "" {
			next = &blocks[i+1]
			i++
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s:%d: %w", readme, b.line, err)
		}
		var err error
		switch {
		case b.kind == "setup":
			err = errors.New("only the first block may be demo-setup")
		case b.kind == "expect" && b.bg != "":
			err = d.expectBackground(ctx, readme, b)
		case b.kind == "expect":
			err = errors.New("an expect block must follow a `sh demo` block")
		case b.bg != "":
			if next != nil {
				err = errors.New("a background command's output is read by `expect bg=NAME` blocks")
			} else {
				err = d.startBackground(b)
			}
		default:
			err = d.step(ctx, readme, b, next)
		}
		if err != nil {
			var mm *mismatch
			if errors.As(err, &mm) {
				return err
			}
			return fmt.Errorf("%s:%d: %w", readme, b.line, err)
		}
		d.commands++
		fmt.Fprintf(d.stdout, "  ok  %s:%d %s\n", readme, b.line, firstLine(b.body))
	}
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if len(l) > 100 {
		l = l[:99] + "…"
	}
	return l
}

var assignment = regexp.MustCompile(`^([A-Z][A-Z0-9_]*)=(\S+)(\s+#.*)?$`)

// setup rewrites the setup block: W, DEV and D take the demo's values, and
// the README's values are remembered to normalise outputs.
func (d *demo) setup(b block) (string, error) {
	ours := map[string]string{"W": d.srv.mgmt, "DEV": d.srv.device, "D": d.srv.dataDir}
	var out []string
	var repl []string
	for _, l := range lines(b.body) {
		m := assignment.FindStringSubmatch(l)
		if m == nil {
			out = append(out, l)
			continue
		}
		v, ok := ours[m[1]]
		if !ok {
			out = append(out, l)
			continue
		}
		delete(ours, m[1])
		out = append(out, m[1]+"="+shellQuote(v))
		repl = append(repl, v, m[2])
	}
	if len(ours) > 0 {
		var names []string
		for n := range ours {
			names = append(names, n)
		}
		sort.Strings(names)
		return "", fmt.Errorf("the setup block must assign %s (one NAME=value a line)", strings.Join(names, ", "))
	}
	// Longest first, so that a folder inside another is replaced whole.
	pairs := make([][2]string, 0, len(repl)/2)
	for i := 0; i < len(repl); i += 2 {
		pairs = append(pairs, [2]string{repl[i], repl[i+1]})
	}
	sort.Slice(pairs, func(i, j int) bool { return len(pairs[i][0]) > len(pairs[j][0]) })
	var args []string
	for _, p := range pairs {
		args = append(args, p[0], p[1])
	}
	d.normal = strings.NewReplacer(args...)
	return strings.Join(out, "\n") + "\n", nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (d *demo) command(b block) (*exec.Cmd, string, error) {
	body, err := d.bound.substitute(b.body)
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command("bash", "-c", "set -eo pipefail\n"+d.prelude+body)
	cmd.Dir = d.root
	cmd.Env = append(os.Environ(), "WFM_DATA_DIR="+d.srv.dataDir, "WFM_DEVICE_LISTEN="+d.srv.devAddr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, body, nil
}

// step runs one command (again and again with poll) and compares its
// output with the expect block that follows it (none: no output).
func (d *demo) step(ctx context.Context, readme string, b block, want *block) error {
	deadline := time.Now().Add(waitFor)
	for {
		cmd, body, err := d.command(b)
		if err != nil {
			return err
		}
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		cctx, cancel := context.WithTimeout(ctx, commandTime)
		if err := cmd.Start(); err != nil {
			cancel()
			return err
		}
		stopped := context.AfterFunc(cctx, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		err = cmd.Wait()
		stopped()
		cancel()
		if err != nil {
			return fmt.Errorf("the command failed (%v):\n%s\nstderr:\n%s", err, body, errOut.String())
		}
		got := d.normal.Replace(out.String())
		if d.verbose {
			fmt.Fprintf(d.stdout, "%s", got)
		}
		try := d.bound.clone()
		diffs := compare(try, want, got)
		if len(diffs) == 0 {
			d.bound = try
			return nil
		}
		if !b.poll || time.Now().After(deadline) || ctx.Err() != nil {
			if b.poll {
				diffs = append(diffs, fmt.Sprintf("(still different after polling for %s)", waitFor))
			}
			return &mismatch{readme: readme, b: b, cmd: body, diffs: diffs, got: got}
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollEvery):
		}
	}
}

// compare matches an output with an expect block (nil: the output must be
// empty).
func compare(bd bindings, want *block, got string) []string {
	if want == nil {
		if strings.TrimSpace(got) != "" {
			return []string{"the README shows no output for this command"}
		}
		return nil
	}
	switch want.lang {
	case "json":
		w, err := jsonValues(want.body)
		if err != nil {
			return []string{fmt.Sprintf("the README's expected JSON (line %d) does not parse: %v", want.line, err)}
		}
		g, err := jsonValues(got)
		if err != nil {
			return []string{fmt.Sprintf("the output is not JSON: %v", err)}
		}
		if len(w) != len(g) {
			return []string{fmt.Sprintf("the README shows %d JSON documents, got %d", len(w), len(g))}
		}
		var diffs []string
		for i := range w {
			ptr := ""
			if len(w) > 1 {
				ptr = fmt.Sprintf("document %d: ", i+1)
			}
			for _, d := range bd.matchJSON("", w[i], g[i]) {
				diffs = append(diffs, ptr+d)
			}
		}
		return diffs
	case "sse":
		return bd.matchSSE(sseEvents(want.body, false), sseEvents(got, false))
	default:
		return bd.matchText(want.body, got)
	}
}

// jsonValues decodes a sequence of JSON values (one or more).
func jsonValues(s string) ([]any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	var vs []any
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		return nil, errors.New("no JSON at all")
	}
	return vs, nil
}

func (d *demo) startBackground(b block) error {
	if _, ok := d.bg[b.bg]; ok {
		return fmt.Errorf("background %q is already running", b.bg)
	}
	cmd, _, err := d.command(b)
	if err != nil {
		return err
	}
	bg := &background{cmd: cmd}
	cmd.Stdout = bg
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return err
	}
	d.bg[b.bg] = bg
	return nil
}

// expectBackground waits (bounded) until a background command printed as
// many lines (text) or events (sse) as the block shows, and compares them.
func (d *demo) expectBackground(ctx context.Context, readme string, b block) error {
	bg, ok := d.bg[b.bg]
	if !ok {
		return fmt.Errorf("no background command %q started before", b.bg)
	}
	deadline := time.Now().Add(waitFor)
	for {
		raw := bg.unread()
		var got string
		var used int
		switch b.lang {
		case "sse":
			want := sseEvents(b.body, false)
			used = eventsEnd(raw, len(want))
		default:
			used = linesEnd(raw, len(lines(b.body)))
		}
		if used >= 0 {
			got = d.normal.Replace(raw[:used])
			try := d.bound.clone()
			diffs := compare(try, &b, got)
			if len(diffs) > 0 {
				return &mismatch{readme: readme, b: b, diffs: diffs, got: got}
			}
			d.bound = try
			bg.mu.Lock()
			bg.read += used
			bg.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return &mismatch{readme: readme, b: b, diffs: []string{fmt.Sprintf("not printed within %s", waitFor)}, got: d.normal.Replace(raw)}
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollEvery):
		}
	}
}

// linesEnd returns the length of the prefix of s holding its first n
// complete lines, -1 if s has fewer.
func linesEnd(s string, n int) int {
	end := 0
	for range n {
		i := strings.IndexByte(s[end:], '\n')
		if i < 0 {
			return -1
		}
		end += i + 1
	}
	return end
}

// eventsEnd returns the length of the prefix of s holding its first n
// complete Server-Sent Events (comments do not count), -1 if s has fewer.
func eventsEnd(s string, n int) int {
	end, count, data := 0, 0, false
	for count < n {
		i := strings.IndexByte(s[end:], '\n')
		if i < 0 {
			return -1
		}
		l := strings.TrimRight(s[end:end+i], "\r")
		end += i + 1
		switch {
		case l == "":
			if data {
				count++
			}
			data = false
		case !strings.HasPrefix(l, ":"):
			data = true
		}
	}
	return end
}
