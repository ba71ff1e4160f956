package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	nethttpmiddleware "github.com/oapi-codegen/nethttp-middleware"

	"github.com/wfm-dev/wfm/api"
)

// uuidPattern is the textual form of a UUID the contract accepts: 32
// hexadecimal digits in groups of 8-4-4-4-12 (any version: an id the server
// never issued is answered 404, not 400).
const uuidPattern = `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`

// requestValidator returns the middleware that checks every request against
// the contract before a handler sees it, answering problem+json with every
// problem found at once.
func (s *Server) requestValidator(spec *openapi3.T) func(http.Handler) http.Handler {
	return nethttpmiddleware.OapiRequestValidatorWithOptions(spec, &nethttpmiddleware.Options{
		Options: openapi3filter.Options{
			MultiError:         true,
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			// kin-openapi checks no "uuid" format by default: a malformed
			// id in a body would pass here and fail in the handler's JSON
			// decoding, as a 400 naming no field.
			SchemaValidationOptions: []openapi3.SchemaValidationOption{
				openapi3.WithStringFormatValidator("uuid", openapi3.NewRegexpFormatValidator(uuidPattern)),
			},
		},
		DoNotValidateServers: true,
		// The device poll is the hot path (design section 9). Its only inputs
		// are the If-None-Match and Accept headers, checked here exactly as
		// the contract states (no query, If-None-Match at most 1024 bytes),
		// so the full route lookup and validation are skipped for it.
		//
		// Status reports are the other hot path: their body is checked by
		// margo.ParseStatusReport, which enforces rc.3's schema and more (with
		// exact pointers), so the generic validation would only repeat it.
		Skipper: func(r *http.Request) bool {
			if r.Method == http.MethodGet && r.URL.Path == "/api/v1/deployments" && r.URL.RawQuery == "" {
				return len(r.Header.Get("If-None-Match")) <= 1024
			}
			if r.Method != http.MethodPost || r.URL.RawQuery != "" || !strings.HasPrefix(r.URL.Path, "/api/v1/deployments/") ||
				!strings.HasSuffix(r.URL.Path, "/status") {
				return false
			}
			mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			return err == nil && mt == "application/json"
		},
		DiscardValidatedValue: true, // handlers decode the raw body themselves (exact bytes are stored)
		SilenceServersWarning: true,
		ErrorHandlerWithOpts: func(ctx context.Context, err error, w http.ResponseWriter, r *http.Request, opts nethttpmiddleware.ErrorHandlerOpts) {
			if errors.Is(err, routers.ErrMethodNotAllowed) {
				s.setAllow(w, r.URL)
			}
			writeProblem(w, r, s.validationProblem(r, err, opts.StatusCode))
		},
	})
}

// validationProblem translates a kin-openapi validation error.
func (s *Server) validationProblem(r *http.Request, err error, suggested int) problem {
	switch {
	case errors.Is(err, routers.ErrPathNotFound):
		return notFoundProblem(r)
	case errors.Is(err, routers.ErrMethodNotAllowed):
		return methodNotAllowedProblem(r)
	}
	var fields []fieldProblem
	status := http.StatusBadRequest
	collectRequestErrors(err, &fields, &status)
	if len(fields) == 0 {
		return problem{Type: ProblemBase + "invalid-request", Title: titles["invalid-request"], Status: status,
			Detail: "The request does not match the API contract: " + err.Error()}
	}
	sort.SliceStable(fields, func(i, j int) bool { return fields[i].Field < fields[j].Field })
	typ := "invalid-request"
	switch status {
	case http.StatusRequestEntityTooLarge:
		typ = "too-large"
	case http.StatusUnsupportedMediaType:
		typ = "unsupported-media-type"
	}
	return problem{Type: ProblemBase + typ, Title: titles[typ], Status: status,
		Detail: fmt.Sprintf("The request does not match the API contract (%d problem(s), listed in errors).", len(fields)),
		Errors: fields}
}

// collectRequestErrors flattens kin-openapi's nested errors into field
// problems. Parameters are named "query/<name>", "path/<name>" or
// "header/<name>"; body problems are JSON pointers into the body.
func collectRequestErrors(err error, out *[]fieldProblem, status *int) {
	if multi, ok := err.(openapi3.MultiError); ok { // a list of request errors: keep each one's context
		for _, e := range multi {
			collectRequestErrors(e, out, status)
		}
		return
	}
	var re *openapi3filter.RequestError
	if !errors.As(err, &re) {
		var se *openapi3.SchemaError
		if errors.As(err, &se) {
			*out = append(*out, fieldProblem{Field: schemaPointer(se), Message: schemaReason(se)})
		}
		return
	}
	switch {
	case re.Parameter != nil:
		field := re.Parameter.In + "/" + re.Parameter.Name
		msgs := schemaReasons(re.Err)
		if len(msgs) == 0 {
			msg := re.Reason
			if msg == "" && re.Err != nil {
				msg = re.Err.Error()
			}
			msgs = []string{msg}
		}
		for _, m := range msgs {
			*out = append(*out, fieldProblem{Field: field, Message: m})
		}
	case re.RequestBody != nil:
		var mbe *http.MaxBytesError
		if errors.As(re.Err, &mbe) {
			*status = http.StatusRequestEntityTooLarge
			*out = append(*out, fieldProblem{Field: "", Message: fmt.Sprintf("the request body exceeds %d bytes", mbe.Limit)})
			return
		}
		if errors.Is(re.Err, openapi3filter.ErrInvalidRequired) || re.Reason == "value is required but missing" {
			*out = append(*out, fieldProblem{Field: "", Message: "a request body is required"})
			return
		}
		var unsupported *openapi3filter.ParseError
		// kin-openapi reports an undeclared Content-Type only by this reason text.
		if (re.Err == nil && strings.HasPrefix(re.Reason, "header Content-Type has unexpected value")) ||
			(errors.As(re.Err, &unsupported) && unsupported.Kind == openapi3filter.KindUnsupportedFormat) {
			*status = http.StatusUnsupportedMediaType
			*out = append(*out, fieldProblem{Field: "header/Content-Type", Message: "this operation does not take " + strconv.Quote(re.Input.Request.Header.Get("Content-Type"))})
			return
		}
		var se *openapi3.SchemaError
		var multi openapi3.MultiError
		if errors.As(re.Err, &multi) || errors.As(re.Err, &se) {
			collectSchemaErrors(re.Err, out)
			if *status == http.StatusBadRequest {
				*status = http.StatusUnprocessableEntity
			}
			return
		}
		msg := re.Reason
		if re.Err != nil {
			msg = strings.TrimSpace(msg + ": " + re.Err.Error())
		}
		*out = append(*out, fieldProblem{Field: "", Message: msg})
	default:
		*out = append(*out, fieldProblem{Field: "", Message: re.Error()})
	}
}

func collectSchemaErrors(err error, out *[]fieldProblem) {
	var multi openapi3.MultiError
	if errors.As(err, &multi) {
		for _, e := range multi {
			collectSchemaErrors(e, out)
		}
		return
	}
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		*out = append(*out, fieldProblem{Field: schemaPointer(se), Message: schemaReason(se)})
		return
	}
	*out = append(*out, fieldProblem{Field: "", Message: err.Error()})
}

// schemaReason is a schema error's reason as the answer gives it: the
// validator's own, except where it speaks of its Go types (a number beyond
// float64 is "cannot convert json.Number to float64").
func schemaReason(se *openapi3.SchemaError) string {
	if strings.Contains(se.Reason, "json.Number") || strings.Contains(se.Reason, "float64") {
		return "is a number out of the range this server can hold"
	}
	// Bounds the validator prints in Go's float form ("at most
	// 2.147483647e+09") are written as the integers they are.
	return floatForm.ReplaceAllStringFunc(se.Reason, func(f string) string {
		if v, err := strconv.ParseFloat(f, 64); err == nil && v == math.Trunc(v) && math.Abs(v) <= maxExactInteger {
			return strconv.FormatInt(int64(v), 10)
		}
		return f
	})
}

// floatForm matches a number Go printed with an exponent.
var floatForm = regexp.MustCompile(`-?[0-9]+(\.[0-9]+)?e[+-][0-9]+`)

func schemaReasons(err error) []string {
	var multi openapi3.MultiError
	if errors.As(err, &multi) {
		var r []string
		for _, e := range multi {
			r = append(r, schemaReasons(e)...)
		}
		return r
	}
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		return []string{schemaReason(se)}
	}
	return nil
}

// pointerOf builds an RFC 6901 JSON pointer from path segments.
// schemaPointer locates a schema error in the body. kin-openapi locates an
// undeclared member (additionalProperties: false) at the object holding it;
// it is named itself, so that {"colour": …} is refused at /colour, not at
// the whole body. kin-openapi says which member only in the reason text.
func schemaPointer(se *openapi3.SchemaError) string {
	p := pointerOf(se.JSONPointer())
	if se.SchemaField != "properties" {
		return p
	}
	quoted, ok := strings.CutSuffix(strings.TrimPrefix(se.Reason, "property "), " is unsupported")
	if name, err := strconv.Unquote(quoted); ok && err == nil {
		return p + pointerOf([]string{name})
	}
	return p
}

func pointerOf(segs []string) string {
	if len(segs) == 0 {
		return ""
	}
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(s))
	}
	return b.String()
}

func notFoundProblem(r *http.Request) problem {
	return problem{Type: ProblemBase + "not-found", Title: titles["not-found"], Status: http.StatusNotFound,
		Detail: fmt.Sprintf("No resource matches %s %s.", r.Method, r.URL.Path)}
}

// wrongListenerProblem answers a device API path on the management
// listener: the device API is served on the device listener only, over
// mutual TLS. deviceURL is that listener's base URL; "" names the setting.
func wrongListenerProblem(r *http.Request, deviceURL string) problem {
	where := "the device listener (-device-listen)"
	p := problem{Type: ProblemBase + "wrong-listener", Title: titles["wrong-listener"], Status: http.StatusNotFound}
	if deviceURL != "" {
		where = "the device listener, " + deviceURL
		p.Extra = map[string]any{"deviceApi": deviceURL + r.URL.Path}
	}
	p.Detail = fmt.Sprintf("The device API is served on %s, over mutual TLS with a WFM client certificate, not on this management listener: "+
		"call %s there with the certificate (for example curl --cacert ca.pem --cert client.pem --key client-key.pem %s).",
		where, r.URL.Path, cmp.Or(deviceURL, "https://<device-listen>")+r.URL.Path)
	return p
}

func methodNotAllowedProblem(r *http.Request) problem {
	return problem{Type: ProblemBase + "method-not-allowed", Title: titles["method-not-allowed"], Status: http.StatusMethodNotAllowed,
		Detail: fmt.Sprintf("%s %s is not allowed; the Allow header lists the methods that are.", r.Method, r.URL.Path)}
}

// paramProblem translates the generated router's parameter binding errors
// (a value that does not even parse as the declared type).
func paramProblem(r *http.Request, err error) problem {
	name, msg := "", err.Error()
	var (
		invalid  *api.InvalidParamFormatError
		required *api.RequiredParamError
		header   *api.RequiredHeaderError
		many     *api.TooManyValuesForParamError
		unmarsh  *api.UnmarshalingParamError
	)
	switch {
	case errors.As(err, &invalid):
		name, msg = invalid.ParamName, "not a valid value of the declared type"
	case errors.As(err, &required):
		name, msg = required.ParamName, "required"
	case errors.As(err, &header):
		name, msg = header.ParamName, "required"
	case errors.As(err, &many):
		name, msg = many.ParamName, "given more than once"
	case errors.As(err, &unmarsh):
		name, msg = unmarsh.ParamName, "not a valid value of the declared type"
	}
	field := ""
	if name != "" {
		field = "path/" + name
		if r.URL.Query().Has(name) {
			field = "query/" + name
		} else if r.Header.Get(name) != "" {
			field = "header/" + name
		}
	}
	return problem{Type: ProblemBase + "invalid-request", Title: titles["invalid-request"], Status: http.StatusBadRequest,
		Detail: "A parameter does not match the API contract.", Errors: []fieldProblem{{Field: field, Message: msg}}}
}
