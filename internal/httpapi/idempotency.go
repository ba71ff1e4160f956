package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// IdempotencyStore remembers responses to requests with an Idempotency-Key,
// per token (actor). It is declared here, where it is used, so that this
// package does not depend on its implementation (postgres.AccessStore).
// ReserveIdempotent claims the key for a request with hash and reports
// whether it was free (or expired, or abandoned); when not, it returns what is
// remembered for the key. CompleteIdempotent and ReleaseIdempotent act only
// on the reservation made at reservedAt. Each returns an error only when the
// store fails.
type IdempotencyStore interface {
	ReserveIdempotent(ctx context.Context, actor, key, hash string, now time.Time) (access.IdempotentResponse, bool, error)
	CompleteIdempotent(ctx context.Context, actor, key string, reservedAt time.Time, r access.IdempotentResponse) error
	ReleaseIdempotent(ctx context.Context, actor, key string, reservedAt time.Time) error
}

// captureWriter keeps a copy of what a handler writes.
type captureWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.body.Write(b)
	return c.ResponseWriter.Write(b)
}

// idempotency honours Idempotency-Key on the operations whose contract
// declares it (per token; responses carrying a token secret are never among
// them): the
// key is reserved before the request runs; the same key and body replay the
// first response (Idempotent-Replayed: true), or get 409
// idempotency-key-in-use while the first is still running; the same key with
// another body is 422 idempotency-key-reused. The transaction that makes
// the request's change marks the reservation made (access.Pending's
// claim), so whether the change happened is known to the key even when the
// answer was lost. Responses of 5xx are not remembered, and a reservation
// not made is released, so a failed attempt can be retried with the same
// key, also when the database was away as it ended (see unreleasedKeys)
// and after a 503 outcome-unknown whose change did not commit. A made
// reservation is never released: a retry gets 409 idempotency-key-in-use
// while the first request may still run, then 409
// idempotency-answer-lost. An answer below 500 that cannot be remembered
// leaves it so as well.
func (s *Server) idempotency(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		op := s.ops[r.Method+" "+chi.RouteContext(r.Context()).RoutePattern()]
		if !op.idempotent || key == "" || s.idem == nil || len(key) > 255 {
			next.ServeHTTP(w, r)
			return
		}
		body, ok := s.readBody(w, r)
		if !ok {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sum := sha256.Sum256(append([]byte(r.Method+" "+r.URL.Path+"\n"), body...))
		hash := hex.EncodeToString(sum[:])
		actor := principalFrom(r.Context()).TokenID
		now := time.Now()
		prev, reserved, err := s.idem.ReserveIdempotent(r.Context(), actor, key, hash, now)
		if err == nil && !reserved && prev.Status == 0 && prev.RequestHash == hash {
			// The first request with this key failed, and its release
			// failed with it (the database was away): free it now.
			if at, ok := s.unreleased.take(actor, key); ok {
				if err = s.idem.ReleaseIdempotent(r.Context(), actor, key, at); err != nil {
					s.unreleased.add(actor, key, at)
				} else {
					prev, reserved, err = s.idem.ReserveIdempotent(r.Context(), actor, key, hash, now)
				}
			}
		}
		if err != nil {
			writeProblem(w, r, problemFromError(s.log, r, err))
			return
		}
		if !reserved {
			if prev.RequestHash != hash {
				writeProblem(w, r, problemFromError(s.log, r, &lifecycle.Error{Code: lifecycle.EINVALID, Type: "idempotency-key-reused",
					Message: "This Idempotency-Key was used with a different request; use a new key for a new request."}))
				return
			}
			if prev.Status == access.IdempotentMade && prev.Abandoned {
				writeProblem(w, r, problemFromError(s.log, r, &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "idempotency-answer-lost",
					Message: "The first request with this Idempotency-Key made its change, but its answer was lost (the connection to the " +
						"database broke as it ended): read the resource to see the result. This key keeps the request from being made twice."}))
				return
			}
			if prev.Status == 0 || prev.Status == access.IdempotentMade {
				writeProblem(w, r, problemFromError(s.log, r, &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "idempotency-key-in-use",
					Message: "The first request with this Idempotency-Key is still running; repeat this one later to get its answer."}))
				return
			}
			h := w.Header()
			ct := "application/json"
			if prev.Status >= 400 {
				ct = problemContentType
			}
			h.Set("Content-Type", ct)
			if prev.Location != "" {
				h.Set("Location", prev.Location)
			}
			if prev.ETag != "" {
				h.Set("ETag", prev.ETag)
			}
			h.Set("Idempotent-Replayed", "true")
			h.Set("Content-Length", strconv.Itoa(len(prev.Body)))
			w.WriteHeader(prev.Status)
			_, _ = w.Write(prev.Body)
			return
		}
		access.PendingOf(r.Context()).ClaimIdempotency(access.IdempotencyClaim{Actor: actor, Key: key, ReservedAt: now})
		cw := &captureWriter{ResponseWriter: w}
		ctx := context.WithoutCancel(r.Context())
		done := false
		defer func() { // a panic or a 5xx frees the key for a retry
			if !done {
				if err := s.idem.ReleaseIdempotent(ctx, actor, key, now); err != nil {
					// Released at the retry instead (this process only).
					s.unreleased.add(actor, key, now)
					s.storeFailed(ctx, "idempotency key not released", err)
				}
			}
		}()
		next.ServeHTTP(cw, r)
		if cw.status > 0 && cw.status < 500 {
			rec := access.IdempotentResponse{RequestHash: hash, Status: cw.status, Location: cw.Header().Get("Location"),
				ETag: cw.Header().Get("ETag"), Body: cw.body.Bytes()}
			// A failure leaves the key reserved: the request took effect,
			// so a retry must not run it again; it is told the key is in
			// use until the reservation is abandoned.
			done = true
			if err := s.idem.CompleteIdempotent(ctx, actor, key, now, rec); err != nil {
				s.storeFailed(ctx, "idempotency response not remembered", err)
			}
		}
	})
}

// storeFailed logs a failed write of the idempotency store: sampled at
// WARN while the database is unavailable, at ERROR otherwise.
func (s *Server) storeFailed(ctx context.Context, what string, err error) {
	if lifecycle.ErrorCode(err) == lifecycle.EUNAVAILABLE {
		s.warnUnavailable(ctx, "database unavailable: "+what, err)
		return
	}
	s.log.ErrorContext(ctx, what, "error", err)
}

// unreleasedKeys remembers, per server process, the idempotency keys whose
// request ended without an answer to remember (5xx, panic) but whose
// release failed, with the time of their reservation. A retry with the same
// key and request releases such a key and runs, instead of being told for
// idempotencyAbandoned (5 minutes) that the first request is still running.
// A retry that reaches another server process still waits. Bounded: when
// full, it starts over (those keys wait out the 5 minutes).
type unreleasedKeys struct {
	mu   sync.Mutex
	keys map[[2]string]time.Time
}

// maxUnreleased bounds unreleasedKeys.
const maxUnreleased = 10_000

func (u *unreleasedKeys) add(actor, key string, reservedAt time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.keys == nil || len(u.keys) >= maxUnreleased {
		u.keys = map[[2]string]time.Time{}
	}
	u.keys[[2]string{actor, key}] = reservedAt
}

func (u *unreleasedKeys) take(actor, key string) (time.Time, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	at, ok := u.keys[[2]string{actor, key}]
	delete(u.keys, [2]string{actor, key})
	return at, ok
}
