package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/wfm-dev/wfm/api"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

type requestKey struct{}

// withRequest is a strict middleware that makes the *http.Request reachable
// from handlers, for the few headers the contract cannot declare (Accept):
// in the request's state (reqState), or, outside requestContext, in a
// context value of its own.
func withRequest(f api.StrictHandlerFunc, _ string) api.StrictHandlerFunc {
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, req any) (any, error) {
		if st := stateOf(ctx); st != nil {
			st.req = r
			return f(ctx, w, r, req)
		}
		return f(context.WithValue(ctx, requestKey{}, r), w, r, req)
	}
}

func requestFrom(ctx context.Context) *http.Request {
	if st := stateOf(ctx); st != nil && st.req != nil {
		return st.req
	}
	r, _ := ctx.Value(requestKey{}).(*http.Request)
	return r
}

// negotiate picks the offer the Accept header prefers (RFC 9110 section
// 12.5.1). An empty header accepts the first offer. Returns false when the
// header accepts none of the offers.
func negotiate(accept string, offers ...string) (string, bool) {
	if strings.TrimSpace(accept) == "" {
		return offers[0], true
	}
	ranges := mediaRanges(accept)
	// An offer's quality is that of the most specific range matching it
	// (an exact type before type/*, before */*), so that "x;q=0, */*"
	// refuses x; the offer of the highest quality wins, on a tie the one
	// matched more specifically, then the first offered.
	best, bestQ, bestSpecific := "", 0.0, -1
	for _, o := range offers {
		q, specific := 0.0, -1
		for _, r := range ranges {
			s := -1
			switch {
			case r.mt == o:
				s = 2
			case r.mt == strings.SplitN(o, "/", 2)[0]+"/*":
				s = 1
			case r.mt == "*/*":
				s = 0
			}
			if s > specific || (s == specific && s >= 0 && r.q > q) {
				q, specific = r.q, s
			}
		}
		if specific < 0 || q <= 0 {
			continue
		}
		if q > bestQ || (q == bestQ && specific > bestSpecific) {
			best, bestQ, bestSpecific = o, q, specific
		}
	}
	return best, best != ""
}

// mediaRange is one member of an Accept header: a media range, lower-case,
// without its parameters, and its weight.
type mediaRange struct {
	mt string
	q  float64
}

// qvalue is RFC 9110's weight syntax (section 12.4.2).
var qvalue = regexp.MustCompile(`^(0(\.[0-9]{0,3})?|1(\.0{0,3})?)$`)

// mediaRanges reads an Accept header's members (a weight that is not a
// qvalue counts as 1).
func mediaRanges(accept string) []mediaRange {
	var ranges []mediaRange
	for _, part := range strings.Split(accept, ",") {
		fields := strings.Split(part, ";")
		r := mediaRange{mt: strings.ToLower(strings.TrimSpace(fields[0])), q: 1}
		for _, p := range fields[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if v = strings.TrimSpace(v); strings.EqualFold(strings.TrimSpace(k), "q") && qvalue.MatchString(v) {
				r.q, _ = strconv.ParseFloat(v, 64)
			}
		}
		ranges = append(ranges, r)
	}
	return ranges
}

// acceptsOwnType reports whether an Accept header takes a document served
// as its own media type own, which is JSON: a header that takes own or
// application/json (negotiate), unless it names own itself with weight 0
// ("not this type", whatever else it accepts; the highest weight of the
// ranges naming it, as negotiate reads them). The state manifest and the
// schemas are served so.
func acceptsOwnType(accept, own string) bool {
	if _, ok := negotiate(accept, own, "application/json"); !ok {
		return false
	}
	named, q := false, 0.0
	for _, r := range mediaRanges(accept) {
		if r.mt == own {
			named, q = true, max(q, r.q)
		}
	}
	return !named || q > 0
}

// readBody reads r's whole body (bounded by limitBody) or, when it cannot,
// answers the problem; ok is false then.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, ok bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeProblem(w, r, problemFromError(s.log, r, bodyReadError(err)))
		return nil, false
	}
	return body, true
}

// bodyReadError classifies a failure to read a request body.
func bodyReadError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &lifecycle.Error{Code: lifecycle.ETOOLARGE, Type: "too-large",
			Message: "The request body exceeds " + strconv.FormatInt(mbe.Limit, 10) + " bytes."}
	}
	return &lifecycle.Error{Code: lifecycle.EMALFORMED, Type: "malformed", Message: "The request body could not be read."}
}

func jsonRaw(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	return json.RawMessage(b), err
}
