-- +goose NO TRANSACTION
-- +goose Up
-- The transition check of deployment_history as a lookup in one jsonb
-- constant (lifecycle.TransitionsSQL) rather than an IN list of its 45
-- pairs. PostgreSQL parses and plans a table's CHECK expressions anew at
-- every statement that writes the table, and the IN list is a tree of 45
-- ANDs under an OR: about 0.2 ms a statement, whatever its rows (pgbench,
-- one prepared INSERT of 1 or 8 rows into a copy of the table, commit
-- included: 0.17-0.22 ms without the check, 0.36-0.48 ms with the list,
-- 0.22-0.25 ms with the lookup; docs/benchmarks.md). Every batch of
-- creations, and every batch of status reports that moves a deployment,
-- writes history. The new check accepts exactly the rows the old one did
-- (TestHistoryCheckIsTheTransitionTable): a NULL from_state only into
-- pending, a pair of the table, nothing else (the coalesce makes an
-- unknown from_state false, not NULL, which a CHECK would let pass).
-- One statement swaps the check NOT VALID under a short lock of the table;
-- the validation then lets reads and writes go on (as in migration 00022).
-- Run again after a failure, it does the same again.
ALTER TABLE deployment_history DROP CONSTRAINT deployment_history_transition,
    ADD CONSTRAINT deployment_history_transition CHECK (from_state IS NULL AND to_state = 'pending' OR coalesce(('{"draining": ["failed", "installed", "reconfiguring", "removed", "removing", "rolling-back", "upgrading"], "failed": ["installed", "pending", "removed", "removing"], "installed": ["failed", "pending", "removed", "removing"], "installing": ["failed", "installed", "removed", "removing"], "pending": ["draining", "failed", "installed", "installing", "reconfiguring", "removed", "removing", "rolling-back", "upgrading"], "reconfiguring": ["draining", "failed", "installed", "removed", "removing"], "removing": ["failed", "removed"], "rolling-back": ["draining", "failed", "installed", "removed", "removing"], "upgrading": ["draining", "failed", "installed", "removed", "removing"]}'::jsonb -> from_state) ? to_state, false)) NOT VALID;
ALTER TABLE deployment_history VALIDATE CONSTRAINT deployment_history_transition;

-- +goose Down
ALTER TABLE deployment_history DROP CONSTRAINT deployment_history_transition,
    ADD CONSTRAINT deployment_history_transition CHECK (from_state IS NULL AND to_state = 'pending' OR (from_state, to_state) IN (('draining','failed'), ('draining','installed'), ('draining','reconfiguring'), ('draining','removed'), ('draining','removing'), ('draining','rolling-back'), ('draining','upgrading'), ('failed','installed'), ('failed','pending'), ('failed','removed'), ('failed','removing'), ('installed','failed'), ('installed','pending'), ('installed','removed'), ('installed','removing'), ('installing','failed'), ('installing','installed'), ('installing','removed'), ('installing','removing'), ('pending','draining'), ('pending','failed'), ('pending','installed'), ('pending','installing'), ('pending','reconfiguring'), ('pending','removed'), ('pending','removing'), ('pending','rolling-back'), ('pending','upgrading'), ('reconfiguring','draining'), ('reconfiguring','failed'), ('reconfiguring','installed'), ('reconfiguring','removed'), ('reconfiguring','removing'), ('removing','failed'), ('removing','removed'), ('rolling-back','draining'), ('rolling-back','failed'), ('rolling-back','installed'), ('rolling-back','removed'), ('rolling-back','removing'), ('upgrading','draining'), ('upgrading','failed'), ('upgrading','installed'), ('upgrading','removed'), ('upgrading','removing'))) NOT VALID;
ALTER TABLE deployment_history VALIDATE CONSTRAINT deployment_history_transition;
