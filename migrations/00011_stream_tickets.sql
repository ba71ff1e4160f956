-- +goose Up
-- Stream tickets (issue 13): a browser's EventSource cannot send an
-- Authorization header, so it opens GET /mgmt/v1/events?ticket=… with a
-- short-lived, single-use ticket obtained with its bearer token. Only the
-- SHA-256 of the ticket is stored, so that any replica accepts it and a
-- database reader cannot use one. Redeeming deletes the row (single use);
-- expired rows are deleted when tickets are issued.
CREATE TABLE stream_tickets (
    hash       text PRIMARY KEY,
    token_id   text NOT NULL REFERENCES api_tokens (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    CHECK (expires_at > created_at)
);
CREATE INDEX stream_tickets_expires_at ON stream_tickets (expires_at);

-- +goose Down
DROP TABLE stream_tickets;
