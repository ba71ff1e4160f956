package loop

import (
	"context"
	"log/slog"
	"sync"
)

// Outage logs the failures of background work that depends on one thing
// (the database) once per outage: a WARN at the first failure, an INFO at
// the first success after it, and nothing per pass in between, however
// often the work retries. Several loops may share one, and Handler folds
// the warnings and errors a library logs meanwhile (River's, which retries
// every second), counted in the INFO line. Safe for concurrent use.
type Outage struct {
	logger *slog.Logger
	what   string

	mu sync.Mutex
	// down: a pass failed or a wrapped logger reported a warning or an
	// error since the last success; confirmed: a pass failed.
	down, confirmed bool
	folded          int
}

// NewOutage returns an Outage that logs to logger about what (for example
// "webhooks").
func NewOutage(logger *slog.Logger, what string) *Outage {
	return &Outage{logger: logger, what: what}
}

// Failed records a failed pass: the first of an outage is logged at WARN as
// msg with err; later ones are counted.
func (o *Outage) Failed(ctx context.Context, msg string, err error) {
	o.mu.Lock()
	first := !o.confirmed
	o.down, o.confirmed = true, true
	if !first {
		o.folded++
	}
	o.mu.Unlock()
	if first {
		o.logger.WarnContext(ctx, msg+"; retrying, logged once until it works again", "error", err)
	}
}

// Succeeded records a pass that worked: it ends an outage with one INFO
// line saying how many lines were folded meanwhile. Without a failed pass
// (no WARN written) it writes nothing, since "working again" would answer
// no reported outage; lines a wrapped logger folded meanwhile count into
// the next outage's line.
func (o *Outage) Succeeded(ctx context.Context) {
	o.mu.Lock()
	was, folded := o.confirmed, o.folded
	o.down, o.confirmed = false, false
	if was {
		o.folded = 0
	}
	o.mu.Unlock()
	if was {
		o.logger.InfoContext(ctx, o.what+": working again", "lines_folded", folded)
	}
}

// fold reports whether a record of level l is folded (and counts it): a
// warning or error after another one or a failed pass, until a pass
// succeeds. The first one is written: a library that retries often learns
// of an outage before the passes do, and says what failed.
func (o *Outage) fold(l slog.Level) bool {
	if l < slog.LevelWarn {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		o.folded++
		return true
	}
	o.down = true
	return false
}

// Handler returns h with the warnings and errors it gets during an outage
// counted rather than written.
func (o *Outage) Handler(h slog.Handler) slog.Handler { return outageHandler{h: h, o: o} }

type outageHandler struct {
	h slog.Handler
	o *Outage
}

func (x outageHandler) Enabled(ctx context.Context, l slog.Level) bool { return x.h.Enabled(ctx, l) }

func (x outageHandler) Handle(ctx context.Context, r slog.Record) error {
	if x.o.fold(r.Level) {
		return nil
	}
	return x.h.Handle(ctx, r)
}

func (x outageHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return outageHandler{h: x.h.WithAttrs(as), o: x.o}
}

func (x outageHandler) WithGroup(name string) slog.Handler {
	return outageHandler{h: x.h.WithGroup(name), o: x.o}
}
