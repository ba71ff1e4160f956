package access

// IdempotentResponse is a remembered response to a management request with
// an Idempotency-Key, as the HTTP adapter captured it and a store keeps it;
// Status 0 means the first request is still running. It lives here, beside
// the tokens it is kept per, so that the adapter that fills it and the store
// that keeps it need not import each other.
type IdempotentResponse struct {
	RequestHash string
	Status      int
	Location    string
	ETag        string
	Body        []byte
}
