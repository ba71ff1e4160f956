package margo

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// DeploymentExtensionMember is the member of an ApplicationDeployment's spec
// that carries wfm's lifecycle instructions for device agents: Margo's
// vendor-extension naming, x-<name>-extensions, which rc.3 allows in spec.
// Agents that do not know it ignore it and still get a correct update.
const DeploymentExtensionMember = "x-wfm-extensions"

// DefaultNamespace is metadata.namespace of a rendered ApplicationDeployment
// when DeploymentInput.Namespace is empty.
const DefaultNamespace = "margo"

// ProblemInvalidRender is the problem type (EINVALID) of every error of
// RenderDeployment: the input cannot make a valid ApplicationDeployment.
const ProblemInvalidRender = "invalid-deployment-input"

// DeploymentInput is everything an ApplicationDeployment document is made
// of. See RenderDeployment.
type DeploymentInput struct {
	// DeploymentID is the deployment's id: a UUID in canonical lowercase
	// form (as PostgreSQL and uuid.UUID.String print it).
	DeploymentID string
	// DeviceID is the target device, rc.3's DeviceId (a gateway's child
	// "gw/child", or "gw/*" for gateway-chosen placement).
	DeviceID string
	// Name is metadata.name; "" renders "<applicationId>-<the first 8
	// characters of DeploymentID>". A given name must be a Kubernetes
	// object name (DNS-1123 subdomain).
	Name string
	// Namespace is metadata.namespace; "" renders DefaultNamespace. A given
	// namespace must be a Kubernetes namespace name (DNS-1123 label).
	Namespace string
	// Description is the application version deployed.
	Description *ApplicationDescription
	// Profile is the chosen deployment profile: one of Description's
	// profiles, unchanged (as Description.Profile returns it).
	Profile DeploymentProfile
	// Values are the effective parameter values by name: string, bool,
	// any Go integer or float type, json.Number, or a list of those. A
	// parameter without an entry (or with nil) takes the description's
	// default; one with neither is omitted.
	Values map[string]any
	// Extension is what the x-wfm-extensions member of spec says.
	Extension Extension
}

// Extension is wfm's lifecycle instructions for device agents, rendered as
// spec.x-wfm-extensions:
//
//	x-wfm-extensions:
//	    revision: 3
//	    operation: upgrade
//	    fromVersion: 1.5.0   # omitted for install
//	    toVersion: 2.0.0     # the description's metadata.version, canonical SemVer
//	    strategy: recreate
//	    drain:               # only when Drain is set and the operation drains
//	        required: true
//	        timeout: 10m0s   # Go duration
//	        onTimeout: abort
type Extension struct {
	// Revision is the revision number, from 1.
	Revision int
	// Operation is the operation that created the revision: install,
	// upgrade, reconfigure or rollback. Remove is refused: Margo removes a
	// workload by its absence from the state manifest, so no document says
	// "remove".
	Operation lifecycle.OperationKind
	// FromVersion is the version the device runs before this revision:
	// the zero Version for install (then omitted), required otherwise.
	FromVersion lifecycle.Version
	// Strategy is how the device replaces the running version; ""
	// renders recreate. It must be one the description's version supports.
	Strategy lifecycle.Strategy
	// Drain, when not nil, tells the agent to drain the running version
	// first: Required as given, Timeout (0: lifecycle.DefaultDrainTimeout)
	// and OnTimeout ("" : abort) with their defaults applied. It is ignored
	// for install, which has no running version to drain.
	Drain *lifecycle.DrainPolicy
}

var (
	// renderUUIDPattern is a UUID in canonical lowercase form: one spelling
	// per deployment, as the URLs of the state manifest need.
	renderUUIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	// renderDeviceIDPattern is rc.3's DeviceId_with_asterisk.
	renderDeviceIDPattern = regexp.MustCompile(`^[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*(/\*)?$`)
	renderNamePattern     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	renderLabelPattern    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// renderYAML11Special matches plain scalars that a YAML 1.1 reader
	// (PyYAML, SnakeYAML, go-yaml v2, older agents) resolves to something
	// other than a string even where YAML 1.2 does not: y/n/yes/no/on/off
	// booleans, sexagesimal, octal, binary and underscored numbers, floats
	// without digits before the dot. Such strings are written quoted so
	// every agent reads a string.
	renderYAML11Special = regexp.MustCompile(`^(?:` +
		`[yYnN]|[yY]es|YES|[nN]o|NO|[tT]rue|TRUE|[fF]alse|FALSE|[oO]n|ON|[oO]ff|OFF|~|[nN]ull|NULL|=|<<` +
		`|[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+` +
		`|[-+]?(?:[0-9][0-9_]*)?\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*` +
		`|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)` +
		`)$`)
)

// MaxKubernetesNameLength bounds a given DeploymentInput.Name (a DNS-1123
// subdomain); MaxNamespaceLength bounds a given Namespace (a DNS-1123 label).
const (
	MaxKubernetesNameLength = 253
	MaxNamespaceLength      = 63
)

// RenderDeployment renders the Margo ApplicationDeployment document of one
// revision of a deployment, in the newest published shape (no apiVersion or
// kind, no metadata.annotations: rc.3's required "annotations" is an
// erratum):
//
//	id: <DeploymentID>
//	metadata: {name, namespace, deviceId}
//	spec:
//	    applicationId: <Description.ID>
//	    deploymentProfile: {type, components [{name, properties}], deviceConstraints (when the profile has them)}
//	    parameters: {<name>: {value, targets [{pointer, components}]}}
//	    x-wfm-extensions: {revision, operation, fromVersion, toVersion, strategy, drain}
//
// Components are the profile's, properties as the description gives them
// (properties: {} when it gives none, since rc.3 requires the member).
// Parameters are every parameter of the description with a value (see
// DeploymentInput.Values), each with those of its targets that name
// components of the chosen profile, each target's components narrowed to
// that profile; a target left with no component is dropped, and so is a
// parameter left with no target. parameters is {} when none remain.
//
// The output is deterministic: the same input gives the same bytes (member
// order fixed, mappings from Go maps sorted by key, 4-space indentation as
// in Margo's examples, no timestamps). Every value reads back as the same
// type: strings stay strings even where they look like numbers, booleans or
// null (quoted, also for YAML 1.1 readers), integers stay integers
// (uint64 above 2^63-1 included), floats always carry a decimal point
// ("1.0", "1.0e+21"). The bytes are the exact bytes to digest and serve.
//
// Returns EINVALID (type ProblemInvalidRender, every problem in Fields with
// a pointer into DeploymentInput) when: Description is nil; DeploymentID is
// not a canonical UUID; DeviceID is not an rc.3 DeviceId; a given Name or
// Namespace is not a Kubernetes name; Profile is not one of Description's
// profiles as it gives them; Values names a parameter the description does
// not have or holds a value that is not a string, finite number, boolean or
// list of them; a string is not valid UTF-8; Extension.Revision < 1;
// Extension.Operation is not install, upgrade, reconfigure or rollback;
// FromVersion is set for install or missing otherwise; Strategy is unknown
// or not supported by the description's version; Drain has a negative
// Timeout or an unknown OnTimeout.
func RenderDeployment(in DeploymentInput) ([]byte, error) {
	return render(in, nil)
}

// render is RenderDeployment, taking the encoded spec from specs (and
// storing it there) when specs is not nil. The document is encoded in two
// parts, the root mapping's id and metadata, then its spec, and the two
// are joined: a block mapping's entries are written one after the other,
// each from its own node, so the bytes are those of the whole mapping
// encoded at once (TestRenderPartsAreTheWhole compares them).
func render(in DeploymentInput, specs *SpecCache) ([]byte, error) {
	r := renderer{}
	d := in.Description
	if d == nil {
		r.add("/description", "is required")
		return nil, r.err()
	}
	name, namespace := r.check(in)
	key, cacheable := specs.key(in)
	var spec []byte
	if cacheable {
		spec = specs.get(key)
	}
	var specNode *yaml.Node
	if spec == nil {
		specNode = r.spec(in)
	}
	// With problems already found, the encoder's path below adds those of
	// the head's strings and reports them all.
	var out []byte
	plain := false
	if len(r.problems) == 0 {
		out, plain = appendPlainHead(make([]byte, 0, 128+len(spec)), in.DeploymentID, name, namespace, in.DeviceID)
	}
	if !plain {
		metadata := r.mapping(
			"name", r.str(name, "/name"),
			"namespace", r.str(namespace, "/namespace"),
			"deviceId", r.str(in.DeviceID, "/deviceId"),
		)
		head := r.mapping(
			"id", r.str(in.DeploymentID, "/deploymentId"),
			"metadata", metadata,
		)
		if len(r.problems) > 0 {
			return nil, r.err()
		}
		var err error
		if out, err = encodeDocument(head, 0); err != nil {
			return nil, err
		}
	}
	if spec == nil {
		var err error
		if spec, err = encodeDocument(r.mapping("spec", specNode), 0); err != nil {
			return nil, err
		}
		if cacheable {
			specs.put(key, spec)
		}
	}
	return append(out, spec...), nil
}

// appendPlainHead appends the document's head (id and metadata) as
// encodeDocument writes it, when each of its four strings is one that the
// YAML encoder writes plain, as itself: a canonical UUID (the deployment id,
// which check has validated), or a string that starts with a letter, holds
// only letters, digits, '-', '.', '_' and '/', and is no YAML 1.1 word
// (yaml11Special). It reports false, having appended nothing, otherwise;
// the caller then encodes the head. The encoder's setup and emitter cost a
// document about 20 µs and 19 KB of allocations, a third of what preparing
// a creation allocates (BenchmarkCreateBatch10000's memory profile), for
// five short lines. TestPlainHeadIsTheEncoders compares both.
func appendPlainHead(dst []byte, id, name, namespace, deviceID string) ([]byte, bool) {
	if !renderUUIDPattern.MatchString(id) || !plainWord(name) || !plainWord(namespace) || !plainWord(deviceID) {
		return dst, false
	}
	dst = append(dst, "id: "...)
	dst = append(dst, id...)
	dst = append(dst, "\nmetadata:\n    name: "...)
	dst = append(dst, name...)
	dst = append(dst, "\n    namespace: "...)
	dst = append(dst, namespace...)
	dst = append(dst, "\n    deviceId: "...)
	dst = append(dst, deviceID...)
	return append(dst, '\n'), true
}

// plainWord reports whether s is a string appendPlainHead writes as itself
// (see there).
func plainWord(s string) bool {
	if s == "" || yaml11Special(s) {
		return false
	}
	if c := s[0] | 0x20; c < 'a' || c > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '.', c == '_', c == '/':
		default:
			return false
		}
	}
	return true
}

// encodeDocument encodes the mapping root as one YAML document, 4-space
// indented; size is a capacity hint.
func encodeDocument(root *yaml.Node, size int) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, max(size, 256)))
	enc := yaml.NewEncoder(buf)
	enc.SetIndent(4)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); err != nil {
		return nil, fmt.Errorf("margo: encode ApplicationDeployment: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("margo: encode ApplicationDeployment: %w", err)
	}
	return buf.Bytes(), nil
}

// renderer builds the document tree and collects problems.
type renderer struct {
	problems []lifecycle.FieldError
}

func (r *renderer) add(p, format string, args ...any) {
	r.problems = append(r.problems, lifecycle.FieldError{Pointer: p, Detail: fmt.Sprintf(format, args...)})
}

// err is the error of the problems found.
func (r *renderer) err() error {
	return &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemInvalidRender,
		Message: fmt.Sprintf("cannot render the ApplicationDeployment: %d problem(s), first: %s: %s",
			len(r.problems), r.problems[0].Pointer, r.problems[0].Detail),
		Fields: r.problems}
}

// check checks the document's own members (everything but the spec) and
// returns metadata's name and namespace.
func (r *renderer) check(in DeploymentInput) (name, namespace string) {
	d := in.Description
	if !renderUUIDPattern.MatchString(in.DeploymentID) {
		r.add("/deploymentId", "must be a UUID in canonical lowercase form, got %q", truncate(in.DeploymentID))
	}
	if len(in.DeviceID) > MaxDeviceIDLength || !renderDeviceIDPattern.MatchString(in.DeviceID) {
		r.add("/deviceId", "must be a Margo device id ({id}[/{id}…][/*], RFC 3986 unreserved characters), got %q", truncate(in.DeviceID))
	}
	name = in.Name
	if name == "" {
		name = d.ID + "-" + in.DeploymentID[:min(8, len(in.DeploymentID))]
	} else if len(name) > MaxKubernetesNameLength || !renderNamePattern.MatchString(name) {
		r.add("/name", "must be a Kubernetes object name (lowercase letters, digits, '-' and '.', at most %d characters), got %q", MaxKubernetesNameLength, truncate(name))
	}
	namespace = in.Namespace
	if namespace == "" {
		namespace = DefaultNamespace
	} else if len(namespace) > MaxNamespaceLength || !renderLabelPattern.MatchString(namespace) {
		r.add("/namespace", "must be a Kubernetes namespace name (lowercase letters, digits and '-', at most %d characters), got %q", MaxNamespaceLength, truncate(namespace))
	}
	if own, ok := d.Profile(in.Profile.ID); !ok {
		r.add("/profile/id", "the description has no deployment profile %q", truncate(in.Profile.ID))
	} else if !reflect.DeepEqual(own, in.Profile) {
		r.add("/profile", "differs from the description's deployment profile %q; pass it unchanged", truncate(in.Profile.ID))
	}
	return name, namespace
}

// spec is the document's spec: a function of the description, the profile,
// the values and the extension only (SpecCache keys on them).
func (r *renderer) spec(in DeploymentInput) *yaml.Node {
	d := in.Description
	return r.mapping(
		"applicationId", r.str(d.ID, "/description/id"),
		"deploymentProfile", r.profile(in.Profile),
		"parameters", r.parameters(d, in.Profile, in.Values),
		DeploymentExtensionMember, r.extension(d, in.Extension),
	)
}

func (r *renderer) profile(p DeploymentProfile) *yaml.Node {
	comps := &yaml.Node{Kind: yaml.SequenceNode}
	for i, c := range p.Components {
		cp := fmt.Sprintf("/profile/components/%d", i)
		props := c.Properties
		if props == nil {
			props = map[string]any{}
		}
		comps.Content = append(comps.Content, r.mapping(
			"name", r.str(c.Name, cp+"/name"),
			"properties", r.value(props, cp+"/properties"),
		))
	}
	members := []any{"type", r.str(string(p.Type), "/profile/type"), "components", comps}
	if p.DeviceConstraints != nil {
		members = append(members, "deviceConstraints", r.value(p.DeviceConstraints, "/profile/deviceConstraints"))
	}
	return r.mapping(members...)
}

func (r *renderer) parameters(d *ApplicationDescription, p DeploymentProfile, values map[string]any) *yaml.Node {
	inProfile := make(map[string]bool, len(p.Components))
	for _, c := range p.Components {
		inProfile[c.Name] = true
	}
	for _, name := range sortedNames(values) {
		if _, ok := d.Parameters[name]; !ok {
			r.add("/values/"+lifecycle.EscapePointer(name), "the description has no parameter %q", truncate(name))
		}
	}
	out := &yaml.Node{Kind: yaml.MappingNode}
	for _, name := range d.ParameterNames() {
		par := d.Parameters[name]
		vp := "/values/" + lifecycle.EscapePointer(name)
		v := values[name]
		if v == nil {
			v, vp = par.Value, "/description/parameters/"+lifecycle.EscapePointer(name)+"/value"
		}
		if v == nil {
			continue
		}
		nv, msg := normalizeValue(v)
		if msg != "" {
			r.add(vp, "%s", msg)
			continue
		}
		targets := &yaml.Node{Kind: yaml.SequenceNode}
		for _, t := range par.Targets {
			comps := &yaml.Node{Kind: yaml.SequenceNode}
			for _, c := range t.Components {
				if inProfile[c] {
					comps.Content = append(comps.Content, r.str(c, "/description/parameters/"+lifecycle.EscapePointer(name)))
				}
			}
			if len(comps.Content) == 0 {
				continue
			}
			targets.Content = append(targets.Content, r.mapping(
				"pointer", r.str(t.Pointer, "/description/parameters/"+lifecycle.EscapePointer(name)),
				"components", comps,
			))
		}
		if len(targets.Content) == 0 {
			continue
		}
		out.Content = append(out.Content, r.str(name, vp), r.mapping("value", r.value(nv, vp), "targets", targets))
	}
	return out
}

func (r *renderer) extension(d *ApplicationDescription, x Extension) *yaml.Node {
	const p = "/extension"
	if x.Revision < 1 {
		r.add(p+"/revision", "must be at least 1, got %d", x.Revision)
	}
	switch x.Operation {
	case lifecycle.OperationInstall:
		if !x.FromVersion.IsZero() {
			r.add(p+"/fromVersion", "must be empty for install, got %s", x.FromVersion)
		}
	case lifecycle.OperationUpgrade, lifecycle.OperationReconfigure, lifecycle.OperationRollback:
		if x.FromVersion.IsZero() {
			r.add(p+"/fromVersion", "is required for %s", x.Operation)
		}
	case lifecycle.OperationRemove:
		r.add(p+"/operation", "remove is not rendered: Margo removes a workload by its absence from the state manifest")
	default:
		r.add(p+"/operation", "must be install, upgrade, reconfigure or rollback, got %q", truncate(string(x.Operation)))
	}
	if d.Version.IsZero() {
		r.add("/description/metadata/version", "is required")
	}
	strategy := x.Strategy
	if strategy == "" {
		strategy = lifecycle.StrategyRecreate
	}
	switch {
	case !strategy.Valid():
		r.add(p+"/strategy", "must be %s or %s, got %q", lifecycle.StrategyRecreate, lifecycle.StrategyBlueGreen, truncate(string(strategy)))
	case !d.Lifecycle.Upgrade.Supports(strategy):
		r.add(p+"/strategy", "version %s does not support strategy %s (it lists %v)", d.Version, strategy, d.Lifecycle.Upgrade.EffectiveStrategies())
	}
	members := []any{
		"revision", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(x.Revision)},
		"operation", r.str(string(x.Operation), p+"/operation"),
	}
	if !x.FromVersion.IsZero() {
		members = append(members, "fromVersion", r.str(x.FromVersion.String(), p+"/fromVersion"))
	}
	members = append(members,
		"toVersion", r.str(d.Version.String(), "/description/metadata/version"),
		"strategy", r.str(string(strategy), p+"/strategy"),
	)
	if dr := x.Drain; dr != nil && x.Operation != lifecycle.OperationInstall {
		if dr.Timeout < 0 {
			r.add(p+"/drain/timeout", "must not be negative, got %s", dr.Timeout)
		}
		if dr.OnTimeout != "" && !dr.OnTimeout.Valid() {
			r.add(p+"/drain/onTimeout", "must be %s or %s, got %q", lifecycle.OnTimeoutAbort, lifecycle.OnTimeoutProceed, truncate(string(dr.OnTimeout)))
		}
		members = append(members, "drain", r.mapping(
			"required", r.value(dr.Required, p+"/drain/required"),
			"timeout", r.str(dr.EffectiveTimeout().String(), p+"/drain/timeout"),
			"onTimeout", r.str(string(dr.EffectiveOnTimeout()), p+"/drain/onTimeout"),
		))
	}
	return r.mapping(members...)
}

// mapping builds a mapping node from alternating keys (string) and values
// (*yaml.Node), in the order given.
func (r *renderer) mapping(kv ...any) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Content = append(m.Content, renderString(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return m
}

// str is a string scalar; p locates it for a problem.
func (r *renderer) str(s, p string) *yaml.Node {
	if !utf8.ValidString(s) {
		r.add(p, "is not valid UTF-8")
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return renderString(s)
}

// value converts generic data (the description's and the caller's: nil,
// bool, int64, uint64, float64, string, []any, map[string]any) to a node.
// Mappings are written with their keys sorted.
func (r *renderer) value(v any, p string) *yaml.Node {
	switch x := v.(type) {
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(x)}
	case string:
		return r.str(x, p)
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for i, e := range x {
			n.Content = append(n.Content, r.value(e, p+"/"+strconv.Itoa(i)))
		}
		return n
	case map[string]any:
		n := &yaml.Node{Kind: yaml.MappingNode}
		for _, k := range sortedNames(x) {
			kp := p + "/" + lifecycle.EscapePointer(k)
			n.Content = append(n.Content, r.str(k, kp), r.value(x[k], kp))
		}
		return n
	}
	nv, msg := normalizeValue(v)
	if msg != "" {
		r.add(p, "%s", msg)
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	}
	switch x := nv.(type) {
	case int64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(x, 10)}
	case uint64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(x, 10)}
	case float64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: renderFloat(x)}
	}
	return r.value(nv, p) // nil, bool, string or []any after normalizing
}

// renderString is a string scalar, quoted where a YAML 1.1 or 1.2 reader
// would read it as something else.
func renderString(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if yaml11Special(s) {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

// yaml11Special reports whether renderYAML11Special matches s. Only the
// numbers, .inf and .nan start with a sign, a dot or a digit; the other
// strings it matches are its words, looked up here. The regexp on every
// rendered string was 17% of preparing a creation (BenchmarkCreateBatch10000's
// profile). TestYAML11SpecialIsTheRegexp compares both.
func yaml11Special(s string) bool {
	if s == "" {
		return false
	}
	if c := s[0]; c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' {
		return renderYAML11Special.MatchString(s)
	}
	switch s {
	case "y", "Y", "n", "N", "yes", "Yes", "YES", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE",
		"on", "On", "ON", "off", "Off", "OFF", "~", "null", "Null", "NULL", "=", "<<":
		return true
	}
	return false
}

// renderFloat writes f so that every YAML reader reads a float back: always
// a decimal point, an exponent with its sign ("1.0e+21", "1.0e-07").
func renderFloat(f float64) string {
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		mant, exp, _ := strings.Cut(strconv.FormatFloat(f, 'e', -1, 64), "e")
		if !strings.Contains(mant, ".") {
			mant += ".0"
		}
		return mant + "e" + exp
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
