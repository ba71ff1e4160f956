-- +goose Up
-- Fleet rollouts (issue 12, design section 13): one change of one
-- application applied to many members in waves. The life cycles of
-- rollouts.state and rollout_members.status are the transition tables of
-- internal/lifecycle (rollout.go): the triggers test the output of
-- lifecycle.RolloutTransitionsSQL and MemberTransitionsSQL, and
-- TestMigrationMirrorsRolloutTables keeps them equal.

CREATE TABLE rollouts (
    id                 uuid        PRIMARY KEY,
    application_id     text        NOT NULL,
    action             text        NOT NULL CHECK (action IN ('install', 'upgrade', 'reconfigure', 'rollback')),
    -- the request as validated (fleet.RolloutRequest as JSON): what the
    -- rollout shows, and what the driver validates again for its settings
    request            jsonb       NOT NULL,
    -- the resolved waves (fleet.RolloutWave without counts): sizes, state,
    -- startedAt, settledAt (the soak runs from it), approvedAt...
    waves              jsonb       NOT NULL,
    state              text        NOT NULL CHECK (state IN ('running', 'paused', 'succeeded', 'aborting', 'aborted', 'cancelled', 'failed')),
    cause              text        NOT NULL,
    state_changed_at   timestamptz NOT NULL,
    -- the wave the driver is at, from 0
    current_wave       integer     NOT NULL DEFAULT 0 CHECK (current_wave >= 0),
    -- resume after a threshold pause accepted the current wave as it is
    threshold_accepted boolean     NOT NULL DEFAULT false,
    revert_on_abort    boolean     NOT NULL DEFAULT false,
    -- the abort asked: {revert, forced, reason, requestedBy, at}; NULL when none
    abort              jsonb,
    deadline_at        timestamptz NOT NULL,
    -- when the driver must look again without a member change; NULL: now
    recheck_at         timestamptz,
    -- a driver holds the rollout until then (several schedulers never
    -- drive one rollout at once; a crashed one's lease runs out)
    lease_until        timestamptz,
    -- the driver holding the lease (its random token): a driver acts on the
    -- rollout only while it is the owner, so one whose lease ran out and
    -- was taken stops
    lease_owner        text,
    -- an ended rollout whose members still have operations in flight
    -- (cancel): the driver keeps syncing their statuses until none is left
    settling           boolean     NOT NULL DEFAULT false,
    -- why it waits: {reason, message, until}; NULL when it does not
    waiting            jsonb,
    generation         bigint      NOT NULL DEFAULT 1,
    created_by         text        NOT NULL,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);
CREATE INDEX rollouts_list ON rollouts (created_at DESC, id DESC);
CREATE INDEX rollouts_application ON rollouts (application_id, created_at DESC, id DESC);
-- What the driver claims: the active rollouts and the ended ones still
-- settling, by recheck instant.
CREATE INDEX rollouts_due ON rollouts (recheck_at NULLS FIRST) WHERE state IN ('running', 'paused', 'aborting') OR settling;

CREATE TABLE rollout_history (
    id         bigserial   PRIMARY KEY,
    rollout_id uuid        NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    from_state text,
    to_state   text        NOT NULL,
    cause      text        NOT NULL,
    at         timestamptz NOT NULL,
    actor      text        NOT NULL,
    detail     text        NOT NULL DEFAULT ''
);
CREATE INDEX rollout_history_rollout ON rollout_history (rollout_id, id);

CREATE TABLE rollout_members (
    rollout_id      uuid        NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    -- the stable order (client id, device id, deployment id), from 0
    ord             integer     NOT NULL CHECK (ord >= 0),
    application_id  text        NOT NULL,
    install         boolean     NOT NULL,
    client_id       text        NOT NULL,
    device_id       text        NOT NULL,
    -- the deployment (for install: the one the rollout creates, its id
    -- chosen when the member is published); no foreign key: a member
    -- outlives nothing of its deployment and must not hold it
    deployment_id   uuid,
    classification  text        NOT NULL CHECK (classification IN ('eligible', 'excluded')),
    reason          text        CHECK (reason IN ('at-target', 'policy-refused', 'no-revision', 'unplaceable', 'busy', 'not-seen', 'operator')),
    reason_detail   text        NOT NULL DEFAULT '',
    supplier_reason text        NOT NULL DEFAULT '',
    -- {"kind": "direct"} or {"kind": "hops", "through": [...]}; NULL when excluded
    plan            jsonb,
    -- from 0; NULL when excluded at start
    wave            integer,
    status          text        NOT NULL CHECK (status IN ('pending', 'in-progress', 'succeeded', 'failed', 'cancelled', 'reverted', 'not-reverted', 'removed', 'excluded')),
    operation_id    uuid,
    from_version    text        NOT NULL DEFAULT '',
    from_revision   integer     NOT NULL DEFAULT 0,
    -- install: the profile chosen for the device at start
    profile_id      text        NOT NULL DEFAULT '',
    -- rollback: the revision the member returns to
    restore_revision integer    NOT NULL DEFAULT 0,
    result          text        NOT NULL DEFAULT '',
    revert_outcome  text        CHECK (revert_outcome IN ('pending', 'in-progress', 'reverted', 'not-reverted', 'failed')),
    revert_to       integer     NOT NULL DEFAULT 0,
    revert_operation uuid,
    revert_detail   text        NOT NULL DEFAULT '',
    revert_forced   boolean     NOT NULL DEFAULT false,
    -- the member holds its deployment (device, for install) for this
    -- rollout: cleared when the rollout ends and when the member is
    -- excluded or removed
    active          boolean     NOT NULL,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (rollout_id, ord),
    CHECK (classification = 'eligible' OR reason IS NOT NULL),
    CHECK (classification = 'eligible' OR status = 'excluded'),
    CHECK (NOT active OR classification = 'eligible')
);
-- A deployment is a member of at most one active rollout; for install, a
-- device is the pending member of at most one active install rollout of
-- the application.
CREATE UNIQUE INDEX rollout_members_active_deployment ON rollout_members (deployment_id) WHERE active AND deployment_id IS NOT NULL;
CREATE UNIQUE INDEX rollout_members_active_install ON rollout_members (application_id, client_id, device_id) WHERE active AND install;
-- Waves and counts; the members list by wave and status.
CREATE INDEX rollout_members_wave ON rollout_members (rollout_id, wave, status);
-- The driver's sync and the cancel's rollout-member check.
CREATE INDEX rollout_members_operation ON rollout_members (operation_id) WHERE active;
CREATE INDEX rollout_members_revert ON rollout_members (revert_operation) WHERE revert_operation IS NOT NULL;

-- +goose StatementBegin
CREATE FUNCTION rollouts_state_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ((OLD.state, NEW.state) IN (('aborting','aborted'), ('paused','aborting'), ('paused','cancelled'), ('paused','failed'), ('paused','running'), ('running','aborting'), ('running','cancelled'), ('running','failed'), ('running','paused'), ('running','succeeded'))) THEN
        RAISE EXCEPTION 'rollout %: state % -> % is not a transition of the rollout life cycle',
            OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'rollouts_state_transition';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER rollouts_state_transition BEFORE UPDATE OF state ON rollouts
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION rollouts_state_transition();

-- +goose StatementBegin
CREATE FUNCTION rollout_members_status_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ((OLD.status, NEW.status) IN (('cancelled','excluded'), ('cancelled','not-reverted'), ('cancelled','removed'), ('cancelled','reverted'), ('failed','excluded'), ('failed','not-reverted'), ('failed','removed'), ('failed','reverted'), ('in-progress','cancelled'), ('in-progress','excluded'), ('in-progress','failed'), ('in-progress','removed'), ('in-progress','succeeded'), ('pending','cancelled'), ('pending','excluded'), ('pending','in-progress'), ('pending','removed'), ('succeeded','excluded'), ('succeeded','not-reverted'), ('succeeded','removed'), ('succeeded','reverted'))) THEN
        RAISE EXCEPTION 'member % of rollout %: status % -> % is not a transition of the member life cycle',
            OLD.ord, OLD.rollout_id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'rollout_members_status_transition';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER rollout_members_status_transition BEFORE UPDATE OF status ON rollout_members
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION rollout_members_status_transition();

-- +goose Down
DROP TABLE rollout_members;
DROP TABLE rollout_history;
DROP TABLE rollouts;
DROP FUNCTION rollout_members_status_transition();
DROP FUNCTION rollouts_state_transition();
