package lifecycle

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ChangeKind says what happens to one parameter's value in an operation.
type ChangeKind string

// The kinds of parameter change, as a plan's diff shows them.
const (
	// ChangeKept: an upgrade carries the operator's value over (onUpgrade:
	// keep, the default).
	ChangeKept ChangeKind = "kept"
	// ChangeReset: an upgrade replaces the operator's value with the
	// target's default (onUpgrade: reset); with no default the parameter
	// has no value after.
	ChangeReset ChangeKind = "reset"
	// ChangeDropped: the target of an upgrade no longer defines the
	// parameter; its value goes.
	ChangeDropped ChangeKind = "dropped"
	// ChangeAdded: the running revision has no value for a parameter the
	// upgrade's target defines (usually a new parameter); it takes the
	// target's default, or stays without a value when there is none.
	ChangeAdded ChangeKind = "added"
	// ChangeChanged: the value differs after: the request set it, or (on
	// upgrade) a value that was a default follows the target's new default.
	ChangeChanged ChangeKind = "changed"
	// ChangeUnchanged: the value is the same before and after, and no rule
	// above applies.
	ChangeUnchanged ChangeKind = "unchanged"
)

// ParamChange is one line of a plan's full before/after parameter diff.
// Before is nil when the parameter had no value, After when it has none
// after (Kind tells an absent value from a null one where it matters).
type ParamChange struct {
	Name   string     `json:"name"`
	Before any        `json:"before"`
	After  any        `json:"after"`
	Kind   ChangeKind `json:"kind"`
}

// Problem types of the parameter rules.
const (
	// ProblemInvalidParameterValues is the type margo's ValidateValues
	// refusals already use for unknown parameters; PlanReconfigure uses it
	// too, so that one condition has one problem type.
	ProblemInvalidParameterValues = "invalid-parameter-values"
	ProblemImmutableParameter     = "immutable-parameter" // EINVALID: an immutable parameter would change
	ProblemNoChange               = "no-change"           // EINVALID: a reconfiguration that changes nothing
)

// CarryInput is what CarryOver needs to compute the parameter values of an
// upgrade.
type CarryInput struct {
	// Current holds the effective values of the running revision.
	Current map[string]any
	// OperatorSet says which names of Current the operator set explicitly
	// (true) rather than took as defaults. When nil (unknown), a value is
	// taken as operator-set when it differs from OldDefaults (or
	// OldDefaults has no default for it); an operator value that happens to
	// equal the old default is then indistinguishable from the default and
	// follows the target's default. A non-nil map, even empty, is
	// authoritative.
	OperatorSet map[string]bool
	// OldDefaults are the defaults of the running version, used only when
	// OperatorSet is nil.
	OldDefaults map[string]any
	// TargetParams are the parameters the target version defines.
	TargetParams []string
	// TargetDefaults are the target version's defaults (margo's
	// DefaultValues).
	TargetDefaults map[string]any
	// TargetPolicy is the target version's lifecycle, for onUpgrade.
	TargetPolicy Lifecycle
	// Requested holds the values set in the upgrade request; they win over
	// everything.
	Requested map[string]any
}

// operatorSet reports whether Current[name] (= v) was set by the operator.
func (in CarryInput) operatorSet(name string, v any) bool {
	if in.OperatorSet != nil {
		return in.OperatorSet[name]
	}
	d, ok := in.OldDefaults[name]
	return !ok || !EqualValues(v, d)
}

// CarryOver returns the effective parameter values after an upgrade, and the
// full diff, one ParamChange per parameter that has a value before or after
// or that the target defines, sorted by name (design section 4, "Upgrade
// parameters"). Per parameter, the first rule that applies:
//
//  1. set in Requested: the requested value (changed, or unchanged when it
//     equals the current one);
//  2. not defined by the target: dropped;
//  3. no current value: the target's default (added);
//  4. operator-set (see CarryInput.OperatorSet): the target's onUpgrade
//     decides: keep carries the value over (kept), reset takes the target's
//     default (reset);
//  5. otherwise the value was a default: it follows the target's default
//     (unchanged or changed).
//
// A parameter whose outcome has no value (reset, or a default that the
// target no longer declares) is absent from the result. CarryOver does not
// validate and cannot fail: the caller validates the result against the
// target's configuration schema (margo's CheckValues with complete = true),
// which also reports a requested name the target does not define (such a
// value is kept in the result, so that the validation sees it). Immutable
// settings are not consulted. The result and the diff share no list or map
// with the inputs.
func CarryOver(in CarryInput) (map[string]any, []ParamChange) {
	inTarget := make(map[string]bool, len(in.TargetParams))
	names := make([]string, 0, len(in.Current)+len(in.TargetParams)+len(in.Requested))
	for _, n := range in.TargetParams {
		inTarget[n] = true
		names = append(names, n)
	}
	for n := range in.Current {
		names = append(names, n)
	}
	for n := range in.Requested {
		names = append(names, n)
	}
	slices.Sort(names)
	names = slices.Compact(names)

	out := make(map[string]any, len(names))
	changes := make([]ParamChange, 0, len(names))
	for _, name := range names {
		before, had := in.Current[name]
		c := ParamChange{Name: name, Before: CloneValue(before)}
		// after sets the outcome; ok false means no value after.
		after := func(v any, ok bool, kind ChangeKind) {
			c.Kind = kind
			if ok {
				out[name] = CloneValue(v)
				c.After = CloneValue(v)
			}
		}
		def, hasDef := in.TargetDefaults[name]
		if req, ok := in.Requested[name]; ok {
			kind := ChangeChanged
			if had && EqualValues(before, req) {
				kind = ChangeUnchanged
			}
			after(req, true, kind)
		} else if !inTarget[name] {
			after(nil, false, ChangeDropped)
		} else if !had {
			after(def, hasDef, ChangeAdded)
		} else if in.operatorSet(name, before) {
			if in.TargetPolicy.OnUpgradeOf(name) == OnUpgradeReset {
				after(def, hasDef, ChangeReset)
			} else {
				after(before, true, ChangeKept)
			}
		} else {
			kind := ChangeChanged
			if hasDef && EqualValues(before, def) {
				kind = ChangeUnchanged
			}
			after(def, hasDef, kind)
		}
		changes = append(changes, c)
	}
	return out, changes
}

// ReconfigurePlan is the outcome of PlanReconfigure.
type ReconfigurePlan struct {
	// Values are the effective values after the reconfiguration:
	// MergeValues(current, requested).
	Values map[string]any `json:"values"`
	// Changes is the full diff over every parameter of current and every
	// known parameter of requested, sorted by name: changed or unchanged.
	// Unknown names are not in it (they are in the refusal).
	Changes []ParamChange `json:"changes"`
	// Checks lists the checks known-parameters, immutable-parameters and
	// parameters-changed, passed or not; also on refusal.
	Checks []Check `json:"checks"`
}

// PlanReconfigure checks a reconfiguration (same version, new values) of a
// deployment whose running revision has the effective values current, with
// the values set in the request, and returns the new values, the full diff
// and the checks for a dry run (design section 4, "Reconfigure"). known
// reports whether the version defines a parameter, immutable whether its
// setting says immutable: true (margo's ApplicationDescription.Immutable); a
// nil known accepts every name, a nil immutable makes none immutable.
//
// Values compare by content: numbers by value across types (30 == 30.0 ==
// json.Number("30")), lists item by item. A parameter changes when the
// request sets it and it had no value or a different one. Schema
// validation (types, ranges, options) is the caller's: margo's
// ValidateValues on the requested values.
//
// Every problem is reported at once. Errors (the plan is still returned):
//   - EINVALID (type "invalid-parameter-values", the type margo uses for
//     the same condition) if the request names parameters the version does
//     not define: a FieldError at /parameters/<name> for each, plus one for
//     each immutable parameter that would change;
//   - EINVALID (type "immutable-parameter", Extra {"parameters": names}) if
//     an immutable parameter would change: a FieldError at
//     /parameters/<name> naming each;
//   - EINVALID (type "no-change") if the request changes no value (also an
//     empty request). A reconfiguration publishes a new revision to the
//     device, so one that changes nothing is refused rather than recorded
//     as an empty operation; automation that applies a desired state
//     repeatedly may treat this type as success.
func PlanReconfigure(current, requested map[string]any, immutable, known func(name string) bool) (ReconfigurePlan, error) {
	if known == nil {
		known = func(string) bool { return true }
	}
	if immutable == nil {
		immutable = func(string) bool { return false }
	}
	plan := ReconfigurePlan{Values: MergeValues(current, requested)}
	names := make([]string, 0, len(current)+len(requested))
	for n := range current {
		names = append(names, n)
	}
	var unknown, frozen, changed []string
	for _, n := range sortedKeys(requested) {
		if !known(n) {
			unknown = append(unknown, n)
			continue
		}
		names = append(names, n)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	plan.Changes = make([]ParamChange, 0, len(names))
	for _, n := range names {
		before, had := current[n]
		c := ParamChange{Name: n, Before: CloneValue(before), After: CloneValue(before), Kind: ChangeUnchanged}
		if req, ok := requested[n]; ok && known(n) && !(had && EqualValues(before, req)) {
			c.After, c.Kind = CloneValue(req), ChangeChanged
			changed = append(changed, n)
			if immutable(n) {
				frozen = append(frozen, n)
			}
		}
		plan.Changes = append(plan.Changes, c)
	}

	check := func(name string, passed bool, format string, args ...any) {
		plan.Checks = append(plan.Checks, Check{Name: name, Passed: passed, Detail: fmt.Sprintf(format, args...)})
	}
	if len(unknown) == 0 {
		check(CheckKnownParameters, true, "every requested parameter is defined by the version")
	} else {
		check(CheckKnownParameters, false, "the version does not define %s", quoteNames(unknown))
	}
	if len(frozen) == 0 {
		check(CheckImmutableParameters, true, "no immutable parameter changes")
	} else {
		check(CheckImmutableParameters, false, "%s cannot change after install (immutable)", quoteNames(frozen))
	}
	if len(changed) == 0 {
		check(CheckParametersChanged, false, "the request changes no parameter value")
	} else {
		check(CheckParametersChanged, true, "%s change", quoteNames(changed))
	}

	var fe []FieldError
	for _, n := range unknown {
		fe = append(fe, FieldError{Pointer: paramPointer(n), Detail: fmt.Sprintf("unknown parameter %q: the version does not define it", n)})
	}
	for _, n := range frozen {
		fe = append(fe, FieldError{Pointer: paramPointer(n), Detail: fmt.Sprintf("parameter %q is immutable: its value cannot change after install", n)})
	}
	switch {
	case len(unknown) > 0:
		slices.SortStableFunc(fe, func(a, b FieldError) int { return strings.Compare(a.Pointer, b.Pointer) })
		return plan, &Error{Code: EINVALID, Type: ProblemInvalidParameterValues, Fields: fe,
			Message: fmt.Sprintf("The request sets %s, which the version does not define.", quoteNames(unknown))}
	case len(frozen) > 0:
		return plan, &Error{Code: EINVALID, Type: ProblemImmutableParameter, Fields: fe,
			Extra:   map[string]any{"parameters": frozen},
			Message: fmt.Sprintf("%s cannot change after install: the application's configuration marks it immutable. Remove it from the request; to use another value, install a new deployment.", capitalize(quoteNames(frozen)))}
	case len(changed) == 0:
		return plan, &Error{Code: EINVALID, Type: ProblemNoChange,
			Message: "The request changes no parameter value: every value it sets equals the running revision's. There is nothing to reconfigure."}
	}
	return plan, nil
}

// DiffValues returns the full diff from the values before to the values
// after, one ParamChange per name of either, sorted by name: dropped (only
// before), added (only after), unchanged (equal by content, as in
// PlanReconfigure) or changed. It suits a change whose values are given
// whole, such as a rollback, which restores the exact values of the target
// revision. The diff shares no list or map with the inputs.
func DiffValues(before, after map[string]any) []ParamChange {
	names := make([]string, 0, len(before)+len(after))
	for n := range before {
		names = append(names, n)
	}
	for n := range after {
		names = append(names, n)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	changes := make([]ParamChange, 0, len(names))
	for _, n := range names {
		b, hadB := before[n]
		a, hasA := after[n]
		c := ParamChange{Name: n, Before: CloneValue(b), After: CloneValue(a)}
		switch {
		case !hasA:
			c.Kind = ChangeDropped
		case !hadB:
			c.Kind = ChangeAdded
		case EqualValues(b, a):
			c.Kind = ChangeUnchanged
		default:
			c.Kind = ChangeChanged
		}
		changes = append(changes, c)
	}
	return changes
}

// MergeValues returns current with every value of requested set over it: the
// effective values of a reconfiguration. A nil value in requested is a
// value (an empty one, as margo's validation sees it), not a deletion. The
// result is a new, non-nil map sharing no list or map with the inputs.
func MergeValues(current, requested map[string]any) map[string]any {
	out := make(map[string]any, len(current)+len(requested))
	for k, v := range current {
		out[k] = CloneValue(v)
	}
	for k, v := range requested {
		out[k] = CloneValue(v)
	}
	return out
}

func paramPointer(name string) string { return "/parameters/" + EscapePointer(name) }

// quoteNames spells parameter names for a message: `parameter "a"`,
// `parameters "a" and "b"`, `parameters "a", "b" and "c"`.
func quoteNames(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	if len(q) == 1 {
		return "parameter " + q[0]
	}
	return "parameters " + strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
