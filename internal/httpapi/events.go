package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	openapi_types "github.com/oapi-codegen/runtime/types"

	"github.com/wfm-dev/wfm/api"
	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/feed"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/page"
)

// EventsConfig is what GET /mgmt/v1/events needs.
type EventsConfig struct {
	// Log reads the event log (postgres.EventLog): the JSON pages and each
	// stream's catch-up read from it. Required.
	Log feed.Reader
	// Hub serves the live streams of this process; nil: SSE answers 503.
	// Its owner starts it, calls CloseStreams before the HTTP server drains
	// and stops it.
	Hub *feed.Hub
	// Heartbeat is how often an idle stream sends a comment line, and how
	// often a stream re-checks its token; 0 means DefaultHeartbeat.
	Heartbeat time.Duration
	// WriteTimeout bounds each write to a stream's connection (streams are
	// exempt from the server's write timeout): a consumer that stops reading
	// is disconnected when a write cannot complete within it; 0 means 30 s.
	WriteTimeout time.Duration
}

// DefaultHeartbeat is EventsConfig.Heartbeat's default: well below the
// idle timeouts of common proxies (60 s).
const DefaultHeartbeat = 15 * time.Second

// EventJSON returns the JSON of e as the contract's Event schema gives it
// (lifecycle.Event.WireJSON): the stream's data lines and the JSON pages
// are this, webhook bodies this plus their sequence.
//
// Returns an error if the body is not valid JSON.
func EventJSON(e lifecycle.Event) ([]byte, error) { return e.WireJSON(0) }

// SSEFrame renders e as one Server-Sent Event: its id, its type as the
// event name and its JSON (EventJSON) as one data line. The process's
// shared stream reader renders each event once for all its streams
// (feed.Config.Encode).
//
// Returns an error if the body is not valid JSON.
func SSEFrame(e lifecycle.Event) ([]byte, error) {
	b, err := EventJSON(e)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, b), nil
}

func badParam(field, detail string) error {
	return &lifecycle.Error{Code: lifecycle.EMALFORMED, Type: "invalid-request", Message: "The request is not valid: " + field + " " + detail + ".",
		Fields: []lifecycle.FieldError{{Pointer: field, Detail: detail}}}
}

// parseEventID parses an event id as the contract carries it.
func parseEventID(field, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 0 || (len(s) > 1 && s[0] == '0') || strings.TrimSpace(s) != s {
		return 0, badParam(field, "must be an event id (a decimal integer, such as an SSE id: line)")
	}
	return id, nil
}

// eventsRequest is a GET /mgmt/v1/events request, translated.
type eventsRequest struct {
	filter   lifecycle.EventFilter
	after    int64
	hasAfter bool
	sse      bool
	limit    int
}

// eventsRequestOf translates the request's parameters.
//
// Returns EMALFORMED naming the parameter for an unknown parameter, an
// unknown type, a bad id, after and Last-Event-ID that differ, and page
// parameters on a stream; EFORBIDDEN for admin-only types asked by a
// viewer or operator; ENOTACCEPTABLE for an Accept header that takes
// neither representation.
func eventsRequestOf(r *http.Request, p access.Principal, params api.ListEventsParams) (eventsRequest, error) {
	var out eventsRequest
	media, ok := negotiate(r.Header.Get("Accept"), "application/json", "text/event-stream")
	if !ok {
		return out, &lifecycle.Error{Code: lifecycle.ENOTACCEPTABLE, Type: "not-acceptable",
			Message: "Events are available as application/json (a page) or text/event-stream (a live stream)."}
	}
	out.sse = media == "text/event-stream"
	types, err := lifecycle.SelectEventTypes(p.Role.EventVisibility(), deref(params.Type))
	if err != nil {
		return out, err
	}
	out.filter.Types = types
	uuidString := func(u *openapi_types.UUID) *string {
		if u == nil {
			return nil
		}
		s := u.String()
		return &s
	}
	for _, ref := range []struct {
		kind  lifecycle.SubjectKind
		value *string
	}{{lifecycle.SubjectApplication, params.Application}, {lifecycle.SubjectDeployment, uuidString(params.Deployment)},
		{lifecycle.SubjectRollout, uuidString(params.Rollout)}, {lifecycle.SubjectClient, params.Client}, {lifecycle.SubjectDevice, params.Device}} {
		if ref.value != nil {
			out.filter.Refs = append(out.filter.Refs, lifecycle.Ref{Kind: ref.kind, ID: *ref.value})
		}
	}
	if params.After != nil {
		if out.after, err = parseEventID("query/after", *params.After); err != nil {
			return out, err
		}
		out.hasAfter = true
	}
	if params.LastEventID != nil {
		id, err := parseEventID("header/Last-Event-ID", *params.LastEventID)
		if err != nil {
			return out, err
		}
		if out.hasAfter && id != out.after {
			return out, badParam("header/Last-Event-ID", "differs from query/after; send one of them")
		}
		out.after, out.hasAfter = id, true
	}
	if out.sse {
		// limit is ignored (the validator fills in its default).
		if params.Cursor != nil {
			return out, badParam("query/cursor", "pages only the application/json list; a stream resumes with after or Last-Event-ID")
		}
		return out, nil
	}
	limit, key, err := page.Args(int(deref(params.Limit)), string(deref(params.Cursor)))
	if err != nil {
		return out, err
	}
	out.limit = limit
	if key != "" {
		if out.hasAfter {
			return out, badParam("query/cursor", "cannot be combined with after or Last-Event-ID")
		}
		id, err := strconv.ParseInt(key, 10, 64)
		if err != nil || id < 0 {
			return out, page.BadCursor()
		}
		out.after, out.hasAfter = id, true
	}
	return out, nil
}

// goneProblem carries EGONE's resumeAfter as the contract's ids are: a
// decimal string.
func goneError(err error) error {
	var de *lifecycle.Error
	if !errors.As(err, &de) || de.Code != lifecycle.EGONE {
		return err
	}
	if id, ok := de.Extra["resumeAfter"].(int64); ok {
		c := *de
		c.Extra = map[string]any{"resumeAfter": strconv.FormatInt(id, 10)}
		return &c
	}
	return err
}

// ListEvents answers the event log as a JSON page or a live SSE stream.
func (s *Server) ListEvents(ctx context.Context, req api.ListEventsRequestObject) (api.ListEventsResponseObject, error) {
	if s.events.Log == nil {
		return nil, &lifecycle.Error{Code: lifecycle.EUNAVAILABLE, Type: "unavailable", Message: "This server does not serve the event log."}
	}
	r := requestFrom(ctx)
	p := principalFrom(ctx)
	er, err := eventsRequestOf(r, p, req.Params)
	if err != nil {
		return nil, err
	}
	if er.sse {
		return s.openStream(ctx, p, er)
	}
	events, err := s.events.Log.EventsAfter(ctx, er.after, er.filter, er.limit+1)
	if err != nil {
		return nil, goneError(err)
	}
	out := eventPage{items: make([]json.RawMessage, 0, min(len(events), er.limit))}
	if len(events) > er.limit {
		events = events[:er.limit]
		out.next = page.Encode(strconv.FormatInt(events[len(events)-1].ID, 10))
	}
	for _, e := range events {
		b, err := EventJSON(e)
		if err != nil {
			return nil, err
		}
		out.items = append(out.items, b)
	}
	return out, nil
}

// eventPage is the JSON page (the contract's EventList), written with each
// event's JSON as EventJSON makes it.
type eventPage struct {
	items []json.RawMessage
	next  string
}

// VisitListEventsResponse implements api.ListEventsResponseObject.
func (pg eventPage) VisitListEventsResponse(w http.ResponseWriter) error {
	body := struct {
		Items      []json.RawMessage `json:"items"`
		NextCursor string            `json:"nextCursor,omitempty"`
	}{pg.items, pg.next}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	return json.NewEncoder(w).Encode(body)
}

// openStream opens the stream of er for p.
func (s *Server) openStream(ctx context.Context, p access.Principal, er eventsRequest) (api.ListEventsResponseObject, error) {
	if s.events.Hub == nil {
		return nil, &lifecycle.Error{Code: lifecycle.EUNAVAILABLE, Type: "unavailable", Message: "This server does not serve event streams."}
	}
	st, err := s.events.Hub.Open(ctx, p.TokenID, er.filter, er.after, !er.hasAfter)
	switch {
	case errors.Is(err, feed.ErrFull):
		return nil, &lifecycle.Error{Code: lifecycle.EUNAVAILABLE, Type: "too-many-streams",
			Message: "This server serves its maximum number of event streams (-event-streams); retry later or page with Accept: application/json.",
			Extra:   map[string]any{"retryable": true, "retryAfterSeconds": 5}}
	case errors.Is(err, feed.ErrTokenFull):
		return nil, &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "too-many-streams",
			Message: "This token has its maximum number of event streams open on this server (an eighth of -event-streams); close one, or page with Accept: application/json.",
			Extra:   map[string]any{"retryable": true, "retryAfterSeconds": 5}}
	case errors.Is(err, feed.ErrClosed), errors.Is(err, feed.ErrNotReady):
		return nil, &lifecycle.Error{Code: lifecycle.EUNAVAILABLE, Type: "unavailable", Message: "This server is starting or shutting down its event streams; retry, or reconnect to another replica.",
			Extra: map[string]any{"retryable": true, "retryAfterSeconds": 1}}
	case err != nil:
		return nil, goneError(err)
	}
	heartbeat := s.events.Heartbeat
	if heartbeat <= 0 {
		heartbeat = DefaultHeartbeat
	}
	writeTimeout := s.events.WriteTimeout
	if writeTimeout <= 0 {
		writeTimeout = 30 * time.Second
	}
	return sseStream{s: s, ctx: ctx, stream: st, tokenID: p.TokenID, heartbeat: heartbeat, writeTimeout: writeTimeout}, nil
}

// sseStream writes a stream as Server-Sent Events.
type sseStream struct {
	s            *Server
	ctx          context.Context
	stream       *feed.Stream
	tokenID      string
	heartbeat    time.Duration
	writeTimeout time.Duration
}

// VisitListEventsResponse implements api.ListEventsResponseObject: it
// writes events until the stream ends, the client goes, or its token is no
// longer valid.
func (ss sseStream) VisitListEventsResponse(w http.ResponseWriter) error {
	defer ss.stream.Close()
	rc := http.NewResponseController(w)
	// Exempt from the server's read and write timeouts (WriteTimeout would
	// cut the stream after a minute); each write has its own deadline.
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Now().Add(ss.writeTimeout))
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer
	w.WriteHeader(http.StatusOK)
	if isHead(ss.ctx) { // the headers a stream would have; no stream
		return nil
	}
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil || rc.Flush() != nil {
		return nil
	}
	// When the hub ends the stream (shutdown, revoked token) while a write
	// is blocked on a consumer that does not read, cut it.
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-ss.stream.Done():
			// The handler ends the stream cleanly unless a write is stuck.
			select {
			case <-finished:
				return
			case <-time.After(time.Second):
			}
			_ = rc.SetWriteDeadline(time.Now())
		case <-finished:
		}
	}()
	lastCheck := time.Now()
	for {
		events, err := ss.stream.Next(ss.ctx, ss.heartbeat)
		if err != nil {
			ss.s.log.DebugContext(ss.ctx, "event stream ended", "reason", err.Error())
			return nil
		}
		var buf []byte
		for _, it := range events {
			frame := it.Encoded
			if frame == nil {
				if frame, err = SSEFrame(it.Event); err != nil {
					ss.s.log.ErrorContext(ss.ctx, "event stream: encode", "error", err)
					return nil
				}
			}
			buf = append(buf, frame...)
		}
		if len(events) == 0 {
			buf = append(buf, ": heartbeat\n\n"...)
		}
		if time.Since(lastCheck) >= ss.heartbeat || len(events) == 0 {
			lastCheck = time.Now()
			if err := ss.s.access.CheckToken(ss.ctx, ss.tokenID); lifecycle.ErrorCode(err) == lifecycle.EUNAUTHORIZED {
				ss.s.log.DebugContext(ss.ctx, "event stream ended: its token is no longer valid", "token", ss.tokenID)
				return nil
			}
		}
		_ = rc.SetWriteDeadline(time.Now().Add(ss.writeTimeout))
		if _, err := w.Write(buf); err != nil {
			return nil
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
	}
}

// CreateStreamTicket issues a single-use stream ticket for the caller.
func (s *Server) CreateStreamTicket(ctx context.Context, _ api.CreateStreamTicketRequestObject) (api.CreateStreamTicketResponseObject, error) {
	ticket, expires, err := s.access.IssueTicket(ctx, principalFrom(ctx))
	if err != nil {
		return nil, err
	}
	return api.CreateStreamTicket201JSONResponse{Ticket: ticket, ExpiresAt: expires}, nil
}

// streamTicket returns the ticket a request to open the event stream
// carries, if any. Returns EMALFORMED (query/ticket) for several tickets,
// or a ticket sent with an Authorization header.
func streamTicket(r *http.Request) (string, bool, error) {
	if r.Method != http.MethodGet || r.URL.Path != "/mgmt/v1/events" {
		return "", false, nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil || !q.Has("ticket") {
		return "", false, nil
	}
	if len(q["ticket"]) > 1 {
		return "", false, badParam("query/ticket", "must be given once")
	}
	if r.Header.Get("Authorization") != "" {
		return "", false, badParam("query/ticket", "cannot be combined with an Authorization header; send one of them")
	}
	if isHead(r.Context()) { // a HEAD opens no stream: it would spend the ticket for nothing
		return "", false, badParam("query/ticket", "is redeemed only by the GET that opens the stream; HEAD takes a bearer token")
	}
	return q.Get("ticket"), true, nil
}
