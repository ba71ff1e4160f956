package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// WithBearerToken returns a ClientOption that authenticates every request of
// the client with a management API token (`Authorization: Bearer <token>`).
// Spaces and line breaks around token are dropped, so the contents of a
// token file (`.data/admin-token`) can be passed as read.
//
// The client's constructor returns an error if the token is empty.
func WithBearerToken(token string) ClientOption {
	return func(c *Client) error {
		fn, err := BearerToken(token)
		if err != nil {
			return err
		}
		return WithRequestEditorFn(fn)(c)
	}
}

// BearerToken returns a RequestEditorFn that sets `Authorization: Bearer
// <token>` (token trimmed as WithBearerToken does). Pass it as a call's last
// argument to make one call as another token than the client's.
//
// Returns an error if the token is empty.
func BearerToken(token string) (RequestEditorFn, error) {
	token = strings.TrimSpace(token)
	if token == "" {
		return nil, errors.New("sdk: empty bearer token")
	}
	header := "Bearer " + token
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", header)
		return nil
	}, nil
}

// maxProblemBody bounds what ReadProblem reads of a response body; wfm's
// problems are a few kilobytes at most.
const maxProblemBody = 1 << 20

// ProblemOf returns the RFC 9457 problem an error response carries, or nil
// when res is not an error (a status below 400). res and body are the
// HTTPResponse and Body members of any response of ClientWithResponses.
//
// Every error wfm answers is a problem (application/problem+json). When the
// body is not one (a load balancer's HTML page, an empty body), ProblemOf
// still returns a problem, as RFC 9457 section 4.2.1 reads such an answer:
// type "about:blank", the status, its text as title, and the beginning of
// the body as detail.
func ProblemOf(res *http.Response, body []byte) *Problem {
	if res == nil || res.StatusCode < 400 {
		return nil
	}
	var p Problem
	if isJSON(res.Header.Get("Content-Type")) && json.Unmarshal(body, &p) == nil && p.Type != "" && p.Status != 0 {
		return &p
	}
	p = Problem{Type: "about:blank", Status: res.StatusCode, Title: http.StatusText(res.StatusCode)}
	if d := strings.TrimSpace(string(body)); d != "" {
		if len(d) > 200 {
			d = d[:200] + "…"
		}
		p.Detail = &d
	}
	return &p
}

// ReadProblem is ProblemOf for a response of Client (the client without
// parsed responses): when res is an error, it reads (up to 1 MiB of) and
// closes its body. It returns nil, leaving the body alone, when res is not
// an error.
func ReadProblem(res *http.Response) *Problem {
	if res == nil || res.StatusCode < 400 {
		return nil
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxProblemBody))
	p := ProblemOf(res, body)
	if err != nil && p.Type == "about:blank" {
		d := "reading the body: " + err.Error()
		p.Detail = &d
	}
	return p
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/problem+json" || mt == "application/json")
}

// Name returns the problem type's short name, the part after '#' of wfm's
// and Margo's type URIs ("upgrade-path-required", see docs/problems.md), or
// the whole type when it has no '#' ("about:blank").
func (p *Problem) Name() string {
	if _, name, ok := strings.Cut(p.Type, "#"); ok {
		return name
	}
	return p.Type
}

// Error makes a problem an error: "<status> <name>: <detail or title>",
// with the request id that wfm's log lines of the request carry.
func (p *Problem) Error() string {
	msg := p.Title
	if p.Detail != nil && *p.Detail != "" {
		msg = *p.Detail
	}
	s := fmt.Sprintf("%d %s: %s", p.Status, p.Name(), msg)
	if p.RequestId != nil && *p.RequestId != "" {
		s += " (request " + *p.RequestId + ")"
	}
	return s
}
