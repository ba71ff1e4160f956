package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestNegotiate: RFC 9110 section 12.5.1 as the handlers use it; an offer's
// quality is the most specific matching range's, so a type refused with
// q=0 stays refused whatever wider range accepts the rest.
func TestNegotiate(t *testing.T) {
	const m = "application/vnd.margo.manifest.v1+json"
	for _, tc := range []struct {
		accept string
		offers []string
		want   string // "" refused
	}{
		{"", []string{m, "application/json"}, m},
		{"*/*", []string{m, "application/json"}, m},
		{m, []string{m, "application/json"}, m},
		{"application/json", []string{m, "application/json"}, "application/json"},
		{"text/html", []string{m, "application/json"}, ""},
		{m + ";q=0", []string{m}, ""},
		{m + ";q=0, */*", []string{m}, ""},
		{m + ";q=0, application/*", []string{m}, ""},
		{m + ";q=0, application/json", []string{m}, ""},
		{m + ";q=0, application/json", []string{m, "application/json"}, "application/json"},
		{"application/*;q=0, */*", []string{m}, ""},
		{"*/*;q=0, " + m, []string{m}, m},
		{"application/yaml, */*", []string{"application/json", "application/yaml"}, "application/yaml"},
		{"application/yaml;q=0.5, application/json", []string{"application/json", "application/yaml"}, "application/json"},
		{"application/yaml, application/json", []string{"application/json", "application/yaml"}, "application/json"},
		{"text/event-stream", []string{"application/json", "text/event-stream"}, "text/event-stream"},
		{"APPLICATION/JSON ; Q=0.8", []string{"application/json"}, "application/json"},
		{"*/*;q=NaN", []string{"application/json"}, "application/json"}, // not a qvalue: weight 1
		{"*/*;q=0x1p-1", []string{"application/json"}, "application/json"},
		{"*/*;q=0.000", []string{"application/json"}, ""},
	} {
		got, ok := negotiate(tc.accept, tc.offers...)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("negotiate(%q, %q) = %q, %v; want %q", tc.accept, tc.offers, got, ok, tc.want)
		}
	}
}

// TestAcceptsOwnType: a document served as its own JSON type is refused
// when the header takes neither it nor application/json, or weighs the
// type itself 0 (the highest weight of the ranges naming it).
func TestAcceptsOwnType(t *testing.T) {
	const m = "application/vnd.margo.manifest.v1+json"
	for accept, want := range map[string]bool{
		"":                          true,
		m + ";q=0":                  false,
		m + ";q=0, */*":             false,
		m + ";q=0, " + m:            true, // named again with weight 1
		"*/*;q=0":                   false,
		"application/json;q=0":      false,
		"application/json":          true,
		"text/html":                 false,
		m + ";q=0.001":              true,
		m + ";q=NaN, application/*": true,
	} {
		assert.Equal(t, want, acceptsOwnType(accept, m), accept)
	}
}

// TestJoinListHeaders: the lines of a list header are one list; empty
// lines state nothing.
func TestJoinListHeaders(t *testing.T) {
	for _, c := range []struct {
		lines []string
		want  string
	}{
		{[]string{`"a"`, `"b"`}, `"a", "b"`},
		{[]string{"", ""}, ""},
		{[]string{"", `"a"`, " "}, `"a"`},
		{[]string{`"a", "b"`}, `"a", "b"`},
	} {
		h := http.Header{}
		for _, l := range c.lines {
			h.Add("If-Match", l)
		}
		joinListHeaders(h)
		assert.Equal(t, c.want, h.Get("If-Match"), "%q", c.lines)
		assert.Len(t, h.Values("If-Match"), 1)
	}
}
