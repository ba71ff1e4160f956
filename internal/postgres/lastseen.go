package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wfm-dev/wfm/internal/fleet"
)

var _ fleet.LastSeenStore = (*FleetStore)(nil)

// sqlMarkClientsSeen moves last_seen_at of the registered devices of each
// client forward to the client's contact instant, in one statement. The
// rows are locked in (client, device) order first, so that two server
// processes writing overlapping clients wait for each other instead of
// deadlocking; a row already at or past the instant is neither locked nor
// written (GREATEST keeps the value forward-only should a concurrent write
// land between the lock and the write).
const sqlMarkClientsSeen = `
WITH s AS (SELECT * FROM unnest($1::text[], $2::timestamptz[]) AS s (client_id, seen)),
l AS (
    SELECT d.client_id, d.id, s.seen FROM devices d JOIN s ON s.client_id = d.client_id
    WHERE d.registered AND (d.last_seen_at IS NULL OR d.last_seen_at < s.seen)
    ORDER BY d.client_id, d.id
    FOR NO KEY UPDATE OF d
)
UPDATE devices d SET last_seen_at = GREATEST(d.last_seen_at, l.seen)
FROM l WHERE d.client_id = l.client_id AND d.id = l.id`

// MarkClientsSeen implements fleet.LastSeenStore: one statement for all of
// seen (client ids unique).
func (s *FleetStore) MarkClientsSeen(ctx context.Context, seen []fleet.ClientSeen) error {
	if len(seen) == 0 {
		return nil
	}
	ids, at := make([]string, len(seen)), make([]time.Time, len(seen))
	for i, c := range seen {
		ids[i], at[i] = c.ClientID, c.At
	}
	_, err := s.pool.Exec(ctx, sqlMarkClientsSeen, ids, at)
	return translate(err)
}

// LastSeen returns when each device of keys ([client id, device id]) was
// last seen on the device API (fleet.LastSeen: up to about a minute late),
// in one read. A device that does not exist or was never seen is absent.
// Rollouts read it to leave out devices not seen recently.
func (s *FleetStore) LastSeen(ctx context.Context, keys [][2]string) (map[[2]string]time.Time, error) {
	clients, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		clients[i], ids[i] = k[0], k[1]
	}
	rows, err := s.pool.Query(ctx, `SELECT client_id, id, last_seen_at FROM devices
WHERE (client_id, id) IN (SELECT * FROM unnest($1::text[], $2::text[])) AND last_seen_at IS NOT NULL`, clients, ids)
	if err != nil {
		return nil, translate(err)
	}
	out := make(map[[2]string]time.Time, len(keys))
	var k [2]string
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&k[0], &k[1], &at}, func() error {
		out[k] = at.UTC()
		return nil
	})
	if err != nil {
		return nil, translate(err)
	}
	return out, nil
}
