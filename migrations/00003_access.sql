-- +goose Up
-- Management API tokens (only hashes of their secrets) and the append-only
-- audit log.

CREATE TABLE api_tokens (
    id           text        PRIMARY KEY CHECK (id ~ '^[a-z0-9]{1,32}$'),
    name         text        NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    role         text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    secret_hash  text        NOT NULL CHECK (secret_hash ~ '^[0-9a-f]{64}$'),
    created_at   timestamptz NOT NULL,
    created_by   text        NOT NULL DEFAULT '',
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz
);

CREATE TABLE audit_log (
    id         bigserial   PRIMARY KEY,
    at         timestamptz NOT NULL,
    actor      text        NOT NULL,
    role       text        NOT NULL DEFAULT '',
    action     text        NOT NULL DEFAULT '',
    method     text        NOT NULL,
    target     text        NOT NULL,
    status     integer     NOT NULL,
    outcome    text        NOT NULL CHECK (outcome IN ('success', 'failure')),
    request_id text        NOT NULL DEFAULT '',
    detail     jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_actor ON audit_log (actor, id DESC);
CREATE INDEX audit_log_action ON audit_log (action, id DESC);

-- Append-only: entries can be neither changed nor deleted (short of
-- dropping the table as its owner).
-- +goose StatementBegin
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

-- +goose Down
DROP TABLE audit_log;
DROP FUNCTION audit_log_append_only();
DROP TABLE api_tokens;
