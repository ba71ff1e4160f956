-- +goose Up
-- Issue 12, the speed of rollouts over 100,000 deployments.

-- A digest of a device's capabilities without their identity members
-- (margo.IdentityProperties: properties.id and properties.serialNumber),
-- kept by PostgreSQL on every write of the capabilities. Devices that
-- differ only in those fit an application alike (when its placement does
-- not read them), so a rollout checks placement once per digest and reads
-- the capabilities document of one device per digest, not of every
-- candidate: computing the digest in each page of candidates and moving
-- every document cost two thirds of the page's time. Adding a stored
-- generated column rewrites the devices table once.
ALTER TABLE devices ADD COLUMN fit_key text NOT NULL
  GENERATED ALWAYS AS (md5((capabilities #- '{properties,id}' #- '{properties,serialNumber}')::text)) STORED;

-- A member by its operation, active or not: creating a member's operation
-- reads the membership reserved for it (rolloutHolds), which an index on
-- active members only left to a scan of every member.
CREATE INDEX rollout_members_any_operation ON rollout_members (operation_id) WHERE operation_id IS NOT NULL;
DROP INDEX rollout_members_operation;

-- +goose Down
CREATE INDEX rollout_members_operation ON rollout_members (operation_id) WHERE active;
DROP INDEX rollout_members_any_operation;
ALTER TABLE devices DROP COLUMN fit_key;
