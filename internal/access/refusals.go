package access

import (
	"context"
	"fmt"
	"time"

	"github.com/wfm-dev/wfm/internal/sampling"
)

// Refusal is a refused management call, for the audit log.
type Refusal struct {
	Principal Principal // Anonymous when no valid token was given
	Address   string    // the caller's address (after trusted proxies)
	Action    string    // operation id, or "" when the route was not reached
	Method    string
	Target    string // request path
	Status    int
	Problem   string // the problem type's slug, such as "forbidden"
	Reason    string // the problem's detail
	RequestID string
}

// refusalKey groups refusals that an aggregate entry counts together: who
// (token, or anonymous and address), what (operation, method) and how
// (status, problem type).
type refusalKey struct {
	actor   string
	role    Role
	address string
	action  string
	method  string
	status  int
	problem string
}

// RefusalsConfig sets how refusals are written.
type RefusalsConfig struct {
	// First is how many refusals of one kind (same caller, operation,
	// status and problem type) are written individually per interval;
	// 0 means DefaultRefusalsFirst.
	First int
	// Interval is the aggregation interval; 0 means DefaultRefusalsInterval.
	Interval time.Duration
	// MaxKeys bounds the kinds counted per interval (anonymous callers
	// from further addresses are counted together); 0 means 10,000.
	MaxKeys int
	// OnFlushError hears about aggregate entries the background loop could
	// not write (they are kept and written at the next interval).
	OnFlushError func(error)
}

// Defaults of RefusalsConfig.
const (
	DefaultRefusalsFirst    = 10
	DefaultRefusalsInterval = time.Minute
)

// Refusals writes refused management calls to the audit log without letting
// a flood of them grow it: the first few of a kind per interval get an
// entry each, the rest one aggregate entry per kind and interval that says
// how many there were. It is a background component: Start it, Stop it on
// shutdown (which writes the counts of the current interval). A crash loses
// at most the counts of the interval not yet written.
type Refusals struct {
	svc     *Service
	first   int
	sampler *sampling.Sampler[refusalKey]
}

// NewRefusals returns the refusal writer of svc (with its clock).
func NewRefusals(svc *Service, cfg RefusalsConfig) *Refusals {
	if cfg.First <= 0 {
		cfg.First = DefaultRefusalsFirst
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultRefusalsInterval
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = 10_000
	}
	r := &Refusals{svc: svc, first: cfg.First}
	r.sampler = sampling.New(sampling.Config[refusalKey]{
		First: cfg.First, Interval: cfg.Interval, MaxKeys: cfg.MaxKeys, Now: svc.now, OnFlushError: cfg.OnFlushError,
		// Beyond MaxKeys: one count per token (tokens are few; addresses
		// can be many) and outcome.
		Overflow: func(k refusalKey) refusalKey {
			return refusalKey{actor: k.actor, role: k.role, address: "", status: k.status, problem: k.problem}
		},
		Flush: r.writeAggregate,
	})
	return r
}

// Record writes f to the audit log, or counts it for the aggregate entry
// of its kind when the first ones of the interval were written already.
// Returns the store's error.
func (r *Refusals) Record(ctx context.Context, f Refusal) error {
	k := refusalKey{actor: f.Principal.TokenID, role: f.Principal.Role, action: f.Action, method: f.Method, status: f.Status, problem: f.Problem}
	if f.Principal.TokenID == Anonymous.TokenID {
		k.address = f.Address // a token is one caller wherever it calls from
	}
	if !r.sampler.Allow(k) {
		return nil
	}
	detail := map[string]any{"reason": f.Reason}
	if f.Address != "" {
		detail["address"] = f.Address
	}
	return r.svc.Record(ctx, AuditEntry{Actor: f.Principal.TokenID, Role: f.Principal.Role, Action: f.Action, Method: f.Method,
		Target: f.Target, Status: f.Status, Outcome: "failure", RequestID: f.RequestID, Detail: detail})
}

// writeAggregate appends the aggregate entry of count refusals of kind k
// in [start, end).
func (r *Refusals) writeAggregate(ctx context.Context, k refusalKey, count int, start, end time.Time) error {
	detail := map[string]any{
		"aggregate":     true,
		"count":         count,
		"problemType":   k.problem,
		"intervalStart": start.UTC().Format(time.RFC3339Nano),
		"intervalEnd":   end.UTC().Format(time.RFC3339Nano),
		"reason": fmt.Sprintf("%d more refused calls of this kind between %s and %s, beyond the first %d written individually",
			count, start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), r.first),
	}
	if k.address != "" {
		detail["address"] = k.address
	}
	err := r.svc.Record(ctx, AuditEntry{Actor: k.actor, Role: k.role, Action: k.action, Method: k.method,
		Status: k.status, Outcome: "failure", Detail: detail})
	if err != nil {
		return fmt.Errorf("access: write aggregate audit entry (%d refusals of %s): %w", count, k.actor, err)
	}
	return nil
}

// Flush writes the aggregate entries of every ended interval (runOnce of
// the background loop). Returns the store's first error; what was not
// written is kept for the next flush.
func (r *Refusals) Flush(ctx context.Context) error { return r.sampler.Flush(ctx, false) }

// Start writes the aggregate entries every interval until Stop.
func (r *Refusals) Start(ctx context.Context) { r.sampler.Start(ctx) }

// Stop stops the background loop and writes the aggregate entries of
// everything counted so far, within ctx.
func (r *Refusals) Stop(ctx context.Context) error { return r.sampler.Stop(ctx) }
