package httpapi

import (
	"net/http"
	"net/netip"
	"testing"
)

func TestClientAddr(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:1::/48")}
	for _, tc := range []struct {
		name, peer string
		header     http.Header
		want       string
		read       string // the configured header; "": X-Forwarded-For
	}{
		{"no header", "192.0.2.9:5000", nil, "192.0.2.9", ""},
		{"spoofed from an untrusted peer", "192.0.2.9:5000", http.Header{"X-Forwarded-For": {"198.51.100.1"}}, "192.0.2.9", ""},
		{"spoofed Forwarded from an untrusted peer", "192.0.2.9:5000", http.Header{"Forwarded": {"for=198.51.100.1"}}, "192.0.2.9", HeaderForwarded},
		{"trusted proxy", "10.0.0.5:5000", http.Header{"X-Forwarded-For": {"198.51.100.1"}}, "198.51.100.1", ""},
		{"rightmost untrusted hop", "10.0.0.5:5000", http.Header{"X-Forwarded-For": {"203.0.113.66, 198.51.100.1, 10.1.2.3"}}, "198.51.100.1", ""},
		{"several header lines", "10.0.0.5:5000", http.Header{"X-Forwarded-For": {"203.0.113.66", "198.51.100.1"}}, "198.51.100.1", ""},
		{"every hop trusted", "10.0.0.5:5000", http.Header{"X-Forwarded-For": {"10.9.9.9, 10.1.1.1"}}, "10.9.9.9", ""},
		{"garbage hop", "10.0.0.5:5000", http.Header{"X-Forwarded-For": {"198.51.100.1, nonsense"}}, "10.0.0.5", ""},
		{"trusted proxy without header", "10.0.0.5:5000", nil, "10.0.0.5", ""},
		// A proxy that appends to X-Forwarded-For passes the client's own
		// Forwarded on: reading it would let the client pick its address.
		{"Forwarded spoofed through an X-Forwarded-For proxy", "10.0.0.5:5000", http.Header{"Forwarded": {`for=192.0.2.60;proto=http;by=10.0.0.5`}, "X-Forwarded-For": {"198.51.100.1"}}, "198.51.100.1", ""},
		{"Forwarded alone through an X-Forwarded-For proxy", "10.0.0.5:5000", http.Header{"Forwarded": {"for=192.0.2.60"}}, "10.0.0.5", ""},
		{"X-Forwarded-For spoofed through a Forwarded proxy", "10.0.0.5:5000", http.Header{"Forwarded": {"for=198.51.100.1"}, "X-Forwarded-For": {"192.0.2.60"}}, "198.51.100.1", HeaderForwarded},
		{"Forwarded IPv6 with port", "[2001:db8:1::5]:443", http.Header{"Forwarded": {`For="[2001:db8:cafe::17]:4711"`}}, "2001:db8:cafe::17", HeaderForwarded},
		{"Forwarded obfuscated", "10.0.0.5:5000", http.Header{"Forwarded": {"for=198.51.100.1, for=_hidden"}}, "10.0.0.5", HeaderForwarded},
		{"Forwarded several elements", "10.0.0.5:5000", http.Header{"Forwarded": {"for=198.51.100.1, for=10.2.2.2"}}, "198.51.100.1", HeaderForwarded},
		{"IPv4-mapped peer", "[::ffff:10.0.0.5]:5000", http.Header{"X-Forwarded-For": {"198.51.100.1"}}, "198.51.100.1", ""},
	} {
		r := &http.Request{RemoteAddr: tc.peer, Header: tc.header}
		if r.Header == nil {
			r.Header = http.Header{}
		}
		read := tc.read
		if read == "" {
			read = HeaderXForwardedFor
		}
		if got := clientAddr(r, trusted, read); got != tc.want {
			t.Errorf("%s: clientAddr(%s, %v) = %s, want %s", tc.name, tc.peer, tc.header, got, tc.want)
		}
	}
}
