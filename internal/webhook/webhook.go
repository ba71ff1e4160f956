// Package webhook delivers events of the event log to HTTP receivers that
// subscribed to them (docs/webhooks.md): subscriptions and their encrypted
// signing secrets (Service), the dispatcher that turns committed events into
// delivery jobs (Dispatcher), and the River worker that signs and sends them
// (Worker). Rules of the delivery outcome are lifecycle's
// (DecideWebhookAttempt); the store (internal/postgres) applies them.
package webhook

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/page"
)

// Defaults of the settings.
const (
	// DefaultRotationOverlap is how long a rotated-out secret keeps signing.
	DefaultRotationOverlap = 24 * time.Hour
	// DefaultDisableAfter is the run of consecutive failed attempts that,
	// once it also lasted DefaultDisableAfterPeriod, disables a
	// subscription.
	DefaultDisableAfter = 50
	// DefaultDisableAfterPeriod is how long a run of failures must last
	// before it disables a subscription: a burst of events meeting a
	// receiver down for a few minutes fails many attempts at once, and
	// must not disable it.
	DefaultDisableAfterPeriod = 6 * time.Hour
	// DefaultDeliveryRetention is how long delivery attempts are kept.
	DefaultDeliveryRetention = 7 * 24 * time.Hour
	// RetryWindow is how long one event's delivery is retried.
	RetryWindow = 24 * time.Hour
)

// Filters narrow a subscription to events about or related to all of the
// set fields (as the event stream's filters).
type Filters struct {
	Application string `json:"application,omitempty"`
	Deployment  string `json:"deployment,omitempty"`
	Rollout     string `json:"rollout,omitempty"`
	Client      string `json:"client,omitempty"`
	Device      string `json:"device,omitempty"` // "<clientId>/<deviceId>"
}

// Refs returns the refs an event must carry to pass the filters.
func (f Filters) Refs() []lifecycle.Ref {
	var out []lifecycle.Ref
	for _, r := range []lifecycle.Ref{{Kind: lifecycle.SubjectApplication, ID: f.Application},
		{Kind: lifecycle.SubjectDeployment, ID: f.Deployment}, {Kind: lifecycle.SubjectRollout, ID: f.Rollout},
		{Kind: lifecycle.SubjectClient, ID: f.Client}, {Kind: lifecycle.SubjectDevice, ID: f.Device}} {
		if r.ID != "" {
			out = append(out, r)
		}
	}
	return out
}

// Webhook is a subscription.
type Webhook struct {
	ID                  string
	URL                 string
	Description         string
	Types               []string // event types and prefixes ("rollout."); empty: all
	Filters             Filters
	Enabled             bool
	DisabledReason      string // why the server disabled it; "" when an admin did or it is enabled
	ConsecutiveFailures int
	// FailingSince is when that run began (zero when there is none).
	FailingSince  time.Time
	PreviousUntil time.Time // the rotated-out secret signs until then; zero: none
	Generation    int64     // bumped by every change; what an Expect names
	AfterEvent    int64     // its creation's position in the event log, minus one: no event up to it belongs to it
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Filter returns what the subscription receives.
func (w Webhook) Filter() lifecycle.WebhookFilter {
	return lifecycle.WebhookFilter{Types: w.Types, Refs: w.Filters.Refs()}
}

// Delivery is one delivery attempt.
type Delivery struct {
	ID          int64
	WebhookID   string
	EventID     int64
	Sequence    int64
	Attempt     int
	At          time.Time
	Succeeded   bool
	StatusCode  int // 0: no response
	Error       string
	Latency     time.Duration
	NextRetryAt time.Time // zero: none
}

// Target is what the worker needs of a subscription to deliver to it.
type Target struct {
	Webhook
	Secret         []byte // sealed
	PreviousSecret []byte // sealed; nil when none
}

// Expect is what a change expects of a subscription (If-Match): nothing
// (the zero value) or one of the listed generations.
type Expect struct {
	set         bool
	generations []int64
}

// ExpectGeneration expects one of gs; with none, no generation matches.
func ExpectGeneration(gs ...int64) Expect { return Expect{set: true, generations: gs} }

func (e Expect) check(w Webhook) error {
	if !e.set || slices.Contains(e.generations, w.Generation) {
		return nil
	}
	return &lifecycle.Error{Code: lifecycle.EPRECONDITION, Type: "precondition-failed",
		Message: "The webhook changed since it was read (If-Match does not match its ETag); read it again."}
}

// Update lists the members of a PATCH; nil ones keep their value.
type Update struct {
	URL         *string
	Description *string
	Types       *[]string
	Filters     *Filters
	Enabled     *bool
}

// Store keeps subscriptions and deliveries (internal/postgres implements
// it). Every method returns ENOTFOUND for an unknown subscription.
type Store interface {
	// CreateWebhook stores w with its sealed secret; it receives the events
	// committed from now on.
	CreateWebhook(ctx context.Context, w Webhook, sealed []byte) (Webhook, error)
	// Webhooks lists subscriptions with ids above after, by id.
	Webhooks(ctx context.Context, after string, limit int) ([]Webhook, error)
	// Webhook reads one subscription.
	Webhook(ctx context.Context, id string) (Webhook, error)
	// UpdateWebhook locks subscription id, lets fn change it (its error
	// rolls back), and writes it with its generation bumped.
	UpdateWebhook(ctx context.Context, id string, at time.Time, fn func(*Webhook) error) (Webhook, error)
	// DeleteWebhook deletes subscription id if check on the locked row
	// passes.
	DeleteWebhook(ctx context.Context, id string, check func(Webhook) error) error
	// RotateWebhookSecret makes sealed the secret and the current one the
	// previous secret until until.
	RotateWebhookSecret(ctx context.Context, id string, sealed []byte, at, until time.Time) (Webhook, error)
	// Deliveries lists subscription id's attempts with ids below before
	// (0: from the newest), newest first.
	Deliveries(ctx context.Context, id string, before int64, limit int) ([]Delivery, error)
	// Redeliver queues the event of attempt deliveryID again. Returns
	// ENOTFOUND for an attempt not of the subscription, ECONFLICT
	// (webhook-disabled) for a disabled subscription and EGONE when the
	// event is no longer in the log.
	Redeliver(ctx context.Context, id string, deliveryID int64) error
}

// Service manages subscriptions.
type Service struct {
	store Store
	keys  *Keyring
	guard Guard
	now   func() time.Time
}

// NewService returns a service on store that seals secrets with keys and
// checks URLs with guard.
func NewService(store Store, keys *Keyring, guard Guard, now func() time.Time) *Service {
	return &Service{store: store, keys: keys, guard: guard, now: now}
}

// check returns EINVALID naming every bad member of w.
func (s *Service) check(w Webhook) error {
	var fields []lifecycle.FieldError
	for _, err := range []error{s.guard.CheckURL("/url", w.URL), lifecycle.CheckWebhookTypes(w.Types)} {
		if e, ok := err.(*lifecycle.Error); ok {
			fields = append(fields, e.Fields...)
		}
	}
	if len(fields) > 0 {
		return &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-webhook", Message: fields[0].Detail, Fields: fields}
	}
	return nil
}

// Create subscribes w (its URL, description, types, filters and enabled
// flag) and returns it with its secret, shown only now.
//
// Returns EINVALID naming /url or /types/<i> for a refused URL or an
// unknown type.
func (s *Service) Create(ctx context.Context, w Webhook) (Webhook, string, error) {
	if err := s.check(w); err != nil {
		return Webhook{}, "", err
	}
	now := s.now().UTC()
	w.ID, w.CreatedAt, w.UpdatedAt, w.Generation = uuid.NewString(), now, now, 1
	if w.Types == nil {
		w.Types = []string{}
	}
	secret, err := newSecret()
	if err != nil {
		return Webhook{}, "", err
	}
	sealed, err := s.keys.seal(w.ID, secret)
	if err != nil {
		return Webhook{}, "", err
	}
	w, err = s.store.CreateWebhook(ctx, w, sealed)
	if err != nil {
		return Webhook{}, "", err
	}
	return w, secret, nil
}

// List returns one page of subscriptions and the next page's cursor.
// Returns EINVALID for a bad limit or cursor.
func (s *Service) List(ctx context.Context, limit int, cursor string) ([]Webhook, string, error) {
	limit, after, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	ws, err := s.store.Webhooks(ctx, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	ws, next := page.Trim(ws, limit, func(w Webhook) string { return w.ID })
	return ws, next, nil
}

// Get returns subscription id. Returns ENOTFOUND if there is none.
func (s *Service) Get(ctx context.Context, id string) (Webhook, error) {
	return s.store.Webhook(ctx, id)
}

// Update changes subscription id as u says. Enabling clears its failure
// run and disabled reason.
//
// Returns ENOTFOUND, EPRECONDITION if expect does not match, and EINVALID
// as Create does.
func (s *Service) Update(ctx context.Context, id string, u Update, expect Expect) (Webhook, error) {
	return s.store.UpdateWebhook(ctx, id, s.now().UTC(), func(w *Webhook) error {
		if err := expect.check(*w); err != nil {
			return err
		}
		if u.URL != nil {
			w.URL = *u.URL
		}
		if u.Description != nil {
			w.Description = *u.Description
		}
		if u.Types != nil {
			w.Types = *u.Types
		}
		if u.Filters != nil {
			w.Filters = *u.Filters
		}
		if u.Enabled != nil {
			if *u.Enabled && !w.Enabled {
				w.ConsecutiveFailures, w.FailingSince, w.DisabledReason = 0, time.Time{}, ""
			}
			w.Enabled = *u.Enabled
		}
		return s.check(*w)
	})
}

// Delete deletes subscription id with its deliveries. Returns ENOTFOUND
// and EPRECONDITION if expect does not match.
func (s *Service) Delete(ctx context.Context, id string, expect Expect) error {
	return s.store.DeleteWebhook(ctx, id, expect.check)
}

// RotateSecret gives subscription id a new secret, returned only now; the
// previous one keeps signing for DefaultRotationOverlap. Returns ENOTFOUND.
func (s *Service) RotateSecret(ctx context.Context, id string) (Webhook, string, error) {
	if _, err := s.store.Webhook(ctx, id); err != nil {
		return Webhook{}, "", err
	}
	secret, err := newSecret()
	if err != nil {
		return Webhook{}, "", err
	}
	sealed, err := s.keys.seal(id, secret)
	if err != nil {
		return Webhook{}, "", err
	}
	now := s.now().UTC()
	w, err := s.store.RotateWebhookSecret(ctx, id, sealed, now, now.Add(DefaultRotationOverlap))
	if err != nil {
		return Webhook{}, "", err
	}
	return w, secret, nil
}

// Deliveries returns one page of subscription id's attempts, newest first.
// Returns ENOTFOUND and EINVALID for a bad limit or cursor.
func (s *Service) Deliveries(ctx context.Context, id string, limit int, cursor string) ([]Delivery, string, error) {
	limit, key, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	var before int64
	if key != "" {
		if before, err = strconv.ParseInt(key, 10, 64); err != nil || before < 1 {
			return nil, "", page.BadCursor()
		}
	}
	if _, err := s.store.Webhook(ctx, id); err != nil {
		return nil, "", err
	}
	ds, err := s.store.Deliveries(ctx, id, before, limit+1)
	if err != nil {
		return nil, "", err
	}
	ds, next := page.Trim(ds, limit, func(d Delivery) string { return strconv.FormatInt(d.ID, 10) })
	return ds, next, nil
}

// Redeliver queues attempt deliveryID's event again, with the same id, body
// and sequence. Returns ENOTFOUND, ECONFLICT for a disabled subscription
// and EGONE for an event no longer in the log.
func (s *Service) Redeliver(ctx context.Context, id string, deliveryID int64) error {
	if err := s.store.Redeliver(ctx, id, deliveryID); err != nil {
		return fmt.Errorf("redeliver: %w", err)
	}
	return nil
}
