package lifecycle

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"testing"
)

// changeMap indexes a diff by name, failing on duplicates or disorder.
func changeMap(t *testing.T, changes []ParamChange) map[string]ParamChange {
	t.Helper()
	m := map[string]ParamChange{}
	for i, c := range changes {
		if i > 0 && changes[i-1].Name >= c.Name {
			t.Fatalf("changes not sorted by name: %q before %q", changes[i-1].Name, c.Name)
		}
		m[c.Name] = c
	}
	return m
}

func TestCarryOver(t *testing.T) {
	resetPolicy := Lifecycle{Parameters: map[string]ParameterPolicy{
		"logLevel": {OnUpgrade: OnUpgradeReset},
		"secret":   {OnUpgrade: OnUpgradeReset},
		"greeting": {OnUpgrade: OnUpgradeKeep},
	}}
	in := CarryInput{
		Current: map[string]any{
			"greeting": "Hi",      // operator: keep
			"logLevel": "debug",   // operator: reset to info
			"secret":   "s3cr3t",  // operator: reset, the target has no default
			"legacy":   true,      // the target no longer defines it
			"port":     int64(80), // a default, unchanged in the target
			"timeout":  30,        // a default, changed in the target
			"gone":     "x",       // a default the target no longer declares
			"retries":  3,         // operator, but the request sets it
			"tags":     []any{"a"},
		},
		OperatorSet: map[string]bool{"greeting": true, "logLevel": true, "secret": true, "legacy": true, "retries": true, "tags": true},
		TargetParams: []string{"greeting", "logLevel", "secret", "port", "timeout", "gone", "retries",
			"newWithDefault", "newNoDefault", "tags"},
		TargetDefaults: map[string]any{"greeting": "Hello", "logLevel": "info", "port": 80.0, "timeout": 60,
			"newWithDefault": "on", "retries": 1, "tags": []any{}},
		TargetPolicy: resetPolicy,
		Requested:    map[string]any{"retries": 5, "tags": []string{"a"}, "extra": "x"},
	}
	got, changes := CarryOver(in)
	want := map[string]any{
		"greeting": "Hi", "logLevel": "info", "port": 80.0, "timeout": 60, "retries": 5,
		"newWithDefault": "on", "tags": []string{"a"}, "extra": "x",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("CarryOver(%v) = %v, want %v", in.Current, got, want)
	}
	wantKinds := map[string]ChangeKind{
		"extra":          ChangeChanged, // kept for the caller's validation to refuse
		"gone":           ChangeChanged,
		"greeting":       ChangeKept,
		"legacy":         ChangeDropped,
		"logLevel":       ChangeReset,
		"newNoDefault":   ChangeAdded,
		"newWithDefault": ChangeAdded,
		"port":           ChangeUnchanged, // int64 80 == 80.0
		"retries":        ChangeChanged,
		"secret":         ChangeReset,
		"tags":           ChangeUnchanged, // []string{"a"} == []any{"a"}
		"timeout":        ChangeChanged,
	}
	cm := changeMap(t, changes)
	if len(cm) != len(wantKinds) {
		t.Errorf("CarryOver diff has %d entries %v, want %d", len(cm), changes, len(wantKinds))
	}
	for name, kind := range wantKinds {
		if c := cm[name]; c.Kind != kind {
			t.Errorf("CarryOver diff[%s] = %+v, want kind %s", name, c, kind)
		}
	}
	if c := cm["logLevel"]; c.Before != "debug" || c.After != "info" {
		t.Errorf("CarryOver diff[logLevel] = %+v, want debug -> info", c)
	}
	if c := cm["legacy"]; c.Before != true || c.After != nil {
		t.Errorf("CarryOver diff[legacy] = %+v, want true -> nil", c)
	}
	if _, ok := got["secret"]; ok {
		t.Errorf("CarryOver kept secret = %v, want no value (reset without a default)", got["secret"])
	}
}

func TestCarryOverRules(t *testing.T) {
	reset := Lifecycle{Parameters: map[string]ParameterPolicy{"p": {OnUpgrade: OnUpgradeReset}}}
	tests := []struct {
		name      string
		in        CarryInput
		wantValue any // nil: absent
		wantKind  ChangeKind
	}{
		{"operator value kept by default",
			CarryInput{Current: map[string]any{"p": "mine"}, OperatorSet: map[string]bool{"p": true}, TargetParams: []string{"p"}, TargetDefaults: map[string]any{"p": "new"}},
			"mine", ChangeKept},
		{"operator value reset",
			CarryInput{Current: map[string]any{"p": "mine"}, OperatorSet: map[string]bool{"p": true}, TargetParams: []string{"p"}, TargetDefaults: map[string]any{"p": "new"}, TargetPolicy: reset},
			"new", ChangeReset},
		{"reset value equal to the new default is still a reset",
			CarryInput{Current: map[string]any{"p": "new"}, OperatorSet: map[string]bool{"p": true}, TargetParams: []string{"p"}, TargetDefaults: map[string]any{"p": "new"}, TargetPolicy: reset},
			"new", ChangeReset},
		{"request wins over reset",
			CarryInput{Current: map[string]any{"p": "mine"}, OperatorSet: map[string]bool{"p": true}, TargetParams: []string{"p"}, TargetDefaults: map[string]any{"p": "new"}, TargetPolicy: reset, Requested: map[string]any{"p": "asked"}},
			"asked", ChangeChanged},
		{"request equal to the current value",
			CarryInput{Current: map[string]any{"p": 30}, TargetParams: []string{"p"}, Requested: map[string]any{"p": 30.0}},
			30.0, ChangeUnchanged},
		{"request on a new parameter",
			CarryInput{TargetParams: []string{"p"}, TargetDefaults: map[string]any{"p": 1}, Requested: map[string]any{"p": 2}},
			2, ChangeChanged},
		{"request on a dropped parameter stays for validation",
			CarryInput{Current: map[string]any{"p": 1}, Requested: map[string]any{"p": 2}},
			2, ChangeChanged},
		{"dropped even if operator-set",
			CarryInput{Current: map[string]any{"p": "mine"}, OperatorSet: map[string]bool{"p": true}, TargetParams: []string{"q"}},
			nil, ChangeDropped},
		{"default follows the new default",
			CarryInput{Current: map[string]any{"p": 1}, OperatorSet: map[string]bool{}, TargetParams: []string{"p"}, TargetDefaults: map[string]any{"p": 2}},
			2, ChangeChanged},
		// OperatorSet unknown: inferred from the old defaults.
		{"inferred default (equal to the old default, numbers by value)",
			CarryInput{Current: map[string]any{"p": int64(30)}, OldDefaults: map[string]any{"p": 30.0}, TargetParams: []string{"p"}, TargetDefaults: map[string]any{"p": 45}},
			45, ChangeChanged},
		{"inferred operator value (differs from the old default)",
			CarryInput{Current: map[string]any{"p": 31}, OldDefaults: map[string]any{"p": 30}, TargetParams: []string{"p"}, TargetDefaults: map[string]any{"p": 45}},
			31, ChangeKept},
		{"inferred operator value (no old default)",
			CarryInput{Current: map[string]any{"p": 31}, TargetParams: []string{"p"}, TargetDefaults: map[string]any{"p": 45}},
			31, ChangeKept},
		{"explicit OperatorSet wins over inference",
			CarryInput{Current: map[string]any{"p": 30}, OperatorSet: map[string]bool{"p": true}, OldDefaults: map[string]any{"p": 30}, TargetParams: []string{"p"}, TargetDefaults: map[string]any{"p": 45}},
			30, ChangeKept},
	}
	for _, tt := range tests {
		got, changes := CarryOver(tt.in)
		v, ok := got["p"]
		if (tt.wantValue == nil) == ok || (ok && !EqualValues(v, tt.wantValue)) {
			t.Errorf("CarryOver(%s)[p] = %v (present %v), want %v", tt.name, v, ok, tt.wantValue)
		}
		c := changeMap(t, changes)["p"]
		if c.Kind != tt.wantKind {
			t.Errorf("CarryOver(%s) diff[p] = %+v, want kind %s", tt.name, c, tt.wantKind)
		}
	}
}

func TestCarryOverDoesNotAlias(t *testing.T) {
	cur := []any{"a", []any{"b"}}
	in := CarryInput{Current: map[string]any{"l": cur}, OperatorSet: map[string]bool{"l": true}, TargetParams: []string{"l"}}
	got, changes := CarryOver(in)
	got["l"].([]any)[0] = "changed"
	changes[0].Before.([]any)[1].([]any)[0] = "changed"
	if cur[0] != "a" || cur[1].([]any)[0] != "b" {
		t.Errorf("CarryOver result aliases its input: input now %v", cur)
	}
}

func TestPlanReconfigure(t *testing.T) {
	current := map[string]any{"greeting": "Hi", "port": 8080, "mode": "a", "tags": []any{"x", "y"}}
	immutable := func(n string) bool { return n == "port" || n == "mode" }
	known := func(n string) bool {
		return slices.Contains([]string{"greeting", "port", "mode", "tags", "level", "a/b"}, n)
	}
	tests := []struct {
		name       string
		requested  map[string]any
		wantType   string   // "" when allowed
		wantFields []string // pointers of the refusal
		wantChange []string // names that change, when allowed
	}{
		{name: "one change", requested: map[string]any{"greeting": "Hello"}, wantChange: []string{"greeting"}},
		{name: "immutable set to the same value (30 == 30.0)", requested: map[string]any{"port": 8080.0, "greeting": "Yo"}, wantChange: []string{"greeting"}},
		{name: "list equal across types", requested: map[string]any{"tags": []string{"x", "y"}, "level": 3}, wantChange: []string{"level"}},
		{name: "list order matters", requested: map[string]any{"tags": []any{"y", "x"}}, wantChange: []string{"tags"}},
		{name: "new value for a parameter without one", requested: map[string]any{"level": nil}, wantChange: []string{"level"}},
		{name: "escaped pointer", requested: map[string]any{"a/b": 1}, wantChange: []string{"a/b"}},
		{name: "unknown", requested: map[string]any{"nope": 1, "also~no": 2, "greeting": "x"},
			wantType: ProblemInvalidParameterValues, wantFields: []string{"/parameters/also~0no", "/parameters/nope"}},
		{name: "immutable change", requested: map[string]any{"port": 9090, "mode": "b", "greeting": "x"},
			wantType: ProblemImmutableParameter, wantFields: []string{"/parameters/mode", "/parameters/port"}},
		{name: "unknown and immutable: every problem at once", requested: map[string]any{"port": 9090, "nope": 1},
			wantType: ProblemInvalidParameterValues, wantFields: []string{"/parameters/nope", "/parameters/port"}},
		{name: "no change", requested: map[string]any{"greeting": "Hi", "port": 8080},
			wantType: ProblemNoChange},
		{name: "empty request", requested: map[string]any{}, wantType: ProblemNoChange},
		{name: "nil request", requested: nil, wantType: ProblemNoChange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := PlanReconfigure(current, tt.requested, immutable, known)
			if tt.wantType != "" {
				if ErrorCode(err) != EINVALID || ErrorType(err) != tt.wantType {
					t.Fatalf("PlanReconfigure(%v) = %v, want EINVALID/%s", tt.requested, err, tt.wantType)
				}
				var ptrs []string
				for _, f := range asError(t, err).Fields {
					ptrs = append(ptrs, f.Pointer)
				}
				if !slices.Equal(ptrs, tt.wantFields) {
					t.Errorf("PlanReconfigure(%v) fields = %v, want %v", tt.requested, ptrs, tt.wantFields)
				}
				return
			}
			if err != nil {
				t.Fatalf("PlanReconfigure(%v) = %v, want allowed", tt.requested, err)
			}
			var changed []string
			for _, c := range plan.Changes {
				if c.Kind == ChangeChanged {
					changed = append(changed, c.Name)
				} else if c.Kind != ChangeUnchanged {
					t.Errorf("PlanReconfigure(%v) diff has kind %s for %s, want changed or unchanged", tt.requested, c.Kind, c.Name)
				}
			}
			if !slices.Equal(changed, tt.wantChange) {
				t.Errorf("PlanReconfigure(%v) changes %v, want %v", tt.requested, changed, tt.wantChange)
			}
			// The full diff covers every current parameter too.
			cm := changeMap(t, plan.Changes)
			for name := range current {
				if _, ok := cm[name]; !ok {
					t.Errorf("PlanReconfigure(%v) diff lacks %s", tt.requested, name)
				}
			}
			for _, c := range plan.Checks {
				if !c.Passed {
					t.Errorf("PlanReconfigure(%v) allowed with failed check %+v", tt.requested, c)
				}
			}
			if want := MergeValues(current, tt.requested); fmt.Sprint(plan.Values) != fmt.Sprint(want) {
				t.Errorf("PlanReconfigure(%v).Values = %v, want %v", tt.requested, plan.Values, want)
			}
		})
	}
}

func TestPlanReconfigureErrorDetails(t *testing.T) {
	current := map[string]any{"port": 8080}
	plan, err := PlanReconfigure(current, map[string]any{"port": 9090}, func(string) bool { return true }, nil)
	e := asError(t, err)
	if got := e.Extra["parameters"]; fmt.Sprint(got) != "[port]" {
		t.Errorf("PlanReconfigure(immutable port) Extra parameters = %v, want [port]", got)
	}
	if got, want := checkNames(plan.Checks), []string{"+known-parameters", "-immutable-parameters", "+parameters-changed"}; !slices.Equal(got, want) {
		t.Errorf("PlanReconfigure(immutable port).Checks = %v, want %v", got, want)
	}
	// The diff is there for a dry run even when refused.
	if len(plan.Changes) != 1 || plan.Changes[0].Kind != ChangeChanged || plan.Changes[0].After != 9090 {
		t.Errorf("PlanReconfigure(immutable port).Changes = %+v, want port changed to 9090", plan.Changes)
	}

	plan, err = PlanReconfigure(current, map[string]any{"port": 8080}, nil, nil)
	if ErrorType(err) != ProblemNoChange {
		t.Fatalf("PlanReconfigure(same value) = %v, want no-change", err)
	}
	if got, want := checkNames(plan.Checks), []string{"+known-parameters", "+immutable-parameters", "-parameters-changed"}; !slices.Equal(got, want) {
		t.Errorf("PlanReconfigure(same value).Checks = %v, want %v", got, want)
	}
}

func TestDiffValues(t *testing.T) {
	before := map[string]any{"a": 1, "b": "x", "c": []any{"l"}, "d": nil}
	after := map[string]any{"a": 1.0, "b": "y", "c": []any{"l"}, "e": false}
	got := DiffValues(before, after)
	want := []ParamChange{
		{Name: "a", Before: 1, After: 1.0, Kind: ChangeUnchanged},
		{Name: "b", Before: "x", After: "y", Kind: ChangeChanged},
		{Name: "c", Before: []any{"l"}, After: []any{"l"}, Kind: ChangeUnchanged},
		{Name: "d", Before: nil, After: nil, Kind: ChangeDropped},
		{Name: "e", Before: nil, After: false, Kind: ChangeAdded},
	}
	if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
		t.Errorf("DiffValues(%v, %v) = %+v, want %+v", before, after, got, want)
	}
	got[2].After.([]any)[0] = "changed"
	if after["c"].([]any)[0] != "l" {
		t.Errorf("DiffValues result aliases its input")
	}
	if got := DiffValues(nil, nil); len(got) != 0 {
		t.Errorf("DiffValues(nil, nil) = %v, want empty", got)
	}
}

func TestMergeValues(t *testing.T) {
	cur := map[string]any{"a": 1, "l": []any{"x"}, "n": "keep"}
	got := MergeValues(cur, map[string]any{"a": 2, "b": nil})
	want := map[string]any{"a": 2, "b": nil, "l": []any{"x"}, "n": "keep"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("MergeValues = %v, want %v", got, want)
	}
	if _, ok := got["b"]; !ok {
		t.Errorf("MergeValues dropped a nil value; a nil value is a value")
	}
	got["l"].([]any)[0] = "changed"
	if cur["l"].([]any)[0] != "x" {
		t.Errorf("MergeValues result aliases its input")
	}
	if m := MergeValues(nil, nil); m == nil || len(m) != 0 {
		t.Errorf("MergeValues(nil, nil) = %#v, want an empty map", m)
	}
}

func TestEqualValues(t *testing.T) {
	tests := []struct {
		a, b any
		want bool
	}{
		{30, 30.0, true},
		{int64(30), uint64(30), true},
		{uint64(math.MaxUint64), float64(math.MaxUint64), false}, // 2^64-1 != 2^64
		{json.Number("30"), 30, true},
		{json.Number("0.1"), 0.1, true},
		{json.Number("1e2"), 100, true},
		{float32(0.5), 0.5, true},
		{30, 31, false},
		{"30", 30, false},
		{30, "30", false},
		{"a", "a", true},
		{true, true, true},
		{true, false, false},
		{nil, nil, true},
		{nil, "", false},
		{"", nil, false},
		{math.NaN(), math.NaN(), false},
		{[]any{1, "a"}, []any{1.0, "a"}, true},
		{[]any{1, "a"}, []any{"a", 1}, false},
		{[]any{1}, []any{1, 1}, false},
		{[]string{"a"}, []any{"a"}, true},
		{[]any{}, []any(nil), true},
		{[]any{[]any{1}}, []any{[]any{1.0}}, true},
		{map[string]any{"x": 1}, map[string]any{"x": 1.0}, true},
		{map[string]any{"x": 1}, map[string]any{"y": 1}, false},
		{[]any{"a"}, "a", false},
	}
	for _, tt := range tests {
		if got := EqualValues(tt.a, tt.b); got != tt.want {
			t.Errorf("EqualValues(%#v, %#v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}
