package fleet

import (
	"regexp"
	"strings"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// SelectorOp is the operator of one label requirement.
type SelectorOp string

// Label requirement operators.
const (
	OpEquals    SelectorOp = "="
	OpNotEquals SelectorOp = "!="
	OpExists    SelectorOp = "exists"
	OpNotExists SelectorOp = "!exists"
)

// Requirement is one term of a label selector.
type Requirement struct {
	Key   string
	Op    SelectorOp
	Value string
}

// Selector is a conjunction of label requirements. The store evaluates it
// (postgres selectorSQL; a label value that is not a string compares in its
// JSON text form: 5, true); its tests run selectors through that SQL.
type Selector []Requirement

// Bounds of label selectors and labels.
const (
	MaxSelectorTerms = 20
	MaxLabelKey      = 253
	MaxLabelValue    = 256
	MaxLabels        = 64
)

var labelKey = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?$`)

// ParseSelector reads "k=v,k!=v,k,!k" (terms AND-ed; "==" is read as "=").
// The empty string selects everything.
//
// Returns EINVALID (field "query/labelSelector") for a malformed term, an
// invalid key or value, or more than MaxSelectorTerms terms.
func ParseSelector(s string) (Selector, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	bad := func(msg string) error {
		return &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-request", Message: "The label selector is not valid: " + msg + ".",
			Fields: []lifecycle.FieldError{{Pointer: "query/labelSelector", Detail: msg}}}
	}
	terms := strings.Split(s, ",")
	if len(terms) > MaxSelectorTerms {
		return nil, bad("at most 20 terms")
	}
	var sel Selector
	for _, raw := range terms {
		t := strings.TrimSpace(raw)
		var r Requirement
		switch {
		case t == "":
			return nil, bad("empty term")
		case strings.HasPrefix(t, "!"):
			r = Requirement{Key: strings.TrimSpace(t[1:]), Op: OpNotExists}
		case strings.Contains(t, "!="):
			k, v, _ := strings.Cut(t, "!=")
			r = Requirement{Key: strings.TrimSpace(k), Op: OpNotEquals, Value: strings.TrimSpace(v)}
		case strings.Contains(t, "="):
			k, v, _ := strings.Cut(t, "=")
			v = strings.TrimPrefix(v, "=")
			r = Requirement{Key: strings.TrimSpace(k), Op: OpEquals, Value: strings.TrimSpace(v)}
		default:
			r = Requirement{Key: t, Op: OpExists}
		}
		if len(r.Key) > MaxLabelKey || !labelKey.MatchString(r.Key) {
			return nil, bad("invalid label key " + quote(r.Key))
		}
		if len(r.Value) > MaxLabelValue || strings.ContainsAny(r.Value, "=!,") {
			return nil, bad("invalid label value " + quote(r.Value))
		}
		sel = append(sel, r)
	}
	return sel, nil
}

// ValidateLabels checks operator labels: at most MaxLabels, keys like
// Kubernetes label keys, values at most MaxLabelValue bytes.
//
// Returns EINVALID with a field per bad label (pointer "/labels/<key>").
func ValidateLabels(labels map[string]string) error {
	var fields []lifecycle.FieldError
	if len(labels) > MaxLabels {
		fields = append(fields, lifecycle.FieldError{Pointer: "/labels", Detail: "at most 64 labels"})
	}
	for k, v := range labels {
		p := "/labels/" + lifecycle.EscapePointer(k)
		if len(k) > MaxLabelKey || !labelKey.MatchString(k) {
			fields = append(fields, lifecycle.FieldError{Pointer: p, Detail: "a label key is 1-253 characters of letters, digits, '.', '_', '-', '/' starting and ending with a letter or digit"})
		}
		if len(v) > MaxLabelValue {
			fields = append(fields, lifecycle.FieldError{Pointer: p, Detail: "a label value is at most 256 bytes"})
		}
	}
	if len(fields) > 0 {
		sortFields(fields)
		return &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-request", Message: "The labels are not valid.", Fields: fields}
	}
	return nil
}

func quote(s string) string { return "\"" + s + "\"" }
