-- +goose Up
-- Issue 11: a batch of 10,000 creations inserts about 60,000 rows into
-- tables whose foreign keys PostgreSQL checks row by row: a key lookup and
-- a row lock on the parent for each row and key, 11 per creation, 0.6-0.7 s
-- of a 2.2-2.6 s BenchmarkCreateBatch10000 (measured by dropping them all,
-- alternated in one run). As migration 00019 did for rollout_members, nine
-- of those keys become statement triggers: after each insert statement,
-- one statement per key locks the parents the new rows name (FOR KEY SHARE,
-- as the key's check did: a parent is not deleted and its key does not
-- change until the inserting transaction ends) and one anti-join finds a
-- row whose parent is missing, reported as the key's violation (same
-- SQLSTATE, constraint and table). Measured alternately in one run:
-- 2.03-2.18 s a batch against 2.49-3.12 s with the keys.
-- The checks' plans are index lookups of the parents, whatever their
-- statistics say (the functions turn sequential scans, hash and merge joins
-- off): a plan is made at a session's first check and kept for the
-- session, and one made while the parents were few (a seq scan, hashed)
-- cost 1.5-1.9 ms a statement once they were 10,000 (pg_stat_statements,
-- batches of 8 creations in the harness).
-- The lock skips parents whose row version this transaction wrote (xmin is
-- its id): no other transaction sees such a row, let alone deletes it, and
-- locking the 10,000 deployments a batch has just inserted, once per key,
-- cost 0.2-0.25 s. (A frozen row keeps its xmin; one written exactly 2^32
-- transactions earlier would go unlocked for that one transaction.)
-- The parents' side keeps the keys' actions: deleting a deployment,
-- operation, document or client cascades or sets null, deleting an
-- application version in use is refused, by statement triggers; a key
-- column never changes (refused, naming the key, as in 00019). Nothing in
-- wfm deletes these parents or changes their keys; the triggers keep the
-- database's integrity for whoever does.
-- Two keys stay row-level: revisions' key to documents is deferred to the
-- commit (a revision may be written before its document), which a
-- statement trigger cannot be, and its checks cost little there;
-- deployments' key to devices names columns an operator may re-collate
-- (ALTER COLUMN TYPE, which a trigger naming a column forbids), and the
-- creation holds those devices locked already (FOR SHARE).

ALTER TABLE revisions DROP CONSTRAINT revisions_deployment_id_fkey, DROP CONSTRAINT revisions_operation_id_fkey,
    DROP CONSTRAINT revisions_application_id_version_fkey;
ALTER TABLE operations DROP CONSTRAINT operations_deployment_id_fkey;
ALTER TABLE operation_steps DROP CONSTRAINT operation_steps_operation_id_fkey;
ALTER TABLE deployment_history DROP CONSTRAINT deployment_history_deployment_id_fkey;
ALTER TABLE documents DROP CONSTRAINT documents_deployment_id_fkey;
ALTER TABLE manifest_entries DROP CONSTRAINT manifest_entries_client_id_fkey,
    DROP CONSTRAINT manifest_entries_deployment_id_digest_fkey;

-- A violation as the key reported it.
-- +goose StatementBegin
CREATE FUNCTION reference_missing(child text, key text, cols text, vals text, parent text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'insert or update on table "%" violates foreign key constraint "%"', child, key
        USING ERRCODE = 'foreign_key_violation', CONSTRAINT = key, TABLE = child,
              DETAIL = format('Key (%s)=(%s) is not present in table "%s".', cols, vals, parent);
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION revisions_check_refs() RETURNS trigger LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
DECLARE
    me xid := pg_current_xact_id()::xid;
    u uuid; a text; v text;
BEGIN
    PERFORM 1 FROM deployments p WHERE p.id IN (SELECT deployment_id FROM new_rows) AND p.xmin <> me FOR KEY SHARE;
    SELECT n.deployment_id INTO u FROM new_rows n WHERE NOT EXISTS (SELECT 1 FROM deployments p WHERE p.id = n.deployment_id) LIMIT 1;
    IF FOUND THEN
        PERFORM reference_missing('revisions', 'revisions_deployment_id_fkey', 'deployment_id', u::text, 'deployments');
    END IF;
    PERFORM 1 FROM operations p WHERE p.id IN (SELECT operation_id FROM new_rows) AND p.xmin <> me FOR KEY SHARE;
    SELECT n.operation_id INTO u FROM new_rows n
    WHERE n.operation_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM operations p WHERE p.id = n.operation_id) LIMIT 1;
    IF FOUND THEN
        PERFORM reference_missing('revisions', 'revisions_operation_id_fkey', 'operation_id', u::text, 'operations');
    END IF;
    PERFORM 1 FROM application_versions p WHERE (p.application_id, p.version) IN (SELECT application_id, version FROM new_rows) AND p.xmin <> me FOR KEY SHARE;
    SELECT n.application_id, n.version INTO a, v FROM new_rows n
    WHERE NOT EXISTS (SELECT 1 FROM application_versions p WHERE p.application_id = n.application_id AND p.version = n.version) LIMIT 1;
    IF FOUND THEN
        PERFORM reference_missing('revisions', 'revisions_application_id_version_fkey', 'application_id, version', a || ', ' || v, 'application_versions');
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER revisions_refs AFTER INSERT ON revisions
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION revisions_check_refs();

-- deployment_id's key, for operations, deployment_history and documents
-- (TG_TABLE_NAME names the child and its key).
-- +goose StatementBegin
CREATE FUNCTION deployment_children_check_refs() RETURNS trigger LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
DECLARE
    me xid := pg_current_xact_id()::xid;
    u uuid;
BEGIN
    PERFORM 1 FROM deployments p WHERE p.id IN (SELECT deployment_id FROM new_rows) AND p.xmin <> me FOR KEY SHARE;
    SELECT n.deployment_id INTO u FROM new_rows n WHERE NOT EXISTS (SELECT 1 FROM deployments p WHERE p.id = n.deployment_id) LIMIT 1;
    IF FOUND THEN
        PERFORM reference_missing(TG_TABLE_NAME, TG_TABLE_NAME || '_deployment_id_fkey', 'deployment_id', u::text, 'deployments');
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER operations_refs AFTER INSERT ON operations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION deployment_children_check_refs();
CREATE TRIGGER deployment_history_refs AFTER INSERT ON deployment_history
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION deployment_children_check_refs();
CREATE TRIGGER documents_refs AFTER INSERT ON documents
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION deployment_children_check_refs();

-- +goose StatementBegin
CREATE FUNCTION operation_steps_check_refs() RETURNS trigger LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
DECLARE
    me xid := pg_current_xact_id()::xid;
    u uuid;
BEGIN
    PERFORM 1 FROM operations p WHERE p.id IN (SELECT operation_id FROM new_rows) AND p.xmin <> me FOR KEY SHARE;
    SELECT n.operation_id INTO u FROM new_rows n WHERE NOT EXISTS (SELECT 1 FROM operations p WHERE p.id = n.operation_id) LIMIT 1;
    IF FOUND THEN
        PERFORM reference_missing('operation_steps', 'operation_steps_operation_id_fkey', 'operation_id', u::text, 'operations');
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER operation_steps_refs AFTER INSERT ON operation_steps
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION operation_steps_check_refs();

-- +goose StatementBegin
CREATE FUNCTION manifest_entries_check_refs() RETURNS trigger LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
DECLARE
    me xid := pg_current_xact_id()::xid;
    c text; u uuid;
BEGIN
    PERFORM 1 FROM clients p WHERE p.id IN (SELECT client_id FROM new_rows) AND p.xmin <> me FOR KEY SHARE;
    SELECT n.client_id INTO c FROM new_rows n WHERE NOT EXISTS (SELECT 1 FROM clients p WHERE p.id = n.client_id) LIMIT 1;
    IF FOUND THEN
        PERFORM reference_missing('manifest_entries', 'manifest_entries_client_id_fkey', 'client_id', c, 'clients');
    END IF;
    PERFORM 1 FROM documents p WHERE (p.deployment_id, p.digest) IN (SELECT deployment_id, digest FROM new_rows) AND p.xmin <> me FOR KEY SHARE;
    SELECT n.deployment_id, n.digest INTO u, c FROM new_rows n
    WHERE NOT EXISTS (SELECT 1 FROM documents p WHERE p.deployment_id = n.deployment_id AND p.digest = n.digest) LIMIT 1;
    IF FOUND THEN
        PERFORM reference_missing('manifest_entries', 'manifest_entries_deployment_id_digest_fkey', 'deployment_id, digest', u || ', ' || c, 'documents');
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER manifest_entries_refs AFTER INSERT ON manifest_entries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION manifest_entries_check_refs();


-- The parents' side. A key column never changes: refused, naming the key.
-- +goose StatementBegin
CREATE FUNCTION reference_key_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the key columns of "%" do not change (foreign key constraint "%")', TG_TABLE_NAME, TG_ARGV[0]
        USING ERRCODE = 'foreign_key_violation', CONSTRAINT = TG_ARGV[0], TABLE = TG_TABLE_NAME;
END $$;
-- +goose StatementEnd
CREATE TRIGGER deployments_key_fixed BEFORE UPDATE OF id ON deployments FOR EACH ROW
    WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION reference_key_fixed('revisions_deployment_id_fkey');
CREATE TRIGGER operations_key_fixed BEFORE UPDATE OF id, deployment_id ON operations FOR EACH ROW
    WHEN (OLD.id IS DISTINCT FROM NEW.id OR OLD.deployment_id IS DISTINCT FROM NEW.deployment_id)
    EXECUTE FUNCTION reference_key_fixed('operations_deployment_id_fkey');
CREATE TRIGGER operation_steps_key_fixed BEFORE UPDATE OF operation_id ON operation_steps FOR EACH ROW
    WHEN (OLD.operation_id IS DISTINCT FROM NEW.operation_id)
    EXECUTE FUNCTION reference_key_fixed('operation_steps_operation_id_fkey');
CREATE TRIGGER deployment_history_key_fixed BEFORE UPDATE OF deployment_id ON deployment_history FOR EACH ROW
    WHEN (OLD.deployment_id IS DISTINCT FROM NEW.deployment_id)
    EXECUTE FUNCTION reference_key_fixed('deployment_history_deployment_id_fkey');
CREATE TRIGGER documents_key_fixed BEFORE UPDATE OF deployment_id, digest ON documents FOR EACH ROW
    WHEN (OLD.deployment_id IS DISTINCT FROM NEW.deployment_id OR OLD.digest IS DISTINCT FROM NEW.digest)
    EXECUTE FUNCTION reference_key_fixed('documents_deployment_id_fkey');
-- A revision's operation may only be cleared (the deleted operation's
-- SET NULL below).
CREATE TRIGGER revisions_key_fixed BEFORE UPDATE OF deployment_id, operation_id, application_id, version ON revisions FOR EACH ROW
    WHEN (OLD.deployment_id IS DISTINCT FROM NEW.deployment_id OR OLD.application_id IS DISTINCT FROM NEW.application_id
          OR OLD.version IS DISTINCT FROM NEW.version OR (NEW.operation_id IS NOT NULL AND OLD.operation_id IS DISTINCT FROM NEW.operation_id))
    EXECUTE FUNCTION reference_key_fixed('revisions_deployment_id_fkey');
CREATE TRIGGER application_versions_key_fixed BEFORE UPDATE OF application_id, version ON application_versions FOR EACH ROW
    WHEN (OLD.application_id IS DISTINCT FROM NEW.application_id OR OLD.version IS DISTINCT FROM NEW.version)
    EXECUTE FUNCTION reference_key_fixed('revisions_application_id_version_fkey');
CREATE TRIGGER clients_key_fixed BEFORE UPDATE OF id ON clients FOR EACH ROW
    WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION reference_key_fixed('manifest_entries_client_id_fkey');
CREATE TRIGGER manifest_entries_key_fixed BEFORE UPDATE OF client_id, deployment_id, digest ON manifest_entries FOR EACH ROW
    WHEN (OLD.client_id IS DISTINCT FROM NEW.client_id OR OLD.deployment_id IS DISTINCT FROM NEW.deployment_id OR OLD.digest IS DISTINCT FROM NEW.digest)
    EXECUTE FUNCTION reference_key_fixed('manifest_entries_deployment_id_digest_fkey');

-- Deleting parents does what the keys' actions did. Deleting deployments
-- deletes their revisions, operations, history and documents (ON DELETE
-- CASCADE); deleting operations deletes their steps and clears the
-- revisions' operation (ON DELETE SET NULL); deleting documents or clients
-- deletes their manifest entries (CASCADE).
-- +goose StatementBegin
CREATE FUNCTION deployments_delete_children() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM revisions c USING old_rows o WHERE c.deployment_id = o.id;
    DELETE FROM deployment_history c USING old_rows o WHERE c.deployment_id = o.id;
    DELETE FROM operations c USING old_rows o WHERE c.deployment_id = o.id;
    DELETE FROM documents c USING old_rows o WHERE c.deployment_id = o.id;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER deployments_delete_children AFTER DELETE ON deployments
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION deployments_delete_children();
-- +goose StatementBegin
CREATE FUNCTION operations_delete_children() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM operation_steps c USING old_rows o WHERE c.operation_id = o.id;
    UPDATE revisions c SET operation_id = NULL FROM old_rows o WHERE c.operation_id = o.id;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER operations_delete_children AFTER DELETE ON operations
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION operations_delete_children();
-- +goose StatementBegin
CREATE FUNCTION documents_delete_children() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM manifest_entries c USING old_rows o WHERE c.deployment_id = o.deployment_id AND c.digest = o.digest;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER documents_delete_children AFTER DELETE ON documents
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION documents_delete_children();
-- +goose StatementBegin
CREATE FUNCTION clients_delete_children() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM manifest_entries c USING old_rows o WHERE c.client_id = o.id;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER clients_delete_children AFTER DELETE ON clients
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION clients_delete_children();
-- An application version in use is not deleted (RESTRICT): checked after
-- the statement, by a statement of its own; an inserting transaction holds
-- the version's row locked, so the delete waits for it and then sees its
-- rows (a READ COMMITTED deleter: each statement of the trigger sees what
-- committed before it started).
-- +goose StatementBegin
CREATE FUNCTION application_versions_in_use() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    a text; v text;
BEGIN
    SELECT o.application_id, o.version INTO a, v FROM old_rows o
    WHERE EXISTS (SELECT 1 FROM revisions c WHERE c.application_id = o.application_id AND c.version = o.version) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'update or delete on table "application_versions" violates foreign key constraint "revisions_application_id_version_fkey" on table "revisions"'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'revisions_application_id_version_fkey', TABLE = 'application_versions',
                  DETAIL = format('Key (application_id, version)=(%s, %s) is still referenced from table "revisions".', a, v);
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER application_versions_in_use AFTER DELETE ON application_versions
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION application_versions_in_use();

-- +goose Down
DROP TRIGGER application_versions_in_use ON application_versions;
DROP FUNCTION application_versions_in_use();
DROP TRIGGER clients_delete_children ON clients;
DROP FUNCTION clients_delete_children();
DROP TRIGGER documents_delete_children ON documents;
DROP FUNCTION documents_delete_children();
DROP TRIGGER operations_delete_children ON operations;
DROP FUNCTION operations_delete_children();
DROP TRIGGER deployments_delete_children ON deployments;
DROP FUNCTION deployments_delete_children();
DROP TRIGGER manifest_entries_key_fixed ON manifest_entries;
DROP TRIGGER clients_key_fixed ON clients;
DROP TRIGGER application_versions_key_fixed ON application_versions;
DROP TRIGGER revisions_key_fixed ON revisions;
DROP TRIGGER documents_key_fixed ON documents;
DROP TRIGGER deployment_history_key_fixed ON deployment_history;
DROP TRIGGER operation_steps_key_fixed ON operation_steps;
DROP TRIGGER operations_key_fixed ON operations;
DROP TRIGGER deployments_key_fixed ON deployments;
DROP FUNCTION reference_key_fixed();
DROP TRIGGER manifest_entries_refs ON manifest_entries;
DROP FUNCTION manifest_entries_check_refs();
DROP TRIGGER operation_steps_refs ON operation_steps;
DROP FUNCTION operation_steps_check_refs();
DROP TRIGGER documents_refs ON documents;
DROP TRIGGER deployment_history_refs ON deployment_history;
DROP TRIGGER operations_refs ON operations;
DROP FUNCTION deployment_children_check_refs();
DROP TRIGGER revisions_refs ON revisions;
DROP FUNCTION revisions_check_refs();
DROP FUNCTION reference_missing(text, text, text, text, text);
ALTER TABLE revisions ADD CONSTRAINT revisions_deployment_id_fkey
        FOREIGN KEY (deployment_id) REFERENCES deployments (id) ON DELETE CASCADE,
    ADD CONSTRAINT revisions_operation_id_fkey FOREIGN KEY (operation_id) REFERENCES operations (id) ON DELETE SET NULL,
    ADD CONSTRAINT revisions_application_id_version_fkey
        FOREIGN KEY (application_id, version) REFERENCES application_versions (application_id, version) ON DELETE RESTRICT;
ALTER TABLE operations ADD CONSTRAINT operations_deployment_id_fkey
    FOREIGN KEY (deployment_id) REFERENCES deployments (id) ON DELETE CASCADE;
ALTER TABLE operation_steps ADD CONSTRAINT operation_steps_operation_id_fkey
    FOREIGN KEY (operation_id) REFERENCES operations (id) ON DELETE CASCADE;
ALTER TABLE deployment_history ADD CONSTRAINT deployment_history_deployment_id_fkey
    FOREIGN KEY (deployment_id) REFERENCES deployments (id) ON DELETE CASCADE;
ALTER TABLE documents ADD CONSTRAINT documents_deployment_id_fkey
    FOREIGN KEY (deployment_id) REFERENCES deployments (id) ON DELETE CASCADE;
ALTER TABLE manifest_entries ADD CONSTRAINT manifest_entries_client_id_fkey
        FOREIGN KEY (client_id) REFERENCES clients (id) ON DELETE CASCADE,
    ADD CONSTRAINT manifest_entries_deployment_id_digest_fkey
        FOREIGN KEY (deployment_id, digest) REFERENCES documents (deployment_id, digest) ON DELETE CASCADE;
