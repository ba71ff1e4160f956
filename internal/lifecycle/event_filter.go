package lifecycle

import (
	"slices"
	"strings"
)

// EventFilter selects events. The zero value selects every event; set fields
// narrow the selection (all of them must match). The store applies it in
// SQL (postgres.EventLog.EventsAfter); Matches applies it in memory (the
// event stream's shared reader), with the same result.
type EventFilter struct {
	// Types selects events of any of these types.
	Types []EventType
	// TypePrefixes selects events whose type starts with any of these (for
	// example "operation."). With Types, an event matching either is
	// selected.
	TypePrefixes []string
	// Refs selects events about or related to all of these (subject or
	// related refs; for example a client and an application).
	Refs []Ref
}

// Matches reports whether f selects e.
func (f EventFilter) Matches(e Event) bool {
	if len(f.Types) > 0 || len(f.TypePrefixes) > 0 {
		ok := slices.Contains(f.Types, e.Type)
		for _, p := range f.TypePrefixes {
			ok = ok || strings.HasPrefix(string(e.Type), p)
		}
		if !ok {
			return false
		}
	}
	for _, r := range f.Refs {
		if r != e.Subject && !slices.Contains(e.Related, r) {
			return false
		}
	}
	return true
}
