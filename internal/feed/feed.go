// Package feed serves the live event streams of one server process: one
// shared reader polls the event log (EventLog.EventsAfter) and fans each
// event out to the streams that want it, each filtering in memory, each with
// a bounded queue. A hundred streams thus cost one query per poll, not a
// hundred, and a stream that does not keep up is never buffered without
// bound: when its queue is full, it stops receiving from the shared reader
// and reads the log on its own, a page at a time, as far as its consumer
// takes them (a consumer that stops reading is disconnected by its
// writer's deadline, and resumes with its last id).
//
// A stream that starts behind the shared reader (it resumes from an older
// id) catches up with queries of its own, then joins the fan-out; see
// Stream.Next for why no event is skipped or repeated at the seam. The
// shared reader also writes the log line of each domain event, at its
// type's level (see logRules): the log says what the stream and webhooks say,
// because it is read from the same log. Every replica logs every event
// once.
package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Reader reads the event log (postgres.EventLog has it).
type Reader interface {
	// EventsAfter returns up to limit events after after that match f, in
	// id order (see postgres.EventLog.EventsAfter; EGONE past retention).
	EventsAfter(ctx context.Context, after int64, f lifecycle.EventFilter, limit int) ([]lifecycle.Event, error)
	// LatestEventID returns the id a reader of future events starts after.
	LatestEventID(ctx context.Context) (int64, error)
}

// Defaults of Config.
const (
	DefaultPoll       = 100 * time.Millisecond
	DefaultBuffer     = 1024
	DefaultMaxStreams = 256
	// drainWait bounds how long the shared reader waits, in a burst, for
	// the streams' queues to have room for the next batch.
	drainWait = 50 * time.Millisecond
	// catchUpPage is how many events a stream reads per query while it
	// catches up (at most 400 KiB of bodies).
	catchUpPage = 100
)

// Config configures a Hub.
type Config struct {
	// Reader reads the event log. Required.
	Reader Reader
	// Logger receives the domain event lines (info) and the reader's
	// failures (warn). Required.
	Logger *slog.Logger
	// Poll is how often the shared reader looks for new events when nothing
	// wakes it (Wake); 0 means DefaultPoll. Each poll is one indexed query
	// that usually finds nothing.
	Poll time.Duration
	// Buffer is how many events a stream may have queued; a stream whose
	// queue is full when an event comes falls back to reading the log on
	// its own (see Stream.Next). 0 means DefaultBuffer. Queued events are
	// shared by every stream (a queue entry is about 150 bytes of
	// references): the events held are at most the last Buffer the shared
	// reader read, plus a page per stream reading on its own, each of at
	// most lifecycle.MaxEventBody bytes of body.
	Buffer int
	// MaxStreams bounds the streams open at once (Open answers ErrFull
	// beyond); 0 means DefaultMaxStreams.
	MaxStreams int
	// MaxStreamsPerToken bounds the streams one token may hold open (Open
	// answers ErrTokenFull beyond), so that one token cannot take every
	// place; 0 means an eighth of MaxStreams, at least 1.
	MaxStreamsPerToken int
	// Encode, when not nil, renders an event as its streams write it; while
	// a stream is open, the shared reader renders each event once for all
	// streams (Item.Encoded).
	Encode func(lifecycle.Event) ([]byte, error)
	// Observe, when not nil, is called by the shared reader with every
	// event it reads, in log order (the metrics count operation outcomes
	// from it). It must not block.
	Observe func(lifecycle.Event)
	// Batch is how many events the shared reader reads per query; 0 means
	// a quarter of Buffer (a burst fills a queue a batch at a time).
	Batch int
}

// Errors that end a stream (Stream.Next) or refuse one (Hub.Open).
var (
	// ErrTokenEnded: the stream's token was revoked or expired.
	ErrTokenEnded = errors.New("the stream's token is no longer valid")
	// ErrClosed: the server is shutting down.
	ErrClosed = errors.New("the server is shutting down its event streams")
	// ErrFull: MaxStreams streams are open.
	ErrFull = errors.New("the server serves its maximum number of event streams")
	// ErrTokenFull: the token has MaxStreamsPerToken streams open.
	ErrTokenFull = errors.New("the token has its maximum number of event streams open")
	// ErrBehind: the shared reader found the log pruned past where it was
	// (it fell behind retention); streams resume and learn what is gone.
	ErrBehind = errors.New("the event log was pruned past the shared reader; resume after the last id received")
	// ErrNotReady: the shared reader has not read the log yet (Start).
	ErrNotReady = errors.New("the event streams are not started")
	// errClientClosed: the stream was closed by its owner.
	errClientClosed = errors.New("stream closed")
)

// Item is one event a stream delivers, with its rendering by
// Config.Encode when the shared reader made it (nil otherwise: the stream
// read it on its own).
type Item struct {
	Event   lifecycle.Event
	Encoded []byte
}

// Hub is the shared reader and the set of streams of one process. Start it,
// Open streams, CloseStreams before the HTTP server drains, Stop at the end.
type Hub struct {
	cfg     Config
	wake    chan struct{}
	drained chan struct{} // a stream took events from its queue

	mu      sync.Mutex
	head    int64 // the last id the shared reader has read (and fanned out)
	ready   bool  // head is set
	streams map[*Stream]struct{}
	closed  bool

	stop context.CancelFunc
	done chan struct{}
}

// New returns a hub; Start starts its shared reader.
func New(cfg Config) *Hub {
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultBuffer
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.MaxStreamsPerToken <= 0 {
		cfg.MaxStreamsPerToken = max(1, cfg.MaxStreams/8)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = max(1, cfg.Buffer/4)
	}
	return &Hub{cfg: cfg, wake: make(chan struct{}, 1), drained: make(chan struct{}, 1), streams: map[*Stream]struct{}{}}
}

// passTimeout bounds one pass of the shared reader.
const passTimeout = time.Minute

// minWakeGap is how long a woken shared reader waits before its pass, so
// that a burst of commits costs one read of the log rather than one each:
// a fraction of the poll period, well within the 100 ms the docs give as
// an event's typical delay.
const minWakeGap = 20 * time.Millisecond

// Start starts the shared reader, which runs until Stop. It starts at the
// current end of the log: the lines it logs are those of events committed
// from then on.
//
// Returns an error, and starts nothing, if the log cannot be read.
func (h *Hub) Start(ctx context.Context) error {
	if _, err := h.RunOnce(ctx); err != nil {
		return err
	}
	ctx, h.stop = context.WithCancel(ctx)
	h.done = make(chan struct{})
	go func() {
		defer close(h.done)
		failing := false
		for {
			// Each pass has a deadline: a database that hangs fails the pass
			// (retried) rather than freezing every stream of the process.
			pctx, cancel := context.WithTimeout(ctx, passTimeout)
			n, err := h.RunOnce(pctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			switch {
			case err != nil && !failing:
				h.cfg.Logger.WarnContext(ctx, "event streams: reading the event log failed; retrying", "error", err)
				failing = true
			case err == nil && failing:
				h.cfg.Logger.InfoContext(ctx, "event streams: reading the event log again")
				failing = false
			}
			if err == nil && n == h.cfg.Batch {
				// More are waiting: give the streams a moment to empty
				// their queues, so that a burst goes through the fan-out
				// rather than overflowing into each stream's own reads.
				h.awaitDrain(ctx, drainWait)
				continue
			}
			t := time.NewTimer(h.cfg.Poll)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-h.wake:
				// Wake-ups come with every commit that changes a manifest
				// (a hundred a second under load); passes at most every
				// minWakeGap take what accumulated in one query.
				t.Reset(minWakeGap)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			case <-t.C:
			}
			t.Stop()
		}
	}()
	return nil
}

// Stop ends every stream (CloseStreams) and stops the shared reader,
// waiting for it.
func (h *Hub) Stop() {
	h.CloseStreams()
	if h.stop != nil {
		h.stop()
		<-h.done
	}
}

// CloseStreams ends every open stream (ErrClosed) and refuses new ones: the
// first step of a shutdown, before the HTTP server drains (a stream would
// otherwise hold the drain until its deadline).
func (h *Hub) CloseStreams() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.streams {
		h.endLocked(s, ErrClosed)
	}
}

// Wake makes the shared reader look for new events now (a process that
// knows it committed some calls it).
func (h *Hub) Wake() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// EndToken ends every stream of token tokenID (ErrTokenEnded): it was
// revoked. Streams of other processes notice at their next check.
func (h *Hub) EndToken(tokenID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.streams {
		if s.tokenID == tokenID {
			h.endLocked(s, ErrTokenEnded)
		}
	}
}

// Stats is a snapshot of a hub's streams.
type Stats struct {
	// Head is the last event id the shared reader has read.
	Head int64
	// Streams is the number of open streams; Joined of those receiving from
	// the shared reader; Live of those caught up (the others read the log on
	// their own until they are).
	Streams, Joined, Live int
	// Queued is the number of events waiting in streams' queues.
	Queued int
}

// Stats returns a snapshot of the hub's streams.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := Stats{Head: h.head, Streams: len(h.streams)}
	for s := range h.streams {
		if s.joined {
			st.Joined++
		}
		if s.live {
			st.Live++
		}
		st.Queued += len(s.ch)
	}
	return st
}

// RunOnce is one pass of the shared reader: it reads the next batch of
// events, logs the important ones and fans them out. It returns how many
// events it read.
//
// Returns an error if the log cannot be read.
func (h *Hub) RunOnce(ctx context.Context) (int, error) {
	h.mu.Lock()
	ready, head := h.ready, h.head
	h.mu.Unlock()
	if !ready {
		id, err := h.cfg.Reader.LatestEventID(ctx)
		if err != nil {
			return 0, fmt.Errorf("event streams: start: %w", err)
		}
		h.mu.Lock()
		h.head, h.ready = id, true
		h.mu.Unlock()
		return 0, nil
	}
	events, err := h.cfg.Reader.EventsAfter(ctx, head, lifecycle.EventFilter{}, h.cfg.Batch)
	if lifecycle.ErrorCode(err) == lifecycle.EGONE {
		var de *lifecycle.Error
		errors.As(err, &de)
		resume, _ := de.Extra["resumeAfter"].(int64)
		h.cfg.Logger.WarnContext(ctx, "event streams: the event log was pruned past the shared reader; its streams end and resume",
			"after", head, "resume_after", resume)
		h.mu.Lock()
		h.head = max(h.head, resume)
		for s := range h.streams {
			if s.joined {
				h.endLocked(s, ErrBehind)
			}
		}
		h.mu.Unlock()
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("event streams: %w", err)
	}
	if len(events) == 0 {
		return 0, nil
	}
	// Rendered only when a stream may take them: with none, the renderings
	// were most of the reader's work. A stream that joins meanwhile renders
	// what it gets unrendered itself (as after a failed rendering).
	h.mu.Lock()
	encode := h.cfg.Encode != nil && len(h.streams) > 0
	h.mu.Unlock()
	items := make([]Item, len(events))
	for i, e := range events {
		logLine(ctx, h.cfg.Logger, e)
		if h.cfg.Observe != nil {
			h.cfg.Observe(e)
		}
		items[i].Event = e
		if encode {
			items[i].Encoded, _ = h.cfg.Encode(e) // nil on failure: the stream renders it (and reports the failure)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, it := range items {
		e := it.Event
		for s := range h.streams {
			if !s.joined || s.overflowed || !s.filter.Matches(e) {
				continue
			}
			select {
			case s.ch <- it:
			default:
				// Full: it reads on its own until it catches up (Next).
				s.overflowed, s.live = true, false
			}
		}
	}
	h.head = events[len(events)-1].ID
	return len(events), nil
}

// awaitDrain waits until every live stream's queue has room for a batch,
// or wait passed, or ctx ended.
func (h *Hub) awaitDrain(ctx context.Context, wait time.Duration) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		h.mu.Lock()
		full := false
		for s := range h.streams {
			full = full || (s.live && len(s.ch) > cap(s.ch)-h.cfg.Batch)
		}
		h.mu.Unlock()
		if !full {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-h.drained:
		}
	}
}

// endLocked ends s with err (once); h.mu is held.
func (h *Hub) endLocked(s *Stream, err error) {
	if s.err != nil {
		return
	}
	s.err = err
	close(s.done)
	delete(h.streams, s)
}

// Stream is one consumer's view of the log: the events after a cursor that
// match its filter, in id order, each once. It is used by one goroutine.
type Stream struct {
	h       *Hub
	filter  lifecycle.EventFilter
	tokenID string
	ch      chan Item
	done    chan struct{}

	// Under h.mu.
	joined     bool  // receives from the shared reader
	live       bool  // caught up: reads only its queue
	overflowed bool  // its queue filled: it reads on its own
	err        error // why it ended

	// Owned by the stream's goroutine.
	cursor  int64
	pending []Item
}

// Open opens a stream for token tokenID of the events that match f after
// after; fromEnd ignores after and starts at the current end of the log
// (only events committed from now on).
//
// Returns ErrClosed while shutting down, ErrNotReady before Start, ErrFull
// beyond MaxStreams, ErrTokenFull beyond MaxStreamsPerToken, EGONE
// (with resumeAfter) if retention deleted events after after, and an error
// if the log cannot be read.
func (h *Hub) Open(ctx context.Context, tokenID string, f lifecycle.EventFilter, after int64, fromEnd bool) (*Stream, error) {
	s := &Stream{h: h, filter: f, tokenID: tokenID, ch: make(chan Item, h.cfg.Buffer), done: make(chan struct{})}
	h.mu.Lock()
	switch {
	case h.closed:
		h.mu.Unlock()
		return nil, ErrClosed
	case !h.ready:
		h.mu.Unlock()
		return nil, ErrNotReady
	case len(h.streams) >= h.cfg.MaxStreams:
		h.mu.Unlock()
		return nil, ErrFull
	}
	mine := 0
	for o := range h.streams {
		if o.tokenID == tokenID {
			mine++
		}
	}
	if mine >= h.cfg.MaxStreamsPerToken {
		h.mu.Unlock()
		return nil, ErrTokenFull
	}
	h.streams[s] = struct{}{}
	h.mu.Unlock()
	if fromEnd {
		id, err := h.cfg.Reader.LatestEventID(ctx)
		if err != nil {
			s.Close()
			return nil, err
		}
		after = id
	}
	s.cursor = after
	// The first read answers 410 before the stream starts.
	evs, err := s.catchUp(ctx)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.pending = evs
	return s, nil
}

// Close ends the stream and releases its place.
func (s *Stream) Close() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.h.endLocked(s, errClientClosed)
}

// Done is closed when the stream is ended by the hub (ErrTokenEnded,
// ErrClosed, ErrBehind) or closed.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Err returns why the stream ended, nil while it runs.
func (s *Stream) Err() error {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.err
}

// Next returns the next events, in id order, waiting up to wait for some;
// none (and no error) when wait passed without any.
//
// Returns the reason the stream ended (ErrTokenEnded, ErrClosed,
// ErrBehind), ctx's error, or an error if the log cannot be read.
//
// A stream behind the shared reader (it resumed from an older id, or its
// queue filled because its consumer read slower than events came) reads on
// its own (catchUp), a page per call, so that it holds at most a page and
// its queue whatever its consumer's pace. When a read
// comes back short (it reached the log's readable end), the stream joins the
// fan-out and reads once more: every event the shared reader had fanned out
// before the join has an id at or below its head then, and that later read's
// gate (the oldest running transaction, which never moves back) is above
// that head, so the read covers them; every event after the join is queued.
// Overlap is dropped by id (the cursor), so nothing is skipped or repeated.
// A stream whose own read went past the head joins ahead of the shared
// reader, which then queues it events it delivered already: dropped too,
// and when they overflow its queue, it reads on its own again.
func (s *Stream) Next(ctx context.Context, wait time.Duration) ([]Item, error) {
	if len(s.pending) > 0 {
		evs := s.pending
		s.pending = nil
		return evs, nil
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		if !s.isLive() {
			evs, err := s.catchUp(ctx)
			if err != nil || len(evs) > 0 {
				return evs, err
			}
		}
		select {
		case it := <-s.ch:
			evs := s.keep(nil, it)
			for more := true; more && len(evs) < cap(s.ch); {
				select {
				case it := <-s.ch:
					evs = s.keep(evs, it)
				default:
					more = false
				}
			}
			select {
			case s.h.drained <- struct{}{}:
			default:
			}
			if len(evs) > 0 {
				return evs, nil
			}
			// Only events it had delivered: it joined ahead of the shared
			// reader, which queued them. If they filled its queue, the
			// shared reader no longer queues it anything (overflowed), and
			// the next pass of the loop reads on its own. A queue overflows
			// only when full, so this receive always sees it.
		case <-s.done:
			return nil, s.Err()
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, nil
		}
	}
}

func (s *Stream) isLive() bool {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.live
}

// keep appends it unless it was delivered already, and moves the cursor.
func (s *Stream) keep(items []Item, it Item) []Item {
	if it.Event.ID <= s.cursor {
		return items
	}
	s.cursor = it.Event.ID
	return append(items, it)
}

// catchUp reads the next events on the stream's own until it is live (see
// Next); it returns as soon as it has events.
func (s *Stream) catchUp(ctx context.Context) ([]Item, error) {
	for {
		if err := s.Err(); err != nil {
			return nil, err
		}
		evs, err := s.h.cfg.Reader.EventsAfter(ctx, s.cursor, s.filter, catchUpPage)
		if err != nil {
			return nil, err
		}
		if len(evs) > 0 {
			s.cursor = evs[len(evs)-1].ID
		}
		s.h.mu.Lock()
		switch {
		case s.err != nil:
		case s.h.ready && s.cursor >= s.h.head:
			// Every event the shared reader has fanned out is at or below
			// its head, so this stream has delivered or read it: it joins
			// (again), and takes only what comes next. Its queue holds only
			// events at or below the head.
			s.joined, s.live, s.overflowed = true, true, false
			for len(s.ch) > 0 {
				<-s.ch
			}
		case len(evs) == catchUpPage:
			// More to read on its own.
		case !s.joined:
			s.joined = true
		case s.overflowed:
			// Events were dropped from the queue: empty it and read again;
			// that read covers them (see Next).
			s.overflowed = false
			for len(s.ch) > 0 {
				<-s.ch
			}
		default:
			s.live = true
		}
		live := s.live
		s.h.mu.Unlock()
		if live || len(evs) > 0 {
			return items(evs), nil
		}
	}
}

// items wraps events read by a stream on its own (not rendered).
func items(evs []lifecycle.Event) []Item {
	out := make([]Item, len(evs))
	for i, e := range evs {
		out[i].Event = e
	}
	return out
}
