package postgres

// Publication: how a change reaches a client's manifest (design §5), at a
// cost proportional to the change, whatever the client's size.
//
// The write side (bumpManifests, queuePublish; called by the applier in
// the change's transaction) stores each new revision's YAML once in documents
// with its bundle piece (margo.NewBundlePiece) ready, and maintains the
// client's manifest as manifest_entries: a publication closes the changed
// deployments' open entries and opens new ones. One new manifest_versions
// row per client per batch. No manifest JSON and no bundle is built there.
//
// The read side (readManifest, on a cache miss of the device poll; Bundle)
// renders: one statement reads the client's current version and open
// entries (one snapshot: a poll during a batch sees the old or the new
// manifest, never a mix). The publication of a client of at most
// smallBundle documents records its bundle digest; otherwise the first
// reader of a version computes it by streaming the entries' pieces through sha256 (linear in the
// client's size, once per version; no compression, the pieces are ready)
// and records it before the manifest naming it is answered, so any replica
// can then serve GET /api/v1/bundles/{digest}: a bundle is a reference
// (version row + entries + pieces), assembled again on each fetch and
// checked against its digest.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
)

const (
	// sqlBumpManifests locks the clients' rows in id order (the lock order),
	// bumps each one's manifest version (the legacy manifest stored before
	// migration 00007 is dropped at its first publication), supersedes each
	// client's current manifest_versions row and inserts the new one (after
	// the supersession: the current version is unique; the cross join on
	// its count orders them). The current rows are found by the clients'
	// ids through manifest_versions_current, not joined to the bumped rows:
	// joined, the planner hashed every current row of every client (its
	// estimate of a freshly filled table is stale), 2.5 ms a batch at
	// 10,000 clients. The clients are locked, so the current row of each
	// is the one the bump supersedes. The times of the versions are the database's
	// (now()), the clock the bundle collector's cutoff is read from:
	// replicas' clocks may disagree, and a skewed one must not shorten a
	// bundle's retention. One statement, one round trip.
	// sqlLockClients locks the clients' rows in id order (the lock order).
	sqlLockClients = `SELECT 1 FROM clients WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`
	// sqlLockClientVersions locks the clients' rows as sqlLockClients does
	// and returns their status and manifest version: the version a bump by
	// this transaction makes is that plus one (bumpLocked).
	sqlLockClientVersions = `SELECT id, status, manifest_version FROM clients WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`
	sqlBumpManifests      = `
WITH locked AS (SELECT id FROM clients WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE),
bumped AS (UPDATE clients c SET manifest_version = c.manifest_version + 1, manifest_json = NULL, manifest_etag = NULL,
    bundle_digest = NULL, updated_at = $2
    FROM locked WHERE c.id = locked.id
    RETURNING c.id, c.manifest_version),
superseded AS (UPDATE manifest_versions m SET superseded_at = now()
    WHERE m.client_id = ANY($1::text[]) AND m.superseded_at IS NULL RETURNING 1),
published AS (INSERT INTO manifest_versions (client_id, version, published_at, bundle_digest, bundle_size)
    SELECT bumped.id, bumped.manifest_version, now(), b.digest, b.size FROM bumped CROSS JOIN (SELECT count(*) FROM superseded) AS done
    LEFT JOIN unnest($3::text[], $4::text[], $5::bigint[]) AS b (id, digest, size) ON b.id = bumped.id)
SELECT id, manifest_version FROM bumped`
	sqlInsertDocuments = `
INSERT INTO documents (deployment_id, digest, yaml, piece, piece_crc, piece_size, created_at)
SELECT *, $7::timestamptz FROM unnest($1::text[]::uuid[], $2::text[], $3::bytea[], $4::bytea[], $5::bigint[], $6::bigint[])
ON CONFLICT DO NOTHING`
	// sqlCloseEntries closes the open entries of the changed deployments
	// whose document changes (or that leave the manifest): an entry opened
	// at the new version itself is deleted instead. $4 is the desired
	// revision, 0 when the deployment leaves the manifest.
	sqlCloseEntries = `
WITH x AS (
    SELECT x.client_id, x.deployment_id, x.v, r.digest
    FROM unnest($1::text[], $2::text[]::uuid[], $3::bigint[], $4::int[]) AS x (client_id, deployment_id, v, n)
    LEFT JOIN revisions r ON r.deployment_id = x.deployment_id AND r.n = x.n),
closed AS (UPDATE manifest_entries e SET to_version = x.v FROM x
    WHERE e.client_id = x.client_id AND e.deployment_id = x.deployment_id AND e.to_version IS NULL
    AND e.from_version < x.v AND e.digest IS DISTINCT FROM x.digest RETURNING 1)
DELETE FROM manifest_entries e USING x
WHERE e.client_id = x.client_id AND e.deployment_id = x.deployment_id AND e.to_version IS NULL
    AND e.from_version = x.v AND e.digest IS DISTINCT FROM x.digest`
	// sqlOpenEntries opens an entry for each deployment in the manifest at
	// its desired revision, unless its open entry already names that
	// document. A missing revision or document fails on NOT NULL.
	sqlOpenEntries = `
INSERT INTO manifest_entries (client_id, deployment_id, digest, size_bytes, from_version)
SELECT x.client_id, x.deployment_id, r.digest, octet_length(d.yaml), x.v
FROM unnest($1::text[], $2::text[]::uuid[], $3::bigint[], $4::int[]) AS x (client_id, deployment_id, v, n)
LEFT JOIN revisions r ON r.deployment_id = x.deployment_id AND r.n = x.n
LEFT JOIN documents d ON d.deployment_id = r.deployment_id AND d.digest = r.digest
ON CONFLICT (client_id, deployment_id) WHERE to_version IS NULL DO NOTHING`
	// sqlInsertEntries opens the entries of deployments created in the
	// batch: none can have one, and their documents were just stored.
	sqlInsertEntries = `
INSERT INTO manifest_entries (client_id, deployment_id, digest, size_bytes, from_version)
SELECT * FROM unnest($1::text[], $2::text[]::uuid[], $3::text[], $4::bigint[], $5::bigint[])`
	sqlNotifyClients = `SELECT pg_notify('` + NotifyChannel + `', c) FROM unnest($1::text[]) AS c`
)

// bumpManifests gives each of clients (sorted and deduplicated here: the
// lock order) one new manifest version: the client row is bumped (updated
// at at), its previous manifest_versions row superseded and the new one
// inserted, both stamped with the database's clock. One statement,
// whatever the number of clients. Call queuePublish afterwards, in the
// same transaction, once the revisions of those versions are queued.
//
// Returns ENOTFOUND if a client does not exist.
func bumpManifests(ctx context.Context, tx pgx.Tx, clients []string, at time.Time) (map[string]uint64, error) {
	clients = slices.Compact(slices.Sorted(slices.Values(clients)))
	versions := make(map[string]uint64, len(clients))
	if len(clients) == 0 {
		return versions, nil
	}
	// The clients are locked by a statement of their own, before the bump:
	// a statement's snapshot is taken when it starts, so a bump that had
	// waited for another transaction's lock on a client would not see the
	// manifest_versions row that transaction inserted, would not supersede
	// it, and its own insert would violate manifest_versions_current. The
	// bump, a later statement, sees what committed before the lock was
	// granted. Both go in one round trip.
	type bumped struct {
		ID      string
		Version int64
	}
	var bs []bumped
	b := &pgx.Batch{}
	b.Queue(sqlLockClients, clients).Exec(func(pgconn.CommandTag) error { return nil })
	b.Queue(sqlBumpManifests, clients, at, []string{}, []string{}, []int64{}).Query(func(rows pgx.Rows) error {
		var err error
		bs, err = pgx.CollectRows(rows, pgx.RowToStructByPos[bumped])
		return err
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	for _, b := range bs {
		versions[b.ID] = uint64(b.Version)
	}
	for _, id := range clients {
		if _, ok := versions[id]; !ok {
			return nil, notFound("There is no client %s.", id)
		}
	}
	return versions, nil
}

// bumpLocked is bumpManifests for clients this transaction has locked
// already (sqlLockClientVersions; locked holds their versions as read
// then): their new versions are known without a round trip, and the bump
// is queued on p, first, to run with the writes that name those versions.
// The bump's own answer is checked against them when p runs. The new
// versions of the clients of bundles are recorded with those bundles'
// digests and sizes (creationBundles).
//
// Returns an error if a client is not in locked.
func bumpLocked(p *pipeline, clients []string, locked map[string]uint64, bundles map[string]bundleSum, at time.Time) (map[string]uint64, error) {
	clients = slices.Compact(slices.Sorted(slices.Values(clients)))
	versions := make(map[string]uint64, len(clients))
	for _, id := range clients {
		v, ok := locked[id]
		if !ok {
			return nil, fmt.Errorf("client %s: its manifest was not locked by the transaction", id)
		}
		versions[id] = v + 1
	}
	var ids, digests []string
	var sizes []int64
	for _, id := range clients {
		if b, ok := bundles[id]; ok {
			ids, digests, sizes = append(ids, id), append(digests, b.digest), append(sizes, b.size)
		}
	}
	p.q().Queue(sqlBumpManifests, clients, at, ids, digests, sizes).Query(func(rows pgx.Rows) error {
		var id string
		var v int64
		n, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error {
			if want := versions[id]; uint64(v) != want {
				return fmt.Errorf("client %s: manifest bumped to version %d, %d expected under the transaction's lock", id, v, want)
			}
			return nil
		})
		if err == nil && int(n.RowsAffected()) != len(clients) {
			err = fmt.Errorf("%d of %d locked clients bumped", n.RowsAffected(), len(clients))
		}
		return err
	})
	return versions, nil
}

// queuePublish queues on p what the changes publish, in the applier's
// transaction, after the statements that write their revisions rows (p
// runs in order): the document of every new revision (not a repeat:
// CopyOf == 0) with its bundle piece; for every change of a manifest
// (c.Manifest) the deployment's entry at its client's new version
// (versions, from bumpManifests): its desired revision c.After.Revision,
// or none when it leaves the manifest (c.After.Removing); the pieces of
// the clients whose bundle publication records (recordSmallBundles); one
// notification per client. A change of no deployment (an unregistration
// without any) only bumps. Set-based: a handful of statements for any
// number of changes, and no work that grows with the client's size; the
// documents and new entries of deployments the batch creates, from copyAt
// of them (the applier's COPY threshold, batch.copyAt), with one COPY each.
//
// The returned smallBundles is complete once p has run; pass it to
// recordSmallBundles.
//
// Returns an error if a change's client was not bumped or a piece cannot
// be made.
func queuePublish(p *pipeline, versions map[string]uint64, changes []*lifecycle.Change, pieces map[[2]string]*margo.BundlePiece,
	at time.Time, copyAt int, known map[string]bundleSum) (*smallBundles, error) {
	created := map[string]bool{}
	for _, c := range changes {
		if c.Create {
			created[c.After.ID] = true
		}
	}
	docs, err := queueDocuments(p, changes, pieces, at, created, copyAt)
	if err != nil {
		return nil, err
	}
	// The last change of a deployment decides its entry.
	var clients, ids []string
	var vs []int64
	var ns []int32
	index := map[string]int{}
	for _, c := range changes {
		if !c.Manifest || c.After.ID == "" {
			continue
		}
		v, ok := versions[c.After.ClientID]
		if !ok {
			return nil, fmt.Errorf("deployment %s changes the manifest of client %s, which was not bumped", c.After.ID, c.After.ClientID)
		}
		n := int32(c.After.Revision)
		if c.After.Removing {
			n = 0
		}
		if i, ok := index[c.After.ID]; ok {
			ns[i] = n
			continue
		}
		index[c.After.ID] = len(ids)
		clients, ids, vs, ns = append(clients, c.After.ClientID), append(ids, c.After.ID), append(vs, int64(v)), append(ns, n)
	}
	queueEntries(p, clients, ids, vs, ns, created, docs, copyAt)
	small := queueSmallBundles(p, versions, known)
	notify := make([]string, 0, len(versions))
	for id := range versions {
		notify = append(notify, id)
	}
	if len(notify) > 0 {
		slices.Sort(notify)
		p.q().Queue(sqlNotifyClients, notify)
	}
	return small, nil
}

// smallBundle is the number of documents up to which a client's new bundle
// digest is computed and recorded by its publication, in the publishing
// transaction, rather than by the first read of the new version: for such a
// client it costs microseconds (the pieces are ready; nothing is
// compressed) and saves that first poll its extra read and write. Larger
// clients (gateways) keep publication proportional to the change.
const smallBundle = 16

// sqlSmallBundles reads, in bundle order, the pieces of the open entries of
// the clients $1 that have at most $2 of them. Whether a client is small is
// decided by counting at most $2+1 of its open entries (a gateway's
// thousands are not counted at every publication), before any of its
// entries is read; every part is a lookup by client, then by entry, in
// whatever plan the statement's plan cache holds (the OFFSET 0 keeps each
// lateral part from being flattened into a join that may scan a whole
// table: a plan cached while the tables were small did, 23 ms a call for a
// gateway of 4,000 devices). The work is proportional to the small
// clients' entries, whatever the clients' size.
const sqlSmallBundles = `
SELECT s.id, p.piece, p.crc, p.size
FROM unnest($1::text[]) AS s (id)
CROSS JOIN LATERAL (
    SELECT e.deployment_id, d.piece, d.crc, d.size
    FROM manifest_entries e
    CROSS JOIN LATERAL (
        SELECT d.piece, coalesce(d.piece_crc, 0) AS crc, coalesce(d.piece_size, 0) AS size FROM documents d
        WHERE d.deployment_id = e.deployment_id AND d.digest = e.digest OFFSET 0) AS d
    WHERE e.client_id = s.id AND e.to_version IS NULL
        AND (SELECT count(*) FROM (
            SELECT FROM manifest_entries c WHERE c.client_id = s.id AND c.to_version IS NULL LIMIT $2 + 1) x) <= $2
    OFFSET 0) AS p
ORDER BY s.id, p.deployment_id`

// revisionDigest is the digest of r's document: the one its renderer
// computed (NewRevision.Digest), else computed here. A creation's batch
// names it three times (its piece, its revision row, its document row):
// one sha256 of the document, in the preparation that renders it, rather
// than three in the store's transaction.
func revisionDigest(r *lifecycle.NewRevision) string {
	if r.Digest != "" {
		return r.Digest
	}
	return margo.Digest(r.YAML)
}

// smallBundles is what queueSmallBundles reads: the pieces, in bundle
// order, of the clients of versions with at most smallBundle documents.
type smallBundles struct {
	versions   map[string]uint64
	byClient   map[string][]margo.BundlePiece
	incomplete map[string]bool
}

// queueSmallBundles queues the read of the pieces of the new version of
// every client of versions with at most smallBundle documents, after the
// entries are written, but those of known (their bundles are recorded).
func queueSmallBundles(p *pipeline, versions map[string]uint64, known map[string]bundleSum) *smallBundles {
	sb := &smallBundles{versions: versions, byClient: map[string][]margo.BundlePiece{}, incomplete: map[string]bool{}}
	clients := make([]string, 0, len(versions))
	for id := range versions {
		if _, ok := known[id]; !ok { // recorded by the bump already
			clients = append(clients, id)
		}
	}
	if len(clients) == 0 {
		return sb
	}
	p.q().Queue(sqlSmallBundles, clients, smallBundle).Query(func(rows pgx.Rows) error {
		var client string
		var piece margo.BundlePiece
		var crc int64
		_, err := pgx.ForEachRow(rows, []any{&client, &piece.Deflate, &crc, &piece.Size}, func() error {
			if piece.Deflate == nil {
				sb.incomplete[client] = true
			}
			piece.CRC32 = uint32(crc)
			sb.byClient[client] = append(sb.byClient[client], piece)
			return nil
		})
		return err
	})
	return sb
}

// sqlCurrentPieces reads, for each client $1 with at most $2 open manifest
// entries, the deployment id and piece of each of them, in bundle order, or
// one row of NULLs when it has none; a client with more entries has no row.
// Each part is a lookup by client, then by entry (see sqlSmallBundles).
const sqlCurrentPieces = `
SELECT s.id, p.deployment_id::text, p.piece, p.crc, p.size
FROM unnest($1::text[]) AS s (id)
CROSS JOIN LATERAL (SELECT count(*) AS n FROM (
    SELECT FROM manifest_entries c WHERE c.client_id = s.id AND c.to_version IS NULL LIMIT $2 + 1) x) AS k
LEFT JOIN LATERAL (
    SELECT e.deployment_id, d.piece, d.crc, d.size
    FROM manifest_entries e
    CROSS JOIN LATERAL (
        SELECT d.piece, coalesce(d.piece_crc, 0) AS crc, coalesce(d.piece_size, 0) AS size FROM documents d
        WHERE d.deployment_id = e.deployment_id AND d.digest = e.digest OFFSET 0) AS d
    WHERE e.client_id = s.id AND e.to_version IS NULL
    OFFSET 0) AS p ON true
WHERE k.n <= $2
ORDER BY s.id, p.deployment_id`

// idPiece is the bundle piece of a deployment's document.
type idPiece struct {
	id    string
	piece margo.BundlePiece
}

// currentPieces is what queueCurrentPieces reads: by client with at most
// smallBundle open entries, their pieces in bundle order; incomplete names
// the clients with a document whose piece is not stored (stored before
// migration 00007).
type currentPieces struct {
	byClient   map[string][]idPiece
	incomplete map[string]bool
}

// queueCurrentPieces queues on q the read of the pieces of the current
// manifests of clients, those with at most smallBundle documents. Queue it
// after the clients are locked: it then reads the manifests no other
// transaction can change before this one ends.
func queueCurrentPieces(q *pgx.Batch, clients []string) *currentPieces {
	cp := &currentPieces{byClient: map[string][]idPiece{}, incomplete: map[string]bool{}}
	q.Queue(sqlCurrentPieces, clients, smallBundle).Query(func(rows pgx.Rows) error {
		var client string
		var id *string
		var deflate []byte
		var crc, size *int64
		_, err := pgx.ForEachRow(rows, []any{&client, &id, &deflate, &crc, &size}, func() error {
			ps := cp.byClient[client]
			if id == nil { // no entry
				cp.byClient[client] = ps
				return nil
			}
			if deflate == nil {
				cp.incomplete[client] = true
			}
			cp.byClient[client] = append(ps, idPiece{id: *id, piece: margo.BundlePiece{Deflate: deflate, CRC32: uint32(*crc), Size: *size}})
			return nil
		})
		return err
	})
	return cp
}

// bundleSum is a bundle's digest and size.
type bundleSum struct {
	digest string
	size   int64
}

// bundleSumOf is the digest and size of the bundle of pieces (in bundle
// order), streamed through sha256: nothing is compressed.
func bundleSumOf(pieces []margo.BundlePiece) (bundleSum, error) {
	h := sha256.New()
	size, err := margo.WriteBundle(h, pieces)
	if err != nil {
		return bundleSum{}, err
	}
	return bundleSum{digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), size: size}, nil
}

// creationBundles returns, for each client of created whose current
// manifest cp read (a small one, all of its pieces stored), the digest and
// size of the bundle of its next version: its current documents and the
// created deployments' (created, by client), when they are at most
// smallBundle. A creation adds an entry and removes none, so that next
// version holds exactly those. The others are left to queueSmallBundles or
// to the first read.
func creationBundles(cp *currentPieces, created map[string][]idPiece) (map[string]bundleSum, error) {
	out := map[string]bundleSum{}
	for client, added := range created {
		cur, ok := cp.byClient[client]
		if !ok || cp.incomplete[client] || len(cur)+len(added) > smallBundle {
			continue
		}
		all := slices.Concat(cur, added)
		slices.SortFunc(all, func(a, b idPiece) int { return strings.Compare(a.id, b.id) })
		pieces := make([]margo.BundlePiece, len(all))
		for i, p := range all {
			pieces[i] = p.piece
		}
		sum, err := bundleSumOf(pieces)
		if err != nil {
			return nil, fmt.Errorf("client %s: bundle: %w", client, err)
		}
		out[client] = sum
	}
	return out, nil
}

// recordSmallBundles records the bundle digest and size of the new version
// of every client sb read, as recordBundle would on the first read. A
// client with a document whose piece is not stored yet (stored before
// migration 00007) is left to that read.
func recordSmallBundles(ctx context.Context, tx pgx.Tx, sb *smallBundles) error {
	var ids, digests []string
	var vs, sizes []int64
	for id, pieces := range sb.byClient {
		if sb.incomplete[id] {
			continue
		}
		sum, err := bundleSumOf(pieces)
		if err != nil {
			return fmt.Errorf("client %s manifest %d: bundle: %w", id, sb.versions[id], err)
		}
		ids, vs = append(ids, id), append(vs, int64(sb.versions[id]))
		digests, sizes = append(digests, sum.digest), append(sizes, sum.size)
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `UPDATE manifest_versions m SET bundle_digest = x.digest, bundle_size = x.size
FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[]) AS x (client_id, version, digest, size)
WHERE m.client_id = x.client_id AND m.version = x.version AND m.bundle_digest IS NULL`, ids, vs, digests, sizes)
	return err
}

// queueEntries queues the closing and opening of the manifest entries of
// deployments ids[i] of clients[i] at versions vs[i], at their desired
// revisions ns[i] (0: the deployment leaves the manifest). A deployment
// created in the batch (created) has no entry to close, and its document
// was stored in the batch (docs, by deployment id and revision number):
// its new entry is written from what is known, with sqlInsertEntries, or
// with one COPY from copyAt of them; the others go through sqlCloseEntries
// and sqlOpenEntries. Both paths write the same rows.
func queueEntries(p *pipeline, clients, ids []string, vs []int64, ns []int32, created map[string]bool,
	docs map[docAt]storedDoc, copyAt int) {
	var nc, ni, nd []string
	var nv, nsz []int64
	k := 0 // the others, kept for the statements
	for i, id := range ids {
		if d, ok := docs[docAt{id, ns[i]}]; ok && created[id] {
			nc, ni, nd, nsz, nv = append(nc, clients[i]), append(ni, id), append(nd, d.digest), append(nsz, d.size), append(nv, vs[i])
			continue
		}
		clients[k], ids[k], vs[k], ns[k] = clients[i], id, vs[i], ns[i]
		k++
	}
	clients, ids, vs, ns = clients[:k], ids[:k], vs[:k], ns[:k]
	switch {
	case len(ni) >= copyAt:
		rows := make([][]any, len(ni))
		for i := range ni {
			rows[i] = []any{nc[i], asUUID(ni[i]), nd[i], nsz[i], nv[i]}
		}
		p.copy("manifest_entries", []string{"client_id", "deployment_id", "digest", "size_bytes", "from_version"}, rows,
			copyCount("manifest_entries", len(rows)))
	case len(ni) > 0:
		p.q().Queue(sqlInsertEntries, nc, ni, nd, nsz, nv)
	}
	if len(ids) == 0 {
		return
	}
	p.q().Queue(sqlCloseEntries, clients, ids, vs, ns)
	var oc, oi []string
	var ov []int64
	var on []int32
	for i, n := range ns {
		if n > 0 {
			oc, oi, ov, on = append(oc, clients[i]), append(oi, ids[i]), append(ov, vs[i]), append(on, n)
		}
	}
	if len(oi) > 0 {
		p.q().Queue(sqlOpenEntries, oc, oi, ov, on)
	}
}

// docAt names a deployment's revision: its deployment id and number.
type docAt struct {
	id string
	n  int32
}

// storedDoc is a document queueDocuments stores: its digest and size in
// bytes (a manifest entry's).
type storedDoc struct {
	digest string
	size   int64
}

// queueDocuments queues the storing of the document of every new revision of changes,
// with its bundle piece (pieces[{deployment id, digest}], computed before the
// transaction, or else computed here: O(document)); a document already
// stored (the same bytes published again) is left as it is. The documents
// of deployments created in the batch (created: none of theirs can exist)
// are written with one COPY from copyAt of them, the others with
// sqlInsertDocuments. It returns the new revisions' documents, by
// deployment id and revision number.
func queueDocuments(p *pipeline, changes []*lifecycle.Change, pieces map[[2]string]*margo.BundlePiece, at time.Time,
	created map[string]bool, copyAt int) (map[docAt]storedDoc, error) {
	type row struct {
		id, digest string
		yaml       []byte
		piece      *margo.BundlePiece
	}
	var rows []row
	docs := map[docAt]storedDoc{}
	seen := map[[2]string]bool{}
	nCreated := 0
	for _, c := range changes {
		if c.Revision == nil || c.Revision.CopyOf != 0 || c.After.ID == "" {
			continue
		}
		d := revisionDigest(c.Revision)
		docs[docAt{c.After.ID, int32(c.Revision.N)}] = storedDoc{d, int64(len(c.Revision.YAML))}
		if seen[[2]string{c.After.ID, d}] {
			continue
		}
		seen[[2]string{c.After.ID, d}] = true
		p := pieces[[2]string{c.After.ID, d}]
		if p == nil {
			np, err := margo.NewBundlePiece(margo.BundleFileName(c.After.ID), c.Revision.YAML)
			if err != nil {
				return nil, fmt.Errorf("deployment %s: bundle piece: %w", c.After.ID, err)
			}
			p = &np
		}
		rows = append(rows, row{c.After.ID, d, c.Revision.YAML, p})
		if created[c.After.ID] {
			nCreated++
		}
	}
	byCopy := nCreated >= copyAt
	var copied [][]any
	var ids, digests []string
	var yamls, deflates [][]byte
	var crcs, sizes []int64
	for _, r := range rows {
		if byCopy && created[r.id] {
			copied = append(copied, []any{asUUID(r.id), r.digest, r.yaml, r.piece.Deflate, int64(r.piece.CRC32), r.piece.Size, at})
			continue
		}
		ids, digests, yamls = append(ids, r.id), append(digests, r.digest), append(yamls, r.yaml)
		deflates, crcs, sizes = append(deflates, r.piece.Deflate), append(crcs, int64(r.piece.CRC32)), append(sizes, r.piece.Size)
	}
	if len(copied) > 0 {
		p.copy("documents", []string{"deployment_id", "digest", "yaml", "piece", "piece_crc", "piece_size", "created_at"}, copied,
			copyCount("documents", len(copied)))
	}
	if len(ids) > 0 {
		p.q().Queue(sqlInsertDocuments, ids, digests, yamls, deflates, crcs, sizes, at)
	}
	return docs, nil
}

// sqlReadManifest reads, in one statement (one snapshot), a client's status,
// current version, legacy manifest (stored before migration 00007, served
// as is until the next publication), the version's recorded bundle, and
// its entries (the open ones), in bundle order.
const sqlReadManifest = `
SELECT c.status, c.manifest_version, c.manifest_json, c.manifest_etag, mv.bundle_digest, mv.bundle_size,
    coalesce(e.ids, '{}'), coalesce(e.digests, '{}'), coalesce(e.sizes, '{}')
FROM clients c
LEFT JOIN manifest_versions mv ON mv.client_id = c.id AND mv.version = c.manifest_version
LEFT JOIN LATERAL (
    SELECT array_agg(deployment_id::text ORDER BY deployment_id) AS ids, array_agg(digest ORDER BY deployment_id) AS digests,
        array_agg(size_bytes ORDER BY deployment_id) AS sizes
    FROM manifest_entries WHERE client_id = c.id AND to_version IS NULL AND c.manifest_json IS NULL) e ON true
WHERE c.id = $1`

// readManifest returns the client's current manifest, rendered from its
// entries (linear in the client's size: called on a cache miss of the
// device poll). The first reader of a version records its bundle digest
// before answering (see recordBundle).
//
// Returns ENOTFOUND if there is no such client.
func (s *FleetStore) readManifest(ctx context.Context, clientID string) (fleet.Manifest, error) {
	m := fleet.Manifest{ClientID: clientID}
	var status string
	var version int64
	var legacy []byte
	var legacyETag, bundleDigest *string
	var bundleSize *int64
	var ids, digests []string
	var sizes []int64
	err := s.pool.QueryRow(ctx, sqlReadManifest, clientID).Scan(&status, &version, &legacy, &legacyETag, &bundleDigest, &bundleSize, &ids, &digests, &sizes)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, notFound("There is no client %s.", clientID)
	}
	if err != nil {
		return m, translate(err)
	}
	m.Status, m.Version = fleet.ClientStatus(status), uint64(version)
	if legacy != nil && legacyETag != nil {
		m.JSON, m.ETag = legacy, *legacyETag
		return m, nil
	}
	docs := make([]margo.ManifestDocument, len(ids))
	for i := range ids {
		docs[i] = margo.ManifestDocument{DeploymentID: ids[i], Digest: digests[i], SizeBytes: sizes[i]}
	}
	var digest string
	var size int64
	if len(docs) > 0 {
		if bundleDigest != nil && bundleSize != nil {
			digest, size = *bundleDigest, *bundleSize
		} else if digest, size, err = s.recordBundle(ctx, clientID, m.Version, ids, digests); err != nil {
			return m, translate(err)
		}
	}
	if m.JSON, err = margo.ManifestJSON(m.Version, docs, digest, size); err != nil {
		return m, err
	}
	m.ETag = margo.ETag(m.JSON)
	return m, nil
}

// recordBundle computes the digest and size of the bundle of the client's
// version whose entries are the documents (ids[i], digests[i]), in bundle
// order, and records them on the version, unless another reader was first
// (then its record is returned). Linear in the client's size, once per
// version: the pieces are streamed through sha256, nothing is compressed
// (but the pieces of documents stored before migration 00007, once).
func (s *FleetStore) recordBundle(ctx context.Context, clientID string, version uint64, ids, digests []string) (string, int64, error) {
	pieces, err := s.loadPieces(ctx, ids, digests)
	if err != nil {
		return "", 0, err
	}
	h := sha256.New()
	size, err := margo.WriteBundle(h, pieces)
	if err != nil {
		return "", 0, fmt.Errorf("client %s manifest %d: bundle: %w", clientID, version, err)
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	tag, err := s.pool.Exec(ctx, `UPDATE manifest_versions SET bundle_digest = $3, bundle_size = $4
WHERE client_id = $1 AND version = $2 AND bundle_digest IS NULL`, clientID, int64(version), digest, size)
	if err != nil || tag.RowsAffected() == 1 {
		return digest, size, err
	}
	err = s.pool.QueryRow(ctx, `SELECT bundle_digest, bundle_size FROM manifest_versions WHERE client_id = $1 AND version = $2`,
		clientID, int64(version)).Scan(&digest, &size)
	if err != nil {
		return "", 0, fmt.Errorf("client %s manifest %d: read its bundle digest: %w", clientID, version, err)
	}
	return digest, size, nil
}

const sqlLoadPieces = `
SELECT d.piece, coalesce(d.piece_crc, 0), coalesce(d.piece_size, 0), CASE WHEN d.piece IS NULL THEN d.yaml END
FROM unnest($1::text[]::uuid[], $2::text[]) WITH ORDINALITY AS x (deployment_id, digest, i)
JOIN documents d ON d.deployment_id = x.deployment_id AND d.digest = x.digest
ORDER BY x.i`

// loadPieces returns the bundle pieces of the documents (ids[i],
// digests[i]), in that order. A piece not stored yet (a document stored
// before migration 00007) is computed and stored once; when a concurrent
// reader stored it first, its piece is read back, so every replica
// assembles the same bytes.
func (s *FleetStore) loadPieces(ctx context.Context, ids, digests []string) ([]margo.BundlePiece, error) {
	for attempt := 0; ; attempt++ {
		rows, err := s.pool.Query(ctx, sqlLoadPieces, ids, digests)
		if err != nil {
			return nil, err
		}
		pieces := make([]margo.BundlePiece, 0, len(ids))
		var missing []int
		var yamls [][]byte
		var p margo.BundlePiece
		var crc int64
		var yaml []byte
		_, err = pgx.ForEachRow(rows, []any{&p.Deflate, &crc, &p.Size, &yaml}, func() error {
			if p.Deflate == nil {
				missing, yamls = append(missing, len(pieces)), append(yamls, yaml)
			}
			p.CRC32 = uint32(crc)
			pieces = append(pieces, p)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(pieces) != len(ids) {
			return nil, fmt.Errorf("%d of %d documents of a manifest are missing", len(ids)-len(pieces), len(ids))
		}
		if len(missing) == 0 {
			return pieces, nil
		}
		if attempt > 0 {
			return nil, fmt.Errorf("%d bundle pieces are still missing after they were stored", len(missing))
		}
		var mi, md []string
		var mp [][]byte
		var mc, ms []int64
		for k, i := range missing {
			np, err := margo.NewBundlePiece(margo.BundleFileName(ids[i]), yamls[k])
			if err != nil {
				return nil, fmt.Errorf("deployment %s: bundle piece: %w", ids[i], err)
			}
			mi, md, mp, mc, ms = append(mi, ids[i]), append(md, digests[i]), append(mp, np.Deflate), append(mc, int64(np.CRC32)), append(ms, np.Size)
		}
		if _, err := s.pool.Exec(ctx, `UPDATE documents d SET piece = x.piece, piece_crc = x.crc, piece_size = x.size
FROM unnest($1::text[]::uuid[], $2::text[], $3::bytea[], $4::bigint[], $5::bigint[]) AS x (deployment_id, digest, piece, crc, size)
WHERE d.deployment_id = x.deployment_id AND d.digest = x.digest AND d.piece IS NULL`, mi, md, mp, mc, ms); err != nil {
			return nil, err
		}
		// Read them back: a concurrent reader may have stored its own first.
	}
}

// sqlVersionEntries lists the entries of the newest of the client's
// versions whose bundle has digest $2, in bundle order: one statement, so
// that the garbage collector cannot take half of them.
const sqlVersionEntries = `
WITH v AS (SELECT version FROM manifest_versions WHERE client_id = $1 AND bundle_digest = $2 ORDER BY version DESC LIMIT 1)
SELECT e.deployment_id::text, e.digest FROM manifest_entries e, v
WHERE e.client_id = $1 AND e.from_version <= v.version AND (e.to_version IS NULL OR e.to_version > v.version)
ORDER BY e.deployment_id`

// Bundle implements fleet.Store: a legacy bundle stored before migration
// 00007 as it was stored, or else the bundle of a manifest version with
// that digest, assembled from its entries' pieces and checked against the
// digest (a mismatch is an internal error: never served).
func (s *FleetStore) Bundle(ctx context.Context, clientID, digest string) ([]byte, error) {
	var b []byte
	err := s.pool.QueryRow(ctx, `SELECT content FROM bundles WHERE client_id = $1 AND digest = $2`, clientID, digest).Scan(&b)
	if err == nil || !errors.Is(err, pgx.ErrNoRows) {
		return b, translate(err)
	}
	rows, err := s.pool.Query(ctx, sqlVersionEntries, clientID, digest)
	if err != nil {
		return nil, translate(err)
	}
	var ids, digests []string
	var id, d string
	if _, err := pgx.ForEachRow(rows, []any{&id, &d}, func() error {
		ids, digests = append(ids, id), append(digests, d)
		return nil
	}); err != nil {
		return nil, translate(err)
	}
	if len(ids) == 0 {
		return nil, notFound("No bundle with digest %s.", digest)
	}
	pieces, err := s.loadPieces(ctx, ids, digests)
	if err != nil {
		return nil, translate(err)
	}
	b, err = margo.AssembleBundle(pieces)
	if err != nil {
		return nil, fmt.Errorf("client %s bundle %s: %w", clientID, digest, err)
	}
	if got := margo.Digest(b); got != digest {
		return nil, fmt.Errorf("client %s bundle %s: its pieces assemble to %s: not served", clientID, digest, got)
	}
	return b, nil
}
