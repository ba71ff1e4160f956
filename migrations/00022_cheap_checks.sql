-- +goose NO TRANSACTION
-- +goose Up
-- The same checks, written so that PostgreSQL's regular expression engine
-- does not expand a bounded repetition at every row. A pattern such as
-- '^sha256:[0-9a-f]{64}$' builds a machine with a state per repetition,
-- anew at each evaluation: about 8 µs a row on this project's 2-core
-- machine, where '^sha256:[0-9a-f]+$' with the length checked apart costs
-- under 1 µs (100,000-row INSERTs into a table with one check or the
-- other, PostgreSQL 15; docs/benchmarks.md). A creation checks two
-- digests (its revision's and its document's), and a publication a
-- client's id (every UPDATE checks every CHECK) and, for a small client,
-- its bundle's digest. Each new check accepts exactly what the old one
-- did: the bracket expression matches one character, so a string of
-- length n (characters, as length() counts them) of which all match is
-- what the bounded repetition of n matched.
-- Each statement commits on its own (NO TRANSACTION), so that replicas of
-- the previous release keep working while one of this release migrates:
-- a check is swapped NOT VALID under a short lock of its one table (no
-- scan), then validated under a lock that lets reads and writes go on.
-- Holding the eight tables' locks in one transaction could deadlock with
-- a publication that locks them in another order. Run again after a
-- failure, every statement does the same again (drop and add by name).
ALTER TABLE applications DROP CONSTRAINT applications_id_check,
    ADD CONSTRAINT applications_id_check CHECK (length(id) BETWEEN 1 AND 200 AND id ~ '^[a-z0-9-]+$') NOT VALID;
ALTER TABLE applications VALIDATE CONSTRAINT applications_id_check;
ALTER TABLE application_versions DROP CONSTRAINT application_versions_digest_check,
    ADD CONSTRAINT application_versions_digest_check CHECK (length(digest) = 71 AND digest ~ '^sha256:[0-9a-f]+$') NOT VALID;
ALTER TABLE application_versions VALIDATE CONSTRAINT application_versions_digest_check;
ALTER TABLE clients DROP CONSTRAINT clients_id_check,
    ADD CONSTRAINT clients_id_check CHECK (length(id) BETWEEN 1 AND 128 AND id ~ '^[A-Za-z0-9._-]+$') NOT VALID;
ALTER TABLE clients VALIDATE CONSTRAINT clients_id_check;
ALTER TABLE clients DROP CONSTRAINT clients_bundle_digest_check,
    ADD CONSTRAINT clients_bundle_digest_check CHECK (length(bundle_digest) = 71 AND bundle_digest ~ '^sha256:[0-9a-f]+$') NOT VALID;
ALTER TABLE clients VALIDATE CONSTRAINT clients_bundle_digest_check;
ALTER TABLE bundles DROP CONSTRAINT bundles_digest_check,
    ADD CONSTRAINT bundles_digest_check CHECK (length(digest) = 71 AND digest ~ '^sha256:[0-9a-f]+$') NOT VALID;
ALTER TABLE bundles VALIDATE CONSTRAINT bundles_digest_check;
ALTER TABLE revisions DROP CONSTRAINT revisions_digest_check,
    ADD CONSTRAINT revisions_digest_check CHECK (length(digest) = 71 AND digest ~ '^sha256:[0-9a-f]+$') NOT VALID;
ALTER TABLE revisions VALIDATE CONSTRAINT revisions_digest_check;
ALTER TABLE documents DROP CONSTRAINT documents_digest_check,
    ADD CONSTRAINT documents_digest_check CHECK (length(digest) = 71 AND digest ~ '^sha256:[0-9a-f]+$') NOT VALID;
ALTER TABLE documents VALIDATE CONSTRAINT documents_digest_check;
ALTER TABLE manifest_versions DROP CONSTRAINT manifest_versions_bundle_digest_check,
    ADD CONSTRAINT manifest_versions_bundle_digest_check CHECK (length(bundle_digest) = 71 AND bundle_digest ~ '^sha256:[0-9a-f]+$') NOT VALID;
ALTER TABLE manifest_versions VALIDATE CONSTRAINT manifest_versions_bundle_digest_check;
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_id_check,
    ADD CONSTRAINT api_tokens_id_check CHECK (length(id) BETWEEN 1 AND 32 AND id ~ '^[a-z0-9]+$') NOT VALID;
ALTER TABLE api_tokens VALIDATE CONSTRAINT api_tokens_id_check;
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_secret_hash_check,
    ADD CONSTRAINT api_tokens_secret_hash_check CHECK (length(secret_hash) = 64 AND secret_hash ~ '^[0-9a-f]+$') NOT VALID;
ALTER TABLE api_tokens VALIDATE CONSTRAINT api_tokens_secret_hash_check;

-- +goose Down
ALTER TABLE applications DROP CONSTRAINT applications_id_check,
    ADD CONSTRAINT applications_id_check CHECK (id ~ '^[a-z0-9-]{1,200}$') NOT VALID;
ALTER TABLE applications VALIDATE CONSTRAINT applications_id_check;
ALTER TABLE application_versions DROP CONSTRAINT application_versions_digest_check,
    ADD CONSTRAINT application_versions_digest_check CHECK (digest ~ '^sha256:[0-9a-f]{64}$') NOT VALID;
ALTER TABLE application_versions VALIDATE CONSTRAINT application_versions_digest_check;
ALTER TABLE clients DROP CONSTRAINT clients_id_check,
    ADD CONSTRAINT clients_id_check CHECK (id ~ '^[A-Za-z0-9._-]{1,128}$') NOT VALID;
ALTER TABLE clients VALIDATE CONSTRAINT clients_id_check;
ALTER TABLE clients DROP CONSTRAINT clients_bundle_digest_check,
    ADD CONSTRAINT clients_bundle_digest_check CHECK (bundle_digest ~ '^sha256:[0-9a-f]{64}$') NOT VALID;
ALTER TABLE clients VALIDATE CONSTRAINT clients_bundle_digest_check;
ALTER TABLE bundles DROP CONSTRAINT bundles_digest_check,
    ADD CONSTRAINT bundles_digest_check CHECK (digest ~ '^sha256:[0-9a-f]{64}$') NOT VALID;
ALTER TABLE bundles VALIDATE CONSTRAINT bundles_digest_check;
ALTER TABLE revisions DROP CONSTRAINT revisions_digest_check,
    ADD CONSTRAINT revisions_digest_check CHECK (digest ~ '^sha256:[0-9a-f]{64}$') NOT VALID;
ALTER TABLE revisions VALIDATE CONSTRAINT revisions_digest_check;
ALTER TABLE documents DROP CONSTRAINT documents_digest_check,
    ADD CONSTRAINT documents_digest_check CHECK (digest ~ '^sha256:[0-9a-f]{64}$') NOT VALID;
ALTER TABLE documents VALIDATE CONSTRAINT documents_digest_check;
ALTER TABLE manifest_versions DROP CONSTRAINT manifest_versions_bundle_digest_check,
    ADD CONSTRAINT manifest_versions_bundle_digest_check CHECK (bundle_digest ~ '^sha256:[0-9a-f]{64}$') NOT VALID;
ALTER TABLE manifest_versions VALIDATE CONSTRAINT manifest_versions_bundle_digest_check;
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_id_check,
    ADD CONSTRAINT api_tokens_id_check CHECK (id ~ '^[a-z0-9]{1,32}$') NOT VALID;
ALTER TABLE api_tokens VALIDATE CONSTRAINT api_tokens_id_check;
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_secret_hash_check,
    ADD CONSTRAINT api_tokens_secret_hash_check CHECK (secret_hash ~ '^[0-9a-f]{64}$') NOT VALID;
ALTER TABLE api_tokens VALIDATE CONSTRAINT api_tokens_secret_hash_check;
