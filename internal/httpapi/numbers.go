package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// maxExactInteger is the largest magnitude below which every integer is a
// float64 exactly (2^53).
const maxExactInteger = 1 << 53

// integralNumbers rewrites, in a JSON document, every number written with a
// fraction or an exponent whose value is an integer of magnitude at most
// 2^53 ("1e2", "100.0", "-2.5e1") as that integer ("100", "-25"); the rest
// of the bytes stay as they are. JSON Schema's integer is the mathematical
// one, so the contract's validator accepts such numbers for integer
// fields, while the generated handlers decode them into Go integers, which
// take only the plain form. Returns the document unchanged (and false)
// when there is nothing to rewrite. The input must be valid JSON.
func integralNumbers(doc []byte) ([]byte, bool) {
	var out []byte
	last := 0
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		if c == '"' { // skip the string
			for i++; i < len(doc) && doc[i] != '"'; i++ {
				if doc[i] == '\\' {
					i++
				}
			}
			continue
		}
		if c != '-' && (c < '0' || c > '9') {
			continue
		}
		j, plain := i, true
		for ; j < len(doc); j++ {
			d := doc[j]
			if d == '.' || d == 'e' || d == 'E' {
				plain = false
			} else if d != '-' && d != '+' && (d < '0' || d > '9') {
				break
			}
		}
		if !plain {
			if n, ok := exactInteger(doc[i:j]); ok {
				out = append(out, doc[last:i]...)
				out = strconv.AppendInt(out, n, 10)
				last = j
			}
		}
		i = j - 1
	}
	if out == nil {
		return doc, false
	}
	return append(out, doc[last:]...), true
}

// exactInteger reads a JSON number literal exactly (not through float64,
// which rounds 9007199254740993e0 to an integer it is not) and returns it
// when it is an integer of magnitude at most 2^53. Literals longer than
// maxIntegerLiteral bytes, or with an exponent beyond ±maxIntegerLiteral,
// are not read (no small integer needs them, and big.Rat's work grows with
// both).
func exactInteger(lit []byte) (int64, bool) {
	if len(lit) > maxIntegerLiteral {
		return 0, false
	}
	if k := bytes.IndexAny(lit, "eE"); k >= 0 {
		e, err := strconv.Atoi(string(lit[k+1:]))
		if err != nil || e > maxIntegerLiteral || e < -maxIntegerLiteral {
			return 0, false
		}
	}
	r, ok := new(big.Rat).SetString(string(lit))
	if !ok || !r.IsInt() || r.Num().CmpAbs(big.NewInt(maxExactInteger)) > 0 {
		return 0, false
	}
	return r.Num().Int64(), true
}

// maxIntegerLiteral bounds what exactInteger reads: the length of a
// literal, and its exponent.
const maxIntegerLiteral = 400

// integerBodies applies integralNumbers to the JSON body of a management
// operation whose body schema has integers (operation.integers), after the
// validator and just before the generated handler decodes it, and keeps
// the body it passes on in the request's context (decodedBodyKey), for
// decodeProblem to point into.
func (s *Server) integerBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rctx := chi.RouteContext(r.Context())
		if r.Body == nil || r.Body == http.NoBody || rctx == nil || !strings.HasPrefix(r.URL.Path, "/mgmt/") {
			next.ServeHTTP(w, r)
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			next.ServeHTTP(w, r)
			return
		}
		body, ok := s.readBody(w, r)
		if !ok {
			return
		}
		if s.ops[r.Method+" "+rctx.RoutePattern()].integers {
			body, _ = integralNumbers(body)
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), decodedBodyKey{}, body)))
	})
}

// decodedBodyKey holds, in a request's context, the JSON body the
// generated handler decodes (integerBodies).
type decodedBodyKey struct{}

// decodeProblem answers a body the generated handler could not decode
// into its Go types, though it passed validation: a number the Go type
// cannot hold (an integer beyond int64, a number beyond float64 such as
// -1e999) is a 422 naming the field; anything else a 400 malformed. The
// decoder's own words (Go type names) are not shown.
func decodeProblem(r *http.Request, err error) problem {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// The value's pointer, from where the decoder stopped (just past
		// it) in the body it read; else from the decoder's field path,
		// which names no map key.
		var field string
		if body, ok := r.Context().Value(decodedBodyKey{}).([]byte); ok && te.Offset > 0 && int(te.Offset) <= len(body) {
			// The literal ends at or before the offset: its last
			// occurrence before it.
			// Only a number's literal is looked for: a type name ("string")
			// could be found in an unrelated string.
			if _, lit, isNum := strings.Cut(te.Value, "number "); isNum && lit != "" {
				if at := bytes.LastIndex(body[:te.Offset], []byte(lit)); at >= 0 {
					field = pointerAt(body, at)
				}
			}
		}
		if field == "" {
			var b strings.Builder
			for seg := range strings.SplitSeq(te.Field, ".") {
				if seg != "" {
					b.WriteString("/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(seg))
				}
			}
			field = b.String()
		}
		msg := "has a value of the wrong type"
		if strings.HasPrefix(te.Value, "number") {
			msg = "is out of the range this server can hold: " + strings.TrimPrefix(te.Value, "number ")
			if len(msg) > 200 {
				msg = msg[:200] + "…"
			}
		}
		return problem{Type: ProblemBase + "invalid-request", Title: titles["invalid-request"], Status: http.StatusUnprocessableEntity,
			Detail: "The request does not match the API contract (1 problem(s), listed in errors).",
			Errors: []fieldProblem{{Field: field, Message: msg}}}
	}
	return problem{Type: ProblemBase + "malformed", Title: titles["malformed"], Status: http.StatusBadRequest,
		Detail: "The request body could not be decoded."}
}
