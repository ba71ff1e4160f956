-- +goose Up
-- Every change of a webhook subscription that decides which events it
-- receives (creation, enabled, types, filters) at its position in the event
-- log: the writing transaction's (pg_current_xact_id() << 20, the position
-- of its first event). The dispatcher judges an event by the version at or
-- before the event's id (lifecycle.WebhookReceives), so an event belongs to
-- the subscription as it was when the event was committed, whenever the
-- dispatcher gets to it. The dispatcher deletes a version once a later
-- version of the subscription is at or before the dispatch cursor: no event
-- still to dispatch is judged by it.
CREATE TABLE webhook_versions (
    webhook_id uuid    NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    position   bigint  NOT NULL CHECK (position >= 0),
    enabled    boolean NOT NULL,
    types      text[]  NOT NULL,
    filters    jsonb   NOT NULL,
    PRIMARY KEY (webhook_id, position)
);

-- Existing subscriptions, as they are, from the event after their creation.
INSERT INTO webhook_versions (webhook_id, position, enabled, types, filters)
SELECT id, after_event + 1, enabled, types, filters FROM webhooks;

-- +goose Down
DROP TABLE webhook_versions;
