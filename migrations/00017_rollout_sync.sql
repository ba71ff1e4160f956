-- +goose Up
-- Issue 12: a rollout's driver finds the members whose deployment was
-- removed (deleted, or its device unregistered) after the rollout started
-- from the few deployments removed since, not from a join of every member
-- with its deployment at each step (880 ms at 100,000 members).
--
-- removed_at is the instant a deployment started being removed, set once
-- (removing never goes back); status reports never write it, so the index
-- leaves their updates HOT (an index on updated_at would not).
ALTER TABLE deployments ADD COLUMN removed_at timestamptz;
UPDATE deployments SET removed_at = updated_at WHERE removing;
CREATE INDEX deployments_removed_at ON deployments (removed_at) WHERE removing;
CREATE INDEX rollout_members_deployment ON rollout_members (deployment_id) WHERE deployment_id IS NOT NULL;

-- +goose Down
DROP INDEX rollout_members_deployment;
DROP INDEX deployments_removed_at;
ALTER TABLE deployments DROP COLUMN removed_at;
