-- +goose Up
-- The scheduler visits only operations that are due (issue 11 follow-up):
-- a visit records the deployment generation it saw (visited_generation) and
-- the instant after which its decision can change without a deployment
-- change (recheck_at: the deadline, a drain timeout, at most the safety-net
-- bound ahead). An active operation is due when it is queued, never
-- visited, its deployment's generation moved on, or recheck_at passed.
ALTER TABLE operations ADD COLUMN visited_generation bigint;
ALTER TABLE operations ADD COLUMN recheck_at timestamptz;
-- What the scheduler lists: the active operations in deadline order with
-- what "due" needs, so the listing reads the index and the deployments'
-- primary key only. Replaces operations_active (same key and predicate).
CREATE INDEX operations_due ON operations (deadline) INCLUDE (deployment_id, state, visited_generation, recheck_at)
    WHERE state IN ('queued', 'running');
DROP INDEX operations_active;

-- +goose Down
CREATE INDEX operations_active ON operations (deadline) WHERE state IN ('queued', 'running');
DROP INDEX operations_due;
ALTER TABLE operations DROP COLUMN recheck_at;
ALTER TABLE operations DROP COLUMN visited_generation;
