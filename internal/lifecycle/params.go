package lifecycle

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
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
	// refusals already use for unknown parameters; CheckReconfigure uses it
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
	return !ok || !equalValue(v, d)
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
		c := ParamChange{Name: name, Before: cloneValue(before)}
		// after sets the outcome; ok false means no value after.
		after := func(v any, ok bool, kind ChangeKind) {
			c.Kind = kind
			if ok {
				out[name] = cloneValue(v)
				c.After = cloneValue(v)
			}
		}
		def, hasDef := in.TargetDefaults[name]
		if req, ok := in.Requested[name]; ok {
			kind := ChangeChanged
			if had && equalValue(before, req) {
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
			if hasDef && equalValue(before, def) {
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
		c := ParamChange{Name: n, Before: cloneValue(before), After: cloneValue(before), Kind: ChangeUnchanged}
		if req, ok := requested[n]; ok && known(n) && !(had && equalValue(before, req)) {
			c.After, c.Kind = cloneValue(req), ChangeChanged
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

// CheckReconfigure is PlanReconfigure for callers that need only the diff:
// it returns plan.Changes and the same error (and the same diff on refusal).
func CheckReconfigure(current, requested map[string]any, immutable, known func(name string) bool) ([]ParamChange, error) {
	plan, err := PlanReconfigure(current, requested, immutable, known)
	return plan.Changes, err
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
		c := ParamChange{Name: n, Before: cloneValue(b), After: cloneValue(a)}
		switch {
		case !hasA:
			c.Kind = ChangeDropped
		case !hadB:
			c.Kind = ChangeAdded
		case equalValue(b, a):
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
		out[k] = cloneValue(v)
	}
	for k, v := range requested {
		out[k] = cloneValue(v)
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

// cloneValue deep-copies the lists and maps of a parameter value; other
// values are returned as they are.
func cloneValue(v any) any {
	switch x := v.(type) {
	case []any:
		if x == nil {
			return x
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = cloneValue(e)
		}
		return out
	case map[string]any:
		if x == nil {
			return x
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = cloneValue(e)
		}
		return out
	}
	return v
}

// equalValue reports whether two parameter values are the same: numbers by
// value across Go types and json.Number (30 == 30.0), strings and booleans
// exactly, lists (any slice or array) item by item, maps member by member,
// nil only to nil. A NaN equals nothing.
func equalValue(a, b any) bool {
	na, aNum := numberOf(a)
	nb, bNum := numberOf(b)
	if aNum || bNum {
		return aNum && bNum && na.Cmp(nb) == 0
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !equalValue(xv, yv) {
				return false
			}
		}
		return true
	}
	ra, rb := reflect.ValueOf(a), reflect.ValueOf(b)
	if isList(ra) && isList(rb) {
		if ra.Len() != rb.Len() {
			return false
		}
		for i := 0; i < ra.Len(); i++ {
			if !equalValue(ra.Index(i).Interface(), rb.Index(i).Interface()) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func isList(v reflect.Value) bool {
	return v.IsValid() && (v.Kind() == reflect.Slice || v.Kind() == reflect.Array)
}

// numberOf returns v as an exact big.Float if v is a number: a Go integer or
// float (not NaN) or a json.Number that parses (read as margo reads it:
// int64, else uint64, else float64).
func numberOf(v any) (*big.Float, bool) {
	f := new(big.Float)
	switch x := v.(type) {
	case int:
		return f.SetInt64(int64(x)), true
	case int8:
		return f.SetInt64(int64(x)), true
	case int16:
		return f.SetInt64(int64(x)), true
	case int32:
		return f.SetInt64(int64(x)), true
	case int64:
		return f.SetInt64(x), true
	case uint:
		return f.SetUint64(uint64(x)), true
	case uint8:
		return f.SetUint64(uint64(x)), true
	case uint16:
		return f.SetUint64(uint64(x)), true
	case uint32:
		return f.SetUint64(uint64(x)), true
	case uint64:
		return f.SetUint64(x), true
	case float32:
		return numberOf(float64(x))
	case float64:
		if math.IsNaN(x) {
			return nil, false
		}
		return f.SetFloat64(x), true
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return f.SetInt64(i), true
			}
			if u, err := strconv.ParseUint(s, 10, 64); err == nil {
				return f.SetUint64(u), true
			}
		}
		if fl, err := strconv.ParseFloat(s, 64); err == nil {
			return numberOf(fl)
		}
	}
	return nil, false
}
