package margotest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// exchange is a request matched to one operation of the document.
type exchange struct {
	c      *Checker
	route  *route
	op     *openapi3.Operation
	method string
	params map[string]string
	key    string // "GET /api/v1/deployments", the operation's identity
}

func (x *exchange) label() string { return "margo " + x.c.version + " " + x.key }

// find matches a request to an operation, or reports why it is none.
func (c *Checker) find(t testing.TB, req *http.Request) *exchange {
	t.Helper()
	if req == nil || req.URL == nil {
		t.Errorf("margo %s: no request given, so no operation can be found", c.version)
		return nil
	}
	r, params, ok := c.match(req.URL)
	if !ok {
		t.Errorf("margo %s: %s %s is not a Margo operation (no path of the document matches)",
			c.version, req.Method, req.URL.EscapedPath())
		return nil
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	op, methods := r.operation(method)
	if op == nil {
		t.Errorf("margo %s: %s %s is not a Margo operation: the document declares only %s for %s",
			c.version, method, req.URL.EscapedPath(), strings.Join(methods, ", "), r.template)
		return nil
	}
	return &exchange{c: c, route: r, op: op, method: strings.ToUpper(method), params: params,
		key: strings.ToUpper(method) + " " + r.template}
}

func (x *exchange) kinRoute() *routers.Route {
	return &routers.Route{Spec: x.c.doc, Path: x.route.template, PathItem: x.route.item,
		Method: x.method, Operation: x.op}
}

// Check validates one response of the device API against the document: that
// req is a Margo operation, that the status is declared for it, the declared
// headers, the Content-Type, the body against the declared schema (an empty
// body where no content is declared, as for 204 and 304), and the rules the
// schema cannot express (see the package documentation). body is the exact
// response body; res.Body is not read. Every problem is reported with
// t.Errorf; Check does not stop the test.
//
// The request is used to find the operation and its path parameters only: its
// body and parameters are not validated (use CheckRequest), so a test that
// sends a bad request on purpose can still check the error response.
func (c *Checker) Check(t testing.TB, req *http.Request, res *http.Response, body []byte) {
	if c == nil {
		return
	}
	t.Helper()
	x := c.find(t, req)
	if x == nil {
		return
	}
	if res == nil {
		t.Errorf("%s: no response given", x.label())
		return
	}
	status := res.StatusCode
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s → %d: %s", x.label(), status, fmt.Sprintf(format, args...))
	}

	responses := x.op.Responses
	ref := responses.Status(status)
	if ref == nil {
		ref = responses.Default()
	}
	if ref == nil || ref.Value == nil {
		fail("status %d is not declared for this operation (declared: %s)", status, strings.Join(responses.Keys(), ", "))
		return
	}
	header := res.Header
	if header == nil {
		header = http.Header{}
	}

	// Declared headers (kin-openapi; the body is validated below, by us).
	hdrIn := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: headerOnly(req), PathParams: x.params, Route: x.kinRoute(),
		},
		Status: status,
		Header: header,
		Options: &openapi3filter.Options{
			ExcludeResponseBody: true, IncludeResponseStatus: true, MultiError: true,
		},
	}
	hdrIn.SetBodyBytes(nil)
	if err := openapi3filter.ValidateResponse(context.Background(), hdrIn); err != nil {
		fail("%s", explain(err))
	}

	payload, err := decodeContentEncoding(header, body)
	if err != nil {
		fail("%v", err)
		return
	}

	content := ref.Value.Content
	if len(content) == 0 || status == http.StatusNotModified || status == http.StatusNoContent {
		if len(body) != 0 {
			fail("the document declares no content for this response, but %d body bytes were sent (Content-Type %q)",
				len(body), header.Get("Content-Type"))
		}
	} else if ok := x.validateBody(fail, content, header.Get("Content-Type"), payload, openapi3.VisitAsResponse()); ok {
		if isProblemJSON(header.Get("Content-Type")) {
			checkProblemStatus(fail, status, payload)
		}
	}

	x.extraResponseChecks(fail, status, header, payload)
}

// CheckRequest validates a request a device sends (a capabilities PUT, a
// status POST, ...) against the document: the operation, its parameters, and
// the body against the declared schema, plus the rules the schema cannot
// express. body is the exact request body; req.Body is not read.
func (c *Checker) CheckRequest(t testing.TB, req *http.Request, body []byte) {
	if c == nil {
		return
	}
	t.Helper()
	x := c.find(t, req)
	if x == nil {
		return
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s request: %s", x.label(), fmt.Sprintf(format, args...))
	}

	// Parameters (path, query, header) and security with kin-openapi; the
	// body is validated below, by us.
	in := &openapi3filter.RequestValidationInput{
		Request: headerOnly(req), PathParams: x.params, Route: x.kinRoute(),
		Options: &openapi3filter.Options{
			ExcludeRequestBody: true, MultiError: true,
			// The document's only scheme is mutual TLS, which belongs to the
			// transport, not to the exchange this checker sees.
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
		},
	}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		fail("%s", explain(err))
	}

	rb := x.op.RequestBody
	switch {
	case rb == nil || rb.Value == nil:
		if len(body) != 0 {
			fail("the document declares no request body for this operation, but %d bytes were sent", len(body))
		}
		return
	case len(body) == 0:
		if rb.Value.Required {
			fail("the request body is required")
		}
		return
	}
	payload, err := decodeContentEncoding(req.Header, body)
	if err != nil {
		fail("%v", err)
		return
	}
	if !x.validateBody(fail, rb.Value.Content, req.Header.Get("Content-Type"), payload, openapi3.VisitAsRequest()) {
		return
	}
	x.extraRequestChecks(fail, payload)
}

// headerOnly is a copy of req without its body, for kin-openapi's parameter
// and header validation (the caller's body is never consumed).
func headerOnly(req *http.Request) *http.Request {
	r := req.Clone(context.Background())
	r.Body = http.NoBody
	r.ContentLength = 0
	if r.Header == nil {
		r.Header = http.Header{}
	}
	return r
}

// validateBody checks the Content-Type against the declared content and the
// body against its schema. It reports whether the body matched.
func (x *exchange) validateBody(fail func(string, ...any), content openapi3.Content, contentType string,
	body []byte, direction openapi3.SchemaValidationOption) bool {
	if contentType == "" {
		fail("Content-Type is missing (declared: %s)", strings.Join(contentKeys(content), ", "))
		return false
	}
	mt := content.Get(contentType)
	if mt == nil {
		fail("Content-Type %q is not declared (declared: %s)", contentType, strings.Join(contentKeys(content), ", "))
		return false
	}
	if mt.Schema == nil || mt.Schema.Value == nil {
		return true
	}
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		fail("Content-Type %q: %v", contentType, err)
		return false
	}
	value, err := decodeBody(mediaType, mt.Schema, body)
	if err != nil {
		fail("the %s body cannot be read: %v", mediaType, err)
		return false
	}
	opts := []openapi3.SchemaValidationOption{openapi3.MultiErrors(), direction}
	if x.c.doc.IsOpenAPI31OrLater() {
		opts = append(opts, openapi3.EnableJSONSchema2020())
	}
	if err := mt.Schema.Value.VisitJSON(value, opts...); err != nil {
		fail("body doesn't match schema%s: %s", schemaName(mt.Schema), explain(err))
		return false
	}
	return true
}

// decodeBody turns a body into the value its schema is checked against. The
// readers are chosen here, per call, and not through kin-openapi's
// process-global body decoder registry, which this package never changes (see
// the package documentation, "Body decoders").
func decodeBody(mediaType string, schema *openapi3.SchemaRef, body []byte) (any, error) {
	s := schema.Value
	isString := s.Type != nil && s.Type.Is(openapi3.TypeString)
	switch {
	case isString && s.Format == "binary":
		// rc.3's bundle (application/vnd.margo.bundle.v1+tar+gzip): raw bytes.
		return string(body), nil
	case mediaType == "application/yaml" || mediaType == "application/x-yaml":
		if !isString {
			return nil, fmt.Errorf("this checker reads YAML only where the schema is type string")
		}
		// Erratum 3: the ApplicationDeployment YAML is validated as its raw text.
		return string(body), nil
	case mediaType == "application/json" || strings.HasSuffix(mediaType, "+json"):
		if !json.Valid(body) {
			return nil, fmt.Errorf("not one well-formed JSON value")
		}
		return openapi3filter.JSONBodyDecoder(bytes.NewReader(body), nil, schema, nil)
	case isString:
		return string(body), nil
	}
	return nil, fmt.Errorf("this checker has no reader for %s with a non-string schema", mediaType)
}

func decodeContentEncoding(h http.Header, body []byte) ([]byte, error) {
	switch enc := strings.ToLower(strings.TrimSpace(h.Get("Content-Encoding"))); enc {
	case "", "identity":
		return body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("Content-Encoding gzip, but the body is not gzip: %v", err)
		}
		out, err := io.ReadAll(zr)
		if err != nil {
			return nil, fmt.Errorf("Content-Encoding gzip, but the body is not gzip: %v", err)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("Content-Encoding %q: this checker cannot decode it, so nothing about the body was checked", enc)
	}
}

func isProblemJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/problem+json"
}

// checkProblemStatus: RFC 9457 §3.1.3, "generators MUST use the same status
// code in the actual HTTP response".
func checkProblemStatus(fail func(string, ...any), status int, body []byte) {
	var p struct {
		Status json.Number `json:"status"`
	}
	if json.Unmarshal(body, &p) != nil || p.Status == "" {
		return
	}
	if p.Status.String() != strconv.Itoa(status) {
		fail("problem detail \"status\" is %s, the HTTP status is %d (RFC 9457 §3.1.3: they must be the same)", p.Status, status)
	}
}

func contentKeys(content openapi3.Content) []string {
	keys := make([]string, 0, len(content))
	for k := range content {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func schemaName(ref *openapi3.SchemaRef) string {
	if ref != nil && ref.Ref != "" {
		return " " + ref.Ref
	}
	return ""
}

// explain renders a kin-openapi error as its reasons, without the schema and
// value dumps SchemaError.Error() adds.
func explain(err error) string {
	var parts []string
	var walk func(error, string)
	walk = func(err error, prefix string) {
		switch e := err.(type) {
		case nil:
		case openapi3.MultiError:
			for _, sub := range e {
				walk(sub, prefix)
			}
		case *openapi3filter.ResponseError:
			p := prefix + e.Reason
			if e.Err == nil {
				parts = append(parts, p)
				return
			}
			walk(e.Err, p+": ")
		case *openapi3filter.RequestError:
			p := prefix
			switch {
			case e.Parameter != nil:
				p += fmt.Sprintf("parameter %q in %s: ", e.Parameter.Name, e.Parameter.In)
			case e.RequestBody != nil:
				p += "request body: "
			}
			if e.Reason != "" && (e.Err == nil || e.Reason != e.Err.Error()) {
				p += e.Reason
				if e.Err != nil {
					p += ": "
				}
			}
			if e.Err == nil {
				parts = append(parts, strings.TrimSuffix(p, ": "))
				return
			}
			walk(e.Err, p)
		case *openapi3filter.SecurityRequirementsError:
			parts = append(parts, prefix+e.Error())
		case *openapi3.SchemaError:
			parts = append(parts, prefix+schemaReason(e))
		default:
			var se *openapi3.SchemaError
			if errors.As(err, &se) {
				parts = append(parts, prefix+schemaReason(se))
				return
			}
			parts = append(parts, prefix+err.Error())
		}
	}
	walk(err, "")
	return strings.Join(parts, "; ")
}

func schemaReason(e *openapi3.SchemaError) string {
	reason := e.Reason
	// The JSON Schema 2020-12 engine's reason is a tree under a header naming
	// its internal schema URL; its lines ("- at '/path': ...") already carry
	// the location, so they are kept, on one line, and the header is dropped.
	if strings.Contains(reason, "jsonschema validation failed with") {
		var lines []string
		for _, l := range strings.Split(reason, "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "- ") {
				lines = append(lines, strings.TrimPrefix(l, "- "))
			}
		}
		if len(lines) > 0 {
			return strings.Join(lines, "; ")
		}
	}
	ptr := e.JSONPointer()
	if len(ptr) == 0 || strings.HasPrefix(reason, "error at ") {
		return reason
	}
	return fmt.Sprintf("at /%s: %s", strings.Join(ptr, "/"), reason)
}
