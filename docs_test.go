package wfm_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// The docs cross-check keeps the prose and the product in step, in both
// directions, for the four kinds of name a reader acts on: problem types,
// endpoints (method and path), event types and the states of deployments,
// operations and rollouts. A name the docs give must exist in openapi.yaml
// or the code; a name the contract or the code defines must be documented
// somewhere in README.md or docs/ (read recursively, so new folders such as
// docs/sup/ are covered as they come).
//
// The extraction is deliberately narrow, so that it finds real drift and
// not prose: a problem type is a backticked slug right after an HTTP error
// status ("422 `immutable-parameter`"), a link into problems.md, or an
// anchor or first-column name in problems.md; an endpoint is a path whose
// first segment begins a contract path (/mgmt/…, /api/…, /healthz…), with
// its method when one precedes it; an event type is a backticked
// <subject>.<name>; a state is a "state" JSON member, a state= query value,
// or either side of a "from → to" transition.

// docAllowed lists names that the docs may give although neither the
// contract nor the code defines them, each with the reason.
var docAllowed = map[string]string{
	// Paths that the device API deliberately does not serve: child-device
	// ids ("gateway/child") answer 404, as the docs explain.
	"endpoint:PUT /api/v1/capabilities/gw/child":                 "child-device ids are refused (device-api.md, Limitations)",
	"endpoint:/api/v1/capabilities/gateway-1/child-device-2":     "child-device ids are refused (margo-errata.md)",
	"endpoint:PUT /api/v1/capabilities/gateway-1/child-device-2": "child-device ids are refused (margo-errata.md)",
	"endpoint:DELETE /api/v1/capabilities":                       "quoted from the history reason of an unregistration, which abbreviates the path",
	// Backticked names of the form <subject>.<name> that are not events.
	"event:operation.go":     "a Go file of internal/lifecycle",
	"event:rollout.deadline": "a rollout field's duration range (rollouts.md), not an event",
	// Words before "→" in device-api.md's list of state edges that are
	// prose, not states ("creation → pending", "any state in progress → failed").
	"state:creation": "prose in a list of state edges",
	"state:progress": "prose in a list of state edges",
	"state:state":    "prose in a list of state edges",
}

// codeAllowed lists names that the contract or the code defines but the
// docs need not name, each with the reason.
var codeAllowed = map[string]string{
	// lifecycle.Code values are a problem type only for an Error whose Type
	// is the code itself (lifecycle.Errorf) or empty. For these three no
	// request gets such an answer: EINVALID's Errorf calls are invariants of
	// event construction (lifecycle.NewEvent, the event store) and
	// configuration checks at start-up (devpki); no Error of EPRECONDITION
	// or EGONE lacks a specific type (precondition-failed, events-gone).
	"problem:invalid":      "only invariant and start-up configuration errors carry it",
	"problem:precondition": "every EPRECONDITION error has a specific type (precondition-failed)",
	"problem:gone":         "every EGONE error has a specific type (events-gone)",
}

// docFiles returns README.md and every Markdown file under docs/, by path.
func docFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	read := func(path string) {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		files[filepath.ToSlash(path)] = string(b)
	}
	read("README.md")
	require.NoError(t, filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			read(path)
		}
		return nil
	}))
	return files
}

// mention is a name found in a document, and where.
type mention struct {
	name  string // "<kind>:<name>"
	where string // file:line
}

func lineOf(text string, offset int) int { return strings.Count(text[:offset], "\n") + 1 }

var (
	// A problem type: a backticked slug right after an error status, with
	// an optional link around it ("422 [`x`](problems.md#x)"), "503 / 409"
	// included.
	problemAfterStatus = regexp.MustCompile("\\b[45]\\d\\d(?: / [45]\\d\\d)? \\[?`([a-z][a-z0-9-]*)`")
	// A link into problems.md.
	problemLink = regexp.MustCompile(`problems\.md#([a-z][a-z0-9-]*)`)
	// An anchor of problems.md, and the backticked names of a table's first
	// column there ("| `invalid-manifest`, `invalid-bundle` |").
	problemAnchor   = regexp.MustCompile(`<a id="([a-z][a-z0-9-]*)"></a>`)
	problemFirstCol = regexp.MustCompile("(?m)^\\| (?:<a id=\"[a-z0-9-]+\"></a>)?(`[a-z][a-z0-9-]*`(?:, `[a-z][a-z0-9-]*`)*) \\|")
	backticked      = regexp.MustCompile("`([^`\n]+)`")

	// An event type: <subject>.<name>, backticked alone.
	eventType = regexp.MustCompile(`^(deployment|revision|operation|device|client|application|token|rollout|webhook)\.[a-z_]+$`)

	// States.
	stateMember = regexp.MustCompile(`"state": ?"([a-z-]+)"`)
	stateQuery  = regexp.MustCompile(`[?&]state=([a-z,-]+)`)
	// "`a` → `b`", "a → b", "(removing → failed", "running | paused → cancelled".
	transition = regexp.MustCompile("(?:`|\\b)([a-z][a-z-]*)`? ?→ ?`?([a-z][a-z-]*)\\b")
	transAlt   = regexp.MustCompile(`\b([a-z][a-z-]*) \| ([a-z][a-z-]*) →`)
)

// endpointPattern matches an endpoint: a path whose first segment is the
// first segment of a contract path (mgmt, api, healthz…: so /mgmt/v2/… is
// caught too), preceded by a method, a URL's scheme and host, a shell
// variable ($WFM) or the start of a word, up to a character a path does not
// hold in prose.
func endpointPattern(contract []string) *regexp.Regexp {
	roots := map[string]bool{}
	for _, e := range contract {
		_, path, _ := strings.Cut(e, " ")
		root, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
		roots[regexp.QuoteMeta(root)] = true
	}
	alts := slices.Sorted(maps.Keys(roots))
	return regexp.MustCompile("(?m)(?:\\b(GET|POST|PUT|PATCH|DELETE|HEAD) +|https?://[a-z0-9.:…-]+|\\$\\{?[A-Z_]+\\}?|^|[\\s`'\"(\\[=])" +
		"(/(?:" + strings.Join(alts, "|") + ")\\b(?:/[^\\s`'\"()\\[\\],;|?#]*)?)")
}

// docMentions extracts every name the documents give; contract is the
// contract's endpoints ("METHOD /path").
func docMentions(files map[string]string, contract []string) []mention {
	var out []mention
	endpoint := endpointPattern(contract)
	sections := headingAnchors(files["docs/problems.md"])
	add := func(path, text string, off int, name string) {
		out = append(out, mention{name: name, where: path + ":" + strconv.Itoa(lineOf(text, off))})
	}
	for path, text := range files {
		for _, m := range problemAfterStatus.FindAllStringSubmatchIndex(text, -1) {
			add(path, text, m[0], "problem:"+text[m[2]:m[3]])
		}
		for _, m := range problemLink.FindAllStringSubmatchIndex(text, -1) {
			if !sections[text[m[2]:m[3]]] { // a link to a section is not a type
				add(path, text, m[0], "problem:"+text[m[2]:m[3]])
			}
		}
		if path == "docs/problems.md" {
			for _, m := range problemAnchor.FindAllStringSubmatchIndex(text, -1) {
				add(path, text, m[0], "problem:"+text[m[2]:m[3]])
			}
			for _, m := range problemFirstCol.FindAllStringSubmatchIndex(text, -1) {
				for _, b := range backticked.FindAllStringSubmatch(text[m[2]:m[3]], -1) {
					if b[1] != "type" {
						add(path, text, m[0], "problem:"+b[1])
					}
				}
			}
		}
		for _, m := range endpoint.FindAllStringSubmatchIndex(text, -1) {
			method := ""
			if m[2] >= 0 {
				method = text[m[2]:m[3]]
			}
			p := strings.TrimRight(text[m[4]:m[5]], ".:")
			add(path, text, m[0], "endpoint:"+strings.TrimSpace(method+" "+p))
		}
		for _, m := range backticked.FindAllStringSubmatchIndex(text, -1) {
			if eventType.MatchString(text[m[2]:m[3]]) {
				add(path, text, m[0], "event:"+text[m[2]:m[3]])
			}
		}
		for _, re := range []*regexp.Regexp{stateMember, stateQuery} {
			for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
				for s := range strings.SplitSeq(text[m[2]:m[3]], ",") {
					add(path, text, m[0], "state:"+s)
				}
			}
		}
		for _, re := range []*regexp.Regexp{transition, transAlt} {
			for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
				add(path, text, m[0], "state:"+text[m[2]:m[3]])
				add(path, text, m[0], "state:"+text[m[4]:m[5]])
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].where < out[j].where })
	return out
}

var heading = regexp.MustCompile(`(?m)^#+ (.+)$`)

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: lower case, punctuation but '-' dropped, spaces as '-'.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(text, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// contractEndpoints returns the contract's operations as "METHOD /path".
func contractEndpoints(t *testing.T) []string {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	var out []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	sort.Strings(out)
	return out
}

// segmentsMatch reports whether a documented path matches a contract path:
// a parameter of the contract ({id}) matches any segment, a documented
// placeholder ({id}, <id>) only a parameter. A documented path that ends in
// "…" (an abbreviation: "/mgmt/v1/rollouts…") matches every contract path
// it begins.
func segmentsMatch(doc, contract string) bool {
	if doc == "/mgmt/v1" || doc == "/api/v1" { // the API as a whole
		return true
	}
	doc = abbreviatedID.ReplaceAllString(doc, "/{id}")
	prefix := false
	if i := strings.Index(doc, "…"); i >= 0 {
		doc, prefix = strings.TrimRight(doc[:i], "/"), true
	}
	d, c := strings.Split(doc, "/"), strings.Split(contract, "/")
	if prefix {
		last := d[len(d)-1]
		if len(c) < len(d) {
			return false
		}
		c[len(d)-1] = strings.TrimSuffix(c[len(d)-1], strings.TrimPrefix(c[len(d)-1], last))
		c = c[:len(d)]
	}
	if len(d) != len(c) {
		return false
	}
	for i := range d {
		param := strings.HasPrefix(c[i], "{")
		placeholder := strings.HasPrefix(d[i], "{") || strings.HasPrefix(d[i], "<")
		switch {
		case strings.HasPrefix(d[i], "<") && !param:
			// "<action>": a literal segment the text goes on to list
		case param:
		case placeholder:
			return false
		case d[i] != c[i]:
			return false
		}
	}
	return true
}

// abbreviatedID is an id shortened in an example ("/6affc112-…/"): a
// placeholder.
var abbreviatedID = regexp.MustCompile(`/[0-9a-f]{4,}-?…`)

// codeProblemTypes returns the problem types the Go code defines: the Type
// of every lifecycle.Error and httpapi problem literal (a string, a constant
// or ProblemBase + a string), the first argument of lifecycle.Retryable,
// every constant named Problem…, the keys of httpapi's titles, and the
// lifecycle.Code values (the type of an Error without one).
func codeProblemTypes(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	type pkgFile struct {
		pkg  string
		file *ast.File
		path string
	}
	var files []pkgFile
	consts := map[string]string{} // "pkg.Name" -> value
	for _, root := range []string{"internal", "cmd"} {
		require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			files = append(files, pkgFile{f.Name.Name, f, path})
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							if s, ok := stringLit(vs.Values[i]); ok {
								consts[f.Name.Name+"."+n.Name] = s
							}
						}
					}
				}
			}
			return nil
		}))
	}
	out := map[string]string{}
	for _, pf := range files {
		value := func(e ast.Expr) (string, bool) {
			switch v := e.(type) {
			case *ast.BasicLit:
				return stringLit(v)
			case *ast.Ident:
				s, ok := consts[pf.pkg+"."+v.Name]
				return s, ok
			case *ast.SelectorExpr:
				if x, ok := v.X.(*ast.Ident); ok {
					s, ok := consts[x.Name+"."+v.Sel.Name]
					return s, ok
				}
			case *ast.BinaryExpr:
				if x, ok := v.X.(*ast.Ident); ok && x.Name == "ProblemBase" {
					return stringLit(v.Y)
				}
			}
			return "", false
		}
		ast.Inspect(pf.file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				typeName := ""
				switch tt := n.Type.(type) {
				case *ast.Ident:
					typeName = tt.Name
				case *ast.SelectorExpr:
					typeName = tt.Sel.Name
				}
				if typeName != "Error" && typeName != "problem" {
					return true
				}
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Type" {
							if s, ok := value(kv.Value); ok {
								out[s] = fset.Position(kv.Pos()).String()
							}
						}
					}
				}
			case *ast.CallExpr:
				name := ""
				switch f := n.Fun.(type) {
				case *ast.Ident:
					name = f.Name
				case *ast.SelectorExpr:
					name = f.Sel.Name
				}
				if name == "Retryable" && len(n.Args) == 3 {
					if s, ok := value(n.Args[0]); ok {
						out[s] = fset.Position(n.Pos()).String()
					}
				}
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if id.Name == "titles" && pf.pkg == "httpapi" && i < len(n.Values) {
						if cl, ok := n.Values[i].(*ast.CompositeLit); ok {
							for _, el := range cl.Elts {
								if s, ok := value(el.(*ast.KeyValueExpr).Key); ok {
									out[s] = fset.Position(el.Pos()).String()
								}
							}
						}
					}
				}
			}
			return true
		})
	}
	for k, v := range consts {
		_, name, _ := strings.Cut(k, ".")
		if strings.HasPrefix(name, "Problem") && !strings.HasSuffix(name, "Base") {
			out[v] = k
		}
	}
	for _, c := range []lifecycle.Code{lifecycle.EINVALID, lifecycle.EMALFORMED, lifecycle.ENOTFOUND, lifecycle.ECONFLICT,
		lifecycle.EPRECONDITION, lifecycle.ETOOLARGE, lifecycle.EUNAUTHORIZED, lifecycle.EFORBIDDEN, lifecycle.EUNAVAILABLE,
		lifecycle.EINTERNAL, lifecycle.EUNSUPPORTEDTYPE, lifecycle.ENOTACCEPTABLE, lifecycle.EGONE} {
		out[string(c)] = "lifecycle.Code"
	}
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	b, ok := e.(*ast.BasicLit)
	if !ok || b.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(b.Value)
	return s, err == nil
}

// codeNames returns every name the contract and the code define, by
// "<kind>:<name>", with where it is defined.
func codeNames(t *testing.T) map[string]string {
	t.Helper()
	names := map[string]string{}
	for typ, where := range codeProblemTypes(t) {
		names["problem:"+typ] = where
	}
	for _, e := range contractEndpoints(t) {
		names["endpoint:"+e] = "openapi.yaml"
	}
	for _, e := range lifecycle.EventTypes() {
		names["event:"+string(e)] = "lifecycle.EventTypes"
	}
	for _, s := range lifecycle.AllStates() {
		names["state:"+string(s)] = "lifecycle.AllStates"
	}
	for _, s := range lifecycle.AllOperationStates() {
		names["state:"+string(s)] = "lifecycle.AllOperationStates"
	}
	for _, s := range lifecycle.AllRolloutStates() {
		names["state:"+string(s)] = "lifecycle.AllRolloutStates"
	}
	return names
}

// TestDocsNameOnlyWhatExists: every problem type, endpoint, event type and
// state the docs name exists in the contract or the code.
func TestDocsNameOnlyWhatExists(t *testing.T) {
	names := codeNames(t)
	// The states a document may name also include the other state-like
	// enumerations a "from → to" or a "state" member can show: step states,
	// revision outcomes, rollout member statuses, and every enumeration of
	// the contract named …State.
	for _, s := range lifecycle.AllStepStates() {
		names["state:"+string(s)] = "lifecycle.AllStepStates"
	}
	for _, s := range lifecycle.AllOutcomes() {
		names["state:"+string(s)] = "lifecycle.AllOutcomes"
	}
	for _, s := range lifecycle.AllMemberStatuses() {
		names["state:"+string(s)] = "lifecycle.AllMemberStatuses"
	}
	// And the contract's other state enumerations (a wave's state…).
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	for name, ref := range doc.Components.Schemas {
		if strings.HasSuffix(name, "State") {
			for _, v := range ref.Value.Enum {
				if s, ok := v.(string); ok {
					names["state:"+s] = "components.schemas." + name
				}
			}
		}
	}
	endpoints := contractEndpoints(t)
	var unknown []string
	used := map[string]bool{}
	for _, m := range docMentions(docFiles(t), contractEndpoints(t)) {
		if _, ok := names[m.name]; ok {
			continue
		}
		if _, ok := docAllowed[m.name]; ok {
			used[m.name] = true
			continue
		}
		if p, ok := strings.CutPrefix(m.name, "endpoint:"); ok {
			method, path, hasMethod := strings.Cut(p, " ")
			if !hasMethod {
				path = method
			}
			if slices.ContainsFunc(endpoints, func(e string) bool {
				em, ep, _ := strings.Cut(e, " ")
				return (!hasMethod || em == method) && segmentsMatch(path, ep)
			}) {
				continue
			}
		}
		unknown = append(unknown, m.where+": "+m.name)
	}
	for name := range docAllowed {
		if !used[name] {
			t.Errorf("docAllowed lists %s, which no document names any more: remove it", name)
		}
	}
	if len(unknown) > 0 {
		t.Errorf("the docs name %d thing(s) that neither openapi.yaml nor the code defines "+
			"(fix the doc, or add the name to docAllowed with the reason):\n%s", len(unknown), strings.Join(unknown, "\n"))
	}
}

// TestDocsNameEverythingThatExists: every problem type, endpoint, event type
// and state that the contract or the code defines is documented somewhere.
func TestDocsNameEverythingThatExists(t *testing.T) {
	mentioned := map[string]bool{}
	endpointsDoc := map[string]bool{}
	for _, m := range docMentions(docFiles(t), contractEndpoints(t)) {
		mentioned[m.name] = true
		if p, ok := strings.CutPrefix(m.name, "endpoint:"); ok {
			endpointsDoc[p] = true
		}
	}
	// Any backticked name counts as documenting an event type or a state
	// (they are listed in tables and prose, not only in the patterns
	// above), and any backticked name in problems.md, the register of
	// problem types, a problem type; endpoints must be named with their
	// method, and not through a "<placeholder>" segment.
	for path, text := range docFiles(t) {
		for _, b := range backticked.FindAllStringSubmatch(text, -1) {
			mentioned["event:"+b[1]] = true
			mentioned["state:"+b[1]] = true
			if path == "docs/problems.md" {
				mentioned["problem:"+b[1]] = true
			}
		}
	}
	var missing []string
	defined := codeNames(t)
	for name := range codeAllowed {
		if _, ok := defined[name]; !ok {
			t.Errorf("codeAllowed lists %s, which the contract and the code no longer define: remove it", name)
		}
	}
	for name, where := range defined {
		if mentioned[name] && codeAllowed[name] != "" {
			t.Errorf("codeAllowed lists %s, which the docs name: remove it", name)
		}
		if mentioned[name] || codeAllowed[name] != "" {
			continue
		}
		if p, ok := strings.CutPrefix(name, "endpoint:"); ok {
			method, path, _ := strings.Cut(p, " ")
			found := false
			for d := range endpointsDoc {
				dm, dp, hasMethod := strings.Cut(d, " ")
				if hasMethod && dm == method && !strings.ContainsAny(dp, "…<") && segmentsMatch(dp, path) {
					found = true
					break
				}
			}
			if found {
				continue
			}
		}
		missing = append(missing, name+" (defined at "+where+")")
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%d name(s) of the contract or the code are documented nowhere in README.md or docs/ "+
			"(document them, or add them to codeAllowed with the reason):\n%s", len(missing), strings.Join(missing, "\n"))
	}
}

// TestAPIPageListsEveryOperation keeps docs/api.md, the one-page map of
// the API, exactly the contract's operations, each with its role; a
// failure prints the rows to add (in the section of the operation's tag).
func TestAPIPageListsEveryOperation(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	want, rows := map[string]string{}, map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			role, _ := op.Extensions["x-wfm-role"].(string)
			switch {
			case strings.HasPrefix(path, "/api/"):
				role = "client certificate"
			case role == "":
				role = "none"
			}
			e := method + " " + path
			want[e] = role
			rows[e] = fmt.Sprintf("| `%s` | %s | %s | (section %s)", e, role, strings.TrimSuffix(strings.TrimSpace(op.Summary), "."), strings.Join(op.Tags, ", "))
		}
	}
	b, err := os.ReadFile("docs/api.md")
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `([A-Z]+ /[^`]*)` \\| ([a-z ]+) \\|")
	got := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		if _, dup := got[m[1]]; dup {
			t.Errorf("docs/api.md lists %s twice", m[1])
		}
		got[m[1]] = m[2]
	}
	var wrong []string
	for e, role := range want {
		switch r, ok := got[e]; {
		case !ok:
			wrong = append(wrong, "add: "+rows[e])
		case r != role:
			wrong = append(wrong, fmt.Sprintf("fix the role of %s: %s, not %s", e, role, r))
		}
	}
	for e := range got {
		if _, ok := want[e]; !ok {
			wrong = append(wrong, "remove: "+e+" (not in openapi.yaml)")
		}
	}
	sort.Strings(wrong)
	if len(wrong) > 0 {
		t.Errorf("docs/api.md must list every operation of openapi.yaml with its x-wfm-role:\n%s", strings.Join(wrong, "\n"))
	}
}

// TestContractStatesAreTheCodes: the states (and the rollout causes and
// waiting reasons) the contract declares are the code's, in the same order, so that "exists in openapi.yaml or the code"
// means the same for both.
func TestContractStatesAreTheCodes(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	enum := func(schema string) []string {
		ref, ok := doc.Components.Schemas[schema]
		require.True(t, ok, "components.schemas.%s", schema)
		var out []string
		for _, v := range ref.Value.Enum {
			out = append(out, v.(string))
		}
		return out
	}
	strs := func(n int, at func(int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = at(i)
		}
		return out
	}
	ds, ops, rs := lifecycle.AllStates(), lifecycle.AllOperationStates(), lifecycle.AllRolloutStates()
	require.Equal(t, strs(len(ds), func(i int) string { return string(ds[i]) }), enum("DeploymentState"))
	require.Equal(t, strs(len(ops), func(i int) string { return string(ops[i]) }), enum("OperationState"))
	require.Equal(t, strs(len(rs), func(i int) string { return string(rs[i]) }), enum("RolloutState"))
	cs, ws := lifecycle.AllRolloutCauses(), lifecycle.AllWaitingReasons()
	require.Equal(t, strs(len(cs), func(i int) string { return string(cs[i]) }), enum("RolloutCause"))
	var waiting []string
	for _, v := range doc.Components.Schemas["RolloutWaiting"].Value.Properties["reason"].Value.Enum {
		waiting = append(waiting, v.(string))
	}
	require.Equal(t, strs(len(ws), func(i int) string { return string(ws[i]) }), waiting, "RolloutWaiting.reason")
}
