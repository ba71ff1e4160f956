package margo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"go.yaml.in/yaml/v3"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// The generic document is a tree of: nil, bool, int64, uint64 (integers above
// MaxInt64), float64 (finite), string (valid UTF-8), []any and *object. It is
// what both YAML and JSON read into, what validation walks, and what the
// JSON form is written from, so the two spellings of one document give the
// same tree.

// object is a mapping that keeps its members in document order.
type object struct {
	keys []string
	m    map[string]any
}

// limits counts what a reader has built, so hostile input stops early.
type limits struct {
	nodes int
	text  int // bytes of keys and strings, each alias use counted again
}

// addText counts n bytes of key or string text. An alias repeats its text
// without repeating its bytes in the input, so without this bound a small
// document could expand to gigabytes of JSON.
func (l *limits) addText(n int) error {
	l.text += n
	if l.text > MaxExpandedText {
		return &lifecycle.Error{Code: lifecycle.ETOOLARGE, Type: ProblemTooLarge,
			Message: fmt.Sprintf("the document holds more than %d bytes of text (counting each use of a YAML alias as a copy of what it names)", MaxExpandedText)}
	}
	return nil
}

func (l *limits) node() error {
	l.nodes++
	if l.nodes > MaxNodes {
		return tooManyNodes(ProblemTooLarge)
	}
	return nil
}

func malformed(format string, args ...any) *lifecycle.Error {
	return &lifecycle.Error{Code: lifecycle.EMALFORMED, Type: ProblemMalformed, Message: fmt.Sprintf(format, args...)}
}

func tooDeep(where string) *lifecycle.Error {
	return malformed("%sthe document nests deeper than %d levels", where, MaxDepth)
}

// --- YAML ---

// readYAML parses raw as exactly one YAML document whose top level is a
// mapping and returns its tree.
func readYAML(raw []byte) (*object, error) {
	// The parser builds a node tree of the whole document before the
	// reader below counts its nodes: checkYAML stops a document too large
	// or too deep before that.
	if err := checkYAML(raw); err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, malformed("the document is empty")
		}
		return nil, malformed("not valid YAML: %s", trimYAMLError(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, malformed("not valid YAML after the first document: %s", trimYAMLError(err))
		}
		return nil, malformed("line %d: the input holds more than one YAML document; want exactly one", extra.Line)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, malformed("the document is empty")
	}
	top := doc.Content[0]
	for top.Kind == yaml.AliasNode && top.Alias != nil {
		top = top.Alias
	}
	if top.Kind != yaml.MappingNode {
		return nil, malformed("line %d, column %d: the top level must be a mapping, got %s", top.Line, top.Column, yamlKind(top))
	}
	r := &yamlReader{}
	v, err := r.value(top, 1)
	if err != nil {
		return nil, err
	}
	return v.(*object), nil
}

func trimYAMLError(err error) string {
	s := err.Error()
	if len(s) > 5 && s[:6] == "yaml: " {
		s = s[6:]
	}
	return s
}

type yamlReader struct {
	limits
}

func at(n *yaml.Node) string {
	return fmt.Sprintf("line %d, column %d: ", n.Line, n.Column)
}

func yamlKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.ScalarNode:
		return "a scalar"
	}
	return "nothing"
}

// value converts n. Aliases are followed, and every node reached through an
// alias counts again, so an alias bomb ("billion laughs") stops at MaxNodes
// after a bounded amount of work; an alias to an ancestor stops at MaxDepth.
func (r *yamlReader) value(n *yaml.Node, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, tooDeep(at(n))
	}
	if err := r.node(); err != nil {
		return nil, err
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, malformed("%sunknown alias", at(n))
		}
		return r.value(n.Alias, depth)
	case yaml.ScalarNode:
		if err := r.addText(len(n.Value)); err != nil {
			return nil, err
		}
		return scalar(n)
	case yaml.SequenceNode:
		if n.Tag != "!!seq" {
			return nil, malformed("%sunsupported YAML tag %s", at(n), n.Tag)
		}
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := r.value(c, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		if n.Tag != "!!map" {
			return nil, malformed("%sunsupported YAML tag %s", at(n), n.Tag)
		}
		o := &object{m: make(map[string]any, len(n.Content)/2)}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, err := r.key(n.Content[i])
			if err != nil {
				return nil, err
			}
			if _, dup := o.m[k]; dup {
				return nil, malformed("%sduplicate key %q", at(n.Content[i]), k)
			}
			v, err := r.value(n.Content[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			o.keys = append(o.keys, k)
			o.m[k] = v
		}
		return o, nil
	}
	return nil, malformed("%sunexpected YAML node", at(n))
}

// key returns the member name a mapping key spells. JSON names are strings,
// so a scalar key of another type (1, true, null) is taken as it is written,
// the way YAML-to-JSON converters do; collection keys are refused.
func (r *yamlReader) key(n *yaml.Node) (string, error) {
	if err := r.node(); err != nil {
		return "", err
	}
	k := n
	for k.Kind == yaml.AliasNode && k.Alias != nil {
		k = k.Alias
	}
	if k.Kind != yaml.ScalarNode {
		return "", malformed("%smapping keys must be scalars, got %s", at(n), yamlKind(k))
	}
	switch k.Tag {
	case "!!merge":
		return "", malformed("%smerge keys (<<) are not supported; write the members out", at(n))
	case "!!str", "!!int", "!!float", "!!bool", "!!null", "!!timestamp":
	default:
		return "", malformed("%sunsupported YAML tag %s", at(n), k.Tag)
	}
	if !utf8.ValidString(k.Value) {
		return "", malformed("%skey is not valid UTF-8", at(n))
	}
	if err := r.addText(len(k.Value)); err != nil {
		return "", err
	}
	return k.Value, nil
}

// scalar converts a scalar node to nil, bool, int64, uint64, float64 or
// string. Timestamps stay strings (JSON has no time type); other tags
// (!!binary, custom tags) are refused rather than guessed at.
func scalar(n *yaml.Node) (any, error) {
	switch n.Tag {
	case "!!str", "!!timestamp":
		if !utf8.ValidString(n.Value) {
			return nil, malformed("%sstring is not valid UTF-8", at(n))
		}
		return n.Value, nil
	case "!!null":
		return nil, nil
	case "!!bool", "!!int", "!!float":
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, malformed("%s%s", at(n), trimYAMLError(err))
		}
		return normalizeNumber(n, v)
	case "!!merge":
		return nil, malformed("%smerge keys (<<) are not supported; write the members out", at(n))
	}
	return nil, malformed("%sunsupported YAML tag %s", at(n), n.Tag)
}

func normalizeNumber(n *yaml.Node, v any) (any, error) {
	switch x := v.(type) {
	case bool, int64, uint64:
		return x, nil
	case int:
		return int64(x), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, malformed("%s%s cannot be represented in JSON", at(n), n.Value)
		}
		return x, nil
	case string:
		// An explicit !!float or !!int on text yaml.v3 keeps as text.
		return nil, malformed("%s%q is not a %s", at(n), x, n.Tag)
	case nil:
		return nil, nil
	}
	return nil, malformed("%sunsupported scalar %s", at(n), n.Value)
}

// --- JSON ---

// readJSON parses raw strictly as one JSON object (RFC 8259): valid UTF-8,
// no duplicate member names, nothing after the value. It reads tokens with
// jsontext (the tokenizer of encoding/json/v2, from its module mirror):
// encoding/json's Decoder.Token decoded each token as a value of its own,
// most of the time of parsing a device's capabilities at every creation
// (BenchmarkParseCapabilities: 28.6 µs and 236 allocations for a small
// document before).
func readJSON(raw []byte) (*object, error) {
	raw = bytes.TrimPrefix(raw, []byte("\xef\xbb\xbf"))
	if !utf8.Valid(raw) {
		return nil, malformed("not valid JSON: the input is not valid UTF-8")
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, malformed("the document is empty")
	}
	// Duplicate names are found below, with their position in the message.
	// The input is valid UTF-8 (checked above); AllowInvalidUTF8 only lets
	// an escaped lone surrogate through as U+FFFD, as encoding/json did.
	dec := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	r := &jsonReader{dec: dec, raw: raw}
	tok, err := r.token()
	if err != nil {
		return nil, err
	}
	if k := tok.Kind(); k != '{' {
		return nil, malformed("the top level must be an object, got %s", jsonKind(k))
	}
	v, err := r.value(tok, 1)
	if err != nil {
		return nil, err
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, r.syntax(err, "unexpected data after the top-level object")
	}
	return v.(*object), nil
}

type jsonReader struct {
	limits
	dec *jsontext.Decoder
	raw []byte
}

func (r *jsonReader) token() (jsontext.Token, error) {
	tok, err := r.dec.ReadToken()
	if err != nil {
		return jsontext.Token{}, r.syntax(err, "")
	}
	return tok, nil
}

// syntax turns a decoder error into EMALFORMED with line and column.
func (r *jsonReader) syntax(err error, fallback string) error {
	var se *jsontext.SyntacticError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return malformed("not valid JSON: unexpected end of input")
	case errors.As(err, &se):
		line, col := lineCol(r.raw, se.ByteOffset)
		msg := se.Error()
		if se.Err != nil {
			msg = se.Err.Error()
		}
		if c, ok := trailingComma(r.raw, se.ByteOffset); ok {
			msg = fmt.Sprintf("trailing comma before %q", c)
		}
		return malformed("not valid JSON: line %d, column %d: %s", line, col, msg)
	case err == nil:
		return malformed("not valid JSON: %s", fallback)
	}
	return malformed("not valid JSON: %s", err)
}

// trailingComma reports whether raw has a comma at off followed (after
// white space) by the end of an object or array, and which: jsontext
// reports it as a comma where a value should start.
func trailingComma(raw []byte, off int64) (byte, bool) {
	if off < 0 || off >= int64(len(raw)) || raw[off] != ',' {
		return 0, false
	}
	rest := bytes.TrimLeft(raw[off+1:], " \t\r\n")
	if len(rest) > 0 && (rest[0] == '}' || rest[0] == ']') {
		return rest[0], true
	}
	return 0, false
}

// where describes the decoder's position for a message. It costs a scan of
// the input, so it is only called once an error is certain.
func (r *jsonReader) where() string {
	return r.whereAt(r.dec.InputOffset())
}

func (r *jsonReader) whereAt(off int64) string {
	// The decoder's offset is just after the previous token; point at the
	// next one.
	for off < int64(len(r.raw)) && strings.IndexByte(" \t\r\n,:", r.raw[off]) >= 0 {
		off++
	}
	line, col := lineCol(r.raw, off)
	return fmt.Sprintf("line %d, column %d: ", line, col)
}

func lineCol(raw []byte, off int64) (int, int) {
	if off > int64(len(raw)) {
		off = int64(len(raw))
	}
	before := raw[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
	return line, col
}

func jsonKind(k jsontext.Kind) string {
	switch k {
	case '[':
		return "an array"
	case '{':
		return "an object"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	}
	return "null"
}

// more reports whether the array or object being read has another element
// (the next token is not its end). A decoder error is read by the next
// token call.
func (r *jsonReader) more() bool {
	k := r.dec.PeekKind()
	return k != ']' && k != '}' && k != jsontext.KindInvalid
}

func (r *jsonReader) value(tok jsontext.Token, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, tooDeep(r.where())
	}
	if err := r.node(); err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case '[':
		out := []any{}
		for r.more() {
			tok, err := r.token()
			if err != nil {
				return nil, err
			}
			v, err := r.value(tok, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		if _, err := r.token(); err != nil { // ']'
			return nil, err
		}
		return out, nil
	case '{':
		o := &object{m: map[string]any{}}
		for r.more() {
			off := r.dec.InputOffset()
			tok, err := r.token()
			if err != nil {
				return nil, err
			}
			k := tok.String() // a string: jsontext refuses any other member name
			if err := r.node(); err != nil {
				return nil, err
			}
			if _, dup := o.m[k]; dup {
				return nil, malformed("%sduplicate member name %q", r.whereAt(off), k)
			}
			tok, err = r.token()
			if err != nil {
				return nil, err
			}
			v, err := r.value(tok, depth+1)
			if err != nil {
				return nil, err
			}
			o.keys = append(o.keys, k)
			o.m[k] = v
		}
		if _, err := r.token(); err != nil { // '}'
			return nil, err
		}
		return o, nil
	case '0':
		v, err := lifecycle.ParseNumber(tok.String())
		if err != nil {
			return nil, malformed("%s%s", r.where(), err)
		}
		return v, nil
	case '"':
		return tok.String(), nil
	case 't', 'f':
		return tok.Bool(), nil
	case 'n':
		return nil, nil
	}
	return nil, malformed("not valid JSON: %sunexpected token", r.where())
}

// --- writing JSON ---

// appendJSON writes v as compact JSON, members in document order. Floats
// always carry a fraction or exponent, so reading the output back gives the
// same tree (an integral float stays a float).
func appendJSON(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, x)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case uint64:
		return strconv.AppendUint(b, x, 10)
	case float64:
		return appendFloat(b, x)
	case string:
		return appendString(b, x)
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, e)
		}
		return append(b, ']')
	case *object:
		b = append(b, '{')
		for i, k := range x.keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendJSON(b, x.m[k])
		}
		return append(b, '}')
	}
	panic(fmt.Sprintf("margo: unexpected %T in document tree", v)) // a bug: the readers build no other type
}

func appendFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if !bytes.ContainsAny(b[start:], ".e") {
		b = append(b, ".0"...)
	}
	return b
}

const hexDigits = "0123456789abcdef"

func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20 || c == 0x7f:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// --- generic data for the typed model ---

// plain converts a tree value to the plain Go form of the typed model:
// *object becomes map[string]any, lists become []any (copied).
func plain(v any) any {
	switch x := v.(type) {
	case *object:
		m := make(map[string]any, len(x.keys))
		for _, k := range x.keys {
			m[k] = plain(x.m[k])
		}
		return m
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plain(e)
		}
		return out
	}
	return v
}
