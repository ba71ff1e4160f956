-- +goose NO TRANSACTION
-- +goose Up
-- A document's YAML (3.7 KB for a realistic deployment) makes its row larger
-- than PostgreSQL's TOAST threshold (about 2 KB), so PostgreSQL compresses
-- it as the row is written: with pglz, its default, about 35 µs of the
-- writing backend's CPU a document, on the serial path of every creation,
-- upgrade and reconfiguration (pgbench, INSERT of 8 such documents, commit
-- included: 0.66-0.79 ms with pglz, 0.41-0.48 ms with lz4; docs/benchmarks.md).
-- lz4 is several times faster to compress and to decompress (the device's
-- document fetch reads it), for rows about a fifth larger. The piece is
-- deflate data, which neither compresses: lz4 gives up on it sooner.
--
-- lz4 needs PostgreSQL 14 or later built with it (Debian's and the official
-- images are); elsewhere this migration changes nothing and the columns
-- keep the server's default. It changes no stored row: a value keeps the
-- compression it was written with and reads the same; new values use lz4.
-- Setting a column's compression changes the catalog only (no rewrite), but
-- under an exclusive lock of the table: it waits at most 10 s for the lock
-- (behind a long reader, such as a running pg_dump), rather than queueing
-- every document read and publication behind it; it then fails, changing
-- nothing, and the next start of the server migrates again. One table, one
-- short statement, as in migration 00022.
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF current_setting('server_version_num')::int >= 140000
       AND EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        EXECUTE 'ALTER TABLE documents ALTER COLUMN yaml SET COMPRESSION lz4, ALTER COLUMN piece SET COMPRESSION lz4';
    END IF;
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('lock_timeout', '10s', true);
    IF current_setting('server_version_num')::int >= 140000 THEN
        EXECUTE 'ALTER TABLE documents ALTER COLUMN yaml SET COMPRESSION default, ALTER COLUMN piece SET COMPRESSION default';
    END IF;
END $$;
-- +goose StatementEnd
