package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return v
}

// TestMatchJSON: what the README's expected JSON accepts and refuses.
func TestMatchJSON(t *testing.T) {
	cases := []struct {
		want, got string
		ok        bool
	}{
		{`{"a": 1, "b": "x"}`, `{"b":"x","a":1}`, true},
		{`{"a": 1}`, `{"a":1,"b":2}`, false},          // a member the README does not show
		{`{"a": 1, "…": "…"}`, `{"a":1,"b":2}`, true}, // abridged
		{`{"a": 1, "…": "…"}`, `{"b":2}`, false},      // abridged, but a shown member is missing
		{`[1, 2]`, `[1,2,3]`, false},
		{`[1, 2, "…"]`, `[1,2,3]`, true},
		{`[1, 2, "…"]`, `[1]`, false},
		{`{"at": "<time>", "n": "<n>"}`, `{"at":"2026-12-01T10:00:00Z","n":7}`, true},
		{`{"s": "revision <n> published"}`, `{"s":"revision 2 published"}`, true},
		{`{"s": "revision <n> published"}`, `{"s":"revision 2 removed"}`, false},
		{`{"id": "<x-id>", "again": "<x-id>"}`, `{"id":"a1","again":"a1"}`, true},
		{`{"id": "<x-id>", "again": "<x-id>"}`, `{"id":"a1","again":"b2"}`, false}, // a bound placeholder keeps its value
		{`{"t": "<time>", "u": "<time>"}`, `{"t":"1","u":"2"}`, true},              // <time> binds nothing
		{`{"b": true}`, `{"b":"true"}`, false},
	}
	for _, tc := range cases {
		diffs := bindings{}.matchJSON("", decode(t, tc.want), decode(t, tc.got))
		if (len(diffs) == 0) != tc.ok {
			t.Errorf("matchJSON(%s, %s) = %q, want match %v", tc.want, tc.got, diffs, tc.ok)
		}
	}
}

// TestBindingsCarryIntoCommands: an id read from one answer is what later
// commands use, and a command that uses an id no answer defined is refused.
func TestBindingsCarryIntoCommands(t *testing.T) {
	b := bindings{}
	if d := b.matchJSON("", decode(t, `{"id":"<deployment-id>"}`), decode(t, `{"id":"d-42"}`)); len(d) > 0 {
		t.Fatalf("matchJSON = %q", d)
	}
	got, err := b.substitute(`curl $W/deployments/<deployment-id>/history`)
	if err != nil || got != `curl $W/deployments/d-42/history` {
		t.Errorf("substitute = %q, %v", got, err)
	}
	if _, err := b.substitute(`curl $W/operations/<operation-id>`); err == nil {
		t.Error("substitute of an unbound placeholder succeeded")
	}
}

// TestMatchTextAndSSE: line-by-line text and Server-Sent Events.
func TestMatchTextAndSSE(t *testing.T) {
	if d := (bindings{}).matchText("registered 2 devices: a b\n", "registered 2 devices: a b  \n"); len(d) > 0 {
		t.Errorf("matchText = %q", d)
	}
	if d := (bindings{}).matchText("line one\n", "line one\nline two\n"); len(d) == 0 {
		t.Error("matchText accepted an extra line")
	}
	want := sseEvents("id: <event-id>\nevent: a.b\ndata: {\"type\": \"a.b\", \"…\": \"…\"}\n", false)
	got := sseEvents(": ping\n\nid: 7\nevent: a.b\ndata: {\"type\":\"a.b\",\"at\":\"x\"}\n\nid: 8\nevent: c", true)
	if d := (bindings{}).matchSSE(want, got); len(d) > 0 {
		t.Errorf("matchSSE = %q", d)
	}
	bad := sseEvents("id: 7\nevent: c.d\ndata: {\"type\":\"c.d\"}\n\n", true)
	if d := (bindings{}).matchSSE(want, bad); len(d) == 0 {
		t.Error("matchSSE accepted another event type")
	}
	if n := eventsEnd(": ping\n\nretry: 2000\n\nid: 1\n", 1); n != len(": ping\n\nretry: 2000\n\n") {
		t.Errorf("eventsEnd = %d", n)
	}
}

// TestParseTour: only the tour section's marked blocks are read, and a
// fence word the demo does not know is an error rather than a skipped step.
func TestParseTour(t *testing.T) {
	readme := strings.Join([]string{
		"## Set-up", "```sh demo", "ignored", "```",
		"## The first ten minutes", "```sh demo-setup", "W=x", "```", "```sh", "not a step", "```",
		"```sh demo poll", "curl $W", "```", "```json expect", "{}", "```",
		"## Configuration", "```sh demo", "ignored", "```",
	}, "\n")
	bs, err := parseTour(readme)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 3 || bs[0].kind != "setup" || bs[1].kind != "run" || !bs[1].poll || bs[2].kind != "expect" || bs[1].line != 12 {
		t.Errorf("parseTour = %+v", bs)
	}
	if _, err := parseTour(strings.Replace(readme, "demo poll", "demo pol", 1)); err == nil {
		t.Error("parseTour accepted an unknown fence word")
	}
}
