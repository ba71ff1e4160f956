-- +goose Up
-- Issue 12: starting a rollout over 100,000 deployments writes 100,000
-- members in one statement (InsertRollout). The foreign key from
-- rollout_members to rollouts checked each row by itself (a lookup and a
-- row lock per member): 2-2.5 s of a 5-6.5 s start at 100,000 members
-- (measured alternately in one run, internal/fleet service-level profile).
-- A statement trigger checks all the rows one statement inserted with one
-- anti-join instead (locking them as the key's check did); a member's
-- rollout and a rollout's id never change; deleting a rollout
-- deletes its members (as ON DELETE CASCADE did; nothing deletes rollouts
-- today). The constraint's name stays the one errors report.
ALTER TABLE rollout_members DROP CONSTRAINT rollout_members_rollout_id_fkey;
-- +goose StatementBegin
CREATE FUNCTION rollout_members_check_rollout() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing uuid;
BEGIN
    -- The rollouts, locked against deletion until the transaction ends, as
    -- the foreign key's check locked them.
    PERFORM 1 FROM rollouts WHERE id IN (SELECT DISTINCT rollout_id FROM new_members) FOR KEY SHARE;
    SELECT n.rollout_id INTO missing FROM new_members n
    WHERE NOT EXISTS (SELECT 1 FROM rollouts r WHERE r.id = n.rollout_id) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'rollout member of no rollout: %', missing
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'rollout_members_rollout_id_fkey';
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER rollout_members_rollout AFTER INSERT ON rollout_members
    REFERENCING NEW TABLE AS new_members FOR EACH STATEMENT EXECUTE FUNCTION rollout_members_check_rollout();
-- +goose StatementBegin
CREATE FUNCTION rollout_members_rollout_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a rollout''s id and a rollout member''s rollout do not change'
        USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'rollout_members_rollout_id_fkey';
END $$;
-- +goose StatementEnd
CREATE TRIGGER rollout_members_rollout_fixed BEFORE UPDATE OF rollout_id ON rollout_members
    FOR EACH ROW WHEN (OLD.rollout_id IS DISTINCT FROM NEW.rollout_id) EXECUTE FUNCTION rollout_members_rollout_fixed();
CREATE TRIGGER rollouts_id_fixed BEFORE UPDATE OF id ON rollouts
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id) EXECUTE FUNCTION rollout_members_rollout_fixed();
-- +goose StatementBegin
CREATE FUNCTION rollouts_delete_members() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM rollout_members m USING old_rollouts o WHERE m.rollout_id = o.id;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER rollouts_delete_members AFTER DELETE ON rollouts
    REFERENCING OLD TABLE AS old_rollouts FOR EACH STATEMENT EXECUTE FUNCTION rollouts_delete_members();


-- The members are copied into rollout_members as they are classified, in
-- the creation's transaction, instead of being staged and then moved with
-- their waves numbered (1.7-2 s at 100,000 members): a member keeps its
-- place among the eligible members (from 0; NULL when excluded), known as
-- it is classified, and its wave follows from the place and the waves'
-- resolved sizes (lifecycle.WaveStarts, WaveAt), which are only known once
-- every member is classified. The rename makes this release a stop-all
-- upgrade (docs/deploy.md): the previous release reads and writes wave
-- (and rollout_stage), and filling both would cost what is saved here.
ALTER TABLE rollout_members RENAME COLUMN wave TO place;
UPDATE rollout_members m SET place = e.place
FROM (SELECT rollout_id, ord, row_number() OVER (PARTITION BY rollout_id ORDER BY ord) - 1 AS place
      FROM rollout_members WHERE classification = 'eligible') e
WHERE m.rollout_id = e.rollout_id AND m.ord = e.ord AND m.place IS DISTINCT FROM e.place;
DROP INDEX rollout_members_wave;
-- A wave's pending members in order (reserving), a rollout's members
-- (counts).
CREATE INDEX rollout_members_place ON rollout_members (rollout_id, status, place);
DROP TABLE rollout_stage;

-- +goose Down
CREATE UNLOGGED TABLE rollout_stage AS
  SELECT rollout_id AS stage_id, ord, client_id, device_id, deployment_id, classification, reason, reason_detail,
         supplier_reason, plan, status, from_version, from_revision, profile_id, restore_revision
  FROM rollout_members WITH NO DATA;
ALTER TABLE rollout_stage ALTER COLUMN stage_id SET NOT NULL,
  ADD COLUMN staged_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX rollout_stage_order ON rollout_stage (stage_id, ord);
DROP INDEX rollout_members_place;
ALTER TABLE rollout_members RENAME COLUMN place TO wave;
UPDATE rollout_members m SET wave = width_bucket(m.wave, (
  SELECT array_agg(s.start ORDER BY s.i) || 2147483647 FROM (
    SELECT i, sum((w->>'ResolvedSize')::int) OVER (ORDER BY i) AS start
    FROM rollouts r, jsonb_array_elements(r.waves) WITH ORDINALITY AS x(w, i) WHERE r.id = m.rollout_id) s
  WHERE s.i < (SELECT jsonb_array_length(waves) FROM rollouts WHERE id = m.rollout_id)))
WHERE m.wave IS NOT NULL;
CREATE INDEX rollout_members_wave ON rollout_members (rollout_id, wave, status);
DROP TRIGGER rollouts_delete_members ON rollouts;
DROP FUNCTION rollouts_delete_members();
DROP TRIGGER rollouts_id_fixed ON rollouts;
DROP TRIGGER rollout_members_rollout_fixed ON rollout_members;
DROP FUNCTION rollout_members_rollout_fixed();
DROP TRIGGER rollout_members_rollout ON rollout_members;
DROP FUNCTION rollout_members_check_rollout();
DELETE FROM rollout_members m WHERE NOT EXISTS (SELECT 1 FROM rollouts r WHERE r.id = m.rollout_id);
ALTER TABLE rollout_members ADD CONSTRAINT rollout_members_rollout_id_fkey
    FOREIGN KEY (rollout_id) REFERENCES rollouts (id) ON DELETE CASCADE;
