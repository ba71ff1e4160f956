-- +goose Up
-- Publication storage that costs what the change costs (issue 11, design §5):
-- every rendered ApplicationDeployment YAML is stored once (documents), with
-- its bundle piece kept ready; a client's manifest is maintained as entries
-- valid over a range of manifest versions (manifest_entries) rather than
-- recomputed; a published version is one row (manifest_versions) and its
-- bundle a reference to the entries' pieces, never a copy. The legacy bundle
-- blobs stay readable for devices holding a manifest published before this
-- migration; no new blob is written.
SET LOCAL statement_timeout = 0;

-- One row per distinct document of a deployment. A revert that repeats a
-- revision (its digest) stores nothing new. piece, piece_crc and piece_size
-- are the document's bundle piece (raw deflate of its tar entry, its CRC-32
-- and uncompressed length); NULL for rows migrated here, computed by the
-- server on first need and stored once (UPDATE … WHERE piece IS NULL).
-- Documents are the history of revisions and are never collected.
CREATE TABLE documents (
    deployment_id uuid        NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    digest        text        NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    yaml          bytea       NOT NULL CHECK (octet_length(yaml) > 0),
    piece         bytea,
    piece_crc     bigint      CHECK (piece_crc BETWEEN 0 AND 4294967295),
    piece_size    bigint      CHECK (piece_size > 0),
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (deployment_id, digest),
    CHECK ((piece IS NULL) = (piece_crc IS NULL) AND (piece IS NULL) = (piece_size IS NULL))
);
INSERT INTO documents (deployment_id, digest, yaml, created_at)
SELECT DISTINCT ON (deployment_id, digest) deployment_id, digest, yaml, created_at
FROM revisions ORDER BY deployment_id, digest, n;
ALTER TABLE revisions DROP COLUMN yaml;
DROP INDEX revisions_digest; -- documents' key serves the lookup by digest now
-- Deferred: the applier writes a revision first and its document after, in
-- the same transaction.
ALTER TABLE revisions ADD CONSTRAINT revisions_document FOREIGN KEY (deployment_id, digest)
    REFERENCES documents (deployment_id, digest) DEFERRABLE INITIALLY DEFERRED;

-- A client's manifest of version v is its entries with
-- from_version <= v AND (to_version IS NULL OR to_version > v). A publication
-- closes the deployment's open entry and opens a new one (unless the
-- deployment left the manifest): O(changes), whatever the client's size.
CREATE TABLE manifest_entries (
    client_id     text   NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    deployment_id uuid   NOT NULL,
    digest        text   NOT NULL,
    size_bytes    bigint NOT NULL CHECK (size_bytes > 0),
    from_version  bigint NOT NULL CHECK (from_version >= 1),
    to_version    bigint CHECK (to_version > from_version),
    PRIMARY KEY (client_id, deployment_id, from_version),
    FOREIGN KEY (deployment_id, digest) REFERENCES documents (deployment_id, digest) ON DELETE CASCADE
);
-- The current manifest: at most one open entry per deployment.
CREATE UNIQUE INDEX manifest_entries_open ON manifest_entries (client_id, deployment_id) WHERE to_version IS NULL;
-- What the garbage collector deletes.
CREATE INDEX manifest_entries_closed ON manifest_entries (client_id, to_version) WHERE to_version IS NOT NULL;
INSERT INTO manifest_entries (client_id, deployment_id, digest, size_bytes, from_version)
SELECT d.client_id, d.id, r.digest, octet_length(doc.yaml), c.manifest_version
FROM deployments d
JOIN clients c ON c.id = d.client_id
JOIN revisions r ON r.deployment_id = d.id AND r.n = d.revision
JOIN documents doc ON doc.deployment_id = r.deployment_id AND doc.digest = r.digest
WHERE NOT d.removing;

-- One row per published manifest version. bundle_digest and bundle_size are
-- computed by the first reader of the version (linear in the client's size,
-- once per version) and recorded before the manifest naming them is served;
-- the bundle's bytes are assembled from the pieces of the version's entries.
-- A version is kept while it is current or superseded less than the bundle
-- retention ago (the garbage collector, -bundle-retention).
CREATE TABLE manifest_versions (
    client_id     text        NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    version       bigint      NOT NULL CHECK (version >= 1),
    published_at  timestamptz NOT NULL,
    superseded_at timestamptz,
    bundle_digest text        CHECK (bundle_digest ~ '^sha256:[0-9a-f]{64}$'),
    bundle_size   bigint      CHECK (bundle_size > 0),
    PRIMARY KEY (client_id, version),
    CHECK ((bundle_digest IS NULL) = (bundle_size IS NULL))
);
CREATE INDEX manifest_versions_bundle ON manifest_versions (client_id, bundle_digest);
CREATE UNIQUE INDEX manifest_versions_current ON manifest_versions (client_id) WHERE superseded_at IS NULL;
-- Today's manifests, with their legacy bundle (served from bundles).
INSERT INTO manifest_versions (client_id, version, published_at, bundle_digest, bundle_size)
SELECT c.id, c.manifest_version, c.updated_at, b.digest, octet_length(b.content)
FROM clients c LEFT JOIN bundles b ON b.client_id = c.id AND b.digest = c.bundle_digest;

-- The legacy manifest of the current version is served as stored until the
-- client's next publication, which clears it: devices see no change caused
-- by the upgrade (same version, same bytes, same ETag).
ALTER TABLE clients ALTER COLUMN manifest_json DROP NOT NULL,
    ALTER COLUMN manifest_etag DROP NOT NULL,
    ADD CONSTRAINT clients_legacy_manifest CHECK ((manifest_json IS NULL) = (manifest_etag IS NULL));

-- Legacy bundle blobs: read-only from now on. A blob no current manifest
-- names was superseded at the latest now; the one a current manifest names
-- is kept as long as its manifest_versions row.
ALTER TABLE bundles ADD COLUMN superseded_at timestamptz;
UPDATE bundles b SET superseded_at = now()
WHERE NOT EXISTS (SELECT 1 FROM clients c WHERE c.id = b.client_id AND c.bundle_digest = b.digest);

-- +goose Down
-- Only possible while every client still has its legacy manifest: a client
-- published to since the Up, or created since (it never had one), has its
-- manifest only as entries, which SQL cannot render.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM clients WHERE manifest_json IS NULL) THEN
        RAISE EXCEPTION 'some clients have no legacy manifest (published to or created since migration 00007): their manifests cannot be rebuilt in SQL';
    END IF;
END $$;
-- +goose StatementEnd
ALTER TABLE bundles DROP COLUMN superseded_at;
ALTER TABLE clients DROP CONSTRAINT clients_legacy_manifest,
    ALTER COLUMN manifest_json SET NOT NULL,
    ALTER COLUMN manifest_etag SET NOT NULL;
DROP TABLE manifest_versions;
DROP TABLE manifest_entries;
ALTER TABLE revisions DROP CONSTRAINT revisions_document;
ALTER TABLE revisions ADD COLUMN yaml bytea;
UPDATE revisions r SET yaml = d.yaml FROM documents d WHERE d.deployment_id = r.deployment_id AND d.digest = r.digest;
ALTER TABLE revisions ALTER COLUMN yaml SET NOT NULL;
CREATE INDEX revisions_digest ON revisions (deployment_id, digest);
DROP TABLE documents;
