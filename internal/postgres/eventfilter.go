package postgres

import (
	"slices"
	"strings"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Matches reports whether f selects e, with the semantics EventsAfter
// applies in SQL (TestEventFilterMatchesLikeSQL compares them): a reader that
// filters events in memory (the event stream's shared reader) selects
// exactly what its query would.
func (f EventFilter) Matches(e lifecycle.Event) bool {
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
