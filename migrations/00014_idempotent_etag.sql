-- +goose Up
-- A replayed answer carries the first answer's ETag, as it carries its
-- Location: a client that retried a create can use it in If-Match.
ALTER TABLE idempotency_keys ADD COLUMN etag text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN etag;
