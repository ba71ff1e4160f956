-- +goose Up
-- Issue 12: a rollout's counts (per wave, status, classification and
-- exclusion reason) were a GROUP BY over all its members at every read of
-- the rollout: 40-100 ms at 100,000 members, several times per driver
-- visit and at every GET. The counts are now kept as deltas appended by
-- statement triggers on rollout_members (no row is updated: concurrent
-- writers of one rollout's members never wait for each other nor
-- deadlock), summed when read (a few rows), and compacted by the driver
-- (SyncRolloutMembers).
--
-- An eligible member's wave follows from its place and the places at
-- which the waves after the first start: rollouts.wave_starts, computed by
-- lifecycle.WaveStarts and written by the rollout's creation once its
-- members are classified (NULL until then); the wave is the number of
-- starts at or below the place (lifecycle.WaveAt), which is width_bucket
-- with a last bound no place reaches. Setting wave_starts counts the
-- rollout's members; members written before (by the creation) are counted
-- then.
ALTER TABLE rollouts ADD COLUMN wave_starts integer[];
UPDATE rollouts r SET wave_starts = coalesce((
    SELECT array_agg(s ORDER BY i) FROM (
        SELECT i, sum((w->>'ResolvedSize')::int) OVER (ORDER BY i) AS s
        FROM jsonb_array_elements(r.waves) WITH ORDINALITY AS x(w, i)) t
    WHERE i < jsonb_array_length(r.waves)), '{}');

-- wave: from 0, -1 for a member in no wave (excluded at start).
CREATE TABLE rollout_count_deltas (
    rollout_id     uuid    NOT NULL,
    wave           integer NOT NULL,
    status         text    NOT NULL,
    classification text    NOT NULL,
    reason         text    NOT NULL,
    n              bigint  NOT NULL
);
CREATE INDEX rollout_count_deltas_rollout ON rollout_count_deltas (rollout_id);

-- +goose StatementBegin
CREATE FUNCTION rollout_members_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO rollout_count_deltas (rollout_id, wave, status, classification, reason, n)
        SELECT m.rollout_id, coalesce(width_bucket(m.place, r.wave_starts || 2147483647), -1), m.status, m.classification,
               coalesce(m.reason, ''), count(*)
        FROM new_members m JOIN rollouts r ON r.id = m.rollout_id AND r.wave_starts IS NOT NULL
        GROUP BY 1, 2, 3, 4, 5;
    ELSIF TG_OP = 'DELETE' THEN
        -- A rollout's own deletion deletes its deltas (rollouts_delete_members).
        INSERT INTO rollout_count_deltas (rollout_id, wave, status, classification, reason, n)
        SELECT m.rollout_id, coalesce(width_bucket(m.place, r.wave_starts || 2147483647), -1), m.status, m.classification,
               coalesce(m.reason, ''), -count(*)
        FROM old_members m JOIN rollouts r ON r.id = m.rollout_id AND r.wave_starts IS NOT NULL
        GROUP BY 1, 2, 3, 4, 5;
    ELSE
        INSERT INTO rollout_count_deltas (rollout_id, wave, status, classification, reason, n)
        SELECT x.rollout_id, coalesce(width_bucket(x.place, r.wave_starts || 2147483647), -1), x.status, x.classification, x.reason, sum(x.d)
        FROM (SELECT rollout_id, place, status, classification, coalesce(reason, '') AS reason, -1 AS d FROM old_members
              UNION ALL
              SELECT rollout_id, place, status, classification, coalesce(reason, ''), 1 FROM new_members) x
        JOIN rollouts r ON r.id = x.rollout_id AND r.wave_starts IS NOT NULL
        GROUP BY 1, 2, 3, 4, 5 HAVING sum(x.d) <> 0;
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER rollout_members_count_insert AFTER INSERT ON rollout_members
    REFERENCING NEW TABLE AS new_members FOR EACH STATEMENT EXECUTE FUNCTION rollout_members_count();
CREATE TRIGGER rollout_members_count_update AFTER UPDATE ON rollout_members
    REFERENCING OLD TABLE AS old_members NEW TABLE AS new_members FOR EACH STATEMENT EXECUTE FUNCTION rollout_members_count();
CREATE TRIGGER rollout_members_count_delete AFTER DELETE ON rollout_members
    REFERENCING OLD TABLE AS old_members FOR EACH STATEMENT EXECUTE FUNCTION rollout_members_count();

-- A rollout's counts from its members, replacing its deltas.
-- +goose StatementBegin
CREATE FUNCTION rollout_recount(rollout uuid) RETURNS void LANGUAGE sql AS $$
  DELETE FROM rollout_count_deltas WHERE rollout_id = rollout;
  INSERT INTO rollout_count_deltas (rollout_id, wave, status, classification, reason, n)
  SELECT m.rollout_id, coalesce(width_bucket(m.place, r.wave_starts || 2147483647), -1), m.status, m.classification,
         coalesce(m.reason, ''), count(*)
  FROM rollout_members m JOIN rollouts r ON r.id = m.rollout_id AND r.wave_starts IS NOT NULL
  WHERE m.rollout_id = rollout GROUP BY 1, 2, 3, 4, 5;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION rollouts_recount() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM rollout_recount(NEW.id);
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER rollouts_wave_starts AFTER UPDATE OF wave_starts ON rollouts FOR EACH ROW
    WHEN (OLD.wave_starts IS DISTINCT FROM NEW.wave_starts) EXECUTE FUNCTION rollouts_recount();

-- Deleting a rollout deletes its members (00019) and its counts.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION rollouts_delete_members() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM rollout_members m USING old_rollouts o WHERE m.rollout_id = o.id;
    DELETE FROM rollout_count_deltas c USING old_rollouts o WHERE c.rollout_id = o.id;
    RETURN NULL;
END $$;
-- +goose StatementEnd

SELECT rollout_recount(id) FROM rollouts;

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION rollouts_delete_members() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM rollout_members m USING old_rollouts o WHERE m.rollout_id = o.id;
    RETURN NULL;
END $$;
-- +goose StatementEnd
DROP TRIGGER rollouts_wave_starts ON rollouts;
DROP FUNCTION rollouts_recount();
DROP FUNCTION rollout_recount(uuid);
DROP TRIGGER rollout_members_count_delete ON rollout_members;
DROP TRIGGER rollout_members_count_update ON rollout_members;
DROP TRIGGER rollout_members_count_insert ON rollout_members;
DROP FUNCTION rollout_members_count();
DROP TABLE rollout_count_deltas;
ALTER TABLE rollouts DROP COLUMN wave_starts;
