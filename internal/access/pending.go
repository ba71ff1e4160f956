package access

import (
	"context"
	"maps"
	"sync"
	"time"
)

// Pending is the audit entry of a management call in progress. The store
// transaction that makes the call's change appends it just before it
// commits (TakeForTx), so that the change and its audit row commit
// together: a crash after the commit cannot lose the row. When no
// transaction wrote it (a refusal, a failure, a call that changed nothing,
// a dry run), the HTTP adapter appends it after the answer (Written false):
// every call leaves exactly one row.
//
// The zero value is not usable; a nil *Pending (no call in progress: the
// scheduler, the device API) does nothing.
type Pending struct {
	mu      sync.Mutex
	entry   AuditEntry
	created int // the status of a change that created the call's resource
	changed int // the status of any other change
	armed   bool
	taken   bool
	written bool
	status  int
	claim   *IdempotencyClaim
}

// ClaimIdempotency tells p that the call holds the reservation c of an
// Idempotency-Key: the transaction that writes the call's audit entry
// marks it made (IdempotentMade) as well.
func (p *Pending) ClaimIdempotency(c IdempotencyClaim) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claim = &c
}

// Claim returns the reservation ClaimIdempotency gave p, if any.
func (p *Pending) Claim() (IdempotencyClaim, bool) {
	if p == nil {
		return IdempotencyClaim{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.claim == nil {
		return IdempotencyClaim{}, false
	}
	return *p.claim, true
}

// NewPending returns the pending audit entry e (its At, Status and Outcome
// are set when it is written) of a call whose contract answers created to a
// change that creates its resource and changed to any other change.
func NewPending(e AuditEntry, created, changed int) *Pending {
	if e.Detail == nil {
		e.Detail = map[string]any{}
	}
	e.Target = CanonicalTarget(e.Target)
	return &Pending{entry: e, created: created, changed: changed}
}

type pendingKey struct{}

// WithPending returns ctx carrying p.
func WithPending(ctx context.Context, p *Pending) context.Context {
	return context.WithValue(ctx, pendingKey{}, p)
}

// PendingOf returns the pending audit entry ctx carries, or nil.
func PendingOf(ctx context.Context) *Pending {
	p, _ := ctx.Value(pendingKey{}).(*Pending)
	return p
}

// SetDetail adds members to the entry's detail (for example a break-glass
// override and its reason). Members set after a transaction wrote the entry
// are not in its row: set them before the change commits.
func (p *Pending) SetDetail(detail map[string]any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	maps.Copy(p.entry.Detail, detail)
}

// Entry returns a copy of the entry as it stands (its detail copied too).
func (p *Pending) Entry() AuditEntry {
	if p == nil {
		return AuditEntry{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entry
	e.Detail = maps.Clone(p.entry.Detail)
	return e
}

// BeginTx tells p that a store transaction of the call begins; only such a
// transaction may take the entry (see TakeForTx and EndTx).
func (p *Pending) BeginTx() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.taken = !p.written, false
}

// TakeForTx returns the entry to append in the current transaction, which
// made the call's change at at (created: the change created the call's
// resource), stamped with the status the contract answers to that change
// and made storable (see Service.Record). ok is false when there is
// nothing to append: no call in progress, no transaction begun with
// BeginTx, or the entry already taken.
func (p *Pending) TakeForTx(at time.Time, created bool) (e AuditEntry, ok bool) {
	if p == nil {
		return AuditEntry{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed || p.taken || p.written {
		return AuditEntry{}, false
	}
	p.taken = true
	p.status = p.changed
	if created {
		p.status = p.created
	}
	e = p.entry
	e.Detail = maps.Clone(p.entry.Detail)
	e.At, e.Status, e.Outcome = at.UTC(), p.status, "success"
	return storableEntry(e), true
}

// EndTx tells p that the transaction begun with BeginTx ended: committed or
// rolled back. An entry it took is written only once it committed.
func (p *Pending) EndTx(committed bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.written = p.written || (p.armed && p.taken && committed)
	p.armed, p.taken = false, false
}

// Written reports whether a committed transaction wrote the entry, and the
// status it was written with.
func (p *Pending) Written() (status int, ok bool) {
	if p == nil {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status, p.written
}
