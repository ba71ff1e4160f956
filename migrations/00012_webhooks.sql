-- +goose Up
-- Webhook subscriptions (issue 13, docs/webhooks.md). Deliveries are River
-- jobs (River's own tables, migrated by rivermigrate next to these), queued
-- by one dispatcher that reads the event log from webhook_dispatch.after.

CREATE TABLE webhooks (
    id                   uuid        PRIMARY KEY,
    url                  text        NOT NULL CHECK (url ~ '^https?://' AND length(url) <= 2048),
    description          text        NOT NULL DEFAULT '' CHECK (length(description) <= 512),
    -- event types and prefixes ("rollout."); empty: every type
    types                text[]      NOT NULL DEFAULT '{}',
    -- filters as "kind:id" refs, all of which an event must carry
    refs                 text[]      NOT NULL DEFAULT '{}',
    -- the filters as the API shows them
    filters              jsonb       NOT NULL DEFAULT '{}',
    enabled              boolean     NOT NULL DEFAULT true,
    disabled_reason      text        NOT NULL DEFAULT '',
    consecutive_failures integer     NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
    -- when the run of failed attempts began (NULL: no run)
    failing_since        timestamptz,
    -- the signing secret, AES-256-GCM (nonce || ciphertext, the id as
    -- additional data) under the server's webhook key; never plain text
    secret_enc           bytea       NOT NULL,
    -- the previous secret during a rotation's overlap
    previous_secret_enc  bytea,
    previous_until       timestamptz,
    -- deliver events with ids above this (the log's head at creation)
    after_event          bigint      NOT NULL CHECK (after_event >= 0),
    generation           bigint      NOT NULL DEFAULT 1,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    CHECK ((previous_secret_enc IS NULL) = (previous_until IS NULL))
);

-- The dispatcher's position in the event log: every event with id <= after
-- has been matched against the subscriptions and its deliveries queued, in
-- the transaction that moved it. One row; the dispatcher of one replica at a
-- time holds it (FOR UPDATE SKIP LOCKED).
CREATE TABLE webhook_dispatch (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    after bigint  NOT NULL CHECK (after >= 0)
);
INSERT INTO webhook_dispatch (after) SELECT coalesce(max(id), 0) FROM events;

-- The per-subject sequence numbers of webhook bodies ("kind:id" -> last
-- number given), advanced by the dispatcher in log order.
CREATE TABLE webhook_sequences (
    subject text   PRIMARY KEY,
    seq     bigint NOT NULL CHECK (seq > 0)
);

-- Delivery attempts, kept for the delivery retention setting.
CREATE TABLE webhook_deliveries (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    webhook_id    uuid        NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id      bigint      NOT NULL,
    sequence      bigint      NOT NULL,
    attempt       integer     NOT NULL CHECK (attempt >= 1),
    at            timestamptz NOT NULL,
    succeeded     boolean     NOT NULL,
    status_code   integer,
    error         text        NOT NULL DEFAULT '' CHECK (length(error) <= 1024),
    latency_ms    integer     NOT NULL CHECK (latency_ms >= 0),
    next_retry_at timestamptz
);
CREATE INDEX webhook_deliveries_list ON webhook_deliveries (webhook_id, id DESC);
CREATE INDEX webhook_deliveries_at ON webhook_deliveries (at);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhook_sequences;
DROP TABLE webhook_dispatch;
DROP TABLE webhooks;
