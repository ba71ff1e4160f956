package postgres

// TEMPORARY (issue 11, branch i11-batch): the two names apply calls, as thin
// wrappers around today's bumpManifest and renderManifest, so that this
// branch builds and tests on its own. The "store" branch defines them in
// publish.go (set-based, documents stored once); this file is deleted when
// the two branches are merged.

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// bumpManifests gives each client (sorted: the lock order) one new manifest
// version, locking its row.
func bumpManifests(ctx context.Context, tx pgx.Tx, clients []string, _ time.Time) (map[string]uint64, error) {
	versions := make(map[string]uint64, len(clients))
	for _, id := range clients {
		v, err := bumpManifest(ctx, tx, id)
		if err != nil {
			return nil, err
		}
		versions[id] = v
	}
	return versions, nil
}

// publish renders each client's manifest of its new version, once the
// revisions of that version exist, and announces it.
func publish(ctx context.Context, tx pgx.Tx, versions map[string]uint64, _ []*lifecycle.Change, at time.Time) error {
	clients := make([]string, 0, len(versions))
	for id := range versions {
		clients = append(clients, id)
	}
	slices.Sort(clients)
	for _, id := range clients {
		if err := renderManifest(ctx, tx, id, versions[id], at); err != nil {
			return err
		}
	}
	return nil
}
