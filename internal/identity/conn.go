package identity

import (
	"context"
	"crypto/x509"
	"net"
	"sync/atomic"
)

// connMemoKey is the context key of a connection's connMemo.
type connMemoKey struct{}

// connMemo remembers the answer of Config.ClientID for the verified client
// certificate of one connection. A TLS connection's peer is fixed at its
// handshake (Go's server does not renegotiate), and net/http hands every
// request of a connection the same verified leaf, so the answer for that
// leaf is computed once per connection instead of on every request (the
// SAN parsing and SPIFFE ID checks were a quarter of the cached poll's
// handler time over mutual TLS). An atomic pointer: HTTP/2 serves the
// requests of one connection concurrently.
type connMemo struct{ last atomic.Pointer[memoEntry] }

// memoEntry is one answer: what ClientID returned for leaf under cfg.
type memoEntry struct {
	cfg  Config
	leaf *x509.Certificate
	id   string
	err  error
}

// ConnContext gives a connection's requests a memo of their client
// identity; use it as the device listener's http.Server.ConnContext.
// Config.ClientIDFromRequest then checks a connection's certificate once
// (for its first request) and answers its next requests from the memo, with
// the same id or the same refusal. Without it every request is checked.
func ConnContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connMemoKey{}, &connMemo{})
}

// clientIDOnce is c.ClientID(leaf), answered from the memo of the
// connection ctx belongs to when it holds the answer for this leaf and
// configuration, and remembered there otherwise.
func (c Config) clientIDOnce(ctx context.Context, leaf *x509.Certificate) (string, error) {
	memo, ok := ctx.Value(connMemoKey{}).(*connMemo)
	if !ok {
		return c.ClientID(leaf)
	}
	if e := memo.last.Load(); e != nil && e.leaf == leaf && e.cfg == c {
		return e.id, e.err
	}
	id, err := c.ClientID(leaf)
	memo.last.Store(&memoEntry{cfg: c, leaf: leaf, id: id, err: err})
	return id, err
}
