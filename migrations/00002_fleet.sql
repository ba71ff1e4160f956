-- +goose Up
-- WFM clients (device agents identified by mTLS), their devices, deployments,
-- revisions, published state manifests, status reports and state history.

CREATE TABLE clients (
    id               text        PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9._-]{1,128}$'),
    status           text        NOT NULL CHECK (status IN ('accepted', 'retired')),
    -- the current state manifest: strictly increasing from 1, never reused
    manifest_version bigint      NOT NULL CHECK (manifest_version >= 1),
    manifest_json    bytea       NOT NULL,
    manifest_etag    text        NOT NULL,
    bundle_digest    text        CHECK (bundle_digest ~ '^sha256:[0-9a-f]{64}$'),
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    retired_at       timestamptz,
    CHECK ((status = 'retired') = (retired_at IS NOT NULL))
);

-- Bundles stay retrievable by digest after they are superseded.
CREATE TABLE bundles (
    client_id   text        NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    digest      text        NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    content     bytea       NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (client_id, digest)
);

CREATE TABLE devices (
    client_id       text        NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    id              text        NOT NULL CHECK (length(id) BETWEEN 1 AND 512),
    registered      boolean     NOT NULL,
    capabilities    jsonb       NOT NULL,
    reported_labels jsonb       NOT NULL DEFAULT '{}',
    operator_labels jsonb       NOT NULL DEFAULT '{}',
    -- reported overridden by operator labels, kept for label selectors
    labels          jsonb       NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (client_id, id)
);
CREATE INDEX devices_labels ON devices USING gin (labels);

CREATE TABLE deployments (
    id                 uuid        PRIMARY KEY,
    client_id          text        NOT NULL,
    device_id          text        NOT NULL,
    application_id     text        NOT NULL,
    state              text        NOT NULL CHECK (state IN ('pending', 'installing', 'installed', 'draining', 'upgrading',
                                                             'reconfiguring', 'rolling-back', 'failed', 'removing', 'removed')),
    state_reason       text        NOT NULL DEFAULT '',
    state_changed_at   timestamptz NOT NULL,
    revision           integer     NOT NULL CHECK (revision >= 1),
    installed_revision integer,
    -- the client manifestVersion that published the desired revision (or the removal)
    desired_since      bigint      NOT NULL CHECK (desired_since >= 1),
    removing           boolean     NOT NULL DEFAULT false,
    newest_adopted     bigint      NOT NULL DEFAULT 0 CHECK (newest_adopted >= 0),
    reports            bigint      NOT NULL DEFAULT 0,
    -- bumped by every change of the row: the deployment's ETag
    generation         bigint      NOT NULL DEFAULT 1,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    FOREIGN KEY (client_id, device_id) REFERENCES devices (client_id, id),
    CHECK (removing OR state NOT IN ('removing', 'removed'))
);
CREATE INDEX deployments_client ON deployments (client_id, device_id);
CREATE INDEX deployments_list ON deployments (created_at DESC, id DESC);
CREATE INDEX deployments_app ON deployments (application_id);

CREATE TABLE revisions (
    deployment_id    uuid        NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    n                integer     NOT NULL CHECK (n >= 1),
    application_id   text        NOT NULL,
    version          text        NOT NULL,
    profile_id       text        NOT NULL,
    parameters       jsonb       NOT NULL,
    operation        text        NOT NULL CHECK (operation IN ('install', 'upgrade', 'reconfigure', 'rollback', 'remove')),
    outcome          text        NOT NULL CHECK (outcome IN ('pending', 'active', 'superseded', 'failed')),
    -- the chosen profile's component names, which status reports must use
    components       text[]      NOT NULL,
    yaml             bytea       NOT NULL,
    digest           text        NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    manifest_version bigint      NOT NULL CHECK (manifest_version >= 1),
    created_at       timestamptz NOT NULL,
    PRIMARY KEY (deployment_id, n),
    -- a version in use by any revision cannot be deleted from the catalog
    FOREIGN KEY (application_id, version) REFERENCES application_versions (application_id, version) ON DELETE RESTRICT
);
CREATE INDEX revisions_digest ON revisions (deployment_id, digest);
CREATE INDEX revisions_version ON revisions (application_id, version);

-- The status-ingestion hot path writes here: one index (the key, which also
-- serves "newest first per deployment" and retention), the report as json
-- (kept as sent, not converted).
CREATE TABLE status_reports (
    id                       bigserial,
    deployment_id            uuid        NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    received_at              timestamptz NOT NULL,
    adopted_manifest_version bigint      NOT NULL CHECK (adopted_manifest_version >= 1),
    state                    text        NOT NULL CHECK (state IN ('pending', 'installing', 'installed', 'failed', 'removing', 'removed')),
    stale                    boolean     NOT NULL,
    report                   json        NOT NULL,
    PRIMARY KEY (deployment_id, id)
);

CREATE TABLE deployment_history (
    id            bigserial   PRIMARY KEY,
    deployment_id uuid        NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    at            timestamptz NOT NULL,
    from_state    text,
    to_state      text        NOT NULL,
    cause         text        NOT NULL CHECK (cause IN ('report', 'operation', 'deadline', 'operator', 'device-unregistered')),
    revision      integer,
    reason        text        NOT NULL DEFAULT '',
    -- the transition table of internal/lifecycle (TestMigrationMirrorsTransitionTable keeps them equal)
    CONSTRAINT deployment_history_transition CHECK (from_state IS NULL AND to_state = 'pending' OR (from_state, to_state) IN (('draining','failed'), ('draining','installed'), ('draining','reconfiguring'), ('draining','removed'), ('draining','removing'), ('draining','rolling-back'), ('draining','upgrading'), ('failed','installed'), ('failed','pending'), ('failed','removed'), ('failed','removing'), ('installed','failed'), ('installed','pending'), ('installed','removed'), ('installed','removing'), ('installing','failed'), ('installing','installed'), ('installing','removed'), ('installing','removing'), ('pending','draining'), ('pending','failed'), ('pending','installed'), ('pending','installing'), ('pending','reconfiguring'), ('pending','removed'), ('pending','removing'), ('pending','rolling-back'), ('pending','upgrading'), ('reconfiguring','draining'), ('reconfiguring','failed'), ('reconfiguring','installed'), ('reconfiguring','removed'), ('reconfiguring','removing'), ('removing','failed'), ('removing','removed'), ('rolling-back','draining'), ('rolling-back','failed'), ('rolling-back','installed'), ('rolling-back','removed'), ('rolling-back','removing'), ('upgrading','draining'), ('upgrading','failed'), ('upgrading','installed'), ('upgrading','removed'), ('upgrading','removing')))
);
CREATE INDEX deployment_history_deployment ON deployment_history (deployment_id, id);

-- +goose Down
DROP TABLE deployment_history;
DROP TABLE status_reports;
DROP TABLE revisions;
DROP TABLE deployments;
DROP TABLE devices;
DROP TABLE bundles;
DROP TABLE clients;
