package identity

import "net/http"

// DevHeader is the request header HeaderIdentity reads the client id from.
const DevHeader = "X-WFM-Client-ID"

// HeaderIdentity identifies the caller by the DevHeader request header, for
// local development without certificates only.
//
// INSECURE: anyone who can reach the server can claim to be any client by
// setting a header; nothing is authenticated. Never enable it in production.
// It must be off by default, switched on only by an explicit flag, and loud
// in the log while on; this package leaves that decision to the caller.
//
// It has the same method as Config, so a server can hold either behind one
// small interface.
type HeaderIdentity struct{}

// ClientIDFromRequest returns the client id in r's DevHeader header. The id
// must pass CheckClientID, as a certificate's client id must.
//
// Returns EUNAUTHORIZED with type TypeInvalidClientIdentity if the header is
// missing, repeated or holds an invalid client id.
func (HeaderIdentity) ClientIDFromRequest(r *http.Request) (string, error) {
	values := r.Header.Values(DevHeader)
	switch len(values) {
	case 0:
		return "", invalidIdentity("no %s header; development header identity is enabled, so every device API request must name its client id in that header", DevHeader)
	case 1:
	default:
		return "", invalidIdentity("%d %s headers; send exactly one", len(values), DevHeader)
	}
	id := values[0]
	if reason := clientIDProblem(id); reason != "" {
		return "", invalidIdentity("%s header %s is not a valid client id: %s", DevHeader, quoteUntrusted(id), reason)
	}
	return id, nil
}
