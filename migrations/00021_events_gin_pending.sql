-- +goose Up
-- Issue 11: the GIN index on events.refs takes new entries into its pending
-- list, which the inserting transaction merges into the index once the list
-- passes gin_pending_list_limit (4 MB by default). A batch of 10,000
-- creations appends 50,000 events (about 230,000 refs): merged in its own
-- transaction, 0.35-0.55 of its 0.83-1.06 s of appending events
-- (BenchmarkCreateBatch10000, alternated in one run); small batches paid
-- the same merges as stalls of whichever batch crossed the limit. With a
-- 16 MB list such a batch appends only, and autovacuum merges the list in
-- the background: it visits events after every 10,000 inserted rows (not
-- after 20% of the table, which grows without bound until pruned). A
-- filtered read scans the pending list until it is merged: 13 ms with
-- 50,000 events pending, 0.5 ms merged (measured on PostgreSQL 15).
ALTER INDEX events_refs SET (gin_pending_list_limit = 16384);
ALTER TABLE events SET (autovacuum_vacuum_insert_threshold = 10000, autovacuum_vacuum_insert_scale_factor = 0);

-- +goose Down
ALTER INDEX events_refs RESET (gin_pending_list_limit);
ALTER TABLE events RESET (autovacuum_vacuum_insert_threshold, autovacuum_vacuum_insert_scale_factor);
