package access

import "time"

// IdempotentResponse is a remembered response to a management request with
// an Idempotency-Key, as the HTTP adapter captured it and a store keeps it;
// Status 0 means the first request is still running, IdempotentMade that
// it made its change and its answer is not remembered (yet). Abandoned,
// as a store reads it, says that the reservation is older than a request
// can run: its request ended without an answer remembered. It lives here,
// beside the tokens it is kept per, so that the adapter that fills it and
// the store that keeps it need not import each other.
type IdempotentResponse struct {
	RequestHash string
	Status      int
	Location    string
	ETag        string
	Body        []byte
	Abandoned   bool
}

// IdempotentMade is the Status of a reservation whose request's change
// committed: the store sets it in the change's own transaction, so a key
// whose request broke at its commit is never run again (and never taken
// over as abandoned), while one whose change did not commit stays 0.
const IdempotentMade = 1

// IdempotencyClaim names a reservation of an Idempotency-Key: whose, which
// key, and when it was reserved (its ownership token).
type IdempotencyClaim struct {
	Actor, Key string
	ReservedAt time.Time
}
