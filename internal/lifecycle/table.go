package lifecycle

import (
	"fmt"
	"slices"
	"strings"
)

// table is the machinery shared by every life cycle in this package: from
// each state, the states it may move to. A no-op is not a transition, so no
// state lists itself; a terminal state lists nothing.
type table[S ~string] map[S][]S

// can reports whether the table allows a move from one state to another:
// false for a no-op and for unknown states.
func (t table[S]) can(from, to S) bool { return slices.Contains(t[from], to) }

// pairs returns every allowed (from, to) pair, sorted by from and then to
// (byte order of the names), so that the result is stable.
func (t table[S]) pairs() [][2]S {
	var out [][2]S
	for from, tos := range t {
		for _, to := range tos {
			out = append(out, [2]S{from, to})
		}
	}
	slices.SortFunc(out, func(a, b [2]S) int {
		if c := strings.Compare(string(a[0]), string(b[0])); c != 0 {
			return c
		}
		return strings.Compare(string(a[1]), string(b[1]))
	})
	return out
}

// sql renders the table as a SQL boolean expression over two columns (or
// expressions) from and to, in pairs order:
//
//	(from, to) IN (('a','b'), ('a','c'), …)
//
// A migration embeds the text and a test compares it byte for byte.
func (t table[S]) sql(from, to string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "(%s, %s) IN (", from, to)
	for i, p := range t.pairs() {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "('%s','%s')", p[0], p[1])
	}
	b.WriteString(")")
	return b.String()
}

// valuesSQL renders states as a SQL list for a CHECK constraint on a state
// column, in the given order: ('a', 'b', …).
func valuesSQL[S ~string](states []S) string {
	var b strings.Builder
	b.WriteString("(")
	for i, s := range states {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "'%s'", s)
	}
	b.WriteString(")")
	return b.String()
}

// jsonSQL renders the table as a SQL boolean expression over two columns
// (or expressions) from and to that is true exactly for an allowed pair,
// and false (never NULL: a CHECK passes on NULL) for any other, a NULL from
// included:
//
//	coalesce(('{"a": ["b", "c"], …}'::jsonb -> from) ? to, false)
//
// Sources in byte order, each with its targets in byte order (pairs
// order). As a CHECK it costs about what one short IN list costs, where the
// IN list of every pair that sql renders costs PostgreSQL a parse and a
// planning of its whole tree at every statement that writes the table
// (see migration 00023).
func (t table[S]) jsonSQL(from, to string) string {
	var b strings.Builder
	b.WriteString("coalesce(('{")
	var last S
	for i, p := range t.pairs() {
		switch {
		case i == 0:
			fmt.Fprintf(&b, `"%s": ["%s"`, p[0], p[1])
		case p[0] != last:
			fmt.Fprintf(&b, `], "%s": ["%s"`, p[0], p[1])
		default:
			fmt.Fprintf(&b, `, "%s"`, p[1])
		}
		last = p[0]
	}
	if last != "" {
		b.WriteString("]")
	}
	fmt.Fprintf(&b, "}'::jsonb -> %s) ? %s, false)", from, to)
	return b.String()
}
