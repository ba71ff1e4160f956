package access

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
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

// CallerNetwork is the network an anonymous caller at addr is counted
// under (rate limit, refusal aggregation, log sampling): its /64 for an IPv6
// address, since one host or site holds a whole /64 and could otherwise take
// a fresh count per address; the address itself for IPv4. addr is returned
// unchanged when it is not an IP address.
func CallerNetwork(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a.WithZone(""), 64).Masked().String()
}

// refusalKey groups refusals that an aggregate entry counts together: who
// (token, or anonymous and network), what (operation, method) and how
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
	// MaxKeys bounds the kinds of token callers counted per interval; 0
	// means 10,000.
	MaxKeys int
	// AnonymousMax bounds the refusals of callers without a valid token
	// written individually per interval, over all their addresses; beyond
	// it they are only counted. 0 means DefaultAnonymousMax.
	AnonymousMax int
	// AnonymousMaxKeys bounds the kinds of anonymous refusals counted per
	// interval (each network is its own kind); the refusals of further
	// networks are counted together, without an address. 0 means
	// DefaultAnonymousMaxKeys.
	AnonymousMaxKeys int
	// OnFlushError hears about aggregate entries the background loop could
	// not write (they are kept and written at the next interval).
	OnFlushError func(error)
}

// Defaults of RefusalsConfig.
const (
	DefaultRefusalsFirst    = 10
	DefaultRefusalsInterval = time.Minute
	DefaultAnonymousMax     = 100
	DefaultAnonymousMaxKeys = 1_000
)

// Refusals writes refused management calls to the audit log without letting
// a flood of them grow it: the first few of a kind per interval get an
// entry each, the rest one aggregate entry per kind and interval that says
// how many there were. Anonymous callers are counted per network
// (CallerNetwork), and their individual entries are also bounded over all
// networks together (RefusalsConfig.AnonymousMax), so that many addresses
// cannot each bring their own allowance. It is a background component: Start it, Stop it on
// shutdown (which writes the counts of the current interval). A crash loses
// at most the counts of the interval not yet written.
type Refusals struct {
	svc       *Service
	first     int
	sampler   *sampling.Sampler[refusalKey] // callers with a token
	anonymous *sampling.Sampler[refusalKey] // callers without one
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
	if cfg.AnonymousMax <= 0 {
		cfg.AnonymousMax = DefaultAnonymousMax
	}
	if cfg.AnonymousMaxKeys <= 0 {
		cfg.AnonymousMaxKeys = DefaultAnonymousMaxKeys
	}
	r := &Refusals{svc: svc, first: cfg.First}
	// Beyond MaxKeys: one count per caller (tokens are few; networks can
	// be many, and lose their address) and outcome.
	overflow := func(k refusalKey) refusalKey {
		return refusalKey{actor: k.actor, role: k.role, address: "", status: k.status, problem: k.problem}
	}
	r.sampler = sampling.New(sampling.Config[refusalKey]{
		First: cfg.First, Interval: cfg.Interval, MaxKeys: cfg.MaxKeys, Now: svc.now, OnFlushError: cfg.OnFlushError,
		Overflow: overflow, Flush: r.writeAggregate,
	})
	r.anonymous = sampling.New(sampling.Config[refusalKey]{
		First: cfg.First, Interval: cfg.Interval, MaxKeys: cfg.AnonymousMaxKeys, MaxPass: cfg.AnonymousMax, Now: svc.now,
		OnFlushError: cfg.OnFlushError, Overflow: overflow, Flush: r.writeAggregate,
	})
	return r
}

// Record writes f to the audit log, or counts it for the aggregate entry
// of its kind when the first ones of the interval were written already.
// Returns the store's error.
func (r *Refusals) Record(ctx context.Context, f Refusal) error {
	k := refusalKey{actor: f.Principal.TokenID, role: f.Principal.Role, action: f.Action, method: f.Method, status: f.Status, problem: f.Problem}
	sampler := r.sampler // a token is one caller wherever it calls from
	if f.Principal.TokenID == Anonymous.TokenID {
		k.address, sampler = CallerNetwork(f.Address), r.anonymous
	}
	if !sampler.Allow(k) {
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
func (r *Refusals) Flush(ctx context.Context) error {
	return errors.Join(r.sampler.Flush(ctx, false), r.anonymous.Flush(ctx, false))
}

// Start writes the aggregate entries every interval until Stop.
func (r *Refusals) Start(ctx context.Context) {
	r.sampler.Start(ctx)
	r.anonymous.Start(ctx)
}

// Stop stops the background loop and writes the aggregate entries of
// everything counted so far, within ctx.
func (r *Refusals) Stop(ctx context.Context) error {
	return errors.Join(r.sampler.Stop(ctx), r.anonymous.Stop(ctx))
}
