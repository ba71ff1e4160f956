package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// block is one fenced block of a document that the demo acts on: a shell
// block (run or skipped) or an expect block.
type block struct {
	line    int    // line of the opening fence
	section string // the heading it is under
	lang    string // sh, json, text, sse
	kind    string // "run", "setup", "skip", "expect"
	poll    bool
	bg      string // the background command it starts or reads
	reason  string // why a skipped block cannot run here
	problem string // the problem type the block's answer is (a refusal it shows)
	body    string
}

// shellLangs are the languages of the blocks the demo runs.
var shellLangs = map[string]bool{"sh": true, "bash": true}

var fence = regexp.MustCompile("^( *)```(\\S*)(.*)$")

// parseDoc returns the blocks of a document the demo acts on: every shell
// block, and every expect block. A fence may be indented (in a list); its
// body loses that indentation.
func parseDoc(doc string) ([]block, error) {
	lines := strings.Split(doc, "\n")
	var out []block
	section := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "#") {
			section = strings.TrimSpace(strings.TrimLeft(l, "#"))
			continue
		}
		m := fence.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		indent := m[1]
		b := block{line: i + 1, section: section, lang: m[2]}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		if i == len(lines) {
			return nil, fmt.Errorf("line %d: the block is not closed", b.line)
		}
		b.body = strings.Join(body, "\n") + "\n"
		if b.lang == "" {
			continue
		}
		if err := b.readWords(m[3]); err != nil {
			return nil, fmt.Errorf("line %d: %w", b.line, err)
		}
		switch {
		case b.kind == "" && shellLangs[b.lang]:
			b.kind = "run"
		case b.kind == "":
			continue // an example of output or a file, not the demo's
		case b.kind != "expect" && !shellLangs[b.lang]:
			return nil, fmt.Errorf("line %d: only sh blocks run", b.line)
		}
		out = append(out, b)
	}
	return out, nil
}

// readWords reads the words of a fence's info string after the language.
func (b *block) readWords(info string) error {
	words, err := fenceWords(info)
	if err != nil {
		return err
	}
	for _, w := range words {
		switch {
		case w == "demo": // the tour's mark: a block whose answer follows
		case w == "demo-setup":
			b.kind = "setup"
		case w == "expect":
			b.kind = "expect"
		case w == "poll":
			b.poll = true
		case strings.HasPrefix(w, "bg="):
			b.bg = strings.TrimPrefix(w, "bg=")
		case strings.HasPrefix(w, "problem="):
			b.problem = strings.TrimPrefix(w, "problem=")
		case strings.HasPrefix(w, "norun="):
			b.kind, b.reason = "skip", strings.TrimPrefix(w, "norun=")
			if strings.TrimSpace(b.reason) == "" {
				return errors.New(`norun needs its reason: norun="why it cannot run here"`)
			}
		default:
			return fmt.Errorf("unknown word %q in the fence (known: demo, demo-setup, expect, poll, bg=NAME, problem=TYPE, norun=\"why\")", w)
		}
	}
	return nil
}

// fenceWords splits an info string into words; a word may hold a double
// quoted value (norun="needs docker: no engine here"), unquoted in the
// result.
func fenceWords(info string) ([]string, error) {
	var words []string
	s := strings.TrimSpace(info)
	for s != "" {
		end := strings.IndexAny(s, " \t\"")
		switch {
		case end < 0:
			words, s = append(words, s), ""
		case s[end] == '"':
			q, err := strconv.QuotedPrefix(s[end:])
			if err != nil {
				return nil, fmt.Errorf("a quote is not closed in the fence: %s", s)
			}
			v, _ := strconv.Unquote(q)
			words = append(words, s[:end]+v)
			s = strings.TrimSpace(s[end+len(q):])
		default:
			words, s = append(words, s[:end]), strings.TrimSpace(s[end:])
		}
	}
	return words, nil
}

// makeRun matches a block that is only `make run`, with ARGS or not
// (comments allowed): the demo starts its server with those arguments.
var makeRun = regexp.MustCompile(`^make run(?: ARGS='([^']*)')?\s*(?:#.*)?$`)

// serverArgs reports whether b is a `make run` block, and with what
// arguments.
func (b block) serverArgs() ([]string, bool) {
	var cmds []string
	for _, l := range lines(b.body) {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			cmds = append(cmds, t)
		}
	}
	if len(cmds) != 1 {
		return nil, false
	}
	m := makeRun.FindStringSubmatch(cmds[0])
	if m == nil {
		return nil, false
	}
	return strings.Fields(m[1]), true
}
