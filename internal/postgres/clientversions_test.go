package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestClientVersions: the status and manifest version of each client
// asked for that exists; an unknown one is absent.
func TestClientVersions(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	s := postgres.NewFleetStore(pool, 0)
	now := time.Now()
	for _, c := range []string{"a", "b"} {
		_, err := s.ClientManifest(ctx, c, true, now)
		require.NoError(t, err)
	}
	_, err := s.RetireClient(ctx, "b", now)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE clients SET manifest_version = 7 WHERE id = 'a'`)
	require.NoError(t, err)

	got, err := s.ClientVersions(ctx, []string{"a", "b", "unknown"})
	require.NoError(t, err)
	require.Equal(t, map[string]fleet.ClientVersion{
		"a": {Status: fleet.ClientAccepted, ManifestVersion: 7},
		"b": {Status: fleet.ClientRetired, ManifestVersion: 1},
	}, got)
}

// BenchmarkClientVersions measures the check of a whole manifest cache
// after missed change notifications: one statement over every cached
// client of a fleet of that many.
func BenchmarkClientVersions(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.New(b)
	const n = 100_000
	_, err := pool.Exec(ctx, `
INSERT INTO clients (id, status, manifest_version, created_at, updated_at)
SELECT 'plant-' || lpad(i::text, 6, '0') || '-gateway', 'accepted', 1 + i % 7, now(), now() FROM generate_series(1, $1) i`, n)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE clients`); err != nil {
		b.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("plant-%06d-gateway", i+1)
	}
	s := postgres.NewFleetStore(pool, 0)
	b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
		for range b.N {
			got, err := s.ClientVersions(ctx, ids)
			if err != nil || len(got) != n {
				b.Fatal(len(got), err)
			}
		}
	})
}
