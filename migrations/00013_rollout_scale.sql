-- +goose Up
-- A rollout's candidates are read a page at a time in the order of their
-- member keys (client id, device id, deployment id) among one
-- application's deployments (issue 12): this index serves each page as a
-- range. It starts with application_id, so it replaces deployments_app
-- (one index more on deployments would cost every creation).
-- The order is byte order (COLLATE "C"), the order the server compares
-- member keys in, whatever the database's default collation.
CREATE INDEX deployments_rollout_order ON deployments (application_id, client_id COLLATE "C", device_id COLLATE "C", id);
DROP INDEX deployments_app;
-- The same for install rollouts, which page through devices.
CREATE INDEX devices_rollout_order ON devices (client_id COLLATE "C", id COLLATE "C");

-- Members of rollouts being created, staged a page at a time as they are
-- classified (each page's COPY its own short transaction on any pooled
-- connection), then moved into rollout_members by the creation's
-- transaction, which deletes them. Unlogged: a crash loses only stages of
-- creations that did not commit; rows a failed creation left behind are
-- deleted by the next creation after an hour.
CREATE UNLOGGED TABLE rollout_stage AS
  SELECT rollout_id AS stage_id, ord, client_id, device_id, deployment_id, classification, reason, reason_detail,
         supplier_reason, plan, status, from_version, from_revision, profile_id, restore_revision
  FROM rollout_members WITH NO DATA;
ALTER TABLE rollout_stage ALTER COLUMN stage_id SET NOT NULL,
  ADD COLUMN staged_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX rollout_stage_order ON rollout_stage (stage_id, ord);

-- +goose Down
DROP TABLE rollout_stage;
DROP INDEX devices_rollout_order;
CREATE INDEX deployments_app ON deployments (application_id);
DROP INDEX deployments_rollout_order;
