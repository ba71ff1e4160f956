package postgres_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
	"github.com/wfm-dev/wfm/internal/margotest"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

const pubDescription = `apiVersion: v1
id: app
metadata:
  name: App
  version: "1.0.0"
deploymentProfiles:
  - type: compose
    id: app-compose
    components:
      - name: web
        properties:
          repository: oci://example.com/web
          revision: "1.0.0"
`

func pubCaps(id string) []byte {
	b, _ := json.Marshal(map[string]any{"properties": map[string]any{"id": id, "vendor": "v", "modelNumber": "m", "serialNumber": "s",
		"cpus": []any{map[string]any{"cores": 2, "architecture": "amd64"}}, "memory": "1Gi", "storage": "1Gi",
		"supportedRuntimes": []string{"oci"}, "supportedDeploymentTypes": []string{"compose"}}})
	return b
}

func pubReport(id string, adopted uint64, state string) []byte {
	b, _ := json.Marshal(map[string]any{"deploymentId": id, "adoptedManifestVersion": adopted, "status": map[string]any{"state": state},
		"components": []any{map[string]any{"name": "web", "state": state}}})
	return b
}

// clock is a settable clock for the service and the collector.
type clock struct{ t atomic.Int64 }

func newClock(t time.Time) *clock { c := &clock{}; c.set(t); return c }
func (c *clock) now() time.Time   { return time.Unix(0, c.t.Load()).UTC() }
func (c *clock) set(t time.Time)  { c.t.Store(t.UnixNano()) }
func (c *clock) add(d time.Duration) {
	c.t.Add(int64(d))
}

// pubFleet is a fleet service over a fresh database with app 1.0.0 and
// 2.0.0 in the catalog, its store (read directly: no manifest cache) and a
// scheduler to publish operations' steps.
type pubFleet struct {
	pool  *pgxpool.Pool
	store *postgres.FleetStore
	svc   *fleet.Service
	sched *fleet.Scheduler
	clock *clock
}

func newPubFleet(t *testing.T) *pubFleet { return newTracedPubFleet(t, nil) }

// newTracedPubFleet is newPubFleet whose store reports every statement it
// runs to after (when not nil).
func newTracedPubFleet(t *testing.T, after func(sql string)) *pubFleet {
	t.Helper()
	pool := pgtest.New(t)
	storePool := pool
	if after != nil {
		storePool = tracedPool(t, pool, after)
	}
	clk := newClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), clk.now)
	for _, v := range []string{"1.0.0", "2.0.0"} {
		_, _, err := cat.Add(t.Context(), []byte(strings.ReplaceAll(pubDescription, `"1.0.0"`, `"`+v+`"`)), catalog.MediaYAML)
		require.NoError(t, err)
	}
	store := postgres.NewFleetStore(storePool, 5)
	svc := fleet.NewService(store, cat, fleet.Policy{AcceptAll: true, AllowOverrides: true}, clk.now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return &pubFleet{pool: pool, store: store, svc: svc, sched: fleet.NewScheduler(svc, time.Hour), clock: clk}
}

func (f *pubFleet) deploy(t *testing.T, client, device string) fleet.Deployment {
	t.Helper()
	_, err := f.svc.PutCapabilities(t.Context(), client, device, pubCaps(device))
	require.NoError(t, err)
	d, err := f.svc.CreateDeployment(t.Context(), fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: client, DeviceID: device})
	require.NoError(t, err)
	return d
}

// installed reports the deployment's desired revision installed.
func (f *pubFleet) installed(t *testing.T, client, id string) {
	t.Helper()
	d, err := f.svc.Deployment(t.Context(), id)
	require.NoError(t, err)
	_, err = f.svc.ReportStatus(t.Context(), client, id, pubReport(id, d.DesiredSince, "installed"))
	require.NoError(t, err)
}

// manifestDoc is what a device reads of a state manifest.
type manifestDoc struct {
	ManifestVersion uint64 `json:"manifestVersion"`
	Bundle          *struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		SizeBytes int64  `json:"sizeBytes"`
		URL       string `json:"url"`
	} `json:"bundle"`
	Deployments []struct {
		DeploymentID string `json:"deploymentId"`
		Digest       string `json:"digest"`
		SizeBytes    int64  `json:"sizeBytes"`
		URL          string `json:"url"`
	} `json:"deployments"`
}

// set is a manifest's deployments: id -> document digest.
func (m manifestDoc) set() map[string]string {
	out := map[string]string{}
	for _, d := range m.Deployments {
		out[d.DeploymentID] = d.Digest
	}
	return out
}

// untar reads a bundle as a device does, and checks that it is one gzip
// member (some agents' readers stop after the first).
func untar(t testing.TB, b []byte) map[string][]byte {
	t.Helper()
	r := bytes.NewReader(b)
	zr, err := gzip.NewReader(r)
	require.NoError(t, err)
	zr.Multistream(false)
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[h.Name] = data
	}
	_, err = io.Copy(io.Discard, zr)
	require.NoError(t, err, "gzip trailer")
	require.Zero(t, r.Len(), "the bundle is exactly one gzip member")
	return files
}

// published reads the client's current manifest from the store and checks
// what a device would fetch from it: every document by its URL (digest
// and size as listed), and the bundle (digest and size as listed) holding
// exactly those documents, by name and bytes. It returns the manifest.
func published(t testing.TB, ctx context.Context, s *postgres.FleetStore, client string) manifestDoc {
	t.Helper()
	m, err := s.ClientManifest(ctx, client, true, time.Now())
	require.NoError(t, err)
	var doc manifestDoc
	require.NoError(t, json.Unmarshal(m.JSON, &doc))
	require.Equal(t, m.Version, doc.ManifestVersion)
	require.Equal(t, margo.ETag(m.JSON), m.ETag)
	want := map[string][]byte{}
	for _, d := range doc.Deployments {
		y, err := s.DeploymentYAML(ctx, client, d.DeploymentID, d.Digest)
		require.NoError(t, err, "document %s of manifest %d", d.DeploymentID, doc.ManifestVersion)
		require.Equal(t, d.Digest, margo.Digest(y))
		require.EqualValues(t, len(y), d.SizeBytes)
		require.Equal(t, margo.DeploymentURL(d.DeploymentID, d.Digest), d.URL)
		want[d.DeploymentID+".yaml"] = y
	}
	if len(doc.Deployments) == 0 {
		require.Nil(t, doc.Bundle, "no deployments, no bundle")
		return doc
	}
	require.NotNil(t, doc.Bundle)
	b, err := s.Bundle(ctx, client, doc.Bundle.Digest)
	require.NoError(t, err, "bundle of manifest %d", doc.ManifestVersion)
	require.Equal(t, doc.Bundle.Digest, margo.Digest(b))
	require.EqualValues(t, len(b), doc.Bundle.SizeBytes)
	require.Equal(t, margo.BundleURL(doc.Bundle.Digest), doc.Bundle.URL)
	require.Equal(t, margo.BundleMediaType, doc.Bundle.MediaType)
	require.Equal(t, want, untar(t, b), "the bundle holds exactly the manifest's documents")
	require.Empty(t, margotest.BundleProblems(b), "Margo's rules for a bundle")
	return doc
}

// TestBundleHoldsExactlyTheReferencedDocuments publishes creations, an
// upgrade (a new revision), a revert (a repeated revision), a removal and
// an unregistration, and after each checks that the manifest's documents,
// the documents served by URL and the bundle's files are the same set; at
// the end, every earlier bundle is still served (within the retention).
func TestBundleHoldsExactlyTheReferencedDocuments(t *testing.T) {
	ctx := t.Context()
	f := newPubFleet(t)
	var bundles []string // every version's bundle digest
	pub := func() manifestDoc {
		t.Helper()
		m := published(t, ctx, f.store, "c")
		if m.Bundle != nil {
			bundles = append(bundles, m.Bundle.Digest)
		}
		return m
	}
	m := pub() // created on first contact: version 1, empty
	assert.Empty(t, m.Deployments)

	var ds []fleet.Deployment
	for _, dev := range []string{"d1", "d2", "d3", "d4"} {
		ds = append(ds, f.deploy(t, "c", dev))
		m = pub()
		assert.Len(t, m.Deployments, len(ds), "after creating %s", dev)
	}
	v1 := m.set()

	// Upgrade d1: its entry moves to revision 2's document.
	f.installed(t, "c", ds[0].ID)
	_, _, err := f.svc.Upgrade(ctx, ds[0].ID, fleet.UpgradeRequest{TargetVersion: "2.0.0"}, fleet.Actor{ID: "t"}, false, fleet.Precondition{})
	require.NoError(t, err)
	_, err = f.sched.RunOnce(ctx)
	require.NoError(t, err)
	m = pub()
	require.Len(t, m.Deployments, 4)
	assert.NotEqual(t, v1[ds[0].ID], m.set()[ds[0].ID], "the upgrade's document")
	assert.Equal(t, v1[ds[1].ID], m.set()[ds[1].ID], "the others are unchanged")

	// A rollback to 1.0.0 publishes a new revision (3, a new document: its
	// revision number is in it); a revert to revision 1 (what a drain timeout
	// decides) repeats revision 1's document, which is not stored again.
	f.installed(t, "c", ds[0].ID)
	_, _, err = f.svc.Rollback(ctx, ds[0].ID, fleet.RollbackRequest{ToRevision: 1, Force: true, Reason: "test"}, fleet.Actor{ID: "t", Admin: true}, false, fleet.Precondition{})
	require.NoError(t, err)
	_, err = f.sched.RunOnce(ctx)
	require.NoError(t, err)
	m = pub()
	assert.NotContains(t, []string{v1[ds[0].ID], ""}, m.set()[ds[0].ID], "revision 3 is a new document")
	cur, err := f.svc.Deployment(ctx, ds[0].ID)
	require.NoError(t, err)
	require.Equal(t, 3, cur.Revision)
	d := lifecycle.Deployment{ID: cur.ID, ClientID: "c", DeviceID: cur.DeviceID, ApplicationID: "app", State: cur.State, Revision: 3,
		InstalledRevision: cur.InstalledRevision, LastRevision: 3, Version: cur.Version.String()}
	revert := lifecycle.NewChange(d, f.clock.now(), "t")
	revert.Revision = &lifecycle.NewRevision{N: 4, CopyOf: 1}
	revert.After.Revision, revert.After.LastRevision, revert.Manifest = 4, 4, true
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error { return postgres.Apply(ctx, tx, []*lifecycle.Change{revert}) }))
	m = pub()
	assert.Equal(t, v1, m.set(), "the revert publishes revision 1's document again")
	var revisions, documents int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM revisions WHERE deployment_id = $1),
    (SELECT count(*) FROM documents WHERE deployment_id = $1)`, ds[0].ID).Scan(&revisions, &documents))
	assert.Equal(t, 4, revisions)
	assert.Equal(t, 3, documents, "a repeated revision stores no document")

	// A removal and an unregistration take deployments out.
	_, err = f.svc.RemoveDeployment(ctx, ds[1].ID, fleet.Precondition{})
	require.NoError(t, err)
	m = pub()
	assert.NotContains(t, m.set(), ds[1].ID)
	assert.Len(t, m.Deployments, 3)
	require.NoError(t, f.svc.Unregister(ctx, "c", "d3"))
	m = pub()
	assert.Equal(t, map[string]string{ds[0].ID: v1[ds[0].ID], ds[3].ID: v1[ds[3].ID]}, m.set())
	require.NoError(t, f.svc.Unregister(ctx, "c", "d1"))
	require.NoError(t, f.svc.Unregister(ctx, "c", "d4"))
	m = pub()
	assert.Empty(t, m.Deployments, "no deployment left")

	var open int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM manifest_entries WHERE client_id = 'c' AND to_version IS NULL`).Scan(&open))
	assert.Zero(t, open, "no open entry")

	// The bundle of every earlier version is still served (retention), as
	// it was.
	require.GreaterOrEqual(t, len(bundles), 8)
	for i, digest := range bundles {
		b, err := f.store.Bundle(ctx, "c", digest)
		if assert.NoError(t, err, "earlier bundle %d", i) {
			assert.Equal(t, digest, margo.Digest(b), "earlier bundle %d, as it was", i)
		}
	}
}

// TestPollDuringABatchSeesOldOrNew removes many of a client's deployments
// in one transaction (an unregistration, its statements run here in an
// explicit transaction) while the client's manifest is read (fresh reads,
// no cache): by a poller that runs from before the transaction begins until
// after it commits, and by polls between the transaction's statements,
// while it is open. Every manifest seen is the one before or the one
// after, never a mix; the polls between the statements see the one before
// (with its bundle), the first after the commit the one after.
func TestPollDuringABatchSeesOldOrNew(t *testing.T) {
	ctx := t.Context()
	f := newPubFleet(t)
	keep := f.deploy(t, "c", "stays")
	const n = 150
	_, err := f.svc.PutCapabilities(ctx, "c", "gateway", pubCaps("gateway"))
	require.NoError(t, err)
	var gateway []lifecycle.Deployment
	for range n {
		d, err := f.svc.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: "gateway"})
		require.NoError(t, err)
		gateway = append(gateway, lifecycle.Deployment{ID: d.ID, ClientID: "c", DeviceID: "gateway", ApplicationID: "app", State: d.State,
			Revision: d.Revision, InstalledRevision: d.InstalledRevision, LastRevision: d.Revision, Version: d.Version.String()})
	}
	slices.SortFunc(gateway, func(a, b lifecycle.Deployment) int { return strings.Compare(a.ID, b.ID) })
	mb := published(t, ctx, f.store, "c") // also records the version's bundle digest: no poll writes
	before, vBefore := mb.set(), mb.ManifestVersion
	require.Len(t, before, n+1)
	after := map[string]string{keep.ID: before[keep.ID]}

	// The poller asserts with assert/t.Errorf only (it is not the test's
	// goroutine).
	done, polling := make(chan struct{}), make(chan struct{})
	var polls, sawBefore, sawAfter int
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(polling)
		first := true
		for last := false; !last; { // one more poll once the batch is committed
			select {
			case <-done:
				last = true
			default:
			}
			m, err := f.store.ClientManifest(ctx, "c", false, time.Now())
			if !assert.NoError(t, err) {
				return
			}
			var doc manifestDoc
			if !assert.NoError(t, json.Unmarshal(m.JSON, &doc)) {
				return
			}
			if first {
				first = false
				polling <- struct{}{}
			}
			got := doc.set()
			polls++
			switch {
			case doc.ManifestVersion == vBefore && assert.ObjectsAreEqual(before, got):
				sawBefore++
			case doc.ManifestVersion == vBefore+1 && assert.ObjectsAreEqual(after, got):
				sawAfter++
			default:
				t.Errorf("poll %d saw version %d with %d deployments: neither the %d before (version %d) nor the %d after",
					polls, doc.ManifestVersion, len(got), len(before), vBefore, len(after))
				return
			}
		}
	})
	select {
	case <-polling: // the poller runs before the transaction begins
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting for the first poll")
	}

	sees := func(what string, want map[string]string, version uint64) {
		t.Helper()
		m := published(t, ctx, f.store, "c") // with its documents and bundle
		assert.Equal(t, version, m.ManifestVersion, what)
		assert.Equal(t, want, m.set(), what)
	}
	now := f.clock.now()
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `UPDATE devices SET registered = false, updated_at = $2 WHERE client_id = 'c' AND id = $1`, "gateway", now)
	require.NoError(t, err)
	sees("after the device's update", before, vBefore)
	_, err = tx.Exec(ctx, `SELECT 1 FROM deployments WHERE client_id = 'c' AND device_id = 'gateway' ORDER BY id FOR UPDATE`)
	require.NoError(t, err)
	sees("with the deployments locked", before, vBefore)
	changes, err := lifecycle.DecideUnregister("c", "gateway", gateway, now, "c")
	require.NoError(t, err)
	require.NoError(t, postgres.Apply(ctx, tx, changes))
	for i := range 3 {
		sees(fmt.Sprint("with the batch written, not committed, poll ", i), before, vBefore)
	}
	require.NoError(t, tx.Commit(ctx))
	sees("after the commit", after, vBefore+1)
	close(done)
	wg.Wait()
	t.Logf("%d polls: %d before, %d after", polls, sawBefore, sawAfter)
	assert.Positive(t, sawAfter, "the poller's last poll sees the batch")
}

// TestBundleCollector checks that garbage collection never deletes a bundle
// a current manifest or its retention still needs: a superseded bundle is
// served until the retention has passed since its supersession, the
// current one always, and a bundle published again is kept as current.
// Times are the database's: the publishing replica's clock is two
// retentions behind it and must not shorten the retention.
func TestBundleCollector(t *testing.T) {
	ctx := t.Context()
	f := newPubFleet(t)
	const retention = 24 * time.Hour
	dbNow := func() time.Time {
		t.Helper()
		now, err := postgres.DBNow(ctx, f.pool)
		require.NoError(t, err)
		return now
	}
	f.clock.set(dbNow().Add(-2 * retention)) // the replica's clock is behind
	gc := postgres.NewBundleCollector(f.pool, retention, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	fetch := func(digest string) error {
		_, err := f.store.Bundle(ctx, "c", digest)
		return err
	}
	collectAt := func(at time.Time) postgres.Collected {
		t.Helper()
		n, err := gc.RunOnceAt(ctx, at)
		require.NoError(t, err)
		return n
	}

	a := f.deploy(t, "c", "d1")
	b1 := published(t, ctx, f.store, "c").Bundle.Digest
	b := f.deploy(t, "c", "d2") // supersedes b1 now
	t2 := dbNow()
	b2 := published(t, ctx, f.store, "c").Bundle.Digest
	require.NotEqual(t, b1, b2)

	collectAt(t2.Add(retention - time.Minute))
	require.NoError(t, fetch(b1), "superseded less than the retention ago: kept")
	require.NoError(t, fetch(b2))

	n := collectAt(t2.Add(retention + time.Minute))
	assert.Positive(t, n.Versions, "versions collected")
	assert.Equal(t, lifecycle.ENOTFOUND, lifecycle.ErrorCode(fetch(b1)), "superseded more than the retention ago: gone")
	require.NoError(t, fetch(b2), "the current bundle stays, however old")
	published(t, ctx, f.store, "c")

	// Later, removing b publishes a's document alone again: b1's bytes are
	// current again, and b2 is kept for the retention from now, however
	// old its publication.
	f.clock.add(10 * retention)
	_, err := f.svc.RemoveDeployment(ctx, b.ID, fleet.Precondition{})
	require.NoError(t, err)
	t3 := dbNow()
	m := published(t, ctx, f.store, "c")
	require.Equal(t, map[string]string{a.ID: m.set()[a.ID]}, m.set())
	require.Equal(t, b1, m.Bundle.Digest, "the same documents make the same bundle")
	collectAt(t3.Add(retention - time.Minute))
	require.NoError(t, fetch(b2), "superseded by a publication less than the retention ago: kept")
	require.NoError(t, fetch(b1))
	collectAt(t3.Add(retention + time.Minute))
	assert.Equal(t, lifecycle.ENOTFOUND, lifecycle.ErrorCode(fetch(b2)), "b2 gone after the retention")
	require.NoError(t, fetch(b1), "current")
	published(t, ctx, f.store, "c")
	n = collectAt(t3.Add(retention + time.Minute))
	assert.Zero(t, n, "a second run finds nothing")
	n, err = gc.RunOnce(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "a run now (the database's clock) finds nothing either")
}

// BenchmarkPublishOneChange measures the publication of one change (a new
// revision of one deployment: its document, the entry moved, one new
// manifest version) into a client that has entries deployments already.
// It must not grow with entries.
func BenchmarkPublishOneChange(b *testing.B) {
	for _, entries := range []int{10, 10000} {
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			ctx := context.Background()
			pool := pgtest.New(b)
			d := seedClient(b, pool, "c", entries)
			at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
			b.ResetTimer()
			for i := range b.N {
				c := lifecycle.NewChange(d, at, "bench")
				c.After.Revision, c.After.LastRevision = d.Revision+1, d.Revision+1
				c.Revision = &lifecycle.NewRevision{N: d.Revision + 1, Version: "1.0.0", ProfileID: "p", Kind: lifecycle.OperationReconfigure,
					Components: []string{"web"}, YAML: fmt.Appendf(nil, "id: %s\nrevision: %d\n%s", d.ID, i, strings.Repeat("# padding\n", 60)),
					Strategy: lifecycle.StrategyRecreate}
				c.Manifest = true
				tx, err := pool.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := postgres.Apply(ctx, tx, []*lifecycle.Change{c}); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
				d = c.After
			}
		})
	}
}

// BenchmarkClientManifest measures rendering a client's manifest of
// entries deployments from its entries (a device poll's cache miss): with
// the bundle digest recorded (every read but the first of a version), and
// the first read of a version (the bundle digest computed over all the
// pieces: linear in the client's size, once per version).
func BenchmarkClientManifest(b *testing.B) {
	for _, entries := range []int{10, 10000} {
		ctx := context.Background()
		pool := pgtest.New(b)
		seedClient(b, pool, "c", entries)
		s := postgres.NewFleetStore(pool, 0)
		if _, err := s.ClientManifest(ctx, "c", false, time.Now()); err != nil { // computes the pieces of the seeded documents once
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			for range b.N {
				if _, err := s.ClientManifest(ctx, "c", false, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("first-read/entries=%d", entries), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				if _, err := pool.Exec(ctx, `UPDATE manifest_versions SET bundle_digest = NULL, bundle_size = NULL`); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := s.ClientManifest(ctx, "c", false, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// seedClient writes, with SQL, an accepted client with one device and n
// pending deployments of app 1.0.0, each with one revision whose document
// is in the client's manifest (version 1), and returns the first
// deployment as a decision sees it.
func seedClient(tb testing.TB, pool *pgxpool.Pool, client string, n int) lifecycle.Deployment {
	tb.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
INSERT INTO applications (id) VALUES ('app');
INSERT INTO application_versions (application_id, version, sort_key, name, digest, media_type, raw, document)
VALUES ('app', '1.0.0', '1.0.0', 'app', 'sha256:`+strings.Repeat("0", 64)+`', 'application/yaml', '', '{}');`)
	require.NoError(tb, err)
	tx, err := pool.Begin(ctx)
	require.NoError(tb, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, q := range []string{
		`INSERT INTO clients (id, status, manifest_version, created_at, updated_at) VALUES ($1, 'accepted', 1, now(), now())`,
		`INSERT INTO manifest_versions (client_id, version, published_at) VALUES ($1, 1, now())`,
		`INSERT INTO devices (client_id, id, registered, capabilities, created_at, updated_at) VALUES ($1, 'gw', true, '{}', now(), now())`,
		`CREATE TEMP TABLE seed ON COMMIT DROP AS
    SELECT (lpad(to_hex(i), 8, '0') || '-0000-4000-8000-000000000000')::uuid AS id,
        convert_to('id: ' || i || E'\n' || repeat(E'# padding\n', 60), 'UTF8') AS yaml, $1::text AS client
    FROM generate_series(1, $2::int) AS i`,
		`INSERT INTO deployments (id, client_id, device_id, application_id, state, state_changed_at, revision, desired_since, created_at, updated_at)
    SELECT id, client, 'gw', 'app', 'pending', now(), 1, 1, now(), now() FROM seed`,
		`INSERT INTO documents (deployment_id, digest, yaml, created_at) SELECT id, 'sha256:' || encode(sha256(yaml), 'hex'), yaml, now() FROM seed`,
		`INSERT INTO revisions (deployment_id, n, application_id, version, profile_id, parameters, operation, outcome, components, digest, manifest_version, created_at)
    SELECT id, 1, 'app', '1.0.0', 'p', '{}', 'install', 'pending', '{web}', 'sha256:' || encode(sha256(yaml), 'hex'), 1, now() FROM seed`,
		`INSERT INTO manifest_entries (client_id, deployment_id, digest, size_bytes, from_version)
    SELECT client, id, 'sha256:' || encode(sha256(yaml), 'hex'), octet_length(yaml), 1 FROM seed`,
	} {
		var args []any
		switch {
		case strings.Contains(q, "$2"):
			args = []any{client, n}
		case strings.Contains(q, "$1"):
			args = []any{client}
		}
		_, err := tx.Exec(ctx, q, args...)
		require.NoError(tb, err, "%s", q)
	}
	require.NoError(tb, tx.Commit(ctx))
	return lifecycle.Deployment{ID: "00000001-0000-4000-8000-000000000000", ClientID: client, DeviceID: "gw", ApplicationID: "app",
		State: lifecycle.StatePending, Revision: 1, LastRevision: 1, Version: "1.0.0"}
}

// recordedBundle returns the bundle digest recorded for client's current
// manifest version, nil when none is.
func recordedBundle(t *testing.T, pool *pgxpool.Pool, client string) *string {
	t.Helper()
	var digest *string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT m.bundle_digest FROM manifest_versions m JOIN clients c
ON c.id = m.client_id AND c.manifest_version = m.version WHERE c.id = $1`, client).Scan(&digest))
	return digest
}

// TestSmallClientBundleRecordedAtPublication: a client with at most a few
// documents gets its new bundle digest recorded by the publication itself
// (so the first poll only reads), equal to the bundle then served; a client
// with more documents leaves it to the first read of the version, which
// records it.
func TestSmallClientBundleRecordedAtPublication(t *testing.T) {
	ctx := t.Context()
	f := newPubFleet(t)
	recorded := func(client string) *string { return recordedBundle(t, f.pool, client) }
	f.deploy(t, "small", "d0")
	d := recorded("small")
	require.NotNil(t, d, "recorded by the publication, before any read")
	doc := published(t, ctx, f.store, "small")
	require.Equal(t, *d, doc.Bundle.Digest, "the recorded digest is the bundle's")

	for i := range postgres.SmallBundle + 1 {
		f.deploy(t, "big", fmt.Sprint("d", i))
	}
	require.Nil(t, recorded("big"), "more than SmallBundle documents: left to the first read")
	doc = published(t, ctx, f.store, "big")
	d = recorded("big")
	require.NotNil(t, d, "recorded by the first read")
	require.Equal(t, *d, doc.Bundle.Digest)
}

// TestSmallClientBundleOfCreations: creations compute the next bundle of a
// small client from its current pieces and the created ones, and the bump
// records it; at every size up to SmallBundle documents, created one by one
// or several in one batch, the recorded digest is that of the bundle then
// served (published checks the bytes); past SmallBundle it is left to the
// first read.
func TestSmallClientBundleOfCreations(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	counting, smallReads := false, 0 // reads of the pieces after the writes (queueSmallBundles)
	f := newTracedPubFleet(t, func(sql string) {
		mu.Lock()
		defer mu.Unlock()
		if counting && strings.Contains(sql, postgres.SQLSmallBundles) {
			smallReads++
		}
	})
	count := func(on bool) int {
		mu.Lock()
		defer mu.Unlock()
		counting = on
		n := smallReads
		smallReads = 0
		return n
	}
	recorded := func(client string) *string { return recordedBundle(t, f.pool, client) }
	for i := range postgres.SmallBundle {
		_, err := f.svc.PutCapabilities(ctx, "grow", fmt.Sprint("d", i), pubCaps(fmt.Sprint("d", i)))
		require.NoError(t, err)
		count(true)
		_, err = f.svc.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "grow", DeviceID: fmt.Sprint("d", i)})
		require.NoError(t, err)
		require.Zero(t, count(false), "the creation computed the bundle before its writes: no read of the pieces after them")
		d := recorded("grow")
		require.NotNil(t, d, "%d documents: recorded by the creation", i+1)
		require.Equal(t, *d, published(t, ctx, f.store, "grow").Bundle.Digest, "%d documents", i+1)
	}
	f.deploy(t, "grow", "one-more")
	require.Nil(t, recorded("grow"), "more than SmallBundle documents: left to the first read")
	published(t, ctx, f.store, "grow")

	total := 0
	for round, n := range []int{3, 5} { // several creations of one client in one batch
		total += n
		var reqs []fleet.CreateRequest
		for j := range n {
			dev := fmt.Sprintf("r%d-%d", round, j)
			_, err := f.svc.PutCapabilities(ctx, "batch", dev, pubCaps(dev))
			require.NoError(t, err)
			reqs = append(reqs, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "batch", DeviceID: dev})
		}
		count(true)
		rs, err := f.svc.CreateDeployments(ctx, reqs)
		require.NoError(t, err)
		require.Zero(t, count(false), "round %d: no read of the pieces after the writes", round)
		for _, r := range rs {
			require.NoError(t, r.Err)
		}
		d := recorded("batch")
		require.NotNil(t, d, "round %d", round)
		doc := published(t, ctx, f.store, "batch")
		require.Equal(t, *d, doc.Bundle.Digest, "round %d", round)
		require.Len(t, doc.Deployments, total, "round %d", round)
	}
}
