package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// The forwarding headers a trusted proxy may name the caller in; a
// deployment reads exactly one of them (Config.ForwardedHeader).
const (
	// HeaderXForwardedFor is X-Forwarded-For, the header most load
	// balancers append to (the default).
	HeaderXForwardedFor = "x-forwarded-for"
	// HeaderForwarded is RFC 7239 Forwarded (its for= parameters).
	HeaderForwarded = "forwarded"
)

// clientAddr is the address of the caller of r: the TCP peer, unless the
// peer is a trusted proxy, in which case the rightmost address of the
// forwarding header (header: HeaderXForwardedFor or HeaderForwarded) that is
// not itself a trusted proxy. Only that one header is read: a proxy that
// appends to X-Forwarded-For passes a client's own Forwarded header on
// unchanged (and the reverse), so reading the other would let the client
// pick its address. A header from an untrusted peer is ignored: anyone can
// send one. When every hop is trusted, the leftmost is the caller; when a
// hop cannot be read (garbage, "unknown", an obfuscated name), the hop
// before it (the last one a trusted proxy vouched for) is the answer.
//
// Hand-written over net/netip: the one library that does this
// (realclientip-go, one release in 2022) reads the header without checking
// the peer, which is the part that matters here.
func clientAddr(r *http.Request, trusted []netip.Prefix, header string) string {
	peer := peerAddr(r.RemoteAddr)
	if !peer.IsValid() {
		return r.RemoteAddr
	}
	if !isTrusted(peer, trusted) {
		return peer.String()
	}
	hops := forwardedFor(r.Header, header)
	addr := peer
	for i := len(hops) - 1; i >= 0; i-- {
		hop := hops[i]
		if !hop.IsValid() {
			break
		}
		addr = hop
		if !isTrusted(hop, trusted) {
			break
		}
	}
	return addr.String()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// peerAddr parses "host:port" (or a bare address) into an address.
func peerAddr(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// forwardedFor lists the client hops of the forwarding header named by
// header (HeaderForwarded: its for= parameters; otherwise X-Forwarded-For),
// leftmost (farthest) first; an unreadable hop is the zero Addr. Every
// instance of the header counts, in order; the other header is ignored.
func forwardedFor(h http.Header, header string) []netip.Addr {
	var hops []netip.Addr
	if header == HeaderForwarded {
		for _, line := range h.Values("Forwarded") {
			for _, elem := range strings.Split(line, ",") {
				var hop netip.Addr
				for _, pair := range strings.Split(elem, ";") {
					k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
					if ok && strings.EqualFold(k, "for") {
						hop = peerAddr(strings.Trim(v, `"`))
					}
				}
				hops = append(hops, hop)
			}
		}
		return hops
	}
	for _, line := range h.Values("X-Forwarded-For") {
		for _, hop := range strings.Split(line, ",") {
			hops = append(hops, peerAddr(strings.TrimSpace(hop)))
		}
	}
	return hops
}
