// Command wfm-demo runs every shell command of the README and the operator
// guide against a real server and real simulated devices, in document
// order, shows what each answered, and checks the answers the documents
// show (`make demo`; CI runs it).
//
// It reads the commands from the documents themselves, so they cannot
// drift from the product. Every fenced block whose language is sh runs,
// unless its fence says why it cannot run here. After the language, the
// fence's info string may carry these words (GitHub shows only the
// language):
//
//	```sh                  a command: run, its answer shown; a command of it
//	                       that fails, or an answer that is a problem
//	                       document, fails the demo unless an expect block
//	                       follows and shows it
//	```sh norun="why"      not run here, for the reason given (printed)
//	```sh demo-setup       starts a new server and data folder: the variables
//	                       every later block uses; the demo gives W, DEV and D
//	                       its own values (its server's addresses and folder)
//	```sh demo             the same as ```sh (the tour marks its steps so)
//	```sh poll             run again (every 500 ms, up to 90 s) until its
//	                       answer matches: for what the devices do
//	```sh problem=TYPE     a command whose answer is the refusal TYPE (a
//	                       problem document), as the text after it shows
//	```sh bg=S             a command that runs in the background (a second
//	                       terminal): the simulator, an event stream
//	```json expect         the answer of the block before, as JSON: members
//	                       compared whatever their order
//	```text expect         the answer line by line
//	```sse expect bg=S     the next events of background S (text expect
//	                       bg=S: its next lines), waited for up to 90 s
//
// A block that is only `make run` (ARGS='…' or not) is the demo's server:
// it starts it again with those arguments, on the same folder and ports,
// when they differ from those it runs with.
//
// In expected outputs <name> is a varying part: <time>, <digest>,
// <request-id>, <event-id> and <n> match anything; any other placeholder
// (<deployment-id>) takes its value where it first appears, must have the
// same value wherever it appears again, and is replaced by it in later
// commands. An expected JSON object with the member "…": "…" may have more
// members than shown, an array ending with "…" more elements; otherwise
// everything is compared.
//
// Each document runs on a new server with its own private PostgreSQL in a
// temporary folder, on free loopback ports, and so does each part that
// starts with a demo-setup block (the README's tour, whose answers are
// those of a new data folder). Its blocks run in one bash from the
// repository's root, as pasted into a terminal, with WFM_DATA_DIR and
// WFM_DEVICE_LISTEN set to the demo server's (so "wfm issue-client-cert"
// needs no flags). Outside a demo-setup part the commands use `make run`'s
// addresses and folder (localhost:8080, 127.0.0.1:8080, the same with
// 8443, .data/): the demo puts its own in their place before running a
// block, and puts them back in what it shows and compares. It stops
// everything it started and removes the folders (and the PostgreSQL
// cluster that wfm, run as root, keeps elsewhere and links), also on
// failure; on a failure it prints the document's line, the command, each
// difference and the output, and exits 1.
//
// Hand-written rather than a golden-file tool: the expected outputs live in
// prose for people, with placeholders and abridged JSON, and no library
// reads that.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
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

// Bounds of waiting for background progress and for one command.
const (
	pollEvery   = 500 * time.Millisecond
	waitFor     = 90 * time.Second
	commandTime = 90 * time.Second
)

// shownLines bounds how much of an answer the demo prints.
const shownLines = 8

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("wfm-demo", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: wfm-demo [flags] [document.md …] (default: README.md docs/operator-guide.md)")
		fs.PrintDefaults()
	}
	wfmBin := fs.String("wfm", "bin/wfm", "the server binary, from the repository's root")
	timeout := fs.Duration("timeout", 8*time.Minute, "the whole demo's time limit")
	verbose := fs.Bool("v", false, "print every command's whole output (normalised), to write the documents' expected outputs")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	docs := fs.Args()
	if len(docs) == 0 {
		docs = []string{"README.md", "docs/operator-guide.md"}
	}
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("the documents' commands need %s (Debian: apt-get install %s): %w", tool, tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	start := time.Now()
	var ran, skipped int
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		if err != nil {
			return err
		}
		blocks, err := parseDoc(string(text))
		if err != nil {
			return fmt.Errorf("%s: %w", doc, err)
		}
		for _, part := range parts(blocks) {
			d := &demo{doc: doc, root: root, bin: filepath.Join(root, *wfmBin), stdout: stdout, bound: bindings{}, bg: map[string]*background{}, verbose: *verbose}
			err := d.play(ctx, part)
			ran, skipped = ran+d.ran, skipped+d.skipped
			if err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(stdout, "wfm-demo: the commands of %s ran as written: %d blocks run, %d not runnable here (reasons above), in %s\n",
		strings.Join(docs, " and "), ran, skipped, time.Since(start).Round(time.Second))
	return nil
}

// parts cuts a document's blocks where a demo-setup block starts a part of
// its own (on a new server).
func parts(blocks []block) [][]block {
	var out [][]block
	cur := []block{}
	for _, b := range blocks {
		if b.kind == "setup" && len(cur) > 0 {
			out = append(out, cur)
			cur = []block{}
		}
		cur = append(cur, b)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// demo runs one part of a document on one server and one shell.
type demo struct {
	doc, root, bin string
	srv            *server
	sh             *shell
	stdout         io.Writer
	bound          bindings
	bg             map[string]*background
	bgOrder        []string
	ran, skipped   int
	verbose        bool
	toDemo         *strings.Replacer // the document's addresses and folder -> the demo's
	toDoc          *strings.Replacer // the demo's addresses and folder -> the document's
}

// where names a block in messages: document, line and section.
func (d *demo) where(b block) string { return fmt.Sprintf("%s:%d", d.doc, b.line) }

// play starts a server and a shell and runs the part's blocks in order.
func (d *demo) play(ctx context.Context, blocks []block) (err error) {
	tmp, err := os.MkdirTemp("", "wfm-demo-")
	if err != nil {
		return err
	}
	defer removeAll(tmp)
	if d.srv, err = newServer(d.bin, tmp); err != nil {
		return err
	}
	if err := d.srv.start(ctx, nil); err != nil {
		return fmt.Errorf("%s:%d: %w", d.doc, blocks[0].line, err)
	}
	defer func() {
		if err != nil {
			d.srv.tail(d.stdout)
		}
		d.srv.stop()
	}()
	d.mapAddresses(nil)
	fmt.Fprintf(d.stdout, "\n=== %s from line %d (%q): a new server on %s (device API %s), data in %s\n",
		d.doc, blocks[0].line, blocks[0].section, d.srv.mgmt, d.srv.device, d.srv.dataDir)
	env := append(os.Environ(), "WFM_DATA_DIR="+d.srv.dataDir, "WFM_DEVICE_LISTEN="+d.srv.devAddr)
	if d.sh, err = startShell(d.root, tmp, env); err != nil {
		return err
	}
	defer d.sh.stop()
	defer d.showBackground()
	for i := 0; i < len(blocks); i++ {
		b := blocks[i]
		var next *block
		if i+1 < len(blocks) && blocks[i+1].kind == "expect" && blocks[i+1].bg == "" {
			next = &blocks[i+1]
			i++
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", d.where(b), err)
		}
		if err := d.block(ctx, b, next); err != nil {
			var mm *mismatch
			if errors.As(err, &mm) {
				return err
			}
			return fmt.Errorf("%s (%s): %w", d.where(b), b.section, err)
		}
	}
	return nil
}

// block runs one block (and compares its answer with next, its expect
// block, if any).
func (d *demo) block(ctx context.Context, b block, next *block) error {
	switch {
	case b.kind == "skip":
		d.skipped++
		fmt.Fprintf(d.stdout, "\n-- %s skipped: %s\n", d.where(b), b.reason)
		d.showCommand(b.body)
		return nil
	case b.kind == "expect" && b.bg != "":
		return d.expectBackground(ctx, b)
	case b.kind == "expect":
		return errors.New("an expect block must follow a command")
	}
	d.ran++
	if b.kind == "setup" {
		body, err := d.setup(b)
		if err != nil {
			return err
		}
		b.body = body
	}
	if args, ok := b.serverArgs(); ok {
		return d.restart(ctx, b, args)
	}
	if b.bg != "" {
		if next != nil {
			return errors.New("a background command's output is read by `expect bg=NAME` blocks")
		}
		return d.startBackground(b)
	}
	return d.step(ctx, b, next)
}

// restart starts the server again with the arguments of a `make run` block.
func (d *demo) restart(ctx context.Context, b block, args []string) error {
	fmt.Fprintf(d.stdout, "\n-- %s: make run, with the arguments %q on the same folder and ports\n", d.where(b), args)
	d.showCommand(b.body)
	if slices.Equal(args, d.srv.args) {
		fmt.Fprintf(d.stdout, "   > the demo's server, listening on %s\n", d.toDoc.Replace(d.srv.mgmt))
		return nil
	}
	d.srv.stop()
	if err := d.srv.start(ctx, args); err != nil {
		return err
	}
	d.mapAddresses(args)
	fmt.Fprintf(d.stdout, "   > listening on %s\n", d.toDoc.Replace(d.srv.mgmt))
	return nil
}

// mapAddresses sets the replacements between `make run`'s addresses and
// folder (those the documents use outside a demo-setup part) and the
// demo's.
func (d *demo) mapAddresses(extra []string) {
	_, mgmtPort, _ := strings.Cut(d.srv.mgmtAddr, ":")
	_, devPort, _ := strings.Cut(d.srv.devAddr, ":")
	pairs := [][2]string{
		{"localhost:8080", "localhost:" + mgmtPort}, {"127.0.0.1:8080", "127.0.0.1:" + mgmtPort},
		{"localhost:8443", "localhost:" + devPort}, {"127.0.0.1:8443", "127.0.0.1:" + devPort},
		{".data/", d.srv.dataDir + "/"},
	}
	var in, out []string
	for _, p := range pairs {
		in = append(in, p[0], p[1])
	}
	// Longest first, so that a folder inside another is replaced whole.
	sort.Slice(pairs, func(i, j int) bool { return len(pairs[i][1]) > len(pairs[j][1]) })
	for _, p := range pairs {
		out = append(out, p[1], p[0])
	}
	out = append(out, d.srv.dataDir, ".data")
	d.toDemo, d.toDoc = strings.NewReplacer(in...), strings.NewReplacer(out...)
}

var assignment = regexp.MustCompile(`^([A-Z][A-Z0-9_]*)=(\S+)(\s+#.*)?$`)

// setup rewrites a demo-setup block: W, DEV and D take the demo's values,
// and the document's values are remembered to normalise outputs.
func (d *demo) setup(b block) (string, error) {
	ours := map[string]string{"W": d.srv.mgmt, "DEV": d.srv.device, "D": d.srv.dataDir}
	var out []string
	var pairs [][2]string
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
		pairs = append(pairs, [2]string{v, m[2]})
	}
	if len(ours) > 0 {
		var names []string
		for n := range ours {
			names = append(names, n)
		}
		sort.Strings(names)
		return "", fmt.Errorf("the setup block must assign %s (one NAME=value a line)", strings.Join(names, ", "))
	}
	sort.Slice(pairs, func(i, j int) bool { return len(pairs[i][0]) > len(pairs[j][0]) })
	var args []string
	for _, p := range pairs {
		args = append(args, p[0], p[1])
	}
	d.toDoc = strings.NewReplacer(args...)
	return strings.Join(out, "\n") + "\n", nil
}

// command is a block's text as the demo runs it: the bound placeholders
// replaced by their values, the document's addresses by the demo's.
func (d *demo) command(b block) (string, error) {
	body, err := d.bound.substitute(b.body)
	if err != nil {
		return "", err
	}
	if b.kind == "setup" {
		return body, nil
	}
	return d.toDemo.Replace(body), nil
}

// step runs one command (again and again with poll) and compares its
// answer with the expect block that follows it; without one, the answer
// must not be a problem document.
func (d *demo) step(ctx context.Context, b block, want *block) error {
	deadline := time.Now().Add(waitFor)
	started := time.Now()
	for {
		body, err := d.command(b)
		if err != nil {
			return err
		}
		out, errOut, err := d.sh.run(ctx, body, commandTime)
		got := d.toDoc.Replace(out)
		if err != nil {
			return fmt.Errorf("%w:\n%s\nstdout:\n%s\nstderr:\n%s", err, b.body, got, d.toDoc.Replace(errOut))
		}
		try := d.bound.clone()
		var diffs []string
		switch problem := problemIn(got); {
		case want != nil:
			diffs = compare(try, want, got)
		case b.problem != "" && problem != b.problem:
			diffs = []string{fmt.Sprintf("the document shows the refusal %s, the answer is %q", b.problem, problem)}
		case b.problem == "" && problem != "":
			diffs = []string{"the answer is a problem document, which the document does not show: " + problem}
		}
		if len(diffs) == 0 {
			d.bound = try
			d.show(b, got, time.Since(started), want != nil)
			return nil
		}
		if !b.poll || time.Now().After(deadline) || ctx.Err() != nil {
			if b.poll {
				diffs = append(diffs, fmt.Sprintf("(still different after polling for %s)", waitFor))
			}
			return &mismatch{doc: d.doc, b: b, cmd: body, diffs: diffs, got: got}
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollEvery):
		}
	}
}

// problemType matches the type of a problem document in an answer.
var problemType = regexp.MustCompile(`"type"\s*:\s*"[^"]*problems\.md#([a-z0-9-]+)"`)

// problemIn returns the type of the first problem document in an answer,
// "" when there is none.
func problemIn(out string) string {
	if m := problemType.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}

// show prints a block's command and (the start of) its answer.
func (d *demo) show(b block, got string, took time.Duration, checked bool) {
	what := "answered"
	if checked {
		what = "answered what the document shows"
	}
	fmt.Fprintf(d.stdout, "\n-- %s %s (%s)\n", d.where(b), what, took.Round(100*time.Millisecond))
	d.showCommand(b.body)
	d.showAnswer(got, d.verbose)
}

func (d *demo) showCommand(body string) {
	for _, l := range lines(body) {
		fmt.Fprintln(d.stdout, "   $ "+clip(l))
	}
}

func (d *demo) showAnswer(got string, whole bool) {
	ls := lines(got)
	if len(ls) == 0 {
		fmt.Fprintln(d.stdout, "   > (nothing)")
		return
	}
	n := len(ls)
	if !whole {
		n = min(n, shownLines)
	}
	for _, l := range ls[:n] {
		if !whole {
			l = clip(l)
		}
		fmt.Fprintln(d.stdout, "   > "+l)
	}
	if n < len(ls) {
		fmt.Fprintf(d.stdout, "   > … (%d more lines)\n", len(ls)-n)
	}
}

// clip shortens a line for the demo's report.
func clip(l string) string {
	if r := []rune(l); len(r) > 160 {
		return string(r[:159]) + "…"
	}
	return l
}

func (d *demo) startBackground(b block) error {
	if _, ok := d.bg[b.bg]; ok {
		return fmt.Errorf("background %q is already running", b.bg)
	}
	body, err := d.command(b)
	if err != nil {
		return err
	}
	bg, err := d.sh.background(b.bg, body)
	if err != nil {
		return err
	}
	d.bg[b.bg] = bg
	d.bgOrder = append(d.bgOrder, b.bg)
	fmt.Fprintf(d.stdout, "\n-- %s started in the background (%s; what it printed is shown at the end of the part)\n", d.where(b), b.bg)
	d.showCommand(b.body)
	return nil
}

// showBackground prints the start of what each background command printed.
func (d *demo) showBackground() {
	for _, name := range d.bgOrder {
		fmt.Fprintf(d.stdout, "\n-- background %s printed:\n", name)
		d.showAnswer(d.toDoc.Replace(d.bg[name].output()), d.verbose)
	}
}

// expectBackground waits (bounded) until a background command printed as
// many lines (text) or events (sse) as the block shows, and compares them.
func (d *demo) expectBackground(ctx context.Context, b block) error {
	bg, ok := d.bg[b.bg]
	if !ok {
		return fmt.Errorf("no background command %q started before", b.bg)
	}
	deadline := time.Now().Add(waitFor)
	for {
		raw := bg.unread()
		var used int
		switch b.lang {
		case "sse":
			used = eventsEnd(raw, len(sseEvents(b.body, false)))
		default:
			used = linesEnd(raw, len(lines(b.body)))
		}
		if used >= 0 {
			got := d.toDoc.Replace(raw[:used])
			try := d.bound.clone()
			if diffs := compare(try, &b, got); len(diffs) > 0 {
				return &mismatch{doc: d.doc, b: b, diffs: diffs, got: got}
			}
			d.bound = try
			bg.read += used
			fmt.Fprintf(d.stdout, "\n-- %s background %s printed what the document shows\n", d.where(b), b.bg)
			d.showAnswer(got, d.verbose)
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return &mismatch{doc: d.doc, b: b, diffs: []string{fmt.Sprintf("not printed within %s", waitFor)}, got: d.toDoc.Replace(raw)}
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollEvery):
		}
	}
}

// mismatch is a step whose output is not the document's.
type mismatch struct {
	doc   string
	b     block
	cmd   string
	diffs []string
	got   string
}

func (m *mismatch) Error() string {
	var s strings.Builder
	fmt.Fprintf(&s, "%s:%d (%s): the output differs from the document\n", m.doc, m.b.line, m.b.section)
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
	s.WriteString("output (the demo's addresses and folder replaced by the document's):\n")
	for _, l := range lines(m.got) {
		s.WriteString("    " + l + "\n")
	}
	return s.String()
}

// compare matches an output with an expect block (nil: the output must be
// empty).
func compare(bd bindings, want *block, got string) []string {
	if want == nil {
		if strings.TrimSpace(got) != "" {
			return []string{"the document shows no output for this command"}
		}
		return nil
	}
	switch want.lang {
	case "json":
		w, err := jsonValues(want.body)
		if err != nil {
			return []string{fmt.Sprintf("the document's expected JSON (line %d) does not parse: %v", want.line, err)}
		}
		g, err := jsonValues(got)
		if err != nil {
			return []string{fmt.Sprintf("the output is not JSON: %v", err)}
		}
		if len(w) != len(g) {
			return []string{fmt.Sprintf("the document shows %d JSON documents, got %d", len(w), len(g))}
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
