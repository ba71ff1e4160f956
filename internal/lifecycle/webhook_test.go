package lifecycle

import (
	"testing"
	"time"
)

func TestWebhookFilterMatches(t *testing.T) {
	e := Event{Type: EventRolloutWaveStarted, Subject: Ref{SubjectRollout, "r1"},
		Related: []Ref{{SubjectApplication, "app"}}}
	tests := []struct {
		f    WebhookFilter
		want bool
	}{
		{WebhookFilter{}, true},
		{WebhookFilter{Types: []string{"rollout."}}, true},
		{WebhookFilter{Types: []string{"rollout"}}, false},
		{WebhookFilter{Types: []string{"rollout.wave_started"}}, true},
		{WebhookFilter{Types: []string{"deployment.", "operation.failed"}}, false},
		{WebhookFilter{Refs: []Ref{{SubjectApplication, "app"}}}, true},
		{WebhookFilter{Refs: []Ref{{SubjectApplication, "app"}, {SubjectRollout, "r1"}}}, true},
		{WebhookFilter{Refs: []Ref{{SubjectApplication, "other"}}}, false},
		{WebhookFilter{Types: []string{"rollout."}, Refs: []Ref{{SubjectClient, "c"}}}, false},
	}
	for _, tt := range tests {
		if got := tt.f.Matches(e); got != tt.want {
			t.Errorf("%+v.Matches(%s) = %v, want %v", tt.f, e.Type, got, tt.want)
		}
	}
}

func TestCheckWebhookTypes(t *testing.T) {
	if err := CheckWebhookTypes([]string{"rollout.", "deployment.state_changed", "webhook."}); err != nil {
		t.Fatalf("CheckWebhookTypes(known) = %v", err)
	}
	err := CheckWebhookTypes([]string{"rollout.", "nope.", "deployment.state"})
	e, ok := err.(*Error)
	if !ok || e.Code != EINVALID || len(e.Fields) != 2 || e.Fields[0].Pointer != "/types/1" || e.Fields[1].Pointer != "/types/2" {
		t.Fatalf("CheckWebhookTypes(unknown) = %#v, want EINVALID naming /types/1 and /types/2", err)
	}
}

func TestDecideWebhookAttempt(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	run := func(failures int, since time.Duration) WebhookRun {
		r := WebhookRun{Failures: failures, DisableAfter: 10, DisableAfterPeriod: time.Hour}
		if failures > 0 {
			r.Since = now.Add(-since)
		}
		return r
	}
	tests := []struct {
		a    WebhookAttempt
		r    WebhookRun
		want WebhookOutcome
	}{
		{WebhookAttempt{StatusCode: 204}, run(7, time.Hour), WebhookOutcome{Succeeded: true}},
		{WebhookAttempt{StatusCode: 500}, run(0, 0), WebhookOutcome{Retry: true, ConsecutiveFailures: 1, FailingSince: now}},
		{WebhookAttempt{Err: "refused"}, run(8, 2*time.Hour), WebhookOutcome{Retry: true, ConsecutiveFailures: 9, FailingSince: now.Add(-2 * time.Hour)}},
		{WebhookAttempt{Err: "refused"}, run(9, 2*time.Hour), WebhookOutcome{ConsecutiveFailures: 10, FailingSince: now.Add(-2 * time.Hour), Disable: true, Reason: "failures"}},
		// Many attempts in a short outage (a burst in flight): not disabled.
		{WebhookAttempt{Err: "refused"}, run(49, time.Minute), WebhookOutcome{Retry: true, ConsecutiveFailures: 50, FailingSince: now.Add(-time.Minute)}},
		// A long outage with few attempts: not disabled either.
		{WebhookAttempt{Err: "refused"}, run(3, 5*time.Hour), WebhookOutcome{Retry: true, ConsecutiveFailures: 4, FailingSince: now.Add(-5 * time.Hour)}},
		{WebhookAttempt{StatusCode: 410}, run(0, 0), WebhookOutcome{ConsecutiveFailures: 1, FailingSince: now, Disable: true, Reason: "gone"}},
		{WebhookAttempt{StatusCode: 301}, run(0, 0), WebhookOutcome{Retry: true, ConsecutiveFailures: 1, FailingSince: now}},
	}
	for _, tt := range tests {
		if got := DecideWebhookAttempt(tt.a, tt.r, now); got != tt.want {
			t.Errorf("DecideWebhookAttempt(%+v, %+v) = %+v, want %+v", tt.a, tt.r, got, tt.want)
		}
	}
}

func TestWebhookReceives(t *testing.T) {
	rollouts := WebhookFilter{Types: []string{"rollout."}}
	on := func(p int64) WebhookVersion { return WebhookVersion{Position: p, Enabled: true} }
	off := func(p int64) WebhookVersion { return WebhookVersion{Position: p} }
	ev := func(id int64) Event {
		return Event{ID: id, Type: EventRolloutWaveStarted, Subject: Ref{SubjectRollout, "r1"}}
	}
	tests := []struct {
		name string
		vs   []WebhookVersion
		e    Event
		want bool
	}{
		{"no version: the subscription does not exist", nil, ev(10), false},
		{"before the creation", []WebhookVersion{on(20)}, ev(10), false},
		{"at the creation's position (its own transaction)", []WebhookVersion{on(20)}, ev(20), true},
		{"after the creation", []WebhookVersion{on(20)}, ev(30), true},
		{"committed while enabled, disabled after", []WebhookVersion{on(10), off(40)}, ev(30), true},
		{"committed while disabled, enabled after", []WebhookVersion{off(10), on(40)}, ev(30), false},
		{"after the disabling", []WebhookVersion{on(10), off(40)}, ev(50), false},
		{"after the enabling", []WebhookVersion{off(10), on(40)}, ev(50), true},
		{"the disabling's own transaction", []WebhookVersion{on(10), off(40)}, ev(40), false},
		{"types narrowed after it", []WebhookVersion{on(10), {Position: 40, Enabled: true, Filter: WebhookFilter{Types: []string{"deployment."}}}}, ev(30), true},
		{"types narrowed before it", []WebhookVersion{on(10), {Position: 20, Enabled: true, Filter: WebhookFilter{Types: []string{"deployment."}}}}, ev(30), false},
		{"types widened before it", []WebhookVersion{{Position: 10, Enabled: true, Filter: WebhookFilter{Types: []string{"deployment."}}}, {Position: 20, Enabled: true, Filter: rollouts}}, ev(30), true},
		{"filter of another rollout", []WebhookVersion{{Position: 10, Enabled: true, Filter: WebhookFilter{Refs: []Ref{{SubjectRollout, "r2"}}}}}, ev(30), false},
	}
	for _, tt := range tests {
		if got := WebhookReceives(tt.vs, tt.e); got != tt.want {
			t.Errorf("%s: WebhookReceives(%+v, event %d) = %v, want %v", tt.name, tt.vs, tt.e.ID, got, tt.want)
		}
	}
}
