package postgres_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestMigratePublication migrates a database of the previous release
// (migrations up to 00006: YAML in revisions, a rendered manifest on the
// client row, whole bundles as blobs) and checks that the documents moved,
// the current manifest's entries are open, the legacy manifest and both
// legacy bundles are still served as they were, the next publication is
// rendered from the entries, and the collector removes the legacy blobs
// only once no retained manifest names them.
func TestMigratePublication(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := open(t, pgtest.EmptyURL(t))
	require.NoError(t, postgres.MigrateTo(ctx, pool, 6))

	const d1, d2, d3 = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002", "00000000-0000-4000-8000-000000000003"
	y1, y2, y3 := []byte("id: "+d1+"\n"), []byte("id: "+d2+"\n"), []byte("id: "+d3+"\n")
	legacy, bundle, err := margo.RenderManifest(margo.StateManifest{Version: 3, Deployments: []margo.ManifestEntry{{DeploymentID: d1, YAML: y1}, {DeploymentID: d2, YAML: y2}}})
	require.NoError(t, err)
	_, older, err := margo.RenderManifest(margo.StateManifest{Version: 2, Deployments: []margo.ManifestEntry{{DeploymentID: d1, YAML: y1}, {DeploymentID: d3, YAML: y3}}})
	require.NoError(t, err)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO applications (id) VALUES ('app')`, nil},
		{`INSERT INTO application_versions (application_id, version, sort_key, name, digest, media_type, raw, document)
VALUES ('app', '1.0.0', '1.0.0', 'app', 'sha256:` + zeros + `', 'application/yaml', '', '{}')`, nil},
		{`INSERT INTO clients (id, status, manifest_version, manifest_json, manifest_etag, bundle_digest, created_at, updated_at)
VALUES ('c', 'accepted', 3, $1, $2, $3, now(), now())`, []any{legacy, margo.ETag(legacy), margo.Digest(bundle)}},
		{`INSERT INTO bundles (client_id, digest, content, created_at) VALUES ('c', $1, $2, now() - interval '1 day'), ('c', $3, $4, now())`,
			[]any{margo.Digest(older), older, margo.Digest(bundle), bundle}},
		{`INSERT INTO devices (client_id, id, registered, capabilities, created_at, updated_at)
SELECT 'c', d, true, '{}', now(), now() FROM unnest('{d1,d2,d3}'::text[]) AS d`, nil},
		{`INSERT INTO deployments (id, client_id, device_id, application_id, state, state_changed_at, revision, desired_since, removing, created_at, updated_at)
VALUES ($1, 'c', 'd1', 'app', 'pending', now(), 2, 3, false, now(), now()), ($2, 'c', 'd2', 'app', 'pending', now(), 1, 3, false, now(), now()),
    ($3, 'c', 'd3', 'app', 'removing', now(), 1, 3, true, now(), now())`, []any{d1, d2, d3}},
		// d1's revision 2 repeats revision 1 (a revert): one document.
		{`INSERT INTO revisions (deployment_id, n, application_id, version, profile_id, parameters, operation, outcome, components, yaml, digest,
    manifest_version, created_at)
VALUES ($1, 1, 'app', '1.0.0', 'p', '{}', 'install', 'superseded', '{web}', $4, $5, 1, now()),
    ($1, 2, 'app', '1.0.0', 'p', '{}', 'rollback', 'pending', '{web}', $4, $5, 3, now()),
    ($2, 1, 'app', '1.0.0', 'p', '{}', 'install', 'pending', '{web}', $6, $7, 2, now()),
    ($3, 1, 'app', '1.0.0', 'p', '{}', 'install', 'pending', '{web}', $8, $9, 1, now())`,
			[]any{d1, d2, d3, y1, margo.Digest(y1), y2, margo.Digest(y2), y3, margo.Digest(y3)}},
	} {
		_, err := pool.Exec(ctx, q.sql, q.args...)
		require.NoError(t, err, "%s", q.sql)
	}

	require.NoError(t, postgres.Migrate(ctx, pool))

	assert.Zero(t, queryInt(t, pool, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'revisions' AND column_name = 'yaml'`),
		"revisions keep no YAML")
	assert.Equal(t, 3, queryInt(t, pool, `SELECT count(*) FROM documents`), "one document per deployment and digest")
	assert.Equal(t, 2, queryInt(t, pool, `SELECT count(*) FROM manifest_entries WHERE client_id = 'c' AND to_version IS NULL AND from_version = 3`),
		"the current manifest's entries are open (not the removed deployment's)")

	s := postgres.NewFleetStore(pool, 0)
	m, err := s.ClientManifest(ctx, "c", false, time.Now())
	require.NoError(t, err)
	assert.Equal(t, uint64(3), m.Version)
	assert.Equal(t, legacy, m.JSON, "the legacy manifest is served as it was")
	assert.Equal(t, margo.ETag(legacy), m.ETag)
	for _, want := range [][]byte{bundle, older} {
		got, err := s.Bundle(ctx, "c", margo.Digest(want))
		require.NoError(t, err)
		assert.Equal(t, want, got, "a legacy bundle is served as it was")
	}
	y, err := s.DeploymentYAML(ctx, "c", d1, margo.Digest(y1))
	require.NoError(t, err)
	assert.Equal(t, y1, y)
	r, err := s.Revision(ctx, d1, 2)
	require.NoError(t, err)
	assert.Equal(t, y1, r.YAML, "a revision's YAML is its document's")

	// The next publication is rendered from the entries (the migrated
	// documents' pieces computed on first need).
	now := time.Now()
	require.NoError(t, s.UnregisterDevice(ctx, "c", "d2", now))
	got := published(t, ctx, s, "c")
	assert.Equal(t, uint64(4), got.ManifestVersion)
	assert.Equal(t, map[string]string{d1: margo.Digest(y1)}, got.set())
	assert.Zero(t, queryInt(t, pool, `SELECT count(*) FROM documents WHERE deployment_id = '`+d1+`' AND piece IS NULL`), "the piece is stored")

	// The legacy bundles stay until no retained manifest names them.
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	gc := postgres.NewBundleCollector(pool, time.Hour, 0, log)
	now, err = postgres.DBNow(ctx, pool) // supersession times are the database's
	require.NoError(t, err)
	_, err = gc.RunOnceAt(ctx, now.Add(30*time.Minute))
	require.NoError(t, err)
	_, err = s.Bundle(ctx, "c", margo.Digest(bundle))
	require.NoError(t, err, "version 3 was superseded less than the retention ago")
	n, err := gc.RunOnceAt(ctx, now.Add(3*time.Hour))
	require.NoError(t, err)
	assert.Equal(t, postgres.Collected{Versions: 1, Entries: 1, Bundles: 2}, n)
	for _, b := range [][]byte{bundle, older} {
		_, err = s.Bundle(ctx, "c", margo.Digest(b))
		assert.Equal(t, lifecycle.ENOTFOUND, lifecycle.ErrorCode(err), "legacy bundle after the retention: %v", err)
	}
	published(t, ctx, s, "c")
}

// TestMigratePublicationDownRefusal: 00007's Down refuses when a client has
// no legacy manifest, and its message names both causes: here the client
// was only created after the upgrade, nothing was published to it.
func TestMigratePublicationDownRefusal(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := open(t, pgtest.EmptyURL(t))
	require.NoError(t, postgres.Migrate(ctx, pool))
	_, err := postgres.NewFleetStore(pool, 0).ClientManifest(ctx, "c", true, time.Now())
	require.NoError(t, err)
	err = postgres.MigrateDownTo(ctx, pool, 6)
	require.Error(t, err, "the Down refuses")
	assert.Contains(t, err.Error(), "created", "the refusal names a client created since the upgrade")
}
