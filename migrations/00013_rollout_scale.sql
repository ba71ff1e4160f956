-- +goose Up
-- A rollout's candidates are read a page at a time in the order of their
-- member keys (client id, device id, deployment id) among one
-- application's deployments (issue 12): this index serves each page as a
-- range. It starts with application_id, so it replaces deployments_app
-- (one index more on deployments would cost every creation).
CREATE INDEX deployments_rollout_order ON deployments (application_id, client_id, device_id, id);
DROP INDEX deployments_app;

-- +goose Down
CREATE INDEX deployments_app ON deployments (application_id);
DROP INDEX deployments_rollout_order;
