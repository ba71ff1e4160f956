package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// more is the marker of an abridged object member ("…": "…") or array
// element ("…") in an expected JSON answer.
const more = "…"

// placeholder is a varying part of an expected output: <deployment-id>.
var placeholder = regexp.MustCompile(`<[a-z][a-z0-9-]*>`)

// anyValue lists the placeholders that match anything and remember nothing:
// values that differ at every occurrence. Every other placeholder binds: its
// first match fixes its value, later occurrences (and commands) use it.
var anyValue = map[string]bool{"<time>": true, "<digest>": true, "<request-id>": true, "<event-id>": true, "<n>": true}

// bindings are the values placeholders took, by placeholder ("<deployment-id>").
type bindings map[string]string

func (b bindings) clone() bindings {
	c := make(bindings, len(b))
	for k, v := range b {
		c[k] = v
	}
	return c
}

// substitute replaces the bound placeholders of a command by their values.
// It returns an error naming a placeholder no earlier output defined.
func (b bindings) substitute(cmd string) (string, error) {
	var missing []string
	out := placeholder.ReplaceAllStringFunc(cmd, func(p string) string {
		if v, ok := b[p]; ok {
			return v
		}
		missing = append(missing, p)
		return p
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("the command uses %s, which no earlier expected output defines", strings.Join(missing, ", "))
	}
	return out, nil
}

// matchString matches got against want, a literal with placeholders, and
// records the new bindings in b. It reports whether they match.
func (b bindings) matchString(want, got string) bool {
	locs := placeholder.FindAllStringIndex(want, -1)
	if len(locs) == 0 {
		return want == got
	}
	var re strings.Builder
	re.WriteString(`^`)
	var names []string
	last := 0
	for _, l := range locs {
		re.WriteString(regexp.QuoteMeta(want[last:l[0]]))
		name := want[l[0]:l[1]]
		if v, ok := b[name]; ok && !anyValue[name] {
			re.WriteString(regexp.QuoteMeta(v))
		} else {
			re.WriteString(`(.+?)`)
			names = append(names, name)
		}
		last = l[1]
	}
	re.WriteString(regexp.QuoteMeta(want[last:]))
	re.WriteString(`$`)
	m := regexp.MustCompile(re.String()).FindStringSubmatch(got)
	if m == nil {
		return false
	}
	for i, name := range names {
		if anyValue[name] {
			continue
		}
		if v, ok := b[name]; ok && v != m[i+1] { // the same placeholder twice in one string
			return false
		}
		b[name] = m[i+1]
	}
	return true
}

// matchJSON compares got with want (both decoded JSON) and returns the
// differences, each "pointer: why"; none when they match. Objects must have
// the same members unless want has the member "…" (then got may have more);
// arrays the same length unless want ends with "…" (then got may be
// longer); a string of want may hold placeholders, and a string that is
// only a placeholder matches a number or boolean too.
func (b bindings) matchJSON(ptr string, want, got any) []string {
	if ptr == "" {
		ptr = "/"
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: the document has an object, got %s", ptr, show(got))}
		}
		var diffs []string
		_, abridged := w[more]
		for _, k := range sortedKeys(w) {
			if k == more {
				continue
			}
			gv, ok := g[k]
			if !ok {
				diffs = append(diffs, fmt.Sprintf("%s: member %q is missing", join(ptr, k), k))
				continue
			}
			diffs = append(diffs, b.matchJSON(join(ptr, k), w[k], gv)...)
		}
		if !abridged {
			for _, k := range sortedKeys(g) {
				if _, ok := w[k]; !ok {
					diffs = append(diffs, fmt.Sprintf("%s: member %q = %s is not in the document (add it, or \"…\": \"…\" to abridge)", join(ptr, k), k, show(g[k])))
				}
			}
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: the document has an array, got %s", ptr, show(got))}
		}
		abridged := len(w) > 0 && w[len(w)-1] == more
		if abridged {
			w = w[:len(w)-1]
		}
		if len(g) < len(w) || !abridged && len(g) != len(w) {
			return []string{fmt.Sprintf("%s: the document has %d elements, got %d: %s", ptr, len(w), len(g), show(got))}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, b.matchJSON(join(ptr, fmt.Sprint(i)), w[i], g[i])...)
		}
		return diffs
	case string:
		switch g := got.(type) {
		case string:
			if !b.matchString(w, g) {
				return []string{fmt.Sprintf("%s: the document has %q, got %q", ptr, w, g)}
			}
			return nil
		case float64, bool:
			if placeholder.FindString(w) == w && w != "" {
				if b.matchString(w, show(g)) {
					return nil
				}
			}
		}
		return []string{fmt.Sprintf("%s: the document has %q, got %s", ptr, w, show(got))}
	default:
		if show(want) != show(got) {
			return []string{fmt.Sprintf("%s: the document has %s, got %s", ptr, show(want), show(got))}
		}
		return nil
	}
}

func join(ptr, k string) string {
	k = strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
	if ptr == "/" {
		return "/" + k
	}
	return ptr + "/" + k
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// matchText compares got with want line by line (trailing spaces ignored,
// placeholders allowed in want's lines) and returns the differences.
func (b bindings) matchText(want, got string) []string {
	wl, gl := lines(want), lines(got)
	var diffs []string
	for i := range max(len(wl), len(gl)) {
		switch {
		case i >= len(gl):
			diffs = append(diffs, fmt.Sprintf("line %d: the document has %q, got nothing", i+1, wl[i]))
		case i >= len(wl):
			diffs = append(diffs, fmt.Sprintf("line %d: got %q, which the README does not show", i+1, gl[i]))
		case !b.matchString(wl[i], gl[i]):
			diffs = append(diffs, fmt.Sprintf("line %d: the document has %q, got %q", i+1, wl[i], gl[i]))
		}
	}
	return diffs
}

func lines(s string) []string {
	s = strings.TrimRight(s, "\n ")
	if s == "" {
		return nil
	}
	ls := strings.Split(s, "\n")
	for i := range ls {
		ls[i] = strings.TrimRight(ls[i], " \r")
	}
	return ls
}

// sseEvents splits Server-Sent Events text into events (groups of lines
// separated by blank lines), leaving out comment lines (": …"); complete
// says whether only complete events (followed by a blank line) are kept.
func sseEvents(s string, complete bool) [][]string {
	var evs [][]string
	var cur []string
	for _, l := range strings.SplitAfter(s, "\n") {
		if !strings.HasSuffix(l, "\n") { // an unfinished line
			break
		}
		l = strings.TrimRight(l, "\r\n")
		switch {
		case l == "":
			if len(cur) > 0 {
				evs = append(evs, cur)
			}
			cur = nil
		case strings.HasPrefix(l, ":"):
		default:
			cur = append(cur, l)
		}
	}
	if !complete && len(cur) > 0 {
		evs = append(evs, cur)
	}
	return evs
}

// matchSSE compares events got with want: the same fields in the same
// order, a data field's value compared as JSON (matchJSON), the others as
// text with placeholders.
func (b bindings) matchSSE(want, got [][]string) []string {
	if len(got) < len(want) {
		return []string{fmt.Sprintf("the document has %d events, got %d", len(want), len(got))}
	}
	var diffs []string
	for i, we := range want {
		ge := got[i]
		if len(ge) != len(we) {
			diffs = append(diffs, fmt.Sprintf("event %d: the document has %d lines, got %d: %q", i+1, len(we), len(ge), ge))
			continue
		}
		for j, wl := range we {
			gl := ge[j]
			wf, wv, _ := strings.Cut(wl, ": ")
			gf, gv, _ := strings.Cut(gl, ": ")
			if wf != gf {
				diffs = append(diffs, fmt.Sprintf("event %d line %d: the document has field %q, got %q", i+1, j+1, wf, gl))
				continue
			}
			if wf != "data" {
				if !b.matchString(wv, gv) {
					diffs = append(diffs, fmt.Sprintf("event %d %s: the document has %q, got %q", i+1, wf, wv, gv))
				}
				continue
			}
			var w, g any
			if err := json.Unmarshal([]byte(wv), &w); err != nil {
				diffs = append(diffs, fmt.Sprintf("event %d data: the document's JSON does not parse: %v", i+1, err))
				continue
			}
			if err := json.Unmarshal([]byte(gv), &g); err != nil {
				diffs = append(diffs, fmt.Sprintf("event %d data: got no JSON: %q", i+1, gv))
				continue
			}
			for _, d := range b.matchJSON("", w, g) {
				diffs = append(diffs, fmt.Sprintf("event %d data %s", i+1, d))
			}
		}
	}
	return diffs
}
