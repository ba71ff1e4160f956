package lifecycle

import (
	"slices"
	"sort"
)

// CheckImmutable refuses a change of an immutable parameter across a new
// revision (an upgrade's carried-over, reset or requested values): every
// parameter that immutable names, that the running revision has and the
// new one keeps, must keep its value. A parameter the new version no longer
// defines is not a change of value.
//
// Returns EINVALID (type "immutable-parameter", one field per parameter,
// pointer /parameters/<name>, Extra "parameters").
func CheckImmutable(current, next map[string]any, immutable func(name string) bool) error {
	var names []string
	for name, after := range next {
		before, had := current[name]
		if had && immutable(name) && !EqualValues(before, after) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	fields := make([]FieldError, 0, len(names))
	for _, n := range names {
		fields = append(fields, FieldError{Pointer: paramPointer(n), Detail: "immutable: it cannot change after install"})
	}
	return &Error{Code: EINVALID, Type: "immutable-parameter",
		Message: capitalize(quoteNames(names)) + " cannot change after install (immutable); the upgrade would change " + pluralIt(len(names)) + ".",
		Fields:  fields, Extra: map[string]any{"parameters": slices.Clone(names)}}
}

func pluralIt(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}
