package margo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Bounds on what ParseStatusReport accepts (MaxDeviceDepth and
// MaxDeviceIDLength apply too).
const (
	MaxStatusSize             = 64 << 10 // bytes of input, and of the canonical JSON (ETOOLARGE beyond)
	MaxDeploymentIDLength     = 256      // characters of deploymentId
	MaxComponentStatuses      = 256      // entries of components
	MaxComponentNameLength    = 256      // characters of a component name
	MaxErrorCodeLength        = 256      // characters of error.code
	MaxErrorSourceLength      = 256      // characters of error.source
	MaxErrorMessageLength     = 4096     // characters of error.message
	MaxExtensionMessageLength = 1024     // characters of x-wfm-extensions.message
)

// Problem types ParseStatusReport returns.
const (
	ProblemInvalidStatus        = "invalid-status"         // EINVALID: breaks a rule; Fields lists every problem
	ProblemDeploymentIDMismatch = "deployment-id-mismatch" // EINVALID: deploymentId is not the deployment id of the path
	ProblemMalformedStatus      = "malformed-status"       // EMALFORMED: not one well-formed JSON object
	ProblemStatusTooLarge       = "status-too-large"       // ETOOLARGE: beyond MaxStatusSize
)

// StatusExtensionMember is the member of a status report that carries a
// StatusExtension: Margo's vendor-extension naming, x-<name>-extensions.
const StatusExtensionMember = "x-wfm-extensions"

const (
	maxNumberLiteral     = 4096                        // longer number literals are refused without being read
	maxUint64Text        = "18446744073709551615"      // 2^64-1, the largest manifest version
	manifestVersionRange = "[1, 18446744073709551615]" // for messages
)

// DeploymentState is a state a device reports for a deployment or one of its
// components: Margo's six states. These are what the device says; the
// server's own, richer deployment state machine lives in internal/lifecycle
// and is derived from them.
type DeploymentState string

// The six Margo device-reported states.
const (
	StatePending    DeploymentState = "pending"
	StateInstalling DeploymentState = "installing"
	StateInstalled  DeploymentState = "installed"
	StateFailed     DeploymentState = "failed"
	StateRemoving   DeploymentState = "removing"
	StateRemoved    DeploymentState = "removed"
)

var deploymentStates = []string{
	string(StatePending), string(StateInstalling), string(StateInstalled),
	string(StateFailed), string(StateRemoving), string(StateRemoved),
}

// Valid reports whether s is one of the six Margo states.
func (s DeploymentState) Valid() bool { return slices.Contains(deploymentStates, string(s)) }

// Phase is where a drain-aware agent is in an update (design section 7),
// reported in the x-wfm-extensions member of a status report.
type Phase string

// The phases of a drain or blue/green update.
const (
	PhaseDraining    Phase = "draining"     // stopped taking new work, finishing what runs
	PhaseDrained     Phase = "drained"      // no work in flight; about to apply the new revision
	PhaseStartingNew Phase = "starting-new" // the new revision is starting
	PhaseVerifying   Phase = "verifying"    // the new revision runs and is being checked
	PhaseSwitching   Phase = "switching"    // traffic moves to the new revision
)

var phases = []string{string(PhaseDraining), string(PhaseDrained), string(PhaseStartingNew), string(PhaseVerifying), string(PhaseSwitching)}

// Valid reports whether p is one of the known phases.
func (p Phase) Valid() bool { return slices.Contains(phases, string(p)) }

// StatusReport is a parsed, valid status report (rc.3
// DeploymentStatusManifest).
type StatusReport struct {
	DeploymentID string
	DeviceID     string // "" when not reported
	// AdoptedManifestVersion is the manifest version whose revision of the
	// deployment the device holds, in [1, 2^64-1].
	AdoptedManifestVersion uint64
	State                  DeploymentState // status.state
	Error                  *StatusError    // status.error; nil when absent or all empty
	Components             []ComponentStatus
	// Extension is the x-wfm-extensions member; nil when absent.
	Extension *StatusExtension
	// JSON is the canonical JSON of the whole report (members rc.3 does not
	// name included): compact, members sorted by name (bytewise), integral
	// numbers written as integers. Reading it back gives the same report.
	JSON []byte
}

// StatusError is the error of a deployment or of a component. Devices send
// {"code": "", "source": "", "message": ""} for "no error", so an error
// whose three strings are empty is read as no error at all.
type StatusError struct {
	Code    string
	Source  string
	Message string
}

// ComponentStatus is the state of one component of a deployment.
type ComponentStatus struct {
	Name  string
	State DeploymentState
	Error *StatusError // nil when absent or all empty
}

// StatusExtension is what a drain-aware agent adds to a status report in
// x-wfm-extensions (design section 6). Every member is optional.
type StatusExtension struct {
	Phase    Phase  // "" when not reported
	InFlight *int64 // work items still running; nil when not reported
	Healthy  *bool  // nil when not reported
	Message  string
}

// ParseStatusReport reads the body of
// POST /api/v1/deployments/{deploymentId}/status from untrusted bytes.
// pathDeploymentID is the {deploymentId} of the path.
//
// The report must be rc.3's DeploymentStatusManifest: deploymentId,
// adoptedManifestVersion (a JSON number whose exact value is an integer in
// [1, 2^64-1]: 1e3 is 1000, 1.5, 0, -1 and 2^64 are refused), status.state
// and components[] (each with a name, unique in the report, and a state)
// are required; deviceId, when present, is a device id. Other members are
// allowed, as the schema is open, and kept in JSON, except that
// x-wfm-extensions, when present, must be a StatusExtension: an object
// with only phase, inFlight (an integer >= 0), healthy and message.
// status.state is taken as the device says; it is not checked against the
// component states.
//
// Returns ETOOLARGE (type "status-too-large") if raw or its canonical JSON
// exceeds MaxStatusSize; EMALFORMED (type "malformed-status") if raw is not
// exactly one JSON object (RFC 8259, valid UTF-8, no repeated member name)
// or nests deeper than MaxDeviceDepth; EINVALID with every problem in
// Fields (JSON pointers into the report, at most MaxProblems of them) if it
// breaks a rule: type "deployment-id-mismatch" when deploymentId is not
// pathDeploymentID (the mismatch is then one of the Fields, at
// /deploymentId), type "invalid-status" otherwise.
func ParseStatusReport(raw []byte, pathDeploymentID string) (*StatusReport, error) {
	if len(raw) > MaxStatusSize {
		return nil, &lifecycle.Error{Code: lifecycle.ETOOLARGE, Type: ProblemStatusTooLarge,
			Message: fmt.Sprintf("the status report is %d bytes; at most %d are accepted", len(raw), MaxStatusSize)}
	}
	doc, err := readDeviceJSON(raw, ProblemMalformedStatus, ProblemStatusTooLarge)
	if err != nil {
		return nil, err
	}
	c := &checker{}
	r, mismatch := c.statusReport(doc, raw, pathDeploymentID)
	if len(c.fe) > 0 {
		typ, msg := ProblemInvalidStatus, fmt.Sprintf("the status report has %d problem(s)", len(c.fe))
		if mismatch {
			typ = ProblemDeploymentIDMismatch
			msg = fmt.Sprintf("deploymentId %q is not the deployment id %q of the request path", truncate(r.DeploymentID), truncate(pathDeploymentID))
			if len(c.fe) > 1 {
				msg += fmt.Sprintf("; the report has %d problem(s) in all", len(c.fe))
			}
		}
		return nil, deviceProblems(typ, msg, c.fe)
	}
	r.JSON = appendJSON(nil, doc)
	if len(r.JSON) > MaxStatusSize {
		return nil, &lifecycle.Error{Code: lifecycle.ETOOLARGE, Type: ProblemStatusTooLarge,
			Message: fmt.Sprintf("the status report is %d bytes as canonical JSON; at most %d are accepted", len(r.JSON), MaxStatusSize)}
	}
	return r, nil
}

// statusReport reads the report and reports whether its deploymentId is not
// pathDeploymentID. raw is the input, for the exact text of numbers.
func (c *checker) statusReport(doc *object, raw []byte, pathDeploymentID string) (*StatusReport, bool) {
	r := &StatusReport{}
	mismatch := false
	if id, ok := c.jsonString(doc, "", "deploymentId", true, MaxDeploymentIDLength); ok {
		if id != pathDeploymentID {
			c.add("/deploymentId", "must equal the deployment id of the request path, %q; got %q", truncate(pathDeploymentID), truncate(id))
			mismatch = true
		}
		r.DeploymentID = id
	}
	if id, ok := c.jsonString(doc, "", "deviceId", false, MaxDeviceIDLength); ok {
		if !deviceIDPattern.MatchString(id) {
			c.add("/deviceId", "must be a device id: one or more /-separated segments of letters, digits, '.', '_', '~' and '-', got %q", truncate(id))
		}
		r.DeviceID = id
	}

	if v, ok := doc.m["adoptedManifestVersion"]; !ok {
		c.add("/adoptedManifestVersion", "is required")
	} else if _, isNum := asFloat(v); !isNum {
		c.add("/adoptedManifestVersion", "must be a number, got %s", jsonKindOf(v))
	} else {
		lit := numberLiteral(raw, "adoptedManifestVersion")
		n, msg := exactInteger(lit, 1, math.MaxUint64)
		if msg != "" {
			c.add("/adoptedManifestVersion", "must be an integer in %s, %s", manifestVersionRange, msg)
		} else {
			r.AdoptedManifestVersion = n
			doc.m["adoptedManifestVersion"] = canonicalUint(n)
		}
	}

	if v, ok := doc.m["status"]; !ok {
		c.add("/status", "is required")
	} else if so := c.jsonObject(v, "/status"); so != nil {
		if s, ok := c.jsonEnum(so, "/status", "state", true, deploymentStates); ok {
			r.State = DeploymentState(s)
		}
		r.Error = c.statusError(so, "/status")
	}

	if _, ok := doc.m["components"]; !ok {
		c.add("/components", "is required")
	}
	names := map[string]string{}
	for i, v := range c.jsonList(doc, "", "components", MaxComponentStatuses) {
		p := idx("/components", i)
		co := c.jsonObject(v, p)
		if co == nil {
			continue
		}
		var cs ComponentStatus
		if n, ok := c.jsonString(co, p, "name", true, MaxComponentNameLength); ok {
			switch {
			case n == "":
				c.add(p+"/name", "must not be empty")
			case names[n] != "":
				c.add(p+"/name", "duplicate component name %q (first used at %s)", truncate(n), names[n])
			default:
				names[n] = p + "/name"
			}
			cs.Name = n
		}
		if s, ok := c.jsonEnum(co, p, "state", true, deploymentStates); ok {
			cs.State = DeploymentState(s)
		}
		cs.Error = c.statusError(co, p)
		r.Components = append(r.Components, cs)
	}

	if v, ok := doc.m[StatusExtensionMember]; ok {
		r.Extension = c.statusExtension(v, raw)
	}
	return r, mismatch
}

// statusError reads the optional error member of o (at base).
func (c *checker) statusError(o *object, base string) *StatusError {
	v, ok := o.m["error"]
	if !ok {
		return nil
	}
	p := base + "/error"
	eo := c.jsonObject(v, p)
	if eo == nil {
		return nil
	}
	var e StatusError
	e.Code, _ = c.jsonString(eo, p, "code", false, MaxErrorCodeLength)
	e.Source, _ = c.jsonString(eo, p, "source", false, MaxErrorSourceLength)
	e.Message, _ = c.jsonString(eo, p, "message", false, MaxErrorMessageLength)
	if e == (StatusError{}) {
		return nil
	}
	return &e
}

// statusExtension reads x-wfm-extensions. Unlike the rest of the report it
// refuses unknown members: it is ours, and a misspelt inFlight must not pass
// as "not reported".
func (c *checker) statusExtension(v any, raw []byte) *StatusExtension {
	p := ptr("", StatusExtensionMember)
	o := c.jsonObject(v, p)
	if o == nil {
		return nil
	}
	c.known(o, p, "phase", "inFlight", "healthy", "message")
	x := &StatusExtension{}
	if s, ok := c.jsonEnum(o, p, "phase", false, phases); ok {
		x.Phase = Phase(s)
	}
	if iv, ok := o.m["inFlight"]; ok {
		if _, isNum := asFloat(iv); !isNum {
			c.add(p+"/inFlight", "must be an integer >= 0, got %s", jsonKindOf(iv))
		} else {
			lit := numberLiteral(raw, StatusExtensionMember, "inFlight")
			n, msg := exactInteger(lit, 0, math.MaxInt64)
			if msg != "" {
				c.add(p+"/inFlight", "must be an integer in [0, %d], %s", int64(math.MaxInt64), msg)
			} else {
				in := int64(n)
				x.InFlight = &in
				o.m["inFlight"] = in
			}
		}
	}
	if hv, ok := o.m["healthy"]; ok {
		if b, isBool := hv.(bool); isBool {
			x.Healthy = &b
		} else {
			c.add(p+"/healthy", "must be true or false, got %s", jsonKindOf(hv))
		}
	}
	x.Message, _ = c.jsonString(o, p, "message", false, MaxExtensionMessageLength)
	return x
}

// canonicalUint is n as the tree holds an integer literal: int64 when it
// fits, uint64 above.
func canonicalUint(n uint64) any {
	if n <= math.MaxInt64 {
		return int64(n)
	}
	return n
}

// numberLiteral returns the text of the number at the member path of raw (a
// valid JSON object, as readJSON accepted it), or "" if there is none.
// The tree holds numbers as int64, uint64 or float64, and a float64 has
// already rounded 9007199254740993e0 or 1.0000000000000000001; the text
// says exactly what the device sent.
func numberLiteral(raw []byte, path ...string) string {
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimPrefix(raw, []byte("\xef\xbb\xbf"))))
	dec.UseNumber()
	for _, name := range path {
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return ""
		}
		found := false
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return ""
			}
			if k, _ := tok.(string); k == name {
				found = true
				break
			}
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return ""
			}
		}
		if !found {
			return ""
		}
	}
	tok, err := dec.Token()
	if err != nil {
		return ""
	}
	n, _ := tok.(json.Number)
	return string(n)
}

// exactInteger reads a JSON number literal exactly and returns its value if
// it is an integer in [lo, hi]; otherwise a message saying what it is
// ("got 1.5, which is not an integer"). The exponent is applied to the
// decimal digits, not to a float, so 1e3 is 1000 and 1.0000000000000000001
// is not an integer; work is bounded by the literal's length.
func exactInteger(lit string, lo, hi uint64) (uint64, string) {
	shown := truncate(lit)
	if lit == "" || len(lit) > maxNumberLiteral {
		return 0, fmt.Sprintf("got %s", shown)
	}
	neg := strings.HasPrefix(lit, "-")
	s := strings.TrimPrefix(lit, "-")
	mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	// value = digits × 10^e
	e := -len(frac)
	if exp != "" {
		x, err := strconv.Atoi(exp)
		if err != nil { // beyond ±2^63: only the sign matters
			if strings.HasPrefix(exp, "-") {
				x = -(maxNumberLiteral + len(maxUint64Text) + 1)
			} else {
				x = maxNumberLiteral + len(maxUint64Text) + 1
			}
		}
		// Bound the exponent so that e cannot overflow; beyond this the
		// result is the same (a fraction, or out of range).
		x = max(min(x, 2*maxNumberLiteral), -2*maxNumberLiteral)
		e += x
	}
	trimmed := strings.TrimRight(digits, "0")
	e += len(digits) - len(trimmed)
	digits = trimmed
	if digits == "" { // zero, however written
		if lo > 0 {
			return 0, fmt.Sprintf("got %s", shown)
		}
		return 0, ""
	}
	if e < 0 {
		return 0, fmt.Sprintf("got %s, which is not an integer", shown)
	}
	if neg {
		return 0, fmt.Sprintf("got %s", shown)
	}
	if len(digits)+e > len(maxUint64Text) {
		return 0, fmt.Sprintf("got %s, which is too large", shown)
	}
	n, err := strconv.ParseUint(digits+strings.Repeat("0", e), 10, 64)
	if err != nil || n > hi {
		return 0, fmt.Sprintf("got %s, which is too large", shown)
	}
	if n < lo {
		return 0, fmt.Sprintf("got %s", shown)
	}
	return n, ""
}

// FailureMessage is what the device said went wrong, for people: the
// deployment's error, then each component's error prefixed by the
// component's name, joined by "; ", each error as "message (code, source)"
// with the empty parts left out; "" when the report carries no error. It is
// at most a few kilobytes (the bounds of the error members); callers that
// show it in one line bound it further (lifecycle.MaxAgentMessage).
func (r *StatusReport) FailureMessage() string {
	var parts []string
	if s := r.Error.text(); s != "" {
		parts = append(parts, s)
	}
	for _, c := range r.Components {
		if s := c.Error.text(); s != "" {
			parts = append(parts, c.Name+": "+s)
		}
	}
	return strings.Join(parts, "; ")
}

// text is e as "message (code, source)", without its empty parts; "" for nil.
func (e *StatusError) text() string {
	if e == nil {
		return ""
	}
	var tags []string
	for _, s := range []string{e.Code, e.Source} {
		if s != "" {
			tags = append(tags, s)
		}
	}
	switch {
	case len(tags) == 0:
		return e.Message
	case e.Message == "":
		return strings.Join(tags, ", ")
	}
	return e.Message + " (" + strings.Join(tags, ", ") + ")"
}
