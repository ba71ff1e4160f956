package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"
	"go.yaml.in/yaml/v3"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// This file refuses, in one place for every operation, the input that the
// handlers could otherwise pass to PostgreSQL and that it cannot store
// (problem type invalid-text, 400): a NUL character (U+0000, which neither
// text nor jsonb columns hold), bytes that are not UTF-8, and in JSON an
// unpaired UTF-16 surrogate escape (jsonb refuses it; encoding/json would
// silently turn it into U+FFFD). It looks at the path, the query, the
// headers the contract declares, JSON bodies (strings and member names) and
// YAML bodies (every scalar). It also refuses a management JSON body that is
// not exactly one JSON value (trailing bytes: problem type malformed, 400):
// the generated binding decodes the first value and ignores the rest.
//
// Hand-written because no library reports JSON escapes as written:
// encoding/json decodes \u0000 to a NUL byte (which this finds) but an
// unpaired surrogate to U+FFFD (which it cannot tell from a real one), so
// the escapes are scanned in the raw bytes.

// textProblem names one string that cannot be stored.
type textProblem struct{ field, reason string }

// checkText returns why s cannot be stored, or "".
func checkText(s string) string {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL character (U+0000)"
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	return ""
}

// headerParams lists the request headers the contract declares as
// parameters of some operation: these reach handlers (and the database).
func headerParams(spec *openapi3.T) []string {
	seen := map[string]bool{}
	var out []string
	add := func(ps openapi3.Parameters) {
		for _, p := range ps {
			if p.Value != nil && p.Value.In == openapi3.ParameterInHeader && !seen[http.CanonicalHeaderKey(p.Value.Name)] {
				seen[http.CanonicalHeaderKey(p.Value.Name)] = true
				out = append(out, http.CanonicalHeaderKey(p.Value.Name))
			}
		}
	}
	for _, item := range spec.Paths.Map() {
		add(item.Parameters)
		for _, op := range item.Operations() {
			add(op.Parameters)
		}
	}
	return out
}

// checkInput is the route middleware that refuses unstorable text and
// management JSON bodies with trailing bytes, before idempotency, validation
// and the handler see the request (and after authorize, so that the refusal
// of a mutating call is audited).
func (s *Server) checkInput(headers []string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tp, ok := checkRequestLine(r); !ok {
				writeProblem(w, r, invalidTextProblem(tp))
				return
			}
			for _, h := range headers {
				for _, v := range r.Header.Values(h) {
					if reason := checkText(v); reason != "" {
						writeProblem(w, r, invalidTextProblem(textProblem{"header/" + h, reason}))
						return
					}
				}
			}
			bodyless := false // a management operation that declares no body
			if rctx := chi.RouteContext(r.Context()); rctx != nil {
				key := r.Method + " " + rctx.RoutePattern()
				op, ok := s.ops[key]
				bodyless = ok && !op.body
				if !ok {
					op, ok = s.openOps[key]
				}
				if ok {
					if err := unknownQuery(r, op); err != nil {
						writeProblem(w, r, problemFromError(s.log, r, err))
						return
					}
				}
			}
			if bodyless && r.Body != nil && r.Body != http.NoBody {
				body, ok := s.readBody(w, r)
				if !ok {
					return
				}
				if t := bytes.TrimSpace(body); len(t) > 0 && !bytes.Equal(t, []byte("{}")) {
					writeProblem(w, r, problemFromError(s.log, r, &lifecycle.Error{Code: lifecycle.EMALFORMED, Type: "invalid-request",
						Message: "The request is not valid: this operation takes no request body; send none.",
						Fields:  []lifecycle.FieldError{{Pointer: "body", Detail: "this operation takes no request body; send none"}}}))
					return
				}
				r.Body = http.NoBody
				next.ServeHTTP(w, r)
				return
			}
			if r.Body == nil || r.Body == http.NoBody || (r.Method != http.MethodPost && r.Method != http.MethodPut && r.Method != http.MethodPatch) {
				next.ServeHTTP(w, r)
				return
			}
			body, device := r.Context().Value(rawBodyKey{}).([]byte)
			if !device {
				var err error
				if body, err = io.ReadAll(r.Body); err != nil {
					writeProblem(w, r, problemFromError(s.log, r, bodyReadError(err)))
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
			if p, ok := checkBody(r.Header.Get("Content-Type"), body, !device); !ok {
				writeProblem(w, r, p)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// checkRequestLine checks the path (naming the path parameter at fault when
// the route has one) and every query parameter name and value.
func checkRequestLine(r *http.Request) (textProblem, bool) {
	if reason := checkText(r.URL.Path); reason != "" {
		field := "path"
		if rc := chi.RouteContext(r.Context()); rc != nil {
			for i, k := range rc.URLParams.Keys {
				v := rc.URLParams.Values[i]
				if u, err := url.PathUnescape(v); err == nil {
					v = u
				}
				if checkText(v) != "" {
					field = "path/" + k
					break
				}
			}
		}
		return textProblem{field, reason}, false
	}
	if r.URL.RawQuery == "" {
		return textProblem{}, true
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return textProblem{}, true // the parameter binding refuses it
	}
	for k, vs := range q {
		if reason := checkText(k); reason != "" {
			return textProblem{"query/" + k, "the parameter name " + reason}, false
		}
		for _, v := range vs {
			if reason := checkText(v); reason != "" {
				return textProblem{"query/" + k, reason}, false
			}
		}
	}
	return textProblem{}, true
}

// checkBody checks a JSON or YAML body; other media types are left to the
// validator (415). whole asks for exactly one JSON value (the device API's
// Margo parsers check that themselves).
func checkBody(contentType string, body []byte, whole bool) (problem, bool) {
	mt, _, _ := mime.ParseMediaType(contentType)
	isJSON := mt == "application/json" || strings.HasSuffix(mt, "+json")
	isYAML := strings.HasSuffix(mt, "/yaml") || strings.HasSuffix(mt, "/x-yaml") || strings.HasSuffix(mt, "+yaml")
	if (!isJSON && !isYAML) || len(body) == 0 {
		return problem{}, true
	}
	if !utf8.Valid(body) {
		off := invalidUTF8At(body)
		field := ""
		if isJSON {
			field = pointerAt(body, off) // the member or value holding it, as for a NUL
		}
		return invalidTextProblem(textProblem{field, fmt.Sprintf("the body is not valid UTF-8 (at byte offset %d)", off)}), false
	}
	if isYAML {
		if tp, ok := checkYAML(body); !ok {
			return invalidTextProblem(tp), false
		}
		return problem{}, true
	}
	if whole && !json.Valid(body) {
		return malformedJSON(body), false
	}
	if whole {
		if ptr, ok := duplicateKey(body); ok {
			return problem{Type: ProblemBase + "malformed", Title: titles["malformed"], Status: http.StatusBadRequest,
				Detail: "The request body names a member twice: " + ptr + ". Send each member once (parsers disagree on which one counts).",
				Errors: []fieldProblem{{Field: ptr, Message: "appears more than once in its object"}}}, false
		}
	}
	if off, reason := badEscape(body); off >= 0 {
		return invalidTextProblem(textProblem{pointerAt(body, off), reason}), false
	}
	return problem{}, true
}

// duplicateKey finds, in the valid JSON text b, the first member name that
// appears twice in one object, and returns its JSON pointer. encoding/json
// keeps the last one and other parsers the first: a body with a duplicate
// is ambiguous, so the management API refuses it.
func duplicateKey(b []byte) (string, bool) {
	type frame struct {
		object, wantKey bool
		key             string
		index           int
		seen            map[string]bool
	}
	var stack []frame
	path := func(key string) string {
		segs := make([]string, 0, len(stack))
		for _, f := range stack[:len(stack)-1] {
			if f.object {
				segs = append(segs, f.key)
			} else {
				segs = append(segs, strconv.Itoa(f.index))
			}
		}
		return pointerOf(append(segs, key))
	}
	complete := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].index++
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		d, isDelim := tok.(json.Delim)
		switch {
		case isDelim && (d == '}' || d == ']'):
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return "", false
			}
			complete()
		case len(stack) > 0 && stack[len(stack)-1].wantKey:
			f := &stack[len(stack)-1]
			key := tok.(string)
			if f.seen[key] {
				return path(key), true
			}
			f.seen[key], f.key, f.wantKey = true, key, false
		case isDelim:
			f := frame{object: d == '{', wantKey: d == '{'}
			if f.object {
				f.seen = map[string]bool{}
			}
			stack = append(stack, f)
		default:
			complete()
		}
	}
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// malformedJSON explains why body is not exactly one JSON value.
func malformedJSON(body []byte) problem {
	dec := json.NewDecoder(bytes.NewReader(body))
	var v json.RawMessage
	detail := "The request body is not exactly one JSON value."
	if err := dec.Decode(&v); err != nil {
		detail = "The request body could not be decoded: " + err.Error()
	} else {
		detail = fmt.Sprintf("The request body holds more than one JSON value: unexpected bytes at offset %d after the first.", dec.InputOffset())
	}
	return problem{Type: ProblemBase + "malformed", Title: titles["malformed"], Status: http.StatusBadRequest, Detail: detail}
}

// badEscape finds, in the JSON text b, the first string escape that
// PostgreSQL cannot store: \u0000 or an unpaired surrogate. It returns its
// byte offset and why, or -1. Escapes occur only inside strings, so a
// backslash outside one means b is not JSON (and the validator says so).
func badEscape(b []byte) (int, string) {
	i := bytes.IndexByte(b, '\\')
	if i < 0 {
		return -1, ""
	}
	for ; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+1 >= len(b) || b[i+1] != 'u' {
			i++ // skip the escaped character (it may be a backslash)
			continue
		}
		cp, ok := hex4(b, i+2)
		if !ok {
			continue
		}
		switch {
		case cp == 0:
			return i, "contains a NUL character (\\u0000)"
		case cp >= 0xD800 && cp < 0xDC00:
			if i+11 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo, ok := hex4(b, i+8); ok && lo >= 0xDC00 && lo < 0xE000 {
					i += 11
					continue
				}
			}
			return i, "contains an unpaired UTF-16 surrogate escape (\\u" + string(b[i+2:i+6]) + ")"
		case cp >= 0xDC00 && cp < 0xE000:
			return i, "contains an unpaired UTF-16 surrogate escape (\\u" + string(b[i+2:i+6]) + ")"
		}
		i += 5
	}
	return -1, ""
}

func hex4(b []byte, at int) (uint64, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[at:at+4]), 16, 32)
	return v, err == nil
}

// pointerAt returns the JSON pointer of the member name or value of the
// JSON text b that holds byte offset off ("" when it cannot tell).
func pointerAt(b []byte, off int) string {
	type frame struct {
		object, wantKey bool
		key             string
		index           int
	}
	var stack []frame
	segs := func() []string {
		out := make([]string, 0, len(stack))
		for _, f := range stack {
			if f.object {
				out = append(out, f.key)
			} else {
				out = append(out, strconv.Itoa(f.index))
			}
		}
		return out
	}
	complete := func() { // the current member or element has been read
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].index++
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	for {
		start := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		in := start <= off && off < int(dec.InputOffset())
		d, isDelim := tok.(json.Delim)
		switch {
		case isDelim && (d == '}' || d == ']'):
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return ""
			}
			complete()
		case len(stack) > 0 && stack[len(stack)-1].wantKey:
			stack[len(stack)-1].key, stack[len(stack)-1].wantKey = tok.(string), false
			if in {
				return pointerOf(segs())
			}
		case in:
			return pointerOf(segs())
		case isDelim:
			stack = append(stack, frame{object: d == '{', wantKey: d == '{'})
		default:
			complete()
		}
	}
}

// checkYAML looks at every scalar of every document in b (keys included),
// without resolving aliases (what they name is checked where it is
// defined). A document that does not parse is left to the description
// parser, which explains the error.
func checkYAML(b []byte) (textProblem, bool) {
	// b is valid UTF-8 (checked before): a NUL can only be a byte of its
	// own or one of the escapes of double-quoted scalars. Without them
	// nothing needs parsing (the parse costs as much as the description
	// parser's, a few hundred milliseconds at 100,000 nodes).
	if !mayHoldNUL(b) {
		return textProblem{}, true
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			return textProblem{}, true
		}
		type item struct {
			n   *yaml.Node
			ptr []string
		}
		todo := []item{{&doc, nil}}
		for len(todo) > 0 {
			it := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			n := it.n
			switch n.Kind {
			case yaml.ScalarNode:
				if reason := checkText(n.Value); reason != "" {
					return textProblem{pointerOf(it.ptr), fmt.Sprintf("line %d: %s", n.Line, reason)}, false
				}
			case yaml.MappingNode:
				for i := 0; i+1 < len(n.Content); i += 2 {
					k := n.Content[i]
					if reason := checkText(k.Value); reason != "" {
						return textProblem{pointerOf(append(it.ptr, k.Value)), fmt.Sprintf("line %d: the key %s", k.Line, reason)}, false
					}
					todo = append(todo, item{n.Content[i+1], append(append([]string(nil), it.ptr...), k.Value)})
				}
			case yaml.DocumentNode, yaml.SequenceNode:
				for i, c := range n.Content {
					p := it.ptr
					if n.Kind == yaml.SequenceNode {
						p = append(append([]string(nil), it.ptr...), strconv.Itoa(i))
					}
					todo = append(todo, item{c, p})
				}
			}
		}
	}
}

// mayHoldNUL reports whether the YAML text b may hold U+0000: a NUL byte,
// or an escape that writes one (\0, \x00, \u0000, \U00000000).
func mayHoldNUL(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return true
	}
	for _, esc := range []string{`\0`, `\x00`, `\u0000`, `\U00000000`} {
		if bytes.Contains(b, []byte(esc)) {
			return true
		}
	}
	return false
}

func invalidTextProblem(tp textProblem) problem {
	where := "a string"
	if tp.field != "" {
		where = tp.field
	}
	return problem{Type: ProblemBase + "invalid-text", Title: titles["invalid-text"], Status: http.StatusBadRequest,
		Detail: fmt.Sprintf("The request carries text that cannot be stored: %s %s.", where, strings.TrimPrefix(tp.reason, "the body ")),
		Errors: []fieldProblem{{Field: tp.field, Message: tp.reason}}}
}
