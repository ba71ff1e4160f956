package margotest

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"
)

// Checker validates HTTP exchanges against the Margo Workload Management API
// document it was loaded from, read as the package documentation describes.
//
// A nil *Checker is valid: every method is a no-op (see FromEnv). A Checker is
// safe for concurrent use by parallel tests.
type Checker struct {
	doc     *openapi3.T
	source  string
	errata  []string
	routes  []route
	version string
}

// route is one path template of the document, split into segments.
type route struct {
	template string
	item     *openapi3.PathItem
	segs     []segment
	literals int  // how many segments are literal (more = more concrete)
	spans    bool // the last segment is a parameter that may contain "/"
}

type segment struct {
	literal string
	param   string // set when the segment is "{param}"
}

// Load reads a Margo Workload Management API document (YAML or JSON), applies
// the errata listed in the package documentation in memory, and prepares it
// for validation. The file on disk is never modified.
func Load(path string) (*Checker, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("margotest: read Margo API document: %w", err)
	}
	c, err := parse(data, true)
	if err != nil {
		return nil, fmt.Errorf("margotest: %s: %w", path, err)
	}
	c.source = path
	return c, nil
}

// parse builds a Checker from the document's bytes. applyErrata is false only
// in this package's tests, which show what each erratum changes.
func parse(data []byte, applyErrata bool) (*Checker, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not an OpenAPI document: the top level is not a mapping")
	}
	var applied []string
	if applyErrata {
		var err error
		if applied, err = applyAllErrata(root.Content[0]); err != nil {
			return nil, err
		}
	}
	edited, err := yaml.Marshal(&root)
	if err != nil {
		return nil, fmt.Errorf("re-encode the document after applying errata: %w", err)
	}

	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromData(edited)
	if err != nil {
		return nil, fmt.Errorf("kin-openapi could not load the document: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("openapi %q: this checker reads the OpenAPI 3.1 Margo document (rc.3)", doc.OpenAPI)
	}
	// Servers are set aside: operations are matched by path alone, whatever
	// host the exchange used (an httptest server, a recorder).
	doc.Servers = nil
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("the document (errata applied) is not a valid OpenAPI document: %w", err)
	}
	routes, err := buildRoutes(doc)
	if err != nil {
		return nil, err
	}
	c := &Checker{doc: doc, errata: applied, routes: routes}
	if doc.Info != nil {
		c.version = doc.Info.Version
	}
	return c, nil
}

// Errata returns, one line each, the errata Load applied to the document.
func (c *Checker) Errata() []string {
	if c == nil {
		return nil
	}
	return slices.Clone(c.errata)
}

// Version returns the document's info.version (for example "1.0.0-rc.3").
func (c *Checker) Version() string {
	if c == nil {
		return ""
	}
	return c.version
}

// Enabled reports whether c checks anything (false for the nil Checker).
func (c *Checker) Enabled() bool { return c != nil }

// ---- errata, applied to the YAML tree before kin-openapi sees it ----

func applyAllErrata(top *yaml.Node) ([]string, error) {
	schemas := mapGet(mapGet(top, "components"), "schemas")
	if schemas == nil || schemas.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("apply errata: the document has no components.schemas")
	}
	var applied []string
	for _, fix := range []func(*yaml.Node) (string, error){dottedRequired, metadataAnnotations} {
		note, err := fix(schemas)
		if err != nil {
			return nil, fmt.Errorf("apply errata: %w", err)
		}
		if note != "" {
			applied = append(applied, note)
		}
	}
	return applied, nil
}

// dottedRequired is erratum 1: UnsignedAppStateManifest.required lists
// "bundle.mediaType", "bundle.digest" and "bundle.url". No JSON object can have
// those members in the intended sense; the intent is that a non-null bundle
// has the three fields. The dotted entries are dropped and the three names are
// added to the required list of the schema that "bundle" references
// (DeploymentBundleRef). That schema is type [object, 'null'], and "required"
// constrains only objects, so null stays valid.
func dottedRequired(schemas *yaml.Node) (string, error) {
	manifest := mapGet(schemas, "UnsignedAppStateManifest")
	if manifest == nil {
		return "", fmt.Errorf("components.schemas.UnsignedAppStateManifest is missing")
	}
	req := mapGet(manifest, "required")
	if req == nil || req.Kind != yaml.SequenceNode {
		return "", nil
	}
	moved := map[string][]string{} // property -> member names
	var kept []*yaml.Node
	for _, n := range req.Content {
		prop, member, dotted := strings.Cut(n.Value, ".")
		if !dotted {
			kept = append(kept, n)
			continue
		}
		moved[prop] = append(moved[prop], member)
	}
	if len(moved) == 0 {
		return "", nil // fixed upstream: nothing to do
	}
	req.Content = kept
	var notes []string
	props := mapGet(manifest, "properties")
	for _, prop := range sortedKeys(moved) {
		p := mapGet(props, prop)
		if p == nil {
			return "", fmt.Errorf("UnsignedAppStateManifest.required names %q.* but there is no property %q", prop, prop)
		}
		target, name := p, "UnsignedAppStateManifest.properties."+prop
		if ref := mapGet(p, "$ref"); ref != nil {
			const local = "#/components/schemas/"
			if !strings.HasPrefix(ref.Value, local) {
				return "", fmt.Errorf("property %q refers to %q, not to a local schema", prop, ref.Value)
			}
			name = strings.TrimPrefix(ref.Value, local)
			if target = mapGet(schemas, name); target == nil {
				return "", fmt.Errorf("property %q refers to the missing schema %q", prop, name)
			}
		}
		targetProps := mapGet(target, "properties")
		for _, member := range moved[prop] {
			if mapGet(targetProps, member) == nil {
				return "", fmt.Errorf("%s has no property %q to require", name, member)
			}
		}
		addRequired(target, moved[prop])
		notes = append(notes, fmt.Sprintf("%s.required gains [%s]", name, strings.Join(moved[prop], ", ")))
	}
	return "erratum 1: dropped the dotted entries bundle.* from UnsignedAppStateManifest.required; " +
		strings.Join(notes, "; ") + " (required applies to a non-null bundle only)", nil
}

// metadataAnnotations is erratum 2: appDeploymentMetadata.required names
// "annotations", which the schema does not define and the published pages do
// not have.
func metadataAnnotations(schemas *yaml.Node) (string, error) {
	meta := mapGet(schemas, "appDeploymentMetadata")
	if meta == nil {
		return "", fmt.Errorf("components.schemas.appDeploymentMetadata is missing")
	}
	if mapGet(mapGet(meta, "properties"), "annotations") != nil {
		return "", nil // defined upstream now: the requirement stands
	}
	req := mapGet(meta, "required")
	if req == nil || req.Kind != yaml.SequenceNode {
		return "", nil
	}
	n := len(req.Content)
	req.Content = slices.DeleteFunc(req.Content, func(e *yaml.Node) bool { return e.Value == "annotations" })
	if len(req.Content) == n {
		return "", nil
	}
	return "erratum 2: dropped the undefined \"annotations\" from appDeploymentMetadata.required", nil
}

func mapGet(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func addRequired(schema *yaml.Node, names []string) {
	req := mapGet(schema, "required")
	if req == nil {
		req = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		schema.Content = append(schema.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "required"}, req)
	}
	for _, name := range names {
		if slices.ContainsFunc(req.Content, func(e *yaml.Node) bool { return e.Value == name }) {
			continue
		}
		req.Content = append(req.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name})
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ---- routing: method + path against the document's path templates ----

const slashProbe = "a/b"

func buildRoutes(doc *openapi3.T) ([]route, error) {
	var routes []route
	for template, item := range doc.Paths.Map() {
		if !strings.HasPrefix(template, "/") {
			return nil, fmt.Errorf("path %q does not start with /", template)
		}
		r := route{template: template, item: item}
		parts := strings.Split(template[1:], "/")
		for i, part := range parts {
			if strings.HasPrefix(part, "{") && strings.HasSuffix(part, "}") && strings.Count(part, "{") == 1 {
				name := part[1 : len(part)-1]
				r.segs = append(r.segs, segment{param: name})
				if i == len(parts)-1 {
					r.spans = paramSpansSlashes(item, name)
				}
				continue
			}
			if strings.ContainsAny(part, "{}") {
				return nil, fmt.Errorf("path %q: a template segment mixing text and parameters is not supported", template)
			}
			r.segs = append(r.segs, segment{literal: part})
			r.literals++
		}
		routes = append(routes, r)
	}
	// The OpenAPI rule: concrete paths are matched before templated ones.
	sort.Slice(routes, func(i, j int) bool {
		a, b := routes[i], routes[j]
		if a.literals != b.literals {
			return a.literals > b.literals
		}
		if a.spans != b.spans {
			return !a.spans
		}
		return a.template < b.template
	})
	return routes, nil
}

// paramSpansSlashes reports whether the path parameter's schema has a pattern
// that admits "/": rc.3's DeviceId ("gateway-1/child-device-2", as in the
// ProblemDetail example instance /api/v1/capabilities/gateway-1/child-device-2).
func paramSpansSlashes(item *openapi3.PathItem, name string) bool {
	for _, op := range item.Operations() {
		for _, p := range append(slices.Clone(item.Parameters), op.Parameters...) {
			if p == nil || p.Value == nil || p.Value.In != openapi3.ParameterInPath || p.Value.Name != name {
				continue
			}
			if p.Value.Schema == nil || p.Value.Schema.Value == nil || p.Value.Schema.Value.Pattern == "" {
				continue
			}
			re, err := regexp.Compile(p.Value.Schema.Value.Pattern)
			if err == nil && re.MatchString(slashProbe) {
				return true
			}
		}
	}
	return false
}

// match finds the path template a request path belongs to, with its path
// parameters percent-decoded.
func (c *Checker) match(u *url.URL) (*route, map[string]string, bool) {
	raw := u.EscapedPath()
	if !strings.HasPrefix(raw, "/") {
		return nil, nil, false
	}
	parts := strings.Split(raw[1:], "/")
	for i := range c.routes {
		r := &c.routes[i]
		if len(parts) < len(r.segs) || (len(parts) > len(r.segs) && !r.spans) {
			continue
		}
		params := map[string]string{}
		ok := true
		for j, s := range r.segs {
			last := j == len(r.segs)-1
			part := parts[j]
			if last && r.spans {
				part = strings.Join(parts[j:], "/")
			}
			if s.param == "" {
				if part != s.literal {
					ok = false
					break
				}
				continue
			}
			if part == "" || strings.Contains(part, "//") || strings.HasSuffix(part, "/") {
				ok = false
				break
			}
			v, err := unescapeSegments(part)
			if err != nil {
				ok = false
				break
			}
			params[s.param] = v
		}
		if ok {
			return r, params, true
		}
	}
	return nil, nil, false
}

func unescapeSegments(s string) (string, error) {
	parts := strings.Split(s, "/")
	for i, p := range parts {
		v, err := url.PathUnescape(p)
		if err != nil {
			return "", err
		}
		parts[i] = v
	}
	return strings.Join(parts, "/"), nil
}

// operation returns the operation of a route for a method, and the methods the
// route declares.
func (r *route) operation(method string) (*openapi3.Operation, []string) {
	ops := r.item.Operations()
	var methods []string
	for m := range ops {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	return ops[strings.ToUpper(method)], methods
}
