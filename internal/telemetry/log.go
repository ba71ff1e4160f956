// Package telemetry holds what makes the server observable: request ids that
// follow a request through every log line, the slog handler that adds them,
// and the Prometheus collectors for HTTP traffic, the database pool and the
// domain (fleet state from one cached aggregate query, counters fed by the
// HTTP adapter and the event log).
package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
)

type requestIDKey struct{}

// WithRequestID returns a context that carries the request id id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id carried by ctx, or "" when there is none.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// NewRequestID returns a fresh random request id (32 hex digits).
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// ValidRequestID reports whether a caller-supplied request id may be reused:
// 1 to 128 characters from [A-Za-z0-9._:-]. Anything else is replaced, so that
// a header cannot inject text into the logs.
func ValidRequestID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// ContextHandler is a slog.Handler that adds the request id of the record's
// context (see WithRequestID) as the attribute "request_id", so every line
// logged with a request's context names the request.
type ContextHandler struct {
	slog.Handler
}

// NewContextHandler wraps h.
func NewContextHandler(h slog.Handler) *ContextHandler { return &ContextHandler{Handler: h} }

// Handle implements slog.Handler.
func (h *ContextHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *ContextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &ContextHandler{Handler: h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h *ContextHandler) WithGroup(name string) slog.Handler {
	return &ContextHandler{Handler: h.Handler.WithGroup(name)}
}
