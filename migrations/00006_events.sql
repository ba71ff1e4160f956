-- +goose Up
-- The event log (transactional outbox): every committed change appends its
-- events in its own transaction. internal/postgres/events.go explains the
-- ids: id = (top-level transaction id << 20) + index of the event in its
-- transaction, so ids order events by writing transaction, and a reader
-- only returns ids below (oldest running transaction id << 20), which every
-- transaction that could still add a smaller id has left.

CREATE TABLE events (
    id           bigint      PRIMARY KEY CHECK (id > 0),
    -- lifecycle.EventType; the Go table is the list of known types (new
    -- types need no migration), the database checks the shape
    type         text        NOT NULL CHECK (type ~ '^[a-z]+(\.[a-z_]+)+$'),
    at           timestamptz NOT NULL,
    subject_kind text        NOT NULL CHECK (subject_kind ~ '^[a-z]+$'),
    subject_id   text        NOT NULL CHECK (subject_id <> ''),
    -- "kind:id" of the subject and of every related thing: what filters match
    refs         text[]      NOT NULL CHECK (cardinality(refs) >= 1),
    actor        text        NOT NULL CHECK (actor <> ''),
    body         jsonb       NOT NULL
);
-- Filters by subject or related thing ("everything about deployment X",
-- "everything of client C").
CREATE INDEX events_refs ON events USING gin (refs);

-- How far retention has deleted: every event with id <= pruned_through is
-- gone, every later one is kept. A reader resuming after an id below it has
-- missed events (the stream answers 410).
CREATE TABLE event_log_horizon (
    one            boolean PRIMARY KEY DEFAULT true CHECK (one),
    pruned_through bigint  NOT NULL DEFAULT 0 CHECK (pruned_through >= 0)
);
INSERT INTO event_log_horizon DEFAULT VALUES;

-- +goose Down
DROP TABLE event_log_horizon;
DROP TABLE events;
