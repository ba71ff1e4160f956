package identity_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

func TestParseSPIFFEID(t *testing.T) {
	t.Parallel()
	longPath := "spiffe://example.org/" + strings.Repeat("a", identity.MaxSPIFFEIDLength-len("spiffe://example.org/"))
	longTD := strings.Repeat("a", identity.MaxTrustDomainLength)

	tests := []struct {
		in       string
		td, path string
		segments []string
	}{
		{in: "spiffe://example.org", td: "example.org"},
		{in: "spiffe://example.org/a", td: "example.org", path: "/a", segments: []string{"a"}},
		{in: "spiffe://ex-am_ple.0rg/margo/wfm/W-1/client/Dev_1.a-b", td: "ex-am_ple.0rg",
			path: "/margo/wfm/W-1/client/Dev_1.a-b", segments: []string{"margo", "wfm", "W-1", "client", "Dev_1.a-b"}},
		{in: "spiffe://example.org/...", td: "example.org", path: "/...", segments: []string{"..."}}, // only "." and ".." are dot segments
		{in: longPath, td: "example.org", path: longPath[len("spiffe://example.org"):], segments: []string{longPath[len("spiffe://example.org/"):]}},
		{in: "spiffe://" + longTD, td: longTD},
	}
	for _, tt := range tests {
		id, err := identity.ParseSPIFFEID(tt.in)
		if err != nil {
			t.Errorf("ParseSPIFFEID(%.60q) = %v, want success", tt.in, err)
			continue
		}
		if id.TrustDomain() != tt.td || id.Path() != tt.path || !slices.Equal(id.Segments(), tt.segments) {
			t.Errorf("ParseSPIFFEID(%.60q) = (%q, %q, %q), want (%q, %q, %q)", tt.in,
				id.TrustDomain(), id.Path(), id.Segments(), tt.td, tt.path, tt.segments)
		}
		if id.String() != tt.in || id.IsZero() {
			t.Errorf("ParseSPIFFEID(%.60q).String() = %.60q, IsZero %v; want the input, false", tt.in, id.String(), id.IsZero())
		}
	}
}

func TestParseSPIFFEIDRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"other scheme", "https://example.org/a"},
		{"no authority", "spiffe:example.org/a"},
		{"uppercase scheme", "SPIFFE://example.org/a"},
		{"mixed-case scheme", "Spiffe://example.org/a"},
		{"no trust domain", "spiffe://"},
		{"empty trust domain", "spiffe:///a"},
		{"uppercase trust domain", "spiffe://Example.org/a"},
		{"port", "spiffe://example.org:8443/a"},
		{"empty port", "spiffe://example.org:/a"},
		{"userinfo", "spiffe://user@example.org/a"},
		{"query", "spiffe://example.org/a?x=1"},
		{"query after trust domain", "spiffe://example.org?x=1"},
		{"fragment", "spiffe://example.org/a#x"},
		{"fragment after trust domain", "spiffe://example.org#x"},
		{"percent-encoded path", "spiffe://example.org/a%41"},
		{"percent-encoded trust domain", "spiffe://ex%61mple.org/a"},
		{"dot segment", "spiffe://example.org/./a"},
		{"dot-dot segment", "spiffe://example.org/a/../b"},
		{"dot-dot last", "spiffe://example.org/a/.."},
		{"empty segment", "spiffe://example.org/a//b"},
		{"trailing slash", "spiffe://example.org/a/"},
		{"root path", "spiffe://example.org/"},
		{"space in path", "spiffe://example.org/a b"},
		{"space in trust domain", "spiffe://exa mple.org/a"},
		{"control byte", "spiffe://example.org/a\nb"},
		{"non-ASCII", "spiffe://example.org/dévice"},
		{"bad char in path", "spiffe://example.org/a~b"},
		{"bad char in trust domain", "spiffe://example.org+x/a"},
		{"too long", "spiffe://example.org/" + strings.Repeat("a", identity.MaxSPIFFEIDLength-len("spiffe://example.org/")+1)},
		{"trust domain too long", "spiffe://" + strings.Repeat("a", identity.MaxTrustDomainLength+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := identity.ParseSPIFFEID(tt.in)
			if lifecycle.ErrorCode(err) != lifecycle.EINVALID || lifecycle.ErrorType(err) != "invalid-spiffe-id" {
				t.Fatalf("ParseSPIFFEID(%.60q) = %v, %v; want EINVALID invalid-spiffe-id", tt.in, id, err)
			}
			if !id.IsZero() {
				t.Errorf("ParseSPIFFEID(%.60q) returned %v with its error, want the zero ID", tt.in, id)
			}
			// The message may repeat the input, but bounded and without raw
			// control bytes.
			msg := err.Error()
			if len(msg) > 600 || strings.ContainsAny(msg, "\n\r") {
				t.Errorf("message is %d bytes or holds a line break: %.100q", len(msg), msg)
			}
		})
	}
}

func TestSPIFFEIDZero(t *testing.T) {
	t.Parallel()
	var id identity.SPIFFEID
	if !id.IsZero() || id.String() != "" || id.Segments() != nil {
		t.Errorf("zero SPIFFEID: IsZero %v, String %q, Segments %q; want true, \"\", nil", id.IsZero(), id.String(), id.Segments())
	}
}
