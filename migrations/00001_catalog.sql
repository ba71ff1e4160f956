-- +goose Up
-- The application catalog: Margo application descriptions, one immutable row
-- per application version.
CREATE TABLE applications (
    id         text PRIMARY KEY CHECK (id ~ '^[a-z0-9-]{1,200}$'),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE application_versions (
    application_id text        NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
    -- canonical SemVer spelling ("1.0" is stored as "1.0.0")
    version        text        NOT NULL CHECK (length(version) BETWEEN 5 AND 128),
    -- lifecycle.Version.SortKey: byte order is SemVer precedence
    sort_key       text        COLLATE "C" NOT NULL,
    -- metadata.name, for listings
    name           text        NOT NULL,
    digest         text        NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    media_type     text        NOT NULL CHECK (media_type IN ('application/yaml', 'application/json')),
    raw            bytea       NOT NULL,
    document       jsonb       NOT NULL,
    yanked         boolean     NOT NULL DEFAULT false,
    yanked_reason  text        NOT NULL DEFAULT '',
    yanked_at      timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (application_id, version),
    CHECK (yanked = (yanked_at IS NOT NULL))
);

CREATE UNIQUE INDEX application_versions_order
    ON application_versions (application_id, sort_key);

-- +goose Down
DROP TABLE application_versions;
DROP TABLE applications;
