-- +goose Up
-- The life cycles of revisions, operations and operation steps, as the
-- transition tables of internal/lifecycle (outcome.go, operation.go) allow
-- them: a trigger per state column refuses a move the table does not list.
-- The expressions are the output of lifecycle.OutcomeTransitionsSQL,
-- OperationTransitionsSQL and StepTransitionsSQL, and
-- TestMigrationMirrorsLifeCycleTables keeps them equal. A no-op (the same
-- value written again) is not a move and is not checked.

-- +goose StatementBegin
CREATE FUNCTION revisions_outcome_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ((OLD.outcome, NEW.outcome) IN (('active','superseded'), ('failed','active'), ('pending','active'), ('pending','failed'), ('pending','superseded'))) THEN
        RAISE EXCEPTION 'revision % of deployment %: outcome % -> % is not a transition of the revision life cycle',
            OLD.n, OLD.deployment_id, OLD.outcome, NEW.outcome
            USING ERRCODE = 'check_violation', CONSTRAINT = 'revisions_outcome_transition';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER revisions_outcome_transition BEFORE UPDATE OF outcome ON revisions
    FOR EACH ROW WHEN (OLD.outcome IS DISTINCT FROM NEW.outcome) EXECUTE FUNCTION revisions_outcome_transition();

-- +goose StatementBegin
CREATE FUNCTION operations_state_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ((OLD.state, NEW.state) IN (('queued','cancelled'), ('queued','failed'), ('queued','running'), ('running','cancelled'), ('running','failed'), ('running','succeeded'))) THEN
        RAISE EXCEPTION 'operation %: state % -> % is not a transition of the operation life cycle',
            OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'operations_state_transition';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER operations_state_transition BEFORE UPDATE OF state ON operations
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION operations_state_transition();

-- +goose StatementBegin
CREATE FUNCTION operation_steps_state_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ((OLD.state, NEW.state) IN (('pending','cancelled'), ('pending','failed'), ('pending','published'), ('published','cancelled'), ('published','failed'), ('published','installed'))) THEN
        RAISE EXCEPTION 'step % of operation %: state % -> % is not a transition of the step life cycle',
            OLD.n, OLD.operation_id, OLD.state, NEW.state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'operation_steps_state_transition';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER operation_steps_state_transition BEFORE UPDATE OF state ON operation_steps
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION operation_steps_state_transition();

-- +goose Down
DROP TRIGGER operation_steps_state_transition ON operation_steps;
DROP FUNCTION operation_steps_state_transition();
DROP TRIGGER operations_state_transition ON operations;
DROP FUNCTION operations_state_transition();
DROP TRIGGER revisions_outcome_transition ON revisions;
DROP FUNCTION revisions_outcome_transition();
