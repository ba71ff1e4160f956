package margo

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Bounds on what ParseCapabilities accepts. Margo sets none; these keep a
// server that reads untrusted bytes cheap to run, and are far above what a
// real device reports.
const (
	MaxCapabilitiesSize = 256 << 10 // bytes of input, and of the canonical JSON (ETOOLARGE beyond)
	MaxDeviceDepth      = 32        // nesting levels of a capabilities document or status report (EMALFORMED beyond)
	MaxDeviceIDLength   = 256       // a device id (EINVALID beyond)
	MaxPropertyLength   = 256       // vendor, modelNumber, serialNumber, a peripheral's manufacturer and model
	MaxCPUs             = 1024      // entries of properties.cpus
	MaxCoresPerCPU      = 65536     // cores of one properties.cpus entry
	MaxPeripherals      = 256       // entries of properties.peripherals
	MaxInterfaces       = 256       // entries of properties.interfaces
	MaxTypeListLength   = 16        // entries of supportedRuntimes and of supportedDeploymentTypes
	MaxLabels           = 256       // labels
	MaxLabelKeyLength   = 256       // characters of a label key
	MaxLabelValueLength = 1024      // characters of a string label value or of one string item
	MaxLabelItems       = 256       // items of an array label value
)

// Problem types ParseCapabilities returns.
const (
	ProblemInvalidCapabilities   = "invalid-capabilities"   // EINVALID: breaks a rule; Fields lists every problem
	ProblemDeviceIDMismatch      = "device-id-mismatch"     // EINVALID: properties.id is not the device id of the path
	ProblemMalformedCapabilities = "malformed-capabilities" // EMALFORMED: not one well-formed JSON object
	ProblemCapabilitiesTooLarge  = "capabilities-too-large" // ETOOLARGE: beyond MaxCapabilitiesSize
)

var (
	// deviceIDPattern is rc.3's DeviceId: "{id}[/{id}...]", each id RFC 3986
	// unreserved characters.
	deviceIDPattern  = regexp.MustCompile(`^[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*$`)
	extensionPattern = regexp.MustCompile(`^x-[a-z][a-z0-9-]*-extensions$`)
	// quantityPattern is a binary quantity. Margo's CapacityRequirements
	// write "1024Mi"; Margo's own capabilities examples write "64 Gi", so
	// one space before the unit is accepted too.
	quantityPattern = regexp.MustCompile(`^([0-9]+) ?(Ki|Mi|Gi|Ti|Pi|Ei)$`)
)

// The enumerations of rc.3's DeviceCapabilitiesManifest.
var (
	cpuArchitectures = []string{"amd64", "arm64", "arm"}
	peripheralTypes  = []string{"gpu", "display", "camera", "microphone", "speaker"}
	interfaceTypes   = []string{"ethernet", "wifi", "cellular", "bluetooth", "usb", "canbus", "rs232"}
	runtimeTypes     = []string{"oci", "custom"}
	deploymentTypes  = []string{string(ProfileHelm), string(ProfileCompose), string(ProfileCustom)}
	// hostingProperties are the members a workload-hosting device reports
	// and a non-hosting one (a see-thru gateway) omits (rc.3's comment on
	// DeviceCapabilitiesManifest.properties).
	hostingProperties = []string{"cpus", "memory", "storage", "peripherals", "interfaces", "otelCollector", "supportedRuntimes", "supportedDeploymentTypes"}
)

// ValidDeviceID reports whether s is a device id as rc.3's DeviceId pattern
// and MaxDeviceIDLength allow.
func ValidDeviceID(s string) bool {
	return len(s) <= MaxDeviceIDLength && deviceIDPattern.MatchString(s)
}

// Capabilities is a parsed, valid device capabilities document
// (rc.3 DeviceCapabilitiesManifest).
type Capabilities struct {
	DeviceID     string // properties.id
	Vendor       string
	ModelNumber  string
	SerialNumber string
	CPUs         []CPU
	// TotalCores is the sum of the cores of CPUs.
	TotalCores float64
	// Architectures are the distinct architectures of CPUs, in order of
	// first appearance.
	Architectures []string
	// Memory and Storage are as reported ("16Gi"), "" when not reported;
	// MemoryBytes and StorageBytes are the same in bytes.
	Memory, Storage           string
	MemoryBytes, StorageBytes uint64
	Peripherals               []Peripheral
	Interfaces                []CommunicationInterface
	OtelCollector             bool
	// SupportedRuntimes ("oci", "custom") and SupportedDeploymentTypes are
	// as reported, a repeated entry kept once.
	SupportedRuntimes        []string
	SupportedDeploymentTypes []ProfileType
	// Properties is the whole properties object as generic data
	// (map[string]any, []any, string, bool, int64, uint64, float64, nil),
	// members this package does not know included; property selectors
	// evaluate JSON pointers against it.
	Properties map[string]any
	// Labels are the supplier-defined labels: string, number (int64, uint64
	// or float64), bool, or []any of strings or of numbers. Nil when absent.
	Labels map[string]any
	// JSON is the canonical JSON of the whole document: compact, members
	// sorted by name (bytewise), integral numbers written as integers. Two
	// spellings of the same content give the same bytes, and reading JSON
	// back gives the same Capabilities.
	JSON []byte
}

// CPU is one entry of properties.cpus.
type CPU struct {
	Cores        float64
	Architecture string // amd64, arm64, arm; "" when not reported
}

// Peripheral is one entry of properties.peripherals.
type Peripheral struct {
	Type         string // gpu, display, camera, microphone, speaker
	Manufacturer string
	Model        string
}

// CommunicationInterface is one entry of properties.interfaces.
type CommunicationInterface struct {
	Type string // ethernet, wifi, cellular, bluetooth, usb, canbus, rs232
}

// Hosting reports whether the device hosts workloads. Per rc.3, a device
// that does not (a see-thru gateway that only relays the devices behind it)
// omits all of cpus, memory, storage, peripherals, interfaces,
// otelCollector, supportedRuntimes and supportedDeploymentTypes; reporting
// any of them makes it a hosting device.
func (c *Capabilities) Hosting() bool {
	for _, k := range hostingProperties {
		if _, ok := c.Properties[k]; ok {
			return true
		}
	}
	return false
}

// ParseCapabilities reads the body of PUT /api/v1/capabilities/{deviceId}
// from untrusted bytes. pathDeviceID is the {deviceId} of the path.
//
// The document must be rc.3's DeviceCapabilitiesManifest: a JSON object
// with `properties`, optionally `labels`, and nothing else but
// x-<name>-extensions objects. `properties` needs id (rc.3 DeviceId),
// vendor, modelNumber and serialNumber; the workload-hosting members are
// checked against rc.3 (cpus, peripherals, interfaces, otelCollector,
// supportedRuntimes, supportedDeploymentTypes), memory and storage must be
// binary quantities such as "16Gi"; members rc.3 does not name are kept,
// as its schema does not close `properties`. A null member is a value of
// the wrong type, not an absent one.
//
// Returns ETOOLARGE (type "capabilities-too-large") if raw or its canonical
// JSON exceeds MaxCapabilitiesSize, or it has more than MaxNodes values;
// EMALFORMED (type "malformed-capabilities") if raw is not exactly one JSON
// object (RFC 8259, valid UTF-8, no repeated member name) or nests deeper
// than MaxDeviceDepth; EINVALID with every problem in Fields (JSON pointers
// into the document, at most MaxProblems of them) if it breaks a rule:
// type "device-id-mismatch" when properties.id is a valid device id other
// than pathDeviceID (the mismatch is then one of the Fields, at
// /properties/id), type "invalid-capabilities" otherwise.
func ParseCapabilities(raw []byte, pathDeviceID string) (*Capabilities, error) {
	if len(raw) > MaxCapabilitiesSize {
		return nil, &lifecycle.Error{Code: lifecycle.ETOOLARGE, Type: ProblemCapabilitiesTooLarge,
			Message: fmt.Sprintf("the capabilities document is %d bytes; at most %d are accepted", len(raw), MaxCapabilitiesSize)}
	}
	doc, err := readDeviceJSON(raw, ProblemMalformedCapabilities, ProblemCapabilitiesTooLarge)
	if err != nil {
		return nil, err
	}
	c := &checker{}
	caps, mismatch := c.capabilities(doc, pathDeviceID)
	if len(c.fe) > 0 {
		typ, msg := ProblemInvalidCapabilities, fmt.Sprintf("the capabilities document has %d problem(s)", len(c.fe))
		if mismatch {
			typ = ProblemDeviceIDMismatch
			msg = fmt.Sprintf("properties.id %q is not the device id %q of the request path", truncate(caps.DeviceID), truncate(pathDeviceID))
			if len(c.fe) > 1 {
				msg += fmt.Sprintf("; the document has %d problem(s) in all", len(c.fe))
			}
		}
		return nil, deviceProblems(typ, msg, c.fe)
	}
	caps.JSON = appendJSON(nil, doc)
	if len(caps.JSON) > MaxCapabilitiesSize {
		return nil, &lifecycle.Error{Code: lifecycle.ETOOLARGE, Type: ProblemCapabilitiesTooLarge,
			Message: fmt.Sprintf("the capabilities document is %d bytes as canonical JSON; at most %d are accepted", len(caps.JSON), MaxCapabilitiesSize)}
	}
	return caps, nil
}

func (c *checker) capabilities(doc *object, pathDeviceID string) (*Capabilities, bool) {
	caps := &Capabilities{}
	mismatch := false
	for _, k := range doc.keys {
		v := doc.m[k]
		switch {
		case k == "properties":
			if o := c.jsonObject(v, "/properties"); o != nil {
				mismatch = c.properties(o, caps, pathDeviceID)
			}
		case k == "labels":
			if o := c.jsonObject(v, "/labels"); o != nil {
				caps.Labels = c.labels(o)
			}
		case extensionPattern.MatchString(k):
			c.jsonObject(v, ptr("", k))
		default:
			c.add(ptr("", k), "unknown member %q; the top level holds properties, labels and x-<name>-extensions objects only", truncate(k))
		}
	}
	if _, ok := doc.m["properties"]; !ok {
		c.add("/properties", "is required")
	}
	return caps, mismatch
}

// properties reads the properties object into caps and reports whether its
// id is a valid device id other than pathDeviceID.
func (c *checker) properties(o *object, caps *Capabilities, pathDeviceID string) bool {
	const p = "/properties"
	caps.Properties = plain(o).(map[string]any)
	mismatch := false
	if id, ok := c.jsonString(o, p, "id", true, MaxDeviceIDLength); ok {
		switch {
		case !deviceIDPattern.MatchString(id):
			c.add(p+"/id", "must be a device id: one or more /-separated segments of letters, digits, '.', '_', '~' and '-' (^[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*$), got %q", truncate(id))
		case id != pathDeviceID:
			c.add(p+"/id", "must equal the device id of the request path, %q; got %q", truncate(pathDeviceID), truncate(id))
			mismatch = true
		}
		caps.DeviceID = id
	}
	caps.Vendor, _ = c.jsonString(o, p, "vendor", true, MaxPropertyLength)
	caps.ModelNumber, _ = c.jsonString(o, p, "modelNumber", true, MaxPropertyLength)
	caps.SerialNumber, _ = c.jsonString(o, p, "serialNumber", true, MaxPropertyLength)

	for i, v := range c.jsonList(o, p, "cpus", MaxCPUs) {
		ip := idx(p+"/cpus", i)
		co := c.jsonObject(v, ip)
		if co == nil {
			continue
		}
		var cpu CPU
		if cv, ok := co.m["cores"]; !ok {
			c.add(ip+"/cores", "is required")
		} else if f, ok := asFloat(cv); !ok {
			c.add(ip+"/cores", "must be a number, got %s", jsonKindOf(cv))
		} else if f <= 0 || f > MaxCoresPerCPU {
			c.add(ip+"/cores", "must be greater than 0 and at most %d, got %s", MaxCoresPerCPU, formatNumber(cv))
		} else {
			cpu.Cores = f
			caps.TotalCores += f
		}
		if a, ok := c.jsonEnum(co, ip, "architecture", false, cpuArchitectures); ok {
			cpu.Architecture = a
			if !slices.Contains(caps.Architectures, a) {
				caps.Architectures = append(caps.Architectures, a)
			}
		}
		caps.CPUs = append(caps.CPUs, cpu)
	}

	caps.Memory, caps.MemoryBytes = c.quantity(o, p, "memory")
	caps.Storage, caps.StorageBytes = c.quantity(o, p, "storage")

	for i, v := range c.jsonList(o, p, "peripherals", MaxPeripherals) {
		ip := idx(p+"/peripherals", i)
		po := c.jsonObject(v, ip)
		if po == nil {
			continue
		}
		var per Peripheral
		per.Type, _ = c.jsonEnum(po, ip, "type", true, peripheralTypes)
		per.Manufacturer, _ = c.jsonString(po, ip, "manufacturer", false, MaxPropertyLength)
		per.Model, _ = c.jsonString(po, ip, "model", false, MaxPropertyLength)
		caps.Peripherals = append(caps.Peripherals, per)
	}
	for i, v := range c.jsonList(o, p, "interfaces", MaxInterfaces) {
		ip := idx(p+"/interfaces", i)
		io := c.jsonObject(v, ip)
		if io == nil {
			continue
		}
		var ci CommunicationInterface
		ci.Type, _ = c.jsonEnum(io, ip, "type", true, interfaceTypes)
		caps.Interfaces = append(caps.Interfaces, ci)
	}
	if v, ok := o.m["otelCollector"]; ok {
		if b, isBool := v.(bool); isBool {
			caps.OtelCollector = b
		} else {
			c.add(p+"/otelCollector", "must be true or false, got %s", jsonKindOf(v))
		}
	}
	caps.SupportedRuntimes = c.enumList(o, p, "supportedRuntimes", runtimeTypes)
	for _, t := range c.enumList(o, p, "supportedDeploymentTypes", deploymentTypes) {
		caps.SupportedDeploymentTypes = append(caps.SupportedDeploymentTypes, ProfileType(t))
	}
	return mismatch
}

// quantity reads a binary quantity member ("16Gi") as reported and in bytes.
func (c *checker) quantity(o *object, base, k string) (string, uint64) {
	s, ok := c.jsonString(o, base, k, false, 64)
	if !ok {
		return "", 0
	}
	n, msg := parseQuantity(s)
	if msg != "" {
		c.add(ptr(base, k), "%s", msg)
		return "", 0
	}
	return s, n
}

// parseQuantity reads a binary quantity ("1024Mi", "16Gi", "64 Gi") as
// bytes, or says why it cannot.
func parseQuantity(s string) (uint64, string) {
	m := quantityPattern.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Sprintf("must be a whole number of Ki, Mi, Gi, Ti, Pi or Ei bytes such as 512Mi or 16Gi, got %q", truncate(s))
	}
	shift := map[string]uint{"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}[m[2]]
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil || bits.LeadingZeros64(n) < int(shift) {
		return 0, fmt.Sprintf("must be less than 16Ei, got %q", truncate(s))
	}
	return n << shift, ""
}

// enumList reads a list of at least one string from names, each kept once.
func (c *checker) enumList(o *object, base, k string, names []string) []string {
	v, ok := o.m[k]
	if !ok {
		return nil
	}
	p := ptr(base, k)
	l, isList := v.([]any)
	switch {
	case !isList:
		c.add(p, "must be an array, got %s", jsonKindOf(v))
		return nil
	case len(l) == 0:
		c.add(p, "must list at least one of %s", quoteList(names))
		return nil
	case len(l) > MaxTypeListLength:
		c.add(p, "must have at most %d items, got %d", MaxTypeListLength, len(l))
		l = l[:MaxTypeListLength]
	}
	var out []string
	for i, e := range l {
		s, isStr := e.(string)
		switch {
		case !isStr:
			c.add(idx(p, i), "must be one of %s, got %s", quoteList(names), jsonKindOf(e))
		case !slices.Contains(names, s):
			c.add(idx(p, i), "must be one of %s, got %q", quoteList(names), truncate(s))
		case !slices.Contains(out, s):
			out = append(out, s)
		}
	}
	return out
}

// labels checks the labels object and returns it as generic data.
func (c *checker) labels(o *object) map[string]any {
	keys := o.keys
	if len(keys) > MaxLabels {
		c.add("/labels", "must have at most %d labels, got %d", MaxLabels, len(keys))
		keys = keys[:MaxLabels]
	}
	for _, k := range keys {
		p := ptr("/labels", k)
		if n := utf8.RuneCountInString(k); n > MaxLabelKeyLength {
			c.add(p, "label key must be at most %d characters, got %d", MaxLabelKeyLength, n)
			continue
		}
		c.labelValue(o.m[k], p)
	}
	return plain(o).(map[string]any)
}

// labelValue checks one label value: a string, number or boolean, or an
// array of strings or an array of numbers. rc.3 says so with a oneOf whose
// two array branches both match an empty array (so oneOf would refuse it);
// an empty array is accepted, as the evident intent is anyOf.
func (c *checker) labelValue(v any, p string) {
	switch x := v.(type) {
	case string:
		if n := utf8.RuneCountInString(x); n > MaxLabelValueLength {
			c.add(p, "must be at most %d characters, got %d", MaxLabelValueLength, n)
		}
	case bool, int64, uint64, float64:
	case []any:
		if len(x) > MaxLabelItems {
			c.add(p, "must have at most %d items, got %d", MaxLabelItems, len(x))
			return
		}
		var first any
		for i, e := range x {
			switch y := e.(type) {
			case string:
				if n := utf8.RuneCountInString(y); n > MaxLabelValueLength {
					c.add(idx(p, i), "must be at most %d characters, got %d", MaxLabelValueLength, n)
					continue
				}
			case int64, uint64, float64:
			default:
				c.add(idx(p, i), "must be a string or a number, got %s", jsonKindOf(e))
				continue
			}
			if first == nil {
				first = e
			} else if lifecycle.IsNumber(first) != lifecycle.IsNumber(e) {
				c.add(idx(p, i), "must be %s like the first item: a label array holds only strings or only numbers", jsonKindOf(first))
			}
		}
	default:
		c.add(p, "must be a string, number, boolean, or an array of strings or of numbers, got %s", jsonKindOf(v))
	}
}

// --- shared by the device documents (capabilities and status reports) ---

// readDeviceJSON reads a device document: one JSON object, bounded by the
// tree reader's limits and MaxDeviceDepth, canonicalized in place (see
// canonicalize). Errors carry the caller's problem types.
func readDeviceJSON(raw []byte, malformedType, tooLargeType string) (*object, error) {
	doc, err := readJSON(raw)
	if err != nil {
		var e *lifecycle.Error
		if errors.As(err, &e) {
			retyped := *e
			switch e.Code {
			case lifecycle.EMALFORMED:
				retyped.Type = malformedType
			case lifecycle.ETOOLARGE:
				retyped.Type = tooLargeType
			}
			return nil, &retyped
		}
		return nil, err
	}
	if tooDeepAt(doc, 1) {
		return nil, &lifecycle.Error{Code: lifecycle.EMALFORMED, Type: malformedType,
			Message: fmt.Sprintf("the document nests deeper than %d levels", MaxDeviceDepth)}
	}
	// U+0000 is valid JSON but PostgreSQL cannot hold it in text or process
	// it in JSON operators; refused here, it can never wedge what reads the
	// stored document later.
	if hasNUL(doc) {
		return nil, &lifecycle.Error{Code: lifecycle.EMALFORMED, Type: malformedType,
			Message: "the document contains U+0000 (\\u0000), which is not accepted"}
	}
	canonicalize(doc)
	return doc, nil
}

// hasNUL reports whether a key or string anywhere in v contains U+0000.
func hasNUL(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.IndexByte(x, 0) >= 0
	case []any:
		return slices.ContainsFunc(x, hasNUL)
	case *object:
		for _, k := range x.keys {
			if strings.IndexByte(k, 0) >= 0 || hasNUL(x.m[k]) {
				return true
			}
		}
	}
	return false
}

// tooDeepAt reports whether v, at nesting level depth, holds a value deeper
// than MaxDeviceDepth. The reader has already bounded the depth at MaxDepth.
func tooDeepAt(v any, depth int) bool {
	if depth > MaxDeviceDepth {
		return true
	}
	switch x := v.(type) {
	case *object:
		for _, k := range x.keys {
			if tooDeepAt(x.m[k], depth+1) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if tooDeepAt(e, depth+1) {
				return true
			}
		}
	}
	return false
}

// canonicalize sorts the members of every object by name and writes every
// integral float64 that fits as int64 (or uint64), so that 1e3, 1000.0 and
// 1000 are the same value and two spellings of one document give the same
// tree and the same JSON. It is idempotent.
func canonicalize(v any) any {
	switch x := v.(type) {
	case *object:
		slices.Sort(x.keys)
		for _, k := range x.keys {
			x.m[k] = canonicalize(x.m[k])
		}
	case []any:
		for i, e := range x {
			x[i] = canonicalize(e)
		}
	case float64:
		if x != math.Trunc(x) {
			return x
		}
		switch {
		case x >= -(1<<63) && x < 1<<63:
			return int64(x)
		case x >= 0 && x < 1<<64:
			return uint64(x)
		}
	}
	return v
}

// deviceProblems is the EINVALID error of a device document.
func deviceProblems(typ, msg string, problems []lifecycle.FieldError) *lifecycle.Error {
	if len(problems) > MaxProblems {
		msg += fmt.Sprintf("; the first %d are listed", MaxProblems)
		problems = problems[:MaxProblems]
	}
	return &lifecycle.Error{Code: lifecycle.EINVALID, Type: typ, Message: msg, Fields: problems}
}

// jsonKindOf names the JSON type of a tree value for messages about JSON
// documents.
func jsonKindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case int64, uint64, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case *object:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// jsonObject returns v as an object, reporting at p if it is not one.
func (c *checker) jsonObject(v any, p string) *object {
	o, ok := v.(*object)
	if !ok {
		c.add(p, "must be an object, got %s", jsonKindOf(v))
	}
	return o
}

// jsonString returns member k of o as a string of at most max characters.
// Unlike str, null is not absence and a required string may be empty (the
// Margo schemas do not forbid it).
func (c *checker) jsonString(o *object, base, k string, required bool, max int) (string, bool) {
	p := ptr(base, k)
	v, ok := o.m[k]
	if !ok {
		if required {
			c.add(p, "is required")
		}
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		c.add(p, "must be a string, got %s", jsonKindOf(v))
		return "", false
	}
	if n := utf8.RuneCountInString(s); n > max {
		c.add(p, "must be at most %d characters, got %d", max, n)
		return "", false
	}
	return s, true
}

// jsonEnum returns member k of o, a string that must be one of names.
func (c *checker) jsonEnum(o *object, base, k string, required bool, names []string) (string, bool) {
	p := ptr(base, k)
	v, ok := o.m[k]
	if !ok {
		if required {
			c.add(p, "is required")
		}
		return "", false
	}
	s, isStr := v.(string)
	switch {
	case !isStr:
		c.add(p, "must be one of %s, got %s", quoteList(names), jsonKindOf(v))
	case !slices.Contains(names, s):
		c.add(p, "must be one of %s, got %q", quoteList(names), truncate(s))
	default:
		return s, true
	}
	return "", false
}

// jsonList returns member k of o as an array. An array of more than max
// items is reported and its first max items returned, so that their own
// problems are reported too.
func (c *checker) jsonList(o *object, base, k string, max int) []any {
	p := ptr(base, k)
	v, ok := o.m[k]
	if !ok {
		return nil
	}
	l, ok := v.([]any)
	switch {
	case !ok:
		c.add(p, "must be an array, got %s", jsonKindOf(v))
		return nil
	case len(l) > max:
		c.add(p, "must have at most %d items, got %d", max, len(l))
		return l[:max]
	}
	return l
}

// asFloat returns a tree number as float64.
func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// formatNumber writes a tree number for a message.
func formatNumber(v any) string {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

func quoteList(names []string) string {
	out := ""
	for i, n := range names {
		switch {
		case i == 0:
		case i == len(names)-1:
			out += " or "
		default:
			out += ", "
		}
		out += strconv.Quote(n)
	}
	return out
}
