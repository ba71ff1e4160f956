-- +goose Up
-- GET /mgmt/v1/audit?targetKind=…&targetId=… selects the calls addressed to
-- one resource: target = its path, or target LIKE '<path>/%'. text_pattern_ops
-- lets a prefix LIKE use the index whatever the database's collation.
CREATE INDEX audit_log_target ON audit_log (target text_pattern_ops);

-- +goose Down
DROP INDEX audit_log_target;
