package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// TestParseDoc: every sh block of a document is a step, indented ones
// included; norun blocks carry their reason; a fence word the demo does
// not know is an error rather than a skipped step.
func TestParseDoc(t *testing.T) {
	doc := strings.Join([]string{
		"## Set-up", "```sh", "curl $W", "```", "```json", "{\"an\": \"example\"}", "```",
		"## The first ten minutes", "```sh demo-setup", "W=x", "```",
		"```sh demo poll", "curl $W", "```", "```json expect", "{}", "```",
		"## Containers", "```sh norun=\"needs docker: no engine here\"", "docker compose up", "```",
		"- a list:", "", "  ```sh", "  curl $W/a", "  ```",
		"```sh", "make run ARGS='-mgmt-tls-dev'   # prints …", "```",
	}, "\n")
	bs, err := parseDoc(doc)
	require.NoError(t, err)
	require.Len(t, bs, 7, "%+v", bs)
	assert.Equal(t, "run", bs[0].kind)
	assert.Equal(t, "Set-up", bs[0].section)
	assert.Equal(t, "setup", bs[1].kind)
	assert.True(t, bs[2].kind == "run" && bs[2].poll && bs[2].line == 12, "%+v", bs[2])
	assert.Equal(t, "expect", bs[3].kind)
	assert.Equal(t, block{line: 19, section: "Containers", lang: "sh", kind: "skip", reason: "needs docker: no engine here", body: "docker compose up\n"}, bs[4])
	assert.Equal(t, "curl $W/a\n", bs[5].body, "the list's indentation removed")
	args, ok := bs[6].serverArgs()
	assert.True(t, ok)
	assert.Equal(t, []string{"-mgmt-tls-dev"}, args)
	_, ok = bs[0].serverArgs()
	assert.False(t, ok)
	assert.Len(t, parts(bs), 2, "a demo-setup block starts a part of its own")

	for _, bad := range []string{"demo pol", `norun=""`, `norun="unclosed`} {
		_, err := parseDoc(strings.Replace(doc, "demo poll", bad, 1))
		assert.Error(t, err, "parseDoc with the fence words %s", bad)
	}
}

// TestProblemIn: an answer holding a problem document is recognised by its
// type, which names the problem.
func TestProblemIn(t *testing.T) {
	assert.Equal(t, "upgrade-path-required", problemIn(`{"type": "https://github.com/wfm-dev/wfm/blob/main/docs/problems.md#upgrade-path-required", "status": 422}`))
	assert.Equal(t, "", problemIn(`{"id": "r-1", "state": "running"}`))
}

// TestShell: blocks run in one bash, as pasted into a terminal: a variable
// set by one block is there for the next; a failed command fails its
// block, one in a loop's condition does not; an answer without a final
// newline is read whole.
func TestShell(t *testing.T) {
	dir := t.TempDir()
	sh, err := startShell(dir, dir, []string{"PATH=/usr/bin:/bin"})
	require.NoError(t, err)
	defer sh.stop()
	out, _, err := sh.run(t.Context(), "X=$(echo 42)\nprintf 'no newline'\n", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "no newline", out)
	out, _, err = sh.run(t.Context(), "while false; do :; done\necho \"X=$X\"\n", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "X=42\n", out)
	out, errOut, err := sh.run(t.Context(), "ls /no/such/folder\necho after\n", 10*time.Second)
	assert.Error(t, err, "a failed command")
	assert.Equal(t, "after\n", out)
	assert.Contains(t, errOut, "/no/such/folder")
	_, _, err = sh.run(t.Context(), "sleep 5\n", 200*time.Millisecond)
	assert.Error(t, err, "a block past its time")
}
