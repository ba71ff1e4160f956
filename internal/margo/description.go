// Package margo reads Margo application descriptions (margo.yaml): the typed
// model, the parser for untrusted YAML or JSON bytes, the validation rules,
// and the validation of parameter values against the description's
// configuration schema. It is pure: no I/O, no context, no clock.
//
// The shape is the newest published one (pre-draft, apiVersion "v1",
// top-level id, deploymentProfiles with deviceConstraints); a legacy top-level
// `kind` is tolerated and ignored. wfm adds one optional section, `lifecycle`
// (design section 4), read into a lifecycle.Lifecycle.
//
// It also writes what devices fetch: deployment documents, state manifests
// and bundles, a bundle assembled from per-document DEFLATE pieces (see
// bundle.go). One thing is written by hand there: combining CRC-32s
// (crc32Combine), which neither hash/crc32 nor a well-kept module offers.
package margo

import (
	"regexp"
	"slices"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Bounds on what ParseDescription accepts. Margo sets none; these keep a
// server that reads untrusted bytes cheap to run and every stored field
// displayable, and are far above what real descriptions use.
const (
	MaxDescriptionSize = 1 << 20 // bytes of input (ETOOLARGE beyond)
	MaxDepth           = 64      // nesting levels of mappings and sequences (EMALFORMED beyond)
	MaxNodes           = 100_000 // nodes, each use of a YAML alias counting as a copy (ETOOLARGE beyond)
	MaxExpandedText    = 4 << 20 // bytes of keys and strings, each use of a YAML alias counting as a copy (ETOOLARGE beyond)

	MaxIDLength          = 200  // id, as Margo's pattern ^[a-z0-9-]{1,200}$ says
	MaxNameLength        = 256  // names: metadata.name, profile ids, component, parameter, section, setting and schema names
	MaxTextLength        = 4096 // descriptions and other free text
	MaxPointerLength     = 1024 // a parameter target's pointer
	MaxRegexLength       = 1024 // a schema's regexMatch
	MaxProfiles          = 32   // deployment profiles
	MaxComponents        = 64   // components in one profile
	MaxParameters        = 256  // parameters
	MaxTargets           = 64   // targets of one parameter
	MaxTargetComponents  = 64   // components named by one target
	MaxSections          = 64   // configuration sections
	MaxSettings          = 256  // settings in one section
	MaxSchemas           = 256  // configuration schemas
	MaxOptions           = 256  // options of one select schema
	MaxStrategies        = 8    // lifecycle upgrade strategies
	MaxValueItems        = 1024 // items of one array parameter value
	MaxValueStringLength = 65536
	MaxProblems          = 100 // field errors reported at once; the message gives the total
)

// Problem types (the slugs of lifecycle.Error.Type) that this package returns.
const (
	ProblemInvalid     = "invalid-description"    // EINVALID: breaks a rule; Fields lists every problem
	ProblemMalformed   = "malformed-description"  // EMALFORMED: not one well-formed YAML/JSON mapping
	ProblemTooLarge    = "description-too-large"  // ETOOLARGE: beyond MaxDescriptionSize or MaxNodes
	ProblemUnsupported = "unsupported-media-type" // EUNSUPPORTEDTYPE: neither YAML nor JSON
)

// APIVersion is the only apiVersion the newest Margo shape allows.
const APIVersion = "v1"

// ApplicationDescription is a parsed, valid Margo application description.
// Catalog, component properties and device constraints are kept as generic
// data (map[string]any, []any, string, bool, int64, uint64, float64, nil);
// the full document, unknown members included, is in Parsed.JSON.
type ApplicationDescription struct {
	APIVersion         string
	ID                 string
	Metadata           Metadata
	DeploymentProfiles []DeploymentProfile
	Parameters         map[string]Parameter // by name
	Configuration      Configuration
	// Lifecycle is the wfm `lifecycle` section; the zero value when absent.
	// Drain defaults are filled in: a present drain section has OnTimeout
	// set (abort when not written) and Timeout set (DefaultDrainTimeout
	// when not written).
	Lifecycle lifecycle.Lifecycle
	// Version is metadata.version read as SemVer.
	Version lifecycle.Version
}

// Metadata is the description's metadata section.
type Metadata struct {
	Name        string
	Description string
	Version     string         // as written; see ApplicationDescription.Version
	Catalog     map[string]any // nil when absent
}

// ProfileType is the format of a deployment profile.
type ProfileType string

// The deployment profile types of the newest Margo shape. The pre-release
// spellings ("helm.v3") are refused with a hint.
const (
	ProfileHelm    ProfileType = "helm"
	ProfileCompose ProfileType = "compose"
	ProfileCustom  ProfileType = "custom"
)

// DeploymentProfile is one way to deploy the application.
type DeploymentProfile struct {
	Type              ProfileType
	ID                string
	Description       string
	Components        []Component
	DeviceConstraints map[string]any // nil when absent
}

// Component is one package of a deployment profile.
type Component struct {
	Name       string
	Properties map[string]any // repository, revision, wait, timeout, …; nil when absent
}

// Parameter is one configurable parameter.
type Parameter struct {
	// Value is the default: nil (no default), bool, int64, uint64, float64,
	// string, or []any of those.
	Value   any
	Targets []Target
}

// Target is where a parameter's value goes.
type Target struct {
	Pointer    string
	Components []string
}

// Configuration is how parameters are presented and validated.
type Configuration struct {
	Sections []Section
	Schema   []Schema
}

// Section groups settings for display.
type Section struct {
	Name     string
	Settings []Setting
}

// Setting presents one parameter and names its schema.
type Setting struct {
	Parameter   string
	Name        string
	Description string
	Immutable   bool // the value must not change after install
	Schema      string
}

// DataType is the data type of a schema.
type DataType string

// The data types of the Margo data model.
const (
	DataString       DataType = "string"
	DataInteger      DataType = "integer"
	DataDouble       DataType = "double"
	DataBoolean      DataType = "boolean"
	DataStringArray  DataType = "array[string]"
	DataIntegerArray DataType = "array[integer]"
	DataDoubleArray  DataType = "array[double]"
	DataBooleanArray DataType = "array[boolean]"
)

// Valid reports whether t is a data type of the Margo data model.
func (t DataType) Valid() bool {
	switch t {
	case DataString, DataInteger, DataDouble, DataBoolean,
		DataStringArray, DataIntegerArray, DataDoubleArray, DataBooleanArray:
		return true
	}
	return false
}

// Elem returns the type of one item: t itself for scalar types, the item type
// for array types.
func (t DataType) Elem() DataType {
	switch t {
	case DataStringArray:
		return DataString
	case DataIntegerArray:
		return DataInteger
	case DataDoubleArray:
		return DataDouble
	case DataBooleanArray:
		return DataBoolean
	}
	return t
}

// IsArray reports whether t is an array type.
func (t DataType) IsArray() bool { return t.Elem() != t }

// Schema is one validation rule set (Margo's TextValidationSchema,
// NumericIntegerValidationSchema, NumericDoubleValidationSchema,
// BooleanValidationSchema and SelectValidationSchema in one type). For array
// data types the rules apply to each item, and AllowEmpty to the array.
type Schema struct {
	Name       string
	DataType   DataType
	AllowEmpty bool // an empty value ("", [], nothing) is acceptable
	// string
	MinLength, MaxLength *int64 // in characters
	RegexMatch           string // the whole value must match; see Regexp
	// integer (int64) and double (int64 or float64); nil = unbounded
	MinValue, MaxValue any
	// double: digits after the decimal point
	MinPrecision, MaxPrecision *int64
	// select
	Options     []any // nil when not a select schema
	Multiselect bool  // the value is an array of options
}

// Regexp returns RegexMatch compiled to match whole values, and false when
// there is none or when RE2 cannot run it. Descriptions may use patterns
// written for other engines (lookaround, backreferences, possessive
// quantifiers, repeat counts above 1000); they are accepted, kept for clients
// that can run them, and not enforced by the server.
func (s Schema) Regexp() (*regexp.Regexp, bool) {
	if s.RegexMatch == "" {
		return nil, false
	}
	re, err := regexp.Compile(`^(?:` + s.RegexMatch + `)$`)
	if err != nil {
		return nil, false
	}
	return re, true
}

// ParameterNames returns the names of the parameters, sorted.
func (d *ApplicationDescription) ParameterNames() []string {
	names := make([]string, 0, len(d.Parameters))
	for n := range d.Parameters {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Profile returns the deployment profile with the given id, and false if
// there is none.
func (d *ApplicationDescription) Profile(id string) (DeploymentProfile, bool) {
	for _, p := range d.DeploymentProfiles {
		if p.ID == id {
			return p, true
		}
	}
	return DeploymentProfile{}, false
}

// Setting returns the configuration setting of parameter name, and false if
// the parameter has none.
func (d *ApplicationDescription) Setting(name string) (Setting, bool) {
	for _, sec := range d.Configuration.Sections {
		for _, s := range sec.Settings {
			if s.Parameter == name {
				return s, true
			}
		}
	}
	return Setting{}, false
}

// Schema returns the configuration schema with the given name, and false if
// there is none.
func (d *ApplicationDescription) Schema(name string) (Schema, bool) {
	for _, s := range d.Configuration.Schema {
		if s.Name == name {
			return s, true
		}
	}
	return Schema{}, false
}

// SchemaOf returns the schema that validates parameter name's values, and
// false if the parameter has no setting.
func (d *ApplicationDescription) SchemaOf(name string) (Schema, bool) {
	st, ok := d.Setting(name)
	if !ok {
		return Schema{}, false
	}
	return d.Schema(st.Schema)
}

// Immutable reports whether parameter name's setting says its value must not
// change after install.
func (d *ApplicationDescription) Immutable(name string) bool {
	st, ok := d.Setting(name)
	return ok && st.Immutable
}
