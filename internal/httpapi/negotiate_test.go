package httpapi

import "testing"

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
	} {
		got, ok := negotiate(tc.accept, tc.offers...)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("negotiate(%q, %q) = %q, %v; want %q", tc.accept, tc.offers, got, ok, tc.want)
		}
	}
}
