package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
)

// Parameter values have one model in wfm, this one, whether they come from a
// request, a stored revision or a Margo document (margo's parameter rules
// build on it; they do not model values again).
//
// A parameter value is nil, a bool, a string, a number or a list of those.
// Numbers arrive as any Go integer or float type or as json.Number; their
// canonical form is int64 or uint64 for integers (ParseNumber gives uint64
// only above math.MaxInt64, as YAML reads the same literal) and float64
// otherwise. Two
// values are equal by content (EqualValues): numbers by value across types,
// lists item by item.

// ParseNumber reads the text of a JSON number into its canonical form: int64
// when it is an integer that fits, uint64 above math.MaxInt64, float64
// otherwise. The error is a plain description ("number … is out of range")
// for a number no float64 holds or text that is not a number.
func ParseNumber(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return u, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, fmt.Errorf("number %.40s is out of range", s)
	}
	return f, nil
}

// NormalizeValue returns v in canonical form: nil, bool, int64, uint64,
// float64, string, or []any of those (a list holds no list). Any Go integer
// or float type, json.Number and any slice or array are accepted. A list
// longer than maxItems is refused before its items are read. The error is a
// plain description of the first problem, fit for a field error's detail
// ("must be a finite number", "item 2 must be a string, number or boolean,
// got a list", …).
func NormalizeValue(v any, maxItems int) (any, error) {
	switch x := v.(type) {
	case nil, bool, int64, uint64, string:
		return x, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, errors.New("must be a finite number")
		}
		return x, nil
	case float32:
		return NormalizeValue(float64(x), maxItems)
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint:
		return uint64(x), nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case json.Number:
		return ParseNumber(string(x))
	case []any:
		return normalizeList(x, maxItems)
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array {
		if rv.Len() > maxItems {
			return nil, fmt.Errorf("must have at most %d items, got %d", maxItems, rv.Len())
		}
		l := make([]any, rv.Len())
		for i := range l {
			l[i] = rv.Index(i).Interface()
		}
		return normalizeList(l, maxItems)
	}
	return nil, fmt.Errorf("must be a string, number, boolean or a list of them, got %s", typeName(v))
}

func normalizeList(l []any, maxItems int) (any, error) {
	if len(l) > maxItems {
		return nil, fmt.Errorf("must have at most %d items, got %d", maxItems, len(l))
	}
	out := make([]any, len(l))
	for i, e := range l {
		if isList(reflect.ValueOf(e)) {
			return nil, fmt.Errorf("item %d must be a string, number or boolean, got a list", i)
		}
		n, err := NormalizeValue(e, maxItems)
		if err != nil {
			return nil, fmt.Errorf("item %d %w", i, err)
		}
		out[i] = n
	}
	return out, nil
}

func typeName(v any) string {
	if _, ok := v.(map[string]any); ok {
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// IsNumber reports whether v is a number: a Go integer or float (not NaN)
// or a json.Number that ParseNumber reads.
func IsNumber(v any) bool {
	_, ok := numberOf(v)
	return ok
}

// CompareNumbers compares two numbers exactly, also across types (-1, 0 or
// +1, as cmp.Compare). ok is false, and c 0, when either is not a number
// (IsNumber).
func CompareNumbers(a, b any) (c int, ok bool) {
	na, aok := numberOf(a)
	nb, bok := numberOf(b)
	if !aok || !bok {
		return 0, false
	}
	return na.Cmp(nb), true
}

// CloneValue deep-copies the lists and maps of a parameter value; other
// values are returned as they are.
func CloneValue(v any) any {
	switch x := v.(type) {
	case []any:
		if x == nil {
			return x
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = CloneValue(e)
		}
		return out
	case map[string]any:
		if x == nil {
			return x
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = CloneValue(e)
		}
		return out
	}
	return v
}

// EqualValues reports whether two parameter values are the same: numbers by
// value across Go types and json.Number (30 == 30.0), strings and booleans
// exactly, lists (any slice or array) item by item, maps member by member,
// nil only to nil. A NaN equals nothing.
func EqualValues(a, b any) bool {
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
			if !ok || !EqualValues(xv, yv) {
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
			if !EqualValues(ra.Index(i).Interface(), rb.Index(i).Interface()) {
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
// float (not NaN) or a json.Number that ParseNumber reads.
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
		if n, err := ParseNumber(string(x)); err == nil {
			return numberOf(n)
		}
	}
	return nil, false
}
