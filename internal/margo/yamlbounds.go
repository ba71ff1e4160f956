package margo

import (
	"bytes"
)

// checkYAML counts, in one pass over the bytes and without building
// anything, a lower bound of the nodes and of the nesting depth of the YAML
// in raw, and returns the tree reader's error as soon as either exceeds its
// bound (MaxNodes: ETOOLARGE; MaxDepth: EMALFORMED with the line and column
// of a node too deep). The YAML parser builds every node of a document
// before the tree reader can count them: this scan is what stops a hostile
// document (a 1 MiB flat list is 500,000 nodes) before they exist.
//
// Hand-written because no YAML library served by the module proxy exposes
// its event stream: go.yaml.in/yaml/v3 and v4 compose a whole node tree
// first. It is a lower bound, so that it never refuses what the reader
// accepts: each node it counts is one the parser makes (an entry after
// "- ", a key and its value after "key:", an item of a flow collection, a
// pair in a flow sequence), and what it cannot tell apart it does not count
// (the top-level collection, the text of block and multi-line scalars). An
// alias counts as one node here; the reader counts it again as a copy of
// what it names, as it always has. For the shapes that make many nodes
// (lists, mappings, flow collections, repeated entries) the count is
// exact or nearly, so what passes is a document of about MaxNodes nodes.
func checkYAML(raw []byte) error {
	_, err := countYAML(raw)
	return err
}

// countYAML is checkYAML's count: the nodes it found, and its error.
func countYAML(raw []byte) (int, error) {
	s := &yamlScan{owner: noOwner, docIndent: -1}
	for line := 1; len(raw) > 0; line++ {
		var l []byte
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			l, raw = raw[:i], raw[i+1:]
		} else {
			l, raw = raw, nil
		}
		s.line, s.l = line, bytes.TrimSuffix(l, []byte("\r"))
		s.scanLine()
		if s.err != nil {
			return s.nodes, s.err
		}
		if s.nodes > MaxNodes {
			return s.nodes, tooManyNodes(ProblemTooLarge)
		}
	}
	return s.nodes, nil
}

// noOwner: no block or plain scalar is open.
const noOwner = -2

// yamlScan is checkYAML's state between lines.
type yamlScan struct {
	l     []byte // the current line, without its line break
	line  int    // its number, from 1
	nodes int
	err   error
	// quote is the quote character of a quoted scalar still open at the
	// end of the previous line, 0 if none.
	quote byte
	// flow holds the open flow collections, innermost last; flowEnd is
	// the column where scanFlow stopped.
	flow    []flowLevel
	flowEnd int
	// owner is the column of the node that owns an open block scalar
	// (plain: false) or plain scalar (plain: true): the lines indented
	// more than it continue that scalar. noOwner when none is open.
	owner int
	plain bool
	// docIndent is the indentation of the document's first node, -1
	// before it: a line indented more is inside a collection.
	docIndent int
}

// flowLevel is one open flow collection: whether it is a mapping, the depth
// of its items, and what the current item holds so far.
type flowLevel struct {
	mapping    bool
	itemDepth  int
	content    bool // the item has begun
	colon      bool // the item is a pair ("a: b")
	afterColon bool // the next scalar is the value of a pair
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// endsToken reports whether position i of l ends a token: the end of the
// line or a blank.
func endsToken(l []byte, i int) bool { return i >= len(l) || isBlank(l[i]) }

func (s *yamlScan) tooDeep(col int) {
	if s.err == nil {
		s.err = malformed("line %d, column %d: the document nests deeper than %d levels", s.line, col+1, MaxDepth)
	}
}

// node counts a node that starts at column col at depth.
func (s *yamlScan) node(depth, col int) {
	s.nodes++
	if depth > MaxDepth {
		s.tooDeep(col)
	}
}

func (s *yamlScan) scanLine() {
	l := s.l
	if s.quote != 0 {
		i := s.skipQuote(0)
		if i < 0 {
			return
		}
		if len(s.flow) > 0 {
			s.scanFlow(i)
		}
		return // in block context, a multi-line quoted scalar is a value: the rest is a comment
	}
	if len(s.flow) > 0 {
		s.scanFlow(0)
		return
	}
	indent := 0
	for indent < len(l) && l[indent] == ' ' {
		indent++
	}
	if indent == 0 && len(l) >= 3 && (bytes.HasPrefix(l, []byte("---")) || bytes.HasPrefix(l, []byte("..."))) && endsToken(l, 3) {
		s.owner, s.docIndent = noOwner, -1
		if l[0] == '.' {
			return
		}
		s.blockNode(3, 0, -1)
		return
	}
	rest := l[indent:]
	if len(bytes.TrimLeft(rest, " \t")) == 0 {
		return // blank: continues whatever is open
	}
	if s.owner != noOwner {
		if indent > s.owner && !(s.plain && rest[0] == '#') {
			return // a line of the open scalar
		}
		s.owner = noOwner
	}
	if rest[0] == '#' || (indent == 0 && rest[0] == '%') {
		return // a comment or a directive
	}
	if s.docIndent < 0 {
		s.docIndent = indent
	}
	depth := 0 // the depth of the container the line's first node belongs to
	if indent > s.docIndent {
		depth = 1
	}
	s.blockNode(indent, depth, indent-1)
}

// blockNode reads, in block context, the nodes from column i to the end of
// the line, the first at depth+1. plainOwner is the owner of a plain scalar
// that starts here and may continue on the next lines.
func (s *yamlScan) blockNode(i, depth, plainOwner int) {
	l := s.l
	for {
		for i < len(l) && isBlank(l[i]) {
			i++
		}
		if i >= len(l) || l[i] == '#' {
			return
		}
		c := l[i]
		if (c == '-' || c == '?') && endsToken(l, i+1) {
			// A sequence entry or an explicit key: the node that follows
			// (or an empty one) belongs to a collection at depth+1.
			depth++
			s.node(depth+1, i)
			plainOwner = i
			i++
			continue
		}
		if c == ':' && endsToken(l, i+1) {
			depth++
			s.node(depth+1, i)
			s.value(i+1, depth, i)
			return
		}
		break
	}
	// A node: properties first, then a key or a value.
	start := i
	i = skipProperties(l, i)
	if i >= len(l) || l[i] == '#' {
		return
	}
	switch c := l[i]; c {
	case '[', '{':
		s.openFlow(i, depth+1)
		s.scanFlow(i + 1)
		s.afterFlowKey(depth, start)
	case '|', '>':
		s.owner, s.plain = plainOwner, false
	case '"', '\'':
		s.quote = c
		j := s.skipQuote(i + 1)
		if j < 0 {
			return
		}
		if k, ok := keyIndicator(l, j); ok && skipBlanks(l, j) == k {
			s.key(start, k, depth)
		}
	default:
		if k, ok := keyIndicator(l, i); ok {
			s.key(start, k, depth)
			return
		}
		s.owner, s.plain = plainOwner, true
	}
}

// key counts a block mapping's key at column col and its value, whose ':'
// is at column colon, and reads the value.
func (s *yamlScan) key(col, colon, depth int) {
	s.node(depth+2, col)
	s.nodes++ // the value, written or empty
	s.value(colon+1, depth+1, col)
}

// afterFlowKey reads what follows a flow collection that ends on its line in
// block context: ": value" when it was a key.
func (s *yamlScan) afterFlowKey(depth, col int) {
	if len(s.flow) > 0 || s.quote != 0 {
		return
	}
	// scanFlow stopped just after the closing bracket: find it again.
	i := s.flowEnd
	if k, ok := keyIndicator(s.l, i); ok && skipBlanks(s.l, i) == k {
		s.nodes++
		s.value(k+1, depth+1, col)
	}
}

// value reads, in block context, the value of a key or of an explicit ":"
// that starts after column i, at depth+1, owned by column owner.
func (s *yamlScan) value(i, depth, owner int) {
	l := s.l
	i = skipProperties(l, skipBlanks(l, i))
	if i >= len(l) || l[i] == '#' {
		return // on the next lines, or empty
	}
	switch c := l[i]; c {
	case '[', '{':
		s.openFlow(i, depth+1)
		s.scanFlow(i + 1)
	case '|', '>':
		s.owner, s.plain = owner, false
	case '"', '\'':
		s.quote = c
		s.skipQuote(i + 1)
	default:
		s.owner, s.plain = owner, true
	}
}

// openFlow opens a flow collection at column i whose node is at depth.
func (s *yamlScan) openFlow(i, depth int) {
	if depth > MaxDepth {
		s.tooDeep(i)
	}
	s.flow = append(s.flow, flowLevel{mapping: s.l[i] == '{', itemDepth: depth + 1})
}

// scanFlow reads flow context from column i, across lines, until the
// outermost open collection closes (flowEnd is then just after it) or the
// line ends.
func (s *yamlScan) scanFlow(i int) {
	l := s.l
	for i < len(l) && len(s.flow) > 0 && s.err == nil {
		top := &s.flow[len(s.flow)-1]
		c := l[i]
		switch {
		case isBlank(c):
			i++
		case c == '#' && (i == 0 || isBlank(l[i-1])):
			return
		case c == '[' || c == '{':
			s.itemBegins(top, i)
			s.openFlow(i, top.itemDepth)
			i++
		case c == ']' || c == '}':
			s.endItem(top)
			s.flow = s.flow[:len(s.flow)-1]
			i++
		case c == ',':
			s.endItem(top)
			i++
		case c == ':' && (top.content || top.mapping) && (i+1 >= len(l) || isBlank(l[i+1]) || bytes.IndexByte([]byte(",[]{}"), l[i+1]) >= 0 || (i > 0 && (l[i-1] == '"' || l[i-1] == '\''))):
			top.colon, top.afterColon, top.content = true, true, true
			i++
		case (c == '"' || c == '\'') && (!top.content || top.afterColon):
			s.itemBegins(top, i)
			top.afterColon = false
			s.quote = c
			if i = s.skipQuote(i + 1); i < 0 {
				return
			}
		default:
			s.itemBegins(top, i)
			top.afterColon = false
			for i < len(l) && !isBlank(l[i]) && bytes.IndexByte([]byte(",[]{}:"), l[i]) < 0 {
				i++
			}
			if i < len(l) && l[i] == ':' && !(i+1 >= len(l) || isBlank(l[i+1]) || bytes.IndexByte([]byte(",[]{}"), l[i+1]) >= 0) {
				i++ // a colon inside a plain scalar ("a:b")
			}
		}
	}
	s.flowEnd = i
}

// itemBegins marks the current item of a flow collection as begun at column
// i, checking its depth.
func (s *yamlScan) itemBegins(top *flowLevel, i int) {
	if !top.content && top.itemDepth > MaxDepth {
		s.tooDeep(i)
	}
	top.content = true
}

// endItem counts the nodes of a flow collection's item that ends: a
// mapping's key and value (written or empty), a sequence's entry, plus a key
// and value when the entry is a pair.
func (s *yamlScan) endItem(top *flowLevel) {
	switch {
	case !top.content:
	case top.mapping:
		s.nodes += 2
	case top.colon:
		s.nodes += 3
	default:
		s.nodes++
	}
	top.content, top.colon, top.afterColon = false, false, false
}

// skipQuote skips a quoted scalar (s.quote) from column i of the line to
// just after its closing quote, and returns that column; -1 when the
// scalar goes on to the next line.
func (s *yamlScan) skipQuote(i int) int {
	l := s.l
	for i < len(l) {
		switch c := l[i]; {
		case s.quote == '"' && c == '\\':
			i += 2
		case c == s.quote && s.quote == '\'' && i+1 < len(l) && l[i+1] == '\'':
			i += 2 // '' is a quote inside single quotes
		case c == s.quote:
			s.quote = 0
			return i + 1
		default:
			i++
		}
	}
	return -1
}

// keyIndicator finds, in a plain or quoted scalar in block context from
// column i, the ':' that makes it a key (followed by a blank or the end of
// the line), before any comment.
func keyIndicator(l []byte, i int) (int, bool) {
	for ; i < len(l); i++ {
		switch l[i] {
		case ':':
			if endsToken(l, i+1) {
				return i, true
			}
		case '#':
			if i > 0 && isBlank(l[i-1]) {
				return 0, false
			}
		}
	}
	return 0, false
}

// skipProperties skips an anchor (&name) and a tag (!tag) and the blanks
// after them.
func skipProperties(l []byte, i int) int {
	for i < len(l) && (l[i] == '&' || l[i] == '!') {
		for i < len(l) && !isBlank(l[i]) {
			i++
		}
		i = skipBlanks(l, i)
	}
	return i
}

func skipBlanks(l []byte, i int) int {
	for i < len(l) && isBlank(l[i]) {
		i++
	}
	return i
}
