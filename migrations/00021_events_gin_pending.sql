-- +goose Up
-- Issue 11: the GIN index on events.refs takes new entries into its pending
-- list, which the inserting transaction merges into the index once the list
-- passes gin_pending_list_limit (4 MB by default). A batch of 10,000
-- creations appends 50,000 events (about 230,000 refs, 8.7 MB of pending
-- list): with 4 MB it merged the list itself, 0.83-0.85 s of appending
-- events against 0.47-0.52 s with this setting (BenchmarkCreateBatch10000,
-- alternated in one run); small batches paid the same merges as stalls of
-- whichever batch crossed the limit. With a 16 MB list such a batch, on a
-- list that autovacuum merged, only appends; autovacuum merges the list in
-- the background at its next check (autovacuum_naptime) after 10,000
-- inserted rows (not after 20% of the table, which grows until pruned).
-- The price: a transaction that does cross the limit (batches in quick
-- succession) merges up to 16 MB, a rarer but longer stall, and a filtered
-- read scans what is pending (13 ms with 50,000 events pending, 0.5 ms
-- merged; up to about 90,000 events can be pending).
ALTER INDEX events_refs SET (gin_pending_list_limit = 16384);
ALTER TABLE events SET (autovacuum_vacuum_insert_threshold = 10000, autovacuum_vacuum_insert_scale_factor = 0);

-- +goose Down
ALTER INDEX events_refs RESET (gin_pending_list_limit);
ALTER TABLE events RESET (autovacuum_vacuum_insert_threshold, autovacuum_vacuum_insert_scale_factor);
