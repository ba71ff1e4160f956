-- +goose Up
-- Issue 12: a rollout's counts (per wave, status, classification and
-- exclusion reason) were a GROUP BY over all its members at every read of
-- the rollout: 40-100 ms at 100,000 members, several times per driver
-- visit and at every GET. The counts are now kept as deltas appended by
-- statement triggers on rollout_members (no row is updated: concurrent
-- writers of one rollout's members never wait for each other nor
-- deadlock), summed when read (a few rows), and compacted by the driver
-- (SyncRolloutMembers). An eligible member's wave follows from its place
-- and the rollout's wave sizes (rollout_wave_starts); a change of those
-- (the creation sets them once its members are written) counts the
-- rollout's members again.

-- The places at which the waves after the first start, then a bound no
-- place reaches (width_bucket's thresholds): lifecycle.WaveStarts.
-- +goose StatementBegin
CREATE FUNCTION rollout_wave_starts(waves jsonb) RETURNS int[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(array_agg(s ORDER BY i) FILTER (WHERE i < jsonb_array_length(waves)), '{}') || 2147483647
  FROM (SELECT i, sum((w->>'ResolvedSize')::int) OVER (ORDER BY i) AS s
        FROM jsonb_array_elements(waves) WITH ORDINALITY AS x(w, i)) t
$$;
-- +goose StatementEnd

-- wave: from 0, -1 for a member in no wave (excluded at start).
CREATE TABLE rollout_count_deltas (
    rollout_id     uuid   NOT NULL,
    wave           integer NOT NULL,
    status         text   NOT NULL,
    classification text   NOT NULL,
    reason         text   NOT NULL,
    n              bigint NOT NULL
);
CREATE INDEX rollout_count_deltas_rollout ON rollout_count_deltas (rollout_id);

-- +goose StatementBegin
CREATE FUNCTION rollout_members_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- The members of a rollout being created (its waves not sized yet)
        -- are counted when its waves are sized (rollouts_wave_sizes).
        INSERT INTO rollout_count_deltas (rollout_id, wave, status, classification, reason, n)
        SELECT m.rollout_id, coalesce(width_bucket(m.place, s.starts), -1), m.status, m.classification, coalesce(m.reason, ''), count(*)
        FROM new_members m JOIN (SELECT id, rollout_wave_starts(waves) AS starts FROM rollouts
                                 WHERE id IN (SELECT DISTINCT rollout_id FROM new_members) AND waves <> '[]') s ON s.id = m.rollout_id
        GROUP BY 1, 2, 3, 4, 5;
    ELSIF TG_OP = 'DELETE' THEN
        -- The rollout's own deletion deletes its deltas (rollouts_delete_members).
        INSERT INTO rollout_count_deltas (rollout_id, wave, status, classification, reason, n)
        SELECT m.rollout_id, coalesce(width_bucket(m.place, s.starts), -1), m.status, m.classification, coalesce(m.reason, ''), -count(*)
        FROM old_members m JOIN (SELECT id, rollout_wave_starts(waves) AS starts FROM rollouts
                                 WHERE id IN (SELECT DISTINCT rollout_id FROM old_members)) s ON s.id = m.rollout_id
        GROUP BY 1, 2, 3, 4, 5;
    ELSE
        INSERT INTO rollout_count_deltas (rollout_id, wave, status, classification, reason, n)
        SELECT x.rollout_id, coalesce(width_bucket(x.place, s.starts), -1), x.status, x.classification, x.reason, sum(x.d)
        FROM (SELECT rollout_id, place, status, classification, coalesce(reason, '') AS reason, -1 AS d FROM old_members
              UNION ALL
              SELECT rollout_id, place, status, classification, coalesce(reason, ''), 1 FROM new_members) x
        JOIN (SELECT id, rollout_wave_starts(waves) AS starts FROM rollouts
              WHERE id IN (SELECT DISTINCT rollout_id FROM new_members)) s ON s.id = x.rollout_id
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
  SELECT m.rollout_id, coalesce(width_bucket(m.place, s.starts), -1), m.status, m.classification, coalesce(m.reason, ''), count(*)
  FROM rollout_members m, (SELECT rollout_wave_starts(waves) AS starts FROM rollouts WHERE id = rollout) s
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
-- Waves are sized when they are set ('[]': a rollout being created) and
-- when their sizes change.
CREATE TRIGGER rollouts_wave_sizes AFTER UPDATE OF waves ON rollouts FOR EACH ROW
    WHEN ((OLD.waves = '[]') IS DISTINCT FROM (NEW.waves = '[]')
          OR rollout_wave_starts(OLD.waves) IS DISTINCT FROM rollout_wave_starts(NEW.waves)) EXECUTE FUNCTION rollouts_recount();

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
DROP TRIGGER rollouts_wave_sizes ON rollouts;
DROP FUNCTION rollouts_recount();
DROP FUNCTION rollout_recount(uuid);
DROP TRIGGER rollout_members_count_delete ON rollout_members;
DROP TRIGGER rollout_members_count_update ON rollout_members;
DROP TRIGGER rollout_members_count_insert ON rollout_members;
DROP FUNCTION rollout_members_count();
DROP TABLE rollout_count_deltas;
DROP FUNCTION rollout_wave_starts(jsonb);
