package margo

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Problem types ChooseProfile returns.
const (
	ProblemNotPlaceable   = "not-placeable"   // EINVALID: no (or not the named) deployment profile fits the device
	ProblemUnknownProfile = "unknown-profile" // EINVALID: the description has no profile with the requested id
)

// Bounds on the deviceConstraints that placement evaluates. The
// description parser bounds the document as a whole; these keep one
// placement decision cheap.
const (
	MaxEligibilityRules = 64  // entries of eligibilityRules
	MaxMatchExpressions = 64  // entries of one matchExpressions
	MaxSelectorValues   = 256 // entries of one expression's values
)

// The match operators of rc.3's MatchExpression.
const (
	opIn           = "In"
	opNotIn        = "NotIn"
	opExists       = "Exists"
	opDoesNotExist = "DoesNotExist"
	opGt           = "Gt"
	opLt           = "Lt"
	opContainsAll  = "ContainsAll"
	opContainsAny  = "ContainsAny"
)

var (
	matchOperators = []string{opIn, opNotIn, opExists, opDoesNotExist, opGt, opLt, opContainsAll, opContainsAny}
	// profileArchitectures is rc.3's DeploymentCpuRequirement enumeration;
	// devices report only amd64, arm64 and arm, so riscv64 and other never
	// match a device today.
	profileArchitectures = []string{"amd64", "arm64", "arm", "riscv64", "other"}
	jsonNumberPattern    = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)
)

// coresTolerance absorbs the rounding of summing fractional core counts
// (0.7 + 0.1 < 0.8 in float64), so a device is not refused for it.
const coresTolerance = 1e-9

// ChooseProfile decides which deployment profile of d runs on the device
// that caps describes. With profileID set, that profile must exist and fit;
// without, the result is the first profile in description order that fits.
//
// A profile fits when (rc.3 and Margo's device-constraints SUP):
//   - the device hosts workloads and its supportedDeploymentTypes include
//     the profile's type;
//   - its capacityRequirements hold: cpu.cores <= the device's total cores,
//     cpu.architectures (when listed) include one of the device's CPU
//     architectures, memory and storage <= the device's;
//   - its eligibilityRules, when present and not empty, match: the rules
//     are OR-ed (one matching rule is enough), the propertySelector and
//     labelSelector of one rule are AND-ed, and so are the matchExpressions
//     of one selector. See matchExpression for each operator.
//
// deviceConstraints the description parser kept but that break the rules
// compileConstraints checks (an unknown operator, "lots" of memory) make
// the profile not fit: a constraint that cannot be read cannot be honoured.
// A nil caps is a device that reported nothing, and fits nothing.
//
// Returns EINVALID type "unknown-profile" (pointer /profileId) if profileID
// names no profile of d; EINVALID type "not-placeable" if nothing fits,
// with one field per profile considered (pointer /deploymentProfiles/<i>,
// detail the first reason it does not fit, such as "needs 1.5 cores,
// device has 1"); EINTERNAL if d is nil.
func ChooseProfile(d *ApplicationDescription, caps *Capabilities, profileID string) (DeploymentProfile, error) {
	if d == nil {
		return DeploymentProfile{}, lifecycle.Errorf(lifecycle.EINTERNAL, "ChooseProfile: no application description")
	}
	device := "the device"
	if caps != nil {
		device = fmt.Sprintf("device %q", truncate(caps.DeviceID))
	}
	if profileID != "" {
		i := slices.IndexFunc(d.DeploymentProfiles, func(p DeploymentProfile) bool { return p.ID == profileID })
		if i < 0 {
			return DeploymentProfile{}, &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemUnknownProfile,
				Message: fmt.Sprintf("application %q has no deployment profile %q", d.ID, truncate(profileID)),
				Fields:  []lifecycle.FieldError{{Pointer: "/profileId", Detail: fmt.Sprintf("no deployment profile with id %q; the profiles are %s", truncate(profileID), profileIDs(d))}}}
		}
		p := d.DeploymentProfiles[i]
		if why := misfit(p, caps); why != "" {
			return DeploymentProfile{}, &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemNotPlaceable,
				Message: fmt.Sprintf("deployment profile %q of application %q does not fit %s: %s", truncate(p.ID), d.ID, device, why),
				Fields:  []lifecycle.FieldError{{Pointer: idx("/deploymentProfiles", i), Detail: why}}}
		}
		return p, nil
	}
	var fields []lifecycle.FieldError
	for i, p := range d.DeploymentProfiles {
		why := misfit(p, caps)
		if why == "" {
			return p, nil
		}
		fields = append(fields, lifecycle.FieldError{Pointer: idx("/deploymentProfiles", i), Detail: why})
	}
	msg := fmt.Sprintf("no deployment profile of application %q fits %s", d.ID, device)
	if len(d.DeploymentProfiles) == 0 {
		msg = fmt.Sprintf("application %q has no deployment profiles", d.ID)
	}
	return DeploymentProfile{}, &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemNotPlaceable, Message: msg, Fields: fields}
}

func profileIDs(d *ApplicationDescription) string {
	ids := make([]string, 0, len(d.DeploymentProfiles))
	for _, p := range d.DeploymentProfiles {
		ids = append(ids, p.ID)
	}
	return formatList(ids)
}

// misfit returns "" if profile p fits the device, and otherwise the first
// reason it does not.
func misfit(p DeploymentProfile, caps *Capabilities) string {
	switch {
	case caps == nil:
		return fmt.Sprintf("the device has reported no capabilities, profile is %s", p.Type)
	case !caps.Hosting():
		return fmt.Sprintf("the device does not host workloads (it reports no workload-hosting properties), profile is %s", p.Type)
	case len(caps.SupportedDeploymentTypes) == 0:
		return fmt.Sprintf("the device reports no supportedDeploymentTypes, profile is %s", p.Type)
	case !slices.Contains(caps.SupportedDeploymentTypes, p.Type):
		return fmt.Sprintf("device supports %s, profile is %s", formatList(caps.SupportedDeploymentTypes), p.Type)
	}
	if p.DeviceConstraints == nil {
		return ""
	}
	cs, fe := compileConstraints(p.DeviceConstraints)
	if len(fe) > 0 {
		return fmt.Sprintf("deviceConstraints%s %s", fe[0].Pointer, fe[0].Detail)
	}
	if why := cs.capacityMisfit(caps); why != "" {
		return why
	}
	return cs.eligibilityMisfit(caps)
}

// constraints is a profile's deviceConstraints, read and checked.
type constraints struct {
	hasCores bool
	cores    float64
	archs    []string
	memory   *quantityRequirement
	storage  *quantityRequirement
	rules    []rule // nil or empty: no eligibility constraint
}

type quantityRequirement struct {
	bytes uint64
	text  string // as written
}

// rule is one EligibilityRule; a nil selector is absent.
type rule struct {
	property, label *selector
}

type selector struct {
	exprs []*matchExpression
}

// matchExpression is one MatchExpression. Its operators (Margo's
// device-constraints SUP; string comparison exact and case-sensitive,
// numbers compared by value):
//
//   - In: the value equals one of values, or the value is an array of
//     strings or numbers and one of its items equals one of values.
//   - NotIn: the key exists, and neither the value nor any of its items
//     equals one of values. An absent key does not satisfy NotIn.
//   - Exists / DoesNotExist: whether the key resolves, whatever its value
//     (null, an object and an array included).
//   - Gt / Lt: the value is a number (or a string spelling a JSON number)
//     greater / less than the single number in values.
//   - ContainsAll: the value is an array and at least one element satisfies
//     every expression of itemSelector (AND).
//   - ContainsAny: the value is an array and at least one element satisfies
//     at least one expression of itemSelector (OR).
//
// ItemSelector keys are JSON pointers relative to each element. In, NotIn,
// Gt and Lt on an object, on an array holding objects, or on null are
// false, as the SUP says of values it does not define.
//
// So ContainsAll's AND holds on one element: "/peripherals ContainsAll
// {/type In [gpu], /manufacturer In [NVIDIA]}" needs an NVIDIA GPU, not a
// GPU and something else by NVIDIA. And example 2's "/interfaces
// ContainsAll {/type In [ethernet, bluetooth]}" is met by an ethernet or a
// bluetooth interface (In is "one of"); a profile that needs both writes
// two ContainsAll expressions. Opaque gateways evaluate the same rules
// (SUP section 4), so reading them any other way would make the WFM and a
// gateway disagree about where a workload may run.
type matchExpression struct {
	key    string
	tokens []string // the key as a JSON pointer, unescaped; unused for labels
	op     string
	values []any
	bound  any // Gt, Lt: the number to compare with
	items  *selector
}

// --- reading ---

// compileConstraints reads a deployment profile's deviceConstraints (as
// DeploymentProfile.DeviceConstraints holds them) and checks them against
// rc.3's DeviceConstraints and the rules of Margo's device-constraints SUP,
// collecting every problem, each located by a JSON pointer relative to the
// deviceConstraints object ("/capacityRequirements/memory"). Members the
// schema does not name are ignored; a null member counts as absent, as
// elsewhere in descriptions.
func compileConstraints(dc map[string]any) (*constraints, []lifecycle.FieldError) {
	c := &checker{}
	cs := &constraints{}
	if cr, ok := c.genericObject(dc, "", "capacityRequirements"); ok {
		const p = "/capacityRequirements"
		if cpu, ok := c.genericObject(cr, p, "cpu"); ok {
			const cp = p + "/cpu"
			switch v, present := genericMember(cpu, "cores"); {
			case !present:
				c.add(cp+"/cores", "is required")
			default:
				f, isNum := asFloat(v)
				switch {
				case !isNum:
					c.add(cp+"/cores", "must be a number, got %s", genericKind(v))
				case f < 0:
					c.add(cp+"/cores", "must not be negative, got %s", formatNumber(v))
				default:
					cs.hasCores, cs.cores = true, f
				}
			}
			if v, present := genericMember(cpu, "architectures"); present {
				l, isList := v.([]any)
				if !isList {
					c.add(cp+"/architectures", "must be a list, got %s", genericKind(v))
				}
				for i, a := range l {
					s, isStr := a.(string)
					if !isStr || !slices.Contains(profileArchitectures, s) {
						c.add(idx(cp+"/architectures", i), "must be one of %s, got %s", quoteList(profileArchitectures), describeGeneric(a))
						continue
					}
					cs.archs = append(cs.archs, s)
				}
			}
		}
		cs.memory = c.quantityRequirement(cr, p, "memory")
		cs.storage = c.quantityRequirement(cr, p, "storage")
	}
	if v, present := genericMember(dc, "eligibilityRules"); present {
		l, isList := v.([]any)
		switch {
		case !isList:
			c.add("/eligibilityRules", "must be a list, got %s", genericKind(v))
		case len(l) > MaxEligibilityRules:
			c.add("/eligibilityRules", "must have at most %d rules, got %d", MaxEligibilityRules, len(l))
		}
		for i, rv := range l[:min(len(l), MaxEligibilityRules)] {
			p := idx("/eligibilityRules", i)
			ro, isObj := rv.(map[string]any)
			if !isObj {
				c.add(p, "must be a mapping, got %s", genericKind(rv))
				continue
			}
			var r rule
			if so, ok := c.genericObject(ro, p, "propertySelector"); ok {
				r.property = c.selector(so, p+"/propertySelector", false, false)
			}
			if so, ok := c.genericObject(ro, p, "labelSelector"); ok {
				r.label = c.selector(so, p+"/labelSelector", true, false)
			}
			cs.rules = append(cs.rules, r)
		}
	}
	return cs, c.fe
}

func (c *checker) quantityRequirement(o map[string]any, base, k string) *quantityRequirement {
	v, present := genericMember(o, k)
	if !present {
		return nil
	}
	s, isStr := v.(string)
	if !isStr {
		c.add(ptr(base, k), "must be a string such as 512Mi, got %s", genericKind(v))
		return nil
	}
	n, msg := parseQuantity(s)
	if msg != "" {
		c.add(ptr(base, k), "%s", msg)
		return nil
	}
	return &quantityRequirement{bytes: n, text: s}
}

// selector reads a Selector at p. labels: keys are label keys, not JSON
// pointers. items: it is an itemSelector, which needs an expression.
func (c *checker) selector(o map[string]any, p string, labels, items bool) *selector {
	s := &selector{}
	v, present := genericMember(o, "matchExpressions")
	if !present {
		c.add(p+"/matchExpressions", "is required")
		return s
	}
	l, isList := v.([]any)
	switch {
	case !isList:
		c.add(p+"/matchExpressions", "must be a list, got %s", genericKind(v))
	case items && len(l) == 0:
		c.add(p+"/matchExpressions", "must have at least one expression")
	case len(l) > MaxMatchExpressions:
		c.add(p+"/matchExpressions", "must have at most %d expressions, got %d", MaxMatchExpressions, len(l))
		l = l[:MaxMatchExpressions]
	}
	for i, ev := range l {
		ep := idx(p+"/matchExpressions", i)
		eo, isObj := ev.(map[string]any)
		if !isObj {
			c.add(ep, "must be a mapping, got %s", genericKind(ev))
			continue
		}
		if e := c.matchExpression(eo, ep, labels); e != nil {
			s.exprs = append(s.exprs, e)
		}
	}
	return s
}

func (c *checker) matchExpression(o map[string]any, p string, labels bool) *matchExpression {
	e := &matchExpression{}
	ok := true
	switch v, present := genericMember(o, "key"); {
	case !present:
		c.add(p+"/key", "is required")
		ok = false
	default:
		s, isStr := v.(string)
		switch {
		case !isStr:
			c.add(p+"/key", "must be a string, got %s", genericKind(v))
			ok = false
		case utf8.RuneCountInString(s) > MaxPointerLength:
			c.add(p+"/key", "must be at most %d characters, got %d", MaxPointerLength, utf8.RuneCountInString(s))
			ok = false
		case labels:
			e.key = s
		default:
			tokens, valid := parsePointer(s)
			if !valid {
				c.add(p+"/key", "must be a JSON pointer (RFC 6901) such as /vendor, got %q", truncate(s))
				ok = false
			}
			e.key, e.tokens = s, tokens
		}
	}
	switch v, present := genericMember(o, "operator"); {
	case !present:
		c.add(p+"/operator", "is required")
		return nil
	default:
		s, isStr := v.(string)
		if !isStr || !slices.Contains(matchOperators, s) {
			c.add(p+"/operator", "must be one of %s, got %s", quoteList(matchOperators), describeGeneric(v))
			return nil
		}
		e.op = s
	}

	values, hasValues := genericMember(o, "values")
	list, isList := values.([]any)
	if hasValues && !isList {
		c.add(p+"/values", "must be a list, got %s", genericKind(values))
		return nil
	}
	itemSel, hasItems := genericMember(o, "itemSelector")
	contains := e.op == opContainsAll || e.op == opContainsAny
	if hasItems && !contains {
		c.add(p+"/itemSelector", "applies only to ContainsAll and ContainsAny, not %s", e.op)
		ok = false
	}
	switch e.op {
	case opIn, opNotIn:
		if msg := checkSetValues(list); msg != "" {
			c.add(p+"/values", "%s %s", e.op, msg)
			return nil
		}
		e.values = list
	case opGt, opLt:
		if len(list) != 1 {
			c.add(p+"/values", "%s needs exactly one number, got %d values", e.op, len(list))
			return nil
		}
		n, isNum := numericValue(list[0])
		if !isNum {
			c.add(idx(p+"/values", 0), "%s needs a number, got %s", e.op, describeGeneric(list[0]))
			return nil
		}
		e.values, e.bound = list, n
	case opExists, opDoesNotExist, opContainsAll, opContainsAny:
		if len(list) > 0 {
			c.add(p+"/values", "must be omitted for %s", e.op)
			ok = false
		}
	}
	if contains {
		if !hasItems {
			c.add(p+"/itemSelector", "is required for %s", e.op)
			return nil
		}
		so, isObj := itemSel.(map[string]any)
		if !isObj {
			c.add(p+"/itemSelector", "must be a mapping, got %s", genericKind(itemSel))
			return nil
		}
		e.items = c.selector(so, p+"/itemSelector", false, true)
	}
	if !ok {
		return nil
	}
	return e
}

// checkSetValues checks the values of In and NotIn: one or more strings,
// or one or more numbers, or exactly one boolean (the SUP's rule).
func checkSetValues(l []any) string {
	if len(l) == 0 {
		return "needs one or more values"
	}
	if len(l) > MaxSelectorValues {
		return fmt.Sprintf("takes at most %d values, got %d", MaxSelectorValues, len(l))
	}
	for i, v := range l {
		switch v.(type) {
		case string, int64, uint64, float64:
		case bool:
			if len(l) > 1 {
				return "takes a boolean only as its one value"
			}
		default:
			return fmt.Sprintf("values must be strings, numbers or one boolean; item %d is %s", i, genericKind(v))
		}
		if _, isStr := v.(string); isStr != isStringValue(l[0]) {
			return "values must all be strings or all be numbers"
		}
	}
	return ""
}

func isStringValue(v any) bool {
	_, ok := v.(string)
	return ok
}

// numericValue returns v as a number (int64, uint64 or float64) when it is
// one or a string spelling a finite JSON number ("8", "1.5e3").
func numericValue(v any) (any, bool) {
	switch x := v.(type) {
	case int64, uint64, float64:
		return x, true
	case string:
		if len(x) > 64 || !jsonNumberPattern.MatchString(x) {
			return nil, false
		}
		n, err := lifecycle.ParseNumber(x)
		if err != nil {
			return nil, false
		}
		return n, true
	}
	return nil, false
}

// parsePointer splits a JSON pointer (RFC 6901) into unescaped reference
// tokens, and reports whether it is one.
func parsePointer(p string) ([]string, bool) {
	if p == "" {
		return nil, true
	}
	if p[0] != '/' {
		return nil, false
	}
	tokens := strings.Split(p[1:], "/")
	for i, t := range tokens {
		if !strings.Contains(t, "~") {
			continue
		}
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, false
			}
		}
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return tokens, true
}

// resolvePointer follows tokens from v through objects and arrays (array
// indexes as RFC 6901 writes them: 0, or digits without a leading zero).
func resolvePointer(v any, tokens []string) (any, bool) {
	for _, t := range tokens {
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[t]
			if !ok {
				return nil, false
			}
			v = e
		case []any:
			if t == "" || len(t) > 1 && t[0] == '0' {
				return nil, false
			}
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// genericMember returns member k of a description mapping; null is absent.
func genericMember(o map[string]any, k string) (any, bool) {
	v, ok := o[k]
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

// genericObject returns member k of o as a mapping, and whether it is
// present and one.
func (c *checker) genericObject(o map[string]any, base, k string) (map[string]any, bool) {
	v, present := genericMember(o, k)
	if !present {
		return nil, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		c.add(ptr(base, k), "must be a mapping, got %s", genericKind(v))
	}
	return m, ok
}

// genericKind names the type of a generic value.
func genericKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return jsonKindOf(v)
}

// --- evaluating ---

func (cs *constraints) capacityMisfit(caps *Capabilities) string {
	if cs.hasCores && cs.cores > caps.TotalCores+coresTolerance {
		unit := "cores"
		if cs.cores == 1 {
			unit = "core"
		}
		if len(caps.CPUs) == 0 {
			return fmt.Sprintf("needs %s %s, device reports no CPUs", formatFloat(cs.cores), unit)
		}
		return fmt.Sprintf("needs %s %s, device has %s", formatFloat(cs.cores), unit, formatFloat(caps.TotalCores))
	}
	if len(cs.archs) > 0 && !slices.ContainsFunc(cs.archs, func(a string) bool { return slices.Contains(caps.Architectures, a) }) {
		need := "architecture " + cs.archs[0]
		if len(cs.archs) > 1 {
			need = "one of architectures " + formatList(cs.archs)
		}
		if len(caps.Architectures) == 0 {
			return fmt.Sprintf("needs %s, device reports no CPU architecture", need)
		}
		return fmt.Sprintf("needs %s, device has %s", need, formatList(caps.Architectures))
	}
	for _, q := range []struct {
		name string
		need *quantityRequirement
		has  string
		n    uint64
	}{{"memory", cs.memory, caps.Memory, caps.MemoryBytes}, {"storage", cs.storage, caps.Storage, caps.StorageBytes}} {
		switch {
		case q.need == nil:
		case q.has == "":
			return fmt.Sprintf("needs %s %s, device reports none", q.need.text, q.name)
		case q.need.bytes > q.n:
			return fmt.Sprintf("needs %s %s, device has %s", q.need.text, q.name, q.has)
		}
	}
	return ""
}

// eligibilityMisfit returns "" if no rules are given or one matches, and
// otherwise why the first rule does not.
func (cs *constraints) eligibilityMisfit(caps *Capabilities) string {
	if len(cs.rules) == 0 {
		return ""
	}
	first := ""
	for _, r := range cs.rules {
		why := r.misfit(caps)
		if why == "" {
			return ""
		}
		if first == "" {
			first = why
		}
	}
	if len(cs.rules) == 1 {
		return first
	}
	return fmt.Sprintf("matches none of its %d eligibility rules; rule 0: %s", len(cs.rules), first)
}

func (r rule) misfit(caps *Capabilities) string {
	if r.property != nil {
		for _, e := range r.property.exprs {
			v, ok := resolvePointer(caps.Properties, e.tokens)
			if caps.Properties == nil {
				v, ok = nil, false
			}
			if match, why := e.eval(v, ok); !match {
				return fmt.Sprintf("propertySelector %s: %s", e, why)
			}
		}
	}
	if r.label != nil {
		for _, e := range r.label.exprs {
			v, ok := caps.Labels[e.key]
			if match, why := e.eval(v, ok); !match {
				return fmt.Sprintf("labelSelector %s: %s", e, why)
			}
		}
	}
	return ""
}

// String writes the expression for a message: "/vendor In [Acme]".
func (e *matchExpression) String() string {
	key := e.key
	if key == "" {
		key = `""`
	}
	switch e.op {
	case opIn, opNotIn, opGt, opLt:
		return fmt.Sprintf("%s %s %s", key, e.op, formatList(e.values))
	}
	return key + " " + e.op
}

// eval applies the expression to the referenced value v (present says
// whether the key resolved) and says why it does not match.
func (e *matchExpression) eval(v any, present bool) (bool, string) {
	switch e.op {
	case opExists:
		return present, "absent"
	case opDoesNotExist:
		return !present, "present: device has " + describeGeneric(v)
	}
	if !present {
		return false, "absent"
	}
	switch e.op {
	case opIn, opNotIn:
		found, defined := e.contains(v)
		switch {
		case !defined:
			return false, fmt.Sprintf("device has %s, which only ContainsAll and ContainsAny can match", describeGeneric(v))
		case found == (e.op == opIn):
			return true, ""
		}
		return false, "device has " + describeGeneric(v)
	case opGt, opLt:
		n, ok := numericValue(v)
		if !ok {
			return false, fmt.Sprintf("device has %s, not a number", describeGeneric(v))
		}
		cmp := compareNumbers(n, e.bound)
		if (e.op == opGt && cmp > 0) || (e.op == opLt && cmp < 0) {
			return true, ""
		}
		return false, "device has " + describeGeneric(v)
	}
	// ContainsAll, ContainsAny
	l, ok := v.([]any)
	if !ok {
		return false, fmt.Sprintf("device has %s, not an array", describeGeneric(v))
	}
	all := e.op == opContainsAll
	for _, el := range l {
		if e.items.matches(el, all) {
			return true, ""
		}
	}
	parts := make([]string, len(e.items.exprs))
	for i, x := range e.items.exprs {
		parts[i] = x.String()
	}
	join := " and "
	if !all {
		join = " or "
	}
	if len(l) == 0 {
		return false, "device has an empty array"
	}
	return false, "no element matches " + strings.Join(parts, join)
}

// contains reports whether v, or an item of v, equals one of the values,
// and whether In/NotIn are defined for v at all (a scalar, or an array of
// scalars).
func (e *matchExpression) contains(v any) (found, defined bool) {
	eq := func(x any) bool {
		return slices.ContainsFunc(e.values, func(want any) bool { return lifecycle.EqualValues(x, want) })
	}
	switch x := v.(type) {
	case string, bool, int64, uint64, float64:
		return eq(x), true
	case []any:
		for _, item := range x {
			switch item.(type) {
			case string, bool, int64, uint64, float64:
			default:
				return false, false
			}
		}
		return slices.ContainsFunc(x, eq), true
	}
	return false, false
}

// matches reports whether element el satisfies every expression of s (all)
// or at least one (any), keys being pointers relative to el.
func (s *selector) matches(el any, all bool) bool {
	for _, x := range s.exprs {
		v, ok := resolvePointer(el, x.tokens)
		m, _ := x.eval(v, ok)
		if m != all {
			return m
		}
	}
	return all
}

// --- formatting ---

// describeGeneric writes a value of a document for a message.
func describeGeneric(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return formatString(x)
	case int64, uint64, float64:
		return formatNumber(x)
	case bool:
		return strconv.FormatBool(x)
	case []any:
		return formatList(x)
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%v", v)
}

// formatList writes up to 8 items as [a, b, c].
func formatList[T any](items []T) string {
	const max = 8
	parts := make([]string, 0, min(len(items), max)+1)
	for i, it := range items {
		if i == max {
			parts = append(parts, fmt.Sprintf("… %d more", len(items)-max))
			break
		}
		switch x := any(it).(type) {
		case []any:
			parts = append(parts, fmt.Sprintf("a list of %d", len(x)))
		default:
			parts = append(parts, describeGeneric(anyString(it)))
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// anyString turns string-kinded values (ProfileType) into string.
func anyString[T any](v T) any {
	switch x := any(v).(type) {
	case ProfileType:
		return string(x)
	}
	return any(v)
}

// formatString writes s bare when that is unambiguous, quoted otherwise
// (the string "4" is not the number 4).
func formatString(s string) string {
	s = truncate(s)
	if s == "" || strings.TrimSpace(s) != s || strings.ContainsAny(s, `,[]"\`) ||
		s == "true" || s == "false" || s == "null" || jsonNumberPattern.MatchString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

func formatFloat(f float64) string {
	if math.Abs(f) >= 1e21 {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// IdentityProperties are the members of a capabilities document's
// properties that name one device rather than describe what it offers.
var IdentityProperties = []string{"id", "serialNumber"}

// PlacementIgnoresIdentity reports whether every deployment profile of d
// decides whether a device fits without reading its IdentityProperties:
// no property selector of its eligibility rules resolves the whole
// properties object or a pointer into one of them. When it holds, two
// devices whose capabilities differ only in those members fit d's
// profiles alike (the message of a misfit still names the device). False
// when a profile's constraints do not read (ChooseProfile reports those).
func (d *ApplicationDescription) PlacementIgnoresIdentity() bool {
	for _, p := range d.DeploymentProfiles {
		if p.DeviceConstraints == nil {
			continue
		}
		cs, fe := compileConstraints(p.DeviceConstraints)
		if len(fe) > 0 {
			return false
		}
		for _, r := range cs.rules {
			if r.property == nil {
				continue
			}
			for _, e := range r.property.exprs {
				if len(e.tokens) == 0 || slices.Contains(IdentityProperties, e.tokens[0]) {
					return false
				}
			}
		}
	}
	return true
}
