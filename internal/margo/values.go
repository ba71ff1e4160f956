package margo

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// DefaultValues returns the default value of every parameter that declares
// one, by name. The result is a copy the caller may change.
func (d *ApplicationDescription) DefaultValues() map[string]any {
	out := make(map[string]any, len(d.Parameters))
	for name, p := range d.Parameters {
		if p.Value != nil {
			out[name] = lifecycle.CloneValue(p.Value)
		}
	}
	return out
}

// ValidateValues checks parameter values (name → value) given for a
// deployment of this description, and returns every problem (nil if none),
// in name order, each at "/parameters/<name>" (array items at
// "/parameters/<name>/<index>").
//
// Names must be parameters of the description. A value is checked against
// the schema of the parameter's configuration setting: data type (integers
// may arrive as integral floats, as JSON decoders give them), minValue and
// maxValue, minLength and maxLength (in characters), regexMatch (the whole
// value must match; patterns RE2 cannot run are not enforced),
// min/maxPrecision (digits after the decimal point of the shortest decimal
// form), options and multiselect, and allowEmpty (nil, "" and [] are empty;
// an empty value passes only when the schema allows it, and then no other
// rule applies). A parameter without a setting takes any string, number,
// boolean or list of them. Accepted number types: Go integers and floats and
// json.Number. ValidateValues does not report parameters that are missing;
// see MissingValues.
func (d *ApplicationDescription) ValidateValues(values map[string]any) []lifecycle.FieldError {
	var fe []lifecycle.FieldError
	for _, name := range sortedNames(values) {
		p := "/parameters/" + lifecycle.EscapePointer(name)
		if _, ok := d.Parameters[name]; !ok {
			fe = append(fe, lifecycle.FieldError{Pointer: p, Detail: fmt.Sprintf("unknown parameter %q", truncate(name))})
			continue
		}
		v, msg := normalizeValue(values[name])
		if msg != "" {
			fe = append(fe, lifecycle.FieldError{Pointer: p, Detail: msg})
			continue
		}
		s, ok := d.SchemaOf(name)
		if !ok {
			continue
		}
		fe = append(fe, checkValue(s, v, p)...)
	}
	return fe
}

// MissingValues returns a problem for every parameter whose schema does not
// allow empty values and that has no non-empty value in values, which should
// hold the effective values (defaults included). Pointers are
// "/parameters/<name>", in name order.
func (d *ApplicationDescription) MissingValues(values map[string]any) []lifecycle.FieldError {
	var fe []lifecycle.FieldError
	for _, name := range d.ParameterNames() {
		s, ok := d.SchemaOf(name)
		if !ok || s.AllowEmpty {
			continue
		}
		v, _ := normalizeValue(values[name])
		if isEmpty(v) {
			fe = append(fe, lifecycle.FieldError{Pointer: "/parameters/" + lifecycle.EscapePointer(name),
				Detail: fmt.Sprintf("a value is required (schema %q does not allow an empty value)", s.Name)})
		}
	}
	return fe
}

// CheckValues is ValidateValues followed, when complete is true, by
// MissingValues, as one error. Returns EINVALID (type
// "invalid-parameter-values") listing every problem, or nil.
func (d *ApplicationDescription) CheckValues(values map[string]any, complete bool) error {
	fe := d.ValidateValues(values)
	if complete {
		fe = append(fe, d.MissingValues(values)...)
	}
	if len(fe) == 0 {
		return nil
	}
	return &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-parameter-values",
		Message: fmt.Sprintf("%d parameter value problem(s)", len(fe)), Fields: fe}
}

func sortedNames(m map[string]any) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	}
	return false
}

// checkValue checks one normalized value against schema s; p is its pointer.
func checkValue(s Schema, v any, p string) []lifecycle.FieldError {
	var fe []lifecycle.FieldError
	add := func(p, format string, args ...any) {
		fe = append(fe, lifecycle.FieldError{Pointer: p, Detail: fmt.Sprintf(format, args...)})
	}
	if isEmpty(v) {
		if !s.AllowEmpty {
			add(p, "a value is required (schema %q does not allow an empty value)", s.Name)
		}
		return fe
	}
	elem := s.DataType.Elem()
	if s.DataType.IsArray() || s.Multiselect {
		items, ok := v.([]any)
		if !ok {
			add(p, "must be a list of %s values, got %s", elem, kindOf(v))
			return fe
		}
		for i, item := range items {
			ip := idx(p, i)
			if msg := checkScalar(s, elem, item); msg != "" {
				add(ip, "%s", msg)
				continue
			}
			if s.Multiselect && slices.ContainsFunc(items[:i], func(prev any) bool { return lifecycle.EqualValues(prev, item) }) {
				add(ip, "%v is selected twice", item)
			}
		}
		return fe
	}
	if msg := checkScalar(s, elem, v); msg != "" {
		add(p, "%s", msg)
	}
	return fe
}

// checkScalar checks one scalar value (a whole value, or one item of an
// array) against the item rules of s.
func checkScalar(s Schema, elem DataType, v any) string {
	if msg := checkType(elem, v); msg != "" {
		return msg
	}
	if s.Options != nil {
		if !slices.ContainsFunc(s.Options, func(o any) bool { return lifecycle.EqualValues(o, v) }) {
			return fmt.Sprintf("must be one of %s", formatOptions(s.Options))
		}
	}
	switch elem {
	case DataString:
		str := v.(string)
		n := utf8.RuneCountInString(str)
		switch {
		case n > MaxValueStringLength:
			return fmt.Sprintf("must be at most %d characters, got %d", MaxValueStringLength, n)
		case s.MinLength != nil && int64(n) < *s.MinLength:
			return fmt.Sprintf("must be at least %d characters, got %d", *s.MinLength, n)
		case s.MaxLength != nil && int64(n) > *s.MaxLength:
			return fmt.Sprintf("must be at most %d characters, got %d", *s.MaxLength, n)
		}
		if re, ok := s.Regexp(); ok && !re.MatchString(str) {
			return fmt.Sprintf("must match the pattern %s", s.RegexMatch)
		}
	case DataInteger, DataDouble:
		if s.MinValue != nil && compareNumbers(v, s.MinValue) < 0 {
			return fmt.Sprintf("must be at least %v, got %v", s.MinValue, v)
		}
		if s.MaxValue != nil && compareNumbers(v, s.MaxValue) > 0 {
			return fmt.Sprintf("must be at most %v, got %v", s.MaxValue, v)
		}
		if elem == DataDouble {
			dp := int64(decimals(v))
			if s.MaxPrecision != nil && dp > *s.MaxPrecision {
				return fmt.Sprintf("must have at most %d digits after the decimal point, got %v", *s.MaxPrecision, v)
			}
			if s.MinPrecision != nil && dp < *s.MinPrecision {
				return fmt.Sprintf("must have at least %d digits after the decimal point, got %v", *s.MinPrecision, v)
			}
		}
	}
	return ""
}

// checkType returns "" if v has data type t (a scalar type), else why not.
func checkType(t DataType, v any) string {
	ok := false
	switch t {
	case DataString:
		_, ok = v.(string)
	case DataBoolean:
		_, ok = v.(bool)
	case DataDouble:
		switch v.(type) {
		case int64, uint64, float64:
			ok = true
		}
	case DataInteger:
		switch x := v.(type) {
		case int64, uint64:
			ok = true
		case float64:
			ok = x == math.Trunc(x)
		}
	}
	if ok {
		return ""
	}
	return fmt.Sprintf("must be %s, got %s", article(t), describe(v))
}

func article(t DataType) string {
	switch t {
	case DataInteger:
		return "an integer"
	case DataDouble:
		return "a number"
	case DataBoolean:
		return "a boolean"
	}
	return "a string"
}

func describe(v any) string {
	switch x := v.(type) {
	case float64:
		return "the number " + strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return fmt.Sprintf("the string %q", truncate(x))
	}
	return kindOf(v)
}

func formatOptions(opts []any) string {
	parts := make([]string, 0, len(opts))
	for i, o := range opts {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("… (%d options)", len(opts)))
			break
		}
		if s, ok := o.(string); ok {
			parts = append(parts, strconv.Quote(truncate(s)))
		} else {
			parts = append(parts, fmt.Sprint(o))
		}
	}
	return strings.Join(parts, ", ")
}

// decimals returns the number of digits after the decimal point in the
// shortest decimal form of v.
func decimals(v any) int {
	f, ok := v.(float64)
	if !ok {
		return 0
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if _, frac, ok := strings.Cut(s, "."); ok {
		return len(frac)
	}
	return 0
}

// normalizeValue is lifecycle.NormalizeValue with margo's bound on list
// items; the message is "" when v is a parameter value.
func normalizeValue(v any) (any, string) {
	n, err := lifecycle.NormalizeValue(v, MaxValueItems)
	if err != nil {
		return nil, err.Error()
	}
	return n, ""
}

// compareNumbers compares two numbers (callers have checked that both are).
func compareNumbers(a, b any) int {
	c, _ := lifecycle.CompareNumbers(a, b)
	return c
}
