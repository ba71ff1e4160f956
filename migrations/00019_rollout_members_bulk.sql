-- +goose Up
-- Issue 12: starting a rollout over 100,000 deployments writes 100,000
-- members in one statement (InsertRollout). The foreign key from
-- rollout_members to rollouts checked each row by itself (a lookup and a
-- row lock per member): 2-2.5 s of a 5-6.5 s start at 100,000 members
-- (measured alternately in one run, internal/fleet service-level profile).
-- A statement trigger checks all the rows one statement inserted with one
-- anti-join instead; a member's rollout never changes; deleting a rollout
-- deletes its members (as ON DELETE CASCADE did; nothing deletes rollouts
-- today). The constraint's name stays the one errors report.
ALTER TABLE rollout_members DROP CONSTRAINT rollout_members_rollout_id_fkey;
-- +goose StatementBegin
CREATE FUNCTION rollout_members_check_rollout() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing uuid;
BEGIN
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
    RAISE EXCEPTION 'a rollout member''s rollout does not change'
        USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'rollout_members_rollout_id_fkey';
END $$;
-- +goose StatementEnd
CREATE TRIGGER rollout_members_rollout_fixed BEFORE UPDATE OF rollout_id ON rollout_members
    FOR EACH ROW WHEN (OLD.rollout_id IS DISTINCT FROM NEW.rollout_id) EXECUTE FUNCTION rollout_members_rollout_fixed();
-- +goose StatementBegin
CREATE FUNCTION rollouts_delete_members() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM rollout_members m USING old_rollouts o WHERE m.rollout_id = o.id;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER rollouts_delete_members AFTER DELETE ON rollouts
    REFERENCING OLD TABLE AS old_rollouts FOR EACH STATEMENT EXECUTE FUNCTION rollouts_delete_members();

-- +goose Down
DROP TRIGGER rollouts_delete_members ON rollouts;
DROP FUNCTION rollouts_delete_members();
DROP TRIGGER rollout_members_rollout_fixed ON rollout_members;
DROP FUNCTION rollout_members_rollout_fixed();
DROP TRIGGER rollout_members_rollout ON rollout_members;
DROP FUNCTION rollout_members_check_rollout();
DELETE FROM rollout_members m WHERE NOT EXISTS (SELECT 1 FROM rollouts r WHERE r.id = m.rollout_id);
ALTER TABLE rollout_members ADD CONSTRAINT rollout_members_rollout_id_fkey
    FOREIGN KEY (rollout_id) REFERENCES rollouts (id) ON DELETE CASCADE;
