-- +goose Up
-- When a device was last seen on the device API (issue 12): any request of
-- its client (the agent that speaks for it) marks it. Kept without a write
-- per poll: each server process notes contacts in memory and moves this
-- value forward at most once a minute per device (fleet.LastSeen), so it
-- lags by up to a minute. NULL: not seen since this column exists.
-- Deliberately not indexed: an index would make every write non-HOT.
ALTER TABLE devices ADD COLUMN last_seen_at timestamptz;

-- +goose Down
ALTER TABLE devices DROP COLUMN last_seen_at;
