package lifecycle

import (
	"fmt"
	"strings"
	"time"
)

// WebhookFilter is what a webhook subscription receives: events of Types
// (exact types, or prefixes ending in "." such as "rollout."; empty: every
// type) that carry every one of Refs (as subject or related thing).
type WebhookFilter struct {
	Types []string
	Refs  []Ref
}

// Matches reports whether e passes f.
func (f WebhookFilter) Matches(e Event) bool {
	if len(f.Types) > 0 {
		ok := false
		for _, t := range f.Types {
			if string(e.Type) == t || strings.HasSuffix(t, ".") && strings.HasPrefix(string(e.Type), t) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	refs := e.Refs()
	for _, want := range f.Refs {
		found := false
		for _, r := range refs {
			if r == want {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// CheckWebhookTypes returns EINVALID, naming /types/<i>, for an entry that
// is neither a known event type nor a prefix ("rollout.") of one.
func CheckWebhookTypes(types []string) error {
	var fields []FieldError
	for i, t := range types {
		known := false
		for _, k := range EventTypes() {
			if string(k) == t || strings.HasSuffix(t, ".") && strings.HasPrefix(string(k), t) {
				known = true
				break
			}
		}
		if !known {
			fields = append(fields, FieldError{Pointer: fmt.Sprintf("/types/%d", i),
				Detail: fmt.Sprintf("%q is neither an event type nor a prefix of one (such as \"rollout.\")", t)})
		}
	}
	if len(fields) > 0 {
		return &Error{Code: EINVALID, Type: "invalid-webhook", Message: "the webhook's types name no event type", Fields: fields}
	}
	return nil
}

// WebhookAttempt is what one delivery attempt got: a status code (0 when no
// response came) and an error text when it was not a 2xx.
type WebhookAttempt struct {
	StatusCode int
	Err        string
}

// WebhookOutcome is the decision about a subscription after an attempt.
type WebhookOutcome struct {
	// Succeeded: the receiver answered 2xx; the delivery is done.
	Succeeded bool
	// Retry: the delivery is tried again later (unless its retry window is
	// over, which the job engine decides).
	Retry bool
	// ConsecutiveFailures is the subscription's new run of failed attempts.
	ConsecutiveFailures int
	// FailingSince is when that run began (zero when there is none).
	FailingSince time.Time
	// Disable: the subscription is disabled, with Event saying why.
	Disable bool
	// Reason is "gone" or "failures" when Disable.
	Reason string
}

// WebhookRun is a subscription's run of failed attempts before an attempt,
// and what ends a run by disabling the subscription.
type WebhookRun struct {
	// Failures is the run's length, Since when it began (zero: no run).
	Failures int
	Since    time.Time
	// DisableAfter (> 0) attempts and DisableAfterPeriod of failures
	// disable the subscription: both, so that the many attempts of a burst
	// of events against a receiver down for a minute (every in-flight
	// delivery fails at once) do not disable it.
	DisableAfter       int
	DisableAfterPeriod time.Duration
}

// DecideWebhookAttempt decides what follows attempt a, made at now, of a
// subscription with failure run r: a 2xx ends the delivery and the run; a
// 410 Gone disables the subscription (the receiver says it is gone for
// good); any other failure is retried, and disables the subscription once
// the run reached r.DisableAfter attempts and lasted r.DisableAfterPeriod.
func DecideWebhookAttempt(a WebhookAttempt, r WebhookRun, now time.Time) WebhookOutcome {
	if a.StatusCode >= 200 && a.StatusCode < 300 {
		return WebhookOutcome{Succeeded: true}
	}
	since := r.Since
	if r.Failures == 0 || since.IsZero() {
		since = now
	}
	out := WebhookOutcome{ConsecutiveFailures: r.Failures + 1, FailingSince: since}
	switch {
	case a.StatusCode == 410:
		out.Disable, out.Reason = true, "gone"
	case out.ConsecutiveFailures >= r.DisableAfter && now.Sub(since) >= r.DisableAfterPeriod:
		out.Disable, out.Reason = true, "failures"
	default:
		out.Retry = true
	}
	return out
}

// WebhookVersion is a subscription as a change left it, from Position of
// the event log on: a change of a subscription (its creation, enabling,
// disabling, types, filters) takes its place in the log as an event does,
// at the position of the transaction that made it.
type WebhookVersion struct {
	// Position is the log position from which this version judges events:
	// events with ids at or above it, up to the next version's.
	Position int64
	Enabled  bool
	Filter   WebhookFilter
}

// WebhookReceives reports whether event e belongs to the subscription whose
// versions are vs (in ascending Position): the version that judges e is the
// last one at or before e's position, the subscription as it was when e was
// committed. An event before the first version (before the subscription
// existed) belongs to none; one judged by a disabled version belongs to
// none, whatever the subscription became afterwards; one judged by an
// enabled version belongs to it even if the subscription is disabled before
// it is sent (it is then recorded as not sent, and can be redelivered).
func WebhookReceives(vs []WebhookVersion, e Event) bool {
	var judge *WebhookVersion
	for i := range vs {
		if vs[i].Position > e.ID {
			break
		}
		judge = &vs[i]
	}
	return judge != nil && judge.Enabled && judge.Filter.Matches(e)
}
