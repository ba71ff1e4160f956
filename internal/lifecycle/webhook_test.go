package lifecycle

import (
	"testing"
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
	tests := []struct {
		a            WebhookAttempt
		failures     int
		disableAfter int
		want         WebhookOutcome
	}{
		{WebhookAttempt{StatusCode: 204}, 7, 10, WebhookOutcome{Succeeded: true}},
		{WebhookAttempt{StatusCode: 500}, 0, 10, WebhookOutcome{Retry: true, ConsecutiveFailures: 1}},
		{WebhookAttempt{Err: "refused"}, 8, 10, WebhookOutcome{Retry: true, ConsecutiveFailures: 9}},
		{WebhookAttempt{Err: "refused"}, 9, 10, WebhookOutcome{ConsecutiveFailures: 10, Disable: true, Reason: "failures"}},
		{WebhookAttempt{StatusCode: 410}, 0, 10, WebhookOutcome{ConsecutiveFailures: 1, Disable: true, Reason: "gone"}},
		{WebhookAttempt{StatusCode: 301}, 0, 10, WebhookOutcome{Retry: true, ConsecutiveFailures: 1}},
	}
	for _, tt := range tests {
		if got := DecideWebhookAttempt(tt.a, tt.failures, tt.disableAfter); got != tt.want {
			t.Errorf("DecideWebhookAttempt(%+v, %d, %d) = %+v, want %+v", tt.a, tt.failures, tt.disableAfter, got, tt.want)
		}
	}
}
