-- +goose Up
-- Lifecycle operations (upgrade, reconfigure, rollback) run by the
-- scheduler, their steps (one per published revision / upgrade hop), and
-- idempotency keys of management POSTs.

CREATE TABLE operations (
    id            uuid        PRIMARY KEY,
    deployment_id uuid        NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    type          text        NOT NULL CHECK (type IN ('install', 'upgrade', 'reconfigure', 'rollback', 'remove')),
    state         text        NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    reason        text        NOT NULL DEFAULT '',
    from_version  text        NOT NULL,
    to_version    text        NOT NULL,
    -- the plan: parameters of the final revision, strategy, drain, failure policy
    parameters    jsonb       NOT NULL,
    profile_id    text        NOT NULL,
    strategy      text        NOT NULL CHECK (strategy IN ('recreate', 'blueGreen')),
    drain         jsonb,
    on_failure    text        NOT NULL CHECK (on_failure IN ('halt', 'rollback')),
    step_timeout  interval    NOT NULL,
    forced        boolean     NOT NULL DEFAULT false,
    force_reason  text        NOT NULL DEFAULT '',
    requested_by  text        NOT NULL,
    -- the revision the deployment had desired before this operation
    base_revision integer     NOT NULL,
    -- for rollbacks: the revision whose content is restored
    restore_revision integer,
    follow_up     uuid,
    deadline      timestamptz NOT NULL,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    CHECK ((state IN ('succeeded', 'failed', 'cancelled')) = (finished_at IS NOT NULL))
);
-- At most one active operation per deployment; the second request gets 409.
CREATE UNIQUE INDEX operations_one_active ON operations (deployment_id) WHERE state IN ('queued', 'running');
-- What the scheduler claims.
CREATE INDEX operations_active ON operations (deadline) WHERE state IN ('queued', 'running');
CREATE INDEX operations_list ON operations (created_at DESC, id DESC);

CREATE TABLE operation_steps (
    operation_id uuid        NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    n            integer     NOT NULL CHECK (n >= 1),
    version      text        NOT NULL,
    revision     integer,
    state        text        NOT NULL CHECK (state IN ('pending', 'published', 'installed', 'failed', 'cancelled')),
    published_at timestamptz,
    finished_at  timestamptz,
    PRIMARY KEY (operation_id, n)
);

ALTER TABLE revisions ADD COLUMN operation_id uuid REFERENCES operations (id) ON DELETE SET NULL;
ALTER TABLE revisions ADD COLUMN forced boolean NOT NULL DEFAULT false;
ALTER TABLE revisions ADD COLUMN force_reason text NOT NULL DEFAULT '';
ALTER TABLE revisions ADD COLUMN strategy text NOT NULL DEFAULT 'recreate';
-- when the device first confirmed this revision installed (rollback windows
-- count from it; "the last installed revision" is found by it)
ALTER TABLE revisions ADD COLUMN installed_at timestamptz;

CREATE TABLE idempotency_keys (
    actor        text        NOT NULL,
    key          text        NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    request_hash text        NOT NULL,
    status       integer     NOT NULL,
    location     text        NOT NULL DEFAULT '',
    body         bytea       NOT NULL,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (actor, key)
);

-- +goose Down
DROP TABLE idempotency_keys;
ALTER TABLE revisions DROP COLUMN installed_at;
ALTER TABLE revisions DROP COLUMN strategy;
ALTER TABLE revisions DROP COLUMN force_reason;
ALTER TABLE revisions DROP COLUMN forced;
ALTER TABLE revisions DROP COLUMN operation_id;
DROP TABLE operation_steps;
DROP TABLE operations;
