package margo

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

var (
	idPattern        = regexp.MustCompile(`^[a-z0-9-]{1,200}$`)
	componentPattern = regexp.MustCompile(`^[a-z0-9-]{1,200}$`)
)

// checker collects every problem of a document, each at its JSON pointer.
type checker struct {
	fe []lifecycle.FieldError
	// stored reads a description stored earlier: a duration outside its
	// range (lifecycle.DurationRangeOf) is replaced by the value used
	// instead and recorded in subs, rather than refused.
	stored bool
	subs   []lifecycle.Substitution
}

func (c *checker) add(p, format string, args ...any) {
	c.fe = append(c.fe, lifecycle.FieldError{Pointer: p, Detail: fmt.Sprintf(format, args...)})
}

func ptr(base, token string) string { return base + "/" + lifecycle.EscapePointer(token) }

func idx(base string, i int) string { return base + "/" + strconv.Itoa(i) }

// kindOf names the JSON type of a tree value for messages.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case int64, uint64:
		return "an integer"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	case *object:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

// member returns o's member k; a null member counts as absent, so `drain:`
// with nothing after it means the same as no drain at all.
func member(o *object, k string) (any, bool) {
	v, ok := o.m[k]
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

// obj returns v as a mapping, reporting at p if it is not one.
func (c *checker) obj(v any, p string) *object {
	o, ok := v.(*object)
	if !ok {
		c.add(p, "must be a mapping, got %s", kindOf(v))
	}
	return o
}

// objAt returns member k of o as a mapping, nil if absent or wrong.
func (c *checker) objAt(o *object, base, k string, required bool) *object {
	v, ok := member(o, k)
	if !ok {
		if required {
			c.add(ptr(base, k), "is required")
		}
		return nil
	}
	return c.obj(v, ptr(base, k))
}

// str returns member k of o as a string of at most max characters.
// A required string must be present and not empty.
func (c *checker) str(o *object, base, k string, required bool, max int) (string, bool) {
	p := ptr(base, k)
	v, ok := member(o, k)
	if !ok {
		if required {
			c.add(p, "is required")
		}
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		c.add(p, "must be a string, got %s", kindOf(v))
		return "", false
	}
	if required && s == "" {
		c.add(p, "must not be empty")
		return "", false
	}
	if n := utf8.RuneCountInString(s); n > max {
		c.add(p, "must be at most %d characters, got %d", max, n)
		return "", false
	}
	return s, true
}

// boolean returns member k of o as a bool, and whether it was present and
// valid.
func (c *checker) boolean(o *object, base, k string) (bool, bool) {
	v, ok := member(o, k)
	if !ok {
		return false, false
	}
	b, ok := v.(bool)
	if !ok {
		c.add(ptr(base, k), "must be true or false, got %s", kindOf(v))
		return false, false
	}
	return b, true
}

// list returns member k of o as a list; a required list must be present and
// not empty. A list of more than max items is reported and its first max
// items returned, so that their own problems are reported too and a long
// list does not also break every reference into it.
func (c *checker) list(o *object, base, k string, required bool, max int) []any {
	p := ptr(base, k)
	v, ok := member(o, k)
	if !ok {
		if required {
			c.add(p, "is required")
		}
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		c.add(p, "must be a list, got %s", kindOf(v))
		return nil
	}
	if required && len(l) == 0 {
		c.add(p, "must not be empty")
		return nil
	}
	if len(l) > max {
		c.add(p, "must have at most %d items, got %d", max, len(l))
		return l[:max]
	}
	return l
}

// integer returns member k of o as an int64, nil if absent or invalid.
func (c *checker) integer(o *object, base, k string, nonNegative bool) *int64 {
	v, ok := member(o, k)
	if !ok {
		return nil
	}
	p := ptr(base, k)
	i, ok := asInt64(v)
	if !ok {
		c.add(p, "must be an integer, got %s", kindOf(v))
		return nil
	}
	if nonNegative && i < 0 {
		c.add(p, "must not be negative, got %d", i)
		return nil
	}
	return &i
}

func isList(v any) bool {
	_, ok := v.([]any)
	return ok
}

func asInt64(v any) (int64, bool) {
	i, ok := v.(int64)
	return i, ok
}

// known reports members of o that are not in names, for sections where a
// typo must not pass silently.
func (c *checker) known(o *object, base string, names ...string) {
	for _, k := range o.keys {
		found := false
		for _, n := range names {
			if k == n {
				found = true
				break
			}
		}
		if !found {
			c.add(ptr(base, k), "unknown member %q; known members are %s", k, strings.Join(names, ", "))
		}
	}
}

// validate reads the typed description from the document tree and returns it
// with every problem found. Members are visited in a fixed order (the order
// of the Margo data model), so the problem list is deterministic.
func validate(doc *object, stored bool) (*ApplicationDescription, []lifecycle.FieldError) {
	c := &checker{stored: stored}
	d := &ApplicationDescription{}

	if s, ok := c.str(doc, "", "apiVersion", true, MaxNameLength); ok {
		if s != APIVersion {
			c.add("/apiVersion", "must be %q, got %q", APIVersion, s)
		}
		d.APIVersion = s
	}
	if s, ok := c.str(doc, "", "id", true, MaxTextLength); ok {
		if !idPattern.MatchString(s) {
			c.add("/id", "must be 1 to 200 lowercase letters, digits and dashes (^[a-z0-9-]{1,200}$), got %q", truncate(s))
		}
		d.ID = s
	}
	// `kind` (older shape) is tolerated and ignored; it stays in the JSON.

	if m := c.objAt(doc, "", "metadata", true); m != nil {
		d.Metadata.Name, _ = c.str(m, "/metadata", "name", true, MaxNameLength)
		d.Metadata.Description, _ = c.str(m, "/metadata", "description", false, MaxTextLength)
		d.Metadata.Version, d.Version = c.version(m, "/metadata", "version", true)
		if cat := c.objAt(m, "/metadata", "catalog", false); cat != nil {
			d.Metadata.Catalog = plain(cat).(map[string]any)
		}
	}

	components := c.profiles(doc, d)
	params := c.parameters(doc, d, components)
	c.configuration(doc, d, params)
	c.lifecycle(doc, d, params)
	return d, c.fe
}

// version reads a version string member. YAML reads unquoted 1.10 as the
// number 1.1, so numbers are refused with a hint rather than converted.
func (c *checker) version(o *object, base, k string, required bool) (string, lifecycle.Version) {
	p := ptr(base, k)
	v, ok := member(o, k)
	if !ok {
		if required {
			c.add(p, "is required")
		}
		return "", lifecycle.Version{}
	}
	s, ok := v.(string)
	if !ok {
		if _, num := v.(float64); num {
			c.add(p, "must be a string, got a number; quote it (\"1.10\"): YAML reads unquoted 1.10 as the number 1.1")
		} else {
			c.add(p, "must be a string, got %s; quote it", kindOf(v))
		}
		return "", lifecycle.Version{}
	}
	ver, err := lifecycle.ParseVersion(s)
	if err != nil {
		var le *lifecycle.Error
		if errors.As(err, &le) {
			c.add(p, "%s", le.Message)
		} else {
			c.add(p, "%s", err)
		}
		return truncate(s), lifecycle.Version{}
	}
	return s, ver
}

// truncate shortens s for quoting in a message.
func truncate(s string) string {
	const max = 64
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max]) + "…"
}

// profiles reads deploymentProfiles and returns the set of all component
// names, which parameter targets refer to.
func (c *checker) profiles(doc *object, d *ApplicationDescription) *names {
	components := newNames()
	profileIDs := map[string]string{} // id -> pointer of its first use
	list := c.list(doc, "", "deploymentProfiles", true, MaxProfiles)
	if len(list) == 0 || c.truncated(doc, "deploymentProfiles", MaxProfiles) {
		components.complete = false
	}
	for i, v := range list {
		p := idx("/deploymentProfiles", i)
		o := c.obj(v, p)
		if o == nil {
			components.complete = false
			continue
		}
		var dp DeploymentProfile
		if t, ok := c.str(o, p, "type", true, MaxNameLength); ok {
			switch ProfileType(t) {
			case ProfileHelm, ProfileCompose, ProfileCustom:
			case "helm.v3":
				c.add(p+"/type", "unknown deployment profile type %q: the current Margo spelling is \"helm\"", t)
			default:
				c.add(p+"/type", "unknown deployment profile type %q; known types are helm, compose and custom", truncate(t))
			}
			dp.Type = ProfileType(t)
		}
		if id, ok := c.str(o, p, "id", true, MaxNameLength); ok {
			if first, dup := profileIDs[id]; dup {
				c.add(p+"/id", "duplicate deployment profile id %q (first used at %s)", truncate(id), first)
			} else {
				profileIDs[id] = p + "/id"
			}
			dp.ID = id
		}
		dp.Description, _ = c.str(o, p, "description", false, MaxTextLength)
		seen := map[string]string{}
		comps := c.list(o, p, "components", true, MaxComponents)
		if len(comps) == 0 || c.truncated(o, "components", MaxComponents) {
			components.complete = false
		}
		for j, cv := range comps {
			cp := idx(p+"/components", j)
			co := c.obj(cv, cp)
			if co == nil {
				components.complete = false
				continue
			}
			var comp Component
			n, ok := c.str(co, cp, "name", true, MaxTextLength)
			if ok {
				switch {
				case !componentPattern.MatchString(n):
					c.add(cp+"/name", "must be 1 to 200 lowercase letters, digits and dashes, got %q", truncate(n))
				case seen[n] != "":
					c.add(cp+"/name", "duplicate component name %q in this profile (first used at %s)", n, seen[n])
				default:
					seen[n] = cp + "/name"
				}
				comp.Name = n
			}
			if ok {
				components.set[n] = true
			}
			if !ok || !componentPattern.MatchString(n) {
				components.complete = false
			}
			if props := c.objAt(co, cp, "properties", false); props != nil {
				c.componentProperties(props, cp+"/properties")
				comp.Properties = plain(props).(map[string]any)
			}
			dp.Components = append(dp.Components, comp)
		}
		if dc := c.objAt(o, p, "deviceConstraints", false); dc != nil {
			dp.DeviceConstraints = plain(dc).(map[string]any)
		}
		d.DeploymentProfiles = append(d.DeploymentProfiles, dp)
	}
	return components
}

// componentProperties checks the types of the properties the Margo data
// model names; others are kept as they are.
func (c *checker) componentProperties(o *object, p string) {
	for _, k := range []string{"repository", "revision", "timeout", "packageLocation", "keyLocation"} {
		v, ok := member(o, k)
		if !ok {
			continue
		}
		if _, isStr := v.(string); !isStr {
			if k == "revision" {
				c.add(ptr(p, k), "must be a string, got %s; quote it (\"1.0\"): YAML reads unquoted 1.0 as a number", kindOf(v))
			} else {
				c.add(ptr(p, k), "must be a string, got %s", kindOf(v))
			}
		}
	}
	c.boolean(o, p, "wait")
}

// parameters reads the parameters and returns the set of their names.
func (c *checker) parameters(doc *object, d *ApplicationDescription, components *names) *names {
	params := newNames()
	po := c.objAt(doc, "", "parameters", false)
	if po == nil {
		_, present := member(doc, "parameters")
		params.complete = !present
		return params
	}
	keys := po.keys
	if len(keys) > MaxParameters {
		c.add("/parameters", "must have at most %d parameters, got %d", MaxParameters, len(keys))
		keys = keys[:MaxParameters]
		params.complete = false
	}
	d.Parameters = make(map[string]Parameter, len(keys))
	for _, name := range keys {
		p := ptr("/parameters", name)
		switch n := utf8.RuneCountInString(name); {
		case n == 0:
			c.add(p, "parameter name must not be empty")
		case n > MaxNameLength:
			c.add(p, "parameter name must be at most %d characters, got %d", MaxNameLength, n)
		}
		params.set[name] = true
		o := c.obj(po.m[name], p)
		if o == nil {
			continue
		}
		var par Parameter
		if v, ok := member(o, "value"); ok {
			if c.plainValue(v, p+"/value") {
				par.Value = plain(v)
			}
		}
		for i, tv := range c.list(o, p, "targets", true, MaxTargets) {
			tp := idx(p+"/targets", i)
			to := c.obj(tv, tp)
			if to == nil {
				continue
			}
			var t Target
			t.Pointer, _ = c.str(to, tp, "pointer", true, MaxPointerLength)
			for j, cv := range c.list(to, tp, "components", true, MaxTargetComponents) {
				cp := idx(tp+"/components", j)
				s, ok := cv.(string)
				switch {
				case !ok:
					c.add(cp, "must be a string, got %s", kindOf(cv))
				case components.unknown(s):
					c.add(cp, "no deployment profile has a component named %q", truncate(s))
				default:
					t.Components = append(t.Components, s)
				}
			}
			par.Targets = append(par.Targets, t)
		}
		d.Parameters[name] = par
	}
	return params
}

// names is a set of defined names that references are checked against.
// When the part of the document that defines them is itself broken, the set
// is incomplete and references into it are not checked: one mistake, one
// problem.
type names struct {
	set      map[string]bool
	complete bool
}

func newNames() *names { return &names{set: map[string]bool{}, complete: true} }

// unknown reports whether n is known not to be defined.
func (s *names) unknown(n string) bool { return s.complete && !s.set[n] }

// truncated reports whether list member k of o has more than max items.
func (c *checker) truncated(o *object, k string, max int) bool {
	l, ok := o.m[k].([]any)
	return ok && len(l) > max
}

// plainValue checks that a default value is a scalar or a list of scalars,
// the value types of the Margo data model.
func (c *checker) plainValue(v any, p string) bool {
	switch x := v.(type) {
	case *object:
		c.add(p, "must be a string, number, boolean or a list of them, got a mapping")
		return false
	case []any:
		if len(x) > MaxValueItems {
			c.add(p, "must have at most %d items, got %d", MaxValueItems, len(x))
			return false
		}
		ok := true
		for i, e := range x {
			switch e.(type) {
			case *object, []any:
				c.add(idx(p, i), "must be a string, number or boolean, got %s", kindOf(e))
				ok = false
			}
		}
		return ok
	}
	return true
}

// configuration reads the configuration: schemas first, because settings
// refer to them.
func (c *checker) configuration(doc *object, d *ApplicationDescription, params *names) {
	co := c.objAt(doc, "", "configuration", false)
	if co == nil {
		return
	}
	validSchema := map[string]bool{} // name -> schema itself is valid
	schemaAt := map[string]string{}
	schemas := newNames()
	if raw, ok := member(co, "schema"); ok && (!isList(raw) || c.truncated(co, "schema", MaxSchemas)) {
		schemas.complete = false
	}
	for i, v := range c.list(co, "/configuration", "schema", false, MaxSchemas) {
		p := idx("/configuration/schema", i)
		o := c.obj(v, p)
		if o == nil {
			schemas.complete = false
			continue
		}
		before := len(c.fe)
		s := c.schema(o, p)
		if s.Name == "" {
			schemas.complete = false
		} else {
			schemas.set[s.Name] = true
		}
		if s.Name != "" {
			if first, dup := schemaAt[s.Name]; dup {
				c.add(p+"/name", "duplicate schema name %q (first used at %s)", truncate(s.Name), first)
				continue
			}
			schemaAt[s.Name] = p + "/name"
			validSchema[s.Name] = len(c.fe) == before
		}
		d.Configuration.Schema = append(d.Configuration.Schema, s)
	}
	if _, ok := member(co, "schema"); !ok {
		c.add("/configuration/schema", "is required")
		schemas.complete = false
	}

	settingAt := map[string]string{} // parameter -> pointer of its setting
	for i, v := range c.list(co, "/configuration", "sections", false, MaxSections) {
		p := idx("/configuration/sections", i)
		o := c.obj(v, p)
		if o == nil {
			continue
		}
		var sec Section
		sec.Name, _ = c.str(o, p, "name", true, MaxNameLength)
		settings := c.list(o, p, "settings", false, MaxSettings)
		if _, ok := member(o, "settings"); !ok {
			c.add(p+"/settings", "is required")
		}
		for j, sv := range settings {
			sp := idx(p+"/settings", j)
			so := c.obj(sv, sp)
			if so == nil {
				continue
			}
			var st Setting
			if name, ok := c.str(so, sp, "parameter", true, MaxNameLength); ok {
				switch {
				case params.unknown(name):
					c.add(sp+"/parameter", "no parameter named %q", truncate(name))
				case settingAt[name] != "":
					c.add(sp+"/parameter", "parameter %q already has a setting at %s", name, settingAt[name])
				default:
					settingAt[name] = sp
				}
				st.Parameter = name
			}
			st.Name, _ = c.str(so, sp, "name", true, MaxNameLength)
			st.Description, _ = c.str(so, sp, "description", false, MaxTextLength)
			st.Immutable, _ = c.boolean(so, sp, "immutable")
			if name, ok := c.str(so, sp, "schema", true, MaxNameLength); ok {
				if schemas.unknown(name) {
					c.add(sp+"/schema", "no schema named %q", truncate(name))
				}
				st.Schema = name
			}
			sec.Settings = append(sec.Settings, st)
		}
		d.Configuration.Sections = append(d.Configuration.Sections, sec)
	}
	if _, ok := member(co, "sections"); !ok {
		c.add("/configuration/sections", "is required")
	}

	// Defaults must satisfy their own schema; a schema with problems of
	// its own is not used, so one mistake is reported once.
	for _, name := range orderedKeys(doc, "parameters") {
		par, ok := d.Parameters[name]
		if !ok || par.Value == nil {
			continue
		}
		st, ok := d.Setting(name)
		if !ok || !validSchema[st.Schema] || settingAt[name] == "" {
			continue
		}
		s, _ := d.Schema(st.Schema)
		c.fe = append(c.fe, checkValue(s, par.Value, ptr("/parameters", name)+"/value")...)
	}
}

// orderedKeys returns the member names of doc's mapping member k in
// document order.
func orderedKeys(doc *object, k string) []string {
	if o, ok := doc.m[k].(*object); ok {
		return o.keys
	}
	return nil
}

// schema reads one validator schema and checks it is consistent.
func (c *checker) schema(o *object, p string) Schema {
	var s Schema
	s.Name, _ = c.str(o, p, "name", true, MaxNameLength)
	if t, ok := c.str(o, p, "dataType", true, MaxNameLength); ok {
		if !DataType(t).Valid() {
			c.add(p+"/dataType", "unknown data type %q; known types are string, integer, double, boolean, array[string], array[integer], array[double] and array[boolean]", truncate(t))
		} else {
			s.DataType = DataType(t)
		}
	}
	elem := s.DataType.Elem()
	s.AllowEmpty, _ = c.boolean(o, p, "allowEmpty")

	only := func(k string, types ...DataType) bool {
		if _, present := member(o, k); !present || s.DataType == "" {
			return present
		}
		for _, t := range types {
			if elem == t {
				return true
			}
		}
		c.add(ptr(p, k), "does not apply to %s schemas", s.DataType)
		return false
	}

	// string
	if only("minLength", DataString) {
		s.MinLength = c.integer(o, p, "minLength", true)
	}
	if only("maxLength", DataString) {
		s.MaxLength = c.integer(o, p, "maxLength", true)
	}
	if s.MinLength != nil && s.MaxLength != nil && *s.MinLength > *s.MaxLength {
		c.add(p+"/minLength", "must not be greater than maxLength (%d > %d)", *s.MinLength, *s.MaxLength)
	}
	if only("regexMatch", DataString) {
		if re, ok := c.str(o, p, "regexMatch", false, MaxRegexLength); ok {
			if msg := checkRegex(re); msg != "" {
				c.add(p+"/regexMatch", "%s", msg)
			} else {
				s.RegexMatch = re
			}
		}
	}

	// numbers
	if only("minValue", DataInteger, DataDouble) {
		s.MinValue = c.bound(o, p, "minValue", elem)
	}
	if only("maxValue", DataInteger, DataDouble) {
		s.MaxValue = c.bound(o, p, "maxValue", elem)
	}
	if s.MinValue != nil && s.MaxValue != nil && compareNumbers(s.MinValue, s.MaxValue) > 0 {
		c.add(p+"/minValue", "must not be greater than maxValue (%v > %v)", s.MinValue, s.MaxValue)
	}
	if only("minPrecision", DataDouble) {
		s.MinPrecision = c.integer(o, p, "minPrecision", true)
	}
	if only("maxPrecision", DataDouble) {
		s.MaxPrecision = c.integer(o, p, "maxPrecision", true)
	}
	if s.MinPrecision != nil && s.MaxPrecision != nil && *s.MinPrecision > *s.MaxPrecision {
		c.add(p+"/minPrecision", "must not be greater than maxPrecision (%d > %d)", *s.MinPrecision, *s.MaxPrecision)
	}

	// select
	if _, ok := member(o, "options"); ok {
		opts := c.list(o, p, "options", true, MaxOptions)
		for i, ov := range opts {
			op := idx(p+"/options", i)
			if s.DataType != "" {
				if msg := checkType(elem, ov); msg != "" {
					c.add(op, "%s", msg)
					continue
				}
			} else if _, isObj := ov.(*object); isObj || isList(ov) {
				c.add(op, "must be a string, number or boolean, got %s", kindOf(ov))
				continue
			}
			for _, prev := range s.Options {
				if lifecycle.EqualValues(prev, ov) {
					c.add(op, "option %v is listed twice", ov)
					break
				}
			}
			s.Options = append(s.Options, ov)
		}
		if len(opts) == 0 {
			s.Options = nil
		}
	}
	if ms, ok := c.boolean(o, p, "multiselect"); ok {
		if ms && s.Options == nil {
			if _, has := member(o, "options"); !has {
				c.add(p+"/multiselect", "needs options to select from")
			}
		}
		s.Multiselect = ms
	}
	return s
}

// bound reads minValue or maxValue: an integer for integer schemas, any
// number for double schemas.
func (c *checker) bound(o *object, p, k string, elem DataType) any {
	v, ok := member(o, k)
	if !ok {
		return nil
	}
	switch x := v.(type) {
	case int64:
		return x
	case uint64:
		if elem == DataInteger {
			c.add(ptr(p, k), "is out of range for an integer")
			return nil
		}
		return float64(x)
	case float64:
		if elem == DataInteger {
			c.add(ptr(p, k), "must be an integer, got %v", x)
			return nil
		}
		return x
	}
	c.add(ptr(p, k), "must be a number, got %s", kindOf(v))
	return nil
}

// lifecycle reads the wfm lifecycle section. Unlike the rest of the
// description, it refuses unknown members, so a misspelt policy
// (minUpgradeFom) cannot silently mean "no policy".
func (c *checker) lifecycle(doc *object, d *ApplicationDescription, params *names) {
	lo := c.objAt(doc, "", "lifecycle", false)
	if lo == nil {
		return
	}
	const base = "/lifecycle"
	c.known(lo, base, "upgrade", "rollback", "parameters")
	var l lifecycle.Lifecycle

	if uo := c.objAt(lo, base, "upgrade", false); uo != nil {
		p := base + "/upgrade"
		c.known(uo, p, "minUpgradeFrom", "drain", "strategies")
		if _, v := c.version(uo, p, "minUpgradeFrom", false); !v.IsZero() {
			l.Upgrade.MinUpgradeFrom = &v
		}
		if do := c.objAt(uo, p, "drain", false); do != nil {
			dp := p + "/drain"
			c.known(do, dp, "required", "timeout", "onTimeout")
			drain := lifecycle.DrainPolicy{Required: true, Timeout: lifecycle.DefaultDrainTimeout, OnTimeout: lifecycle.OnTimeoutAbort}
			if r, ok := c.boolean(do, dp, "required"); ok {
				drain.Required = r
			}
			if t, ok := c.duration(do, dp, "timeout", lifecycle.DurationDrainTimeout); ok {
				drain.Timeout = t
			}
			if s, ok := c.str(do, dp, "onTimeout", false, MaxNameLength); ok {
				if s == "" {
					c.add(dp+"/onTimeout", "must be %q or %q, got \"\"", lifecycle.OnTimeoutAbort, lifecycle.OnTimeoutProceed)
				} else {
					drain.OnTimeout = lifecycle.OnTimeout(s)
				}
			}
			l.Upgrade.Drain = &drain
		}
		if raw, ok := member(uo, "strategies"); ok {
			if items, isList := raw.([]any); isList && len(items) == 0 {
				c.add(p+"/strategies", "must list at least one strategy (omit it for [recreate])")
			}
		}
		var strategies []lifecycle.Strategy
		allStrings := true
		for i, sv := range c.list(uo, p, "strategies", false, MaxStrategies) {
			s, ok := sv.(string)
			if !ok {
				c.add(idx(p+"/strategies", i), "must be a string, got %s", kindOf(sv))
				allStrings = false
				continue
			}
			strategies = append(strategies, lifecycle.Strategy(s))
		}
		if allStrings {
			// Only a list of strings keeps its indexes, which Validate's
			// pointers refer to.
			l.Upgrade.Strategies = strategies
		}
	}

	if ro := c.objAt(lo, base, "rollback", false); ro != nil {
		p := base + "/rollback"
		c.known(ro, p, "allowed", "minVersion", "window", "reason")
		l.Rollback.Allowed, _ = c.boolean(ro, p, "allowed")
		if _, v := c.version(ro, p, "minVersion", false); !v.IsZero() {
			l.Rollback.MinVersion = &v
		}
		if w, ok := c.duration(ro, p, "window", lifecycle.DurationRollbackWindow); ok {
			l.Rollback.Window = w
		}
		l.Rollback.Reason, _ = c.str(ro, p, "reason", false, lifecycle.MaxReasonLength)
	}

	if po := c.objAt(lo, base, "parameters", false); po != nil {
		p := base + "/parameters"
		if len(po.keys) > MaxParameters {
			c.add(p, "must have at most %d parameters, got %d", MaxParameters, len(po.keys))
		} else {
			l.Parameters = make(map[string]lifecycle.ParameterPolicy, len(po.keys))
			for _, name := range po.keys {
				pp := ptr(p, name)
				if params.unknown(name) {
					c.add(pp, "no parameter named %q", truncate(name))
					continue
				}
				var pol lifecycle.ParameterPolicy
				if po.m[name] == nil { // `greeting:` alone: the defaults
					l.Parameters[name] = pol
					continue
				}
				o := c.obj(po.m[name], pp)
				if o == nil {
					continue
				}
				c.known(o, pp, "onUpgrade")
				if s, ok := c.str(o, pp, "onUpgrade", false, MaxNameLength); ok {
					if s == "" {
						c.add(pp+"/onUpgrade", "must be %q or %q, got \"\"", lifecycle.OnUpgradeKeep, lifecycle.OnUpgradeReset)
					}
					pol.OnUpgrade = lifecycle.OnUpgrade(s)
				}
				l.Parameters[name] = pol
			}
		}
	}

	// The policy rules (versions lower than this one, known enumerations,
	// no repeated strategy) belong to the lifecycle package.
	for _, f := range l.Validate(d.Version) {
		c.add(base+f.Pointer, "%s", f.Detail)
	}
	for _, sub := range c.subs {
		sub.Pointer = strings.TrimPrefix(sub.Pointer, base)
		l.Substitutions = append(l.Substitutions, sub)
	}
	d.Lifecycle = l
}

// duration reads a Go duration string (90s, 10m, 72h) that must be within
// field's range. Reading a stored description, a value outside the range is
// replaced by the one used instead, and recorded.
func (c *checker) duration(o *object, base, k string, field lifecycle.DurationField) (time.Duration, bool) {
	v, ok := member(o, k)
	if !ok {
		return 0, false
	}
	p := ptr(base, k)
	s, ok := v.(string)
	if !ok {
		c.add(p, "must be a duration such as 90s, 10m or 72h, got %s", kindOf(v))
		return 0, false
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		c.add(p, "must be a duration such as 90s, 10m or 72h, got %q", truncate(s))
		return 0, false
	}
	if c.stored {
		if sub, out := lifecycle.Substitute(field, dur, s, p); out {
			c.subs = append(c.subs, sub)
			return sub.Used, true
		}
		return dur, true
	}
	if r := lifecycle.DurationRangeOf(field); !r.Contains(dur) {
		c.add(p, "must be a duration %s, got %q", r, s)
		return 0, false
	}
	return dur, true
}
