package webhook

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// forbidden are the ranges a receiver may not be in unless a configured
// range allows it: loopback, "this network", private (RFC 1918),
// carrier-grade NAT, link-local (cloud metadata 169.254.169.254 among them),
// benchmarking, multicast and reserved, and their IPv6 counterparts
// (unique-local fc00::/7 holds AWS's metadata fd00:ec2::254; IPv4-mapped
// addresses are unmapped before the check).
var forbidden = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
		"224.0.0.0/4", "240.0.0.0/4",
		"::/128", "::1/128", "64:ff9b:1::/48", "100::/64", "2001:db8::/32", "fc00::/7", "fe80::/10", "ff00::/8",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// numericHost matches hosts made of digits, dots and hexadecimal or octal
// notation only (no letter beyond x and a-f): no DNS name is one.
var numericHost = regexp.MustCompile(`^(?i:0x[0-9a-f]*|[0-9]+)(?i:\.(?:0x[0-9a-f]*|[0-9]+))*$`)

// Guard is the server's policy on receivers' URLs and addresses.
type Guard struct {
	// AllowHTTP lets subscriptions use http:// URLs (https only otherwise).
	AllowHTTP bool
	// Allowed are ranges allowed even though forbidden by default (an
	// on-premises receiver, a test's loopback receiver).
	Allowed []netip.Prefix
}

// Prefixes of IPv6 addresses that carry an IPv4 address: the IPv4 address
// is what a connection reaches, so it is what is checked.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052, the IPv4 address in the last 32 bits
	v4compat  = netip.MustParsePrefix("::/96")        // deprecated IPv4-compatible ::a.b.c.d
	sixToFour = netip.MustParsePrefix("2002::/16")    // 6to4, the IPv4 address in bits 16-47
)

// addrAllowed reports whether a receiver may be at a. A zone (fe80::1%eth0)
// is dropped before the check (a prefix never contains an address with a
// zone), an IPv4-mapped address is unmapped, and an address that embeds an
// IPv4 address (NAT64, IPv4-compatible, 6to4) is checked as that IPv4
// address.
func (g Guard) addrAllowed(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a), v4compat.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
			return g.addrAllowed(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(a):
			return g.addrAllowed(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	for _, p := range g.Allowed {
		if p.Contains(a) {
			return true
		}
	}
	for _, p := range forbidden {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// CheckURL returns EINVALID naming field (a JSON pointer such as /url) when
// raw is not an absolute http(s) URL the guard allows: https (http only with
// AllowHTTP), a host, no user info or fragment, and, when the host is a
// literal address, one not in a forbidden range. Names are checked when
// connecting (Dialer), after DNS resolution.
func (g Guard) CheckURL(field, raw string) error {
	bad := func(detail string) error {
		return &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-webhook", Message: "the webhook URL is refused: " + detail,
			Fields: []lifecycle.FieldError{{Pointer: field, Detail: detail}}}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || strings.ContainsAny(raw, " \t\r\n\x00"):
		return bad("not a URL")
	case u.Scheme != "https" && !(u.Scheme == "http" && g.AllowHTTP):
		if u.Scheme == "http" {
			return bad("http is not allowed on this server (-webhook-allow-http); use https")
		}
		return bad(fmt.Sprintf("scheme %q: want https", u.Scheme))
	case u.Host == "" || u.Hostname() == "":
		return bad("no host")
	case u.User != nil:
		return bad("user info is not allowed (use the signing secret to authenticate)")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return bad("a fragment is not allowed")
	}
	if strings.Contains(u.Hostname(), "%") {
		return bad("an address with a zone is not allowed")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return bad(fmt.Sprintf("port %q: want 1 to 65535", p))
		}
	}
	host := strings.TrimSuffix(strings.Trim(u.Hostname(), "[]"), ".")
	if numericHost.MatchString(host) {
		if _, err := netip.ParseAddr(host); err != nil {
			// 2130706433, 0x7f.1, 0177.0.0.1, 10.1: forms some resolvers
			// read as addresses; only the canonical dotted quad is taken.
			return bad(fmt.Sprintf("host %q looks like an address but is not a canonical one (a.b.c.d)", u.Hostname()))
		}
	}
	if a, err := netip.ParseAddr(host); err == nil && !g.addrAllowed(a) {
		return bad(fmt.Sprintf("address %s is in a range receivers may not be in (loopback, private, link-local, metadata…); allow it with -webhook-allow-cidr", a))
	}
	return nil
}

// Dialer returns a dialer that refuses, at connect time (after DNS
// resolution, so a name that resolves to a forbidden address is refused
// too), connections to addresses the guard forbids.
func (g Guard) Dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("webhook receiver address %q: %w", address, err)
		}
		if !g.addrAllowed(ap.Addr()) {
			return &refusedAddrError{addr: ap.Addr()}
		}
		return nil
	}}
}

// refusedAddrError is a connection the guard refused.
type refusedAddrError struct{ addr netip.Addr }

func (e *refusedAddrError) Error() string {
	return fmt.Sprintf("address %s is in a range receivers may not be in (allow it with -webhook-allow-cidr)", e.addr)
}

// ParseCIDRs parses a comma-separated list of CIDRs or addresses. Returns
// an error naming the first bad entry.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q: not a CIDR or address", f)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
