package lifecycle

import (
	"slices"
	"strings"
)

// SelectEventTypes resolves what a reader of visibility v asked for (specs:
// event types, or prefixes ending in "." such as "rollout."; each may be a
// comma-separated list) into the exact, sorted set of known types it will
// receive. No spec means every type v may read. A reader never receives a
// type above its visibility: a prefix is narrowed to the visible types it
// covers.
//
// Returns EMALFORMED (type "invalid-request", field query/type) for an empty
// spec, an unknown type, or a prefix that matches no known type, and
// EFORBIDDEN (type "forbidden") for a type, or a prefix matching only types,
// that v may not read.
func SelectEventTypes(v Visibility, specs []string) ([]EventType, error) {
	visible := EventTypesVisibleTo(v)
	if len(specs) == 0 {
		return visible, nil
	}
	var fields []FieldError
	var forbidden []string
	var out []EventType
	for _, spec := range specs {
		for _, s := range strings.Split(spec, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				fields = append(fields, FieldError{Pointer: "query/type", Detail: "an empty type"})
				continue
			}
			var matched []EventType
			for _, t := range EventTypes() {
				if string(t) == s || (strings.HasSuffix(s, ".") && strings.HasPrefix(string(t), s)) {
					matched = append(matched, t)
				}
			}
			if len(matched) == 0 {
				fields = append(fields, FieldError{Pointer: "query/type",
					Detail: "unknown event type or prefix " + quote(s) + " (see docs/events.md; a prefix ends in \".\")"})
				continue
			}
			n := 0
			for _, t := range matched {
				if slices.Contains(visible, t) {
					out = append(out, t)
					n++
				}
			}
			if n == 0 {
				forbidden = append(forbidden, s)
			}
		}
	}
	if len(fields) > 0 {
		return nil, &Error{Code: EMALFORMED, Type: "invalid-request", Message: "The event type filter is not valid.", Fields: fields}
	}
	if len(forbidden) > 0 {
		return nil, &Error{Code: EFORBIDDEN, Type: "forbidden",
			Message: "Events of " + strings.Join(forbidden, ", ") + " are visible to admins only.",
			Extra:   map[string]any{"requiredRole": string(VisibilityAdmin)}}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return `"` + s + `"`
}
