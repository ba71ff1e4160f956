-- +goose Up
-- Issue 12: a rollout's driver finds the members whose deployment was
-- removed (deleted, or its device unregistered) after the rollout started,
-- from the few deployments removed since, not from a join of every member
-- with its deployment at each step (880 ms at 100,000 members).
CREATE INDEX deployments_removed_since ON deployments (updated_at) WHERE removing;
CREATE INDEX rollout_members_deployment ON rollout_members (deployment_id) WHERE deployment_id IS NOT NULL;

-- +goose Down
DROP INDEX rollout_members_deployment;
DROP INDEX deployments_removed_since;
