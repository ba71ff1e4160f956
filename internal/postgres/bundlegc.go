package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultBundleRetention is how long a superseded manifest version (and so
// its bundle) stays fetchable when no setting says otherwise: design §5's
// 7 days.
const DefaultBundleRetention = 7 * 24 * time.Hour

// DefaultBundleGCInterval is how often the bundle collector runs when no
// setting says otherwise: hourly is far finer than the days of retention,
// and one run is a few set-based deletes.
const DefaultBundleGCInterval = time.Hour

// bundleGCTimeout bounds one run of the bundle collector.
const bundleGCTimeout = 5 * time.Minute

// Collected counts what one run of the bundle collector deleted.
type Collected struct {
	Versions int64 // manifest_versions rows
	Entries  int64 // manifest_entries rows
	Bundles  int64 // legacy bundle blobs (stored before migration 00007)
}

// sqlCutoff is the collector's cutoff, now minus the retention, by the
// database's clock ($1: microseconds to add to now).
const sqlCutoff = `SELECT now() + $1 * interval '1 microsecond'`

// The garbage collector's statements. A client's version is needed while it
// is current or was superseded less than the retention ago ($1 is now minus
// the retention); what is older than the client's oldest needed version
// can no longer be fetched: its version rows, the entries closed at or
// before it, and the legacy blobs no needed version names (once superseded
// more than the retention ago). Documents are the history of revisions and
// are not collected. Each statement only touches rows a publication never
// writes (superseded versions, closed entries), so it runs next to them.
const (
	sqlOldestNeeded = `oldest AS (SELECT client_id, min(version) AS version FROM manifest_versions
    WHERE superseded_at IS NULL OR superseded_at > $1 GROUP BY client_id)`
	sqlCollectVersions = `WITH ` + sqlOldestNeeded + `
DELETE FROM manifest_versions m USING oldest o WHERE m.client_id = o.client_id AND m.version < o.version`
	sqlCollectEntries = `WITH ` + sqlOldestNeeded + `
DELETE FROM manifest_entries e USING oldest o WHERE e.client_id = o.client_id AND e.to_version IS NOT NULL AND e.to_version <= o.version`
	sqlCollectBundles = `
DELETE FROM bundles b WHERE (b.superseded_at IS NULL OR b.superseded_at <= $1)
AND NOT EXISTS (SELECT 1 FROM manifest_versions m WHERE m.client_id = b.client_id AND m.bundle_digest = b.digest
    AND (m.superseded_at IS NULL OR m.superseded_at > $1))`
)

// BundleCollector deletes, in the background, the manifest versions, entries
// and legacy bundles no device can need any more: once at Start, then every
// interval. A superseded manifest's bundle stays fetchable for the
// retention after its supersession; a current one always. Several replicas
// may run one each. Supersessions are stamped and the cutoff is computed
// with the database's clock, so that replicas whose clocks disagree do not
// shorten the retention.
type BundleCollector struct {
	pool      *pgxpool.Pool
	retention time.Duration
	interval  time.Duration
	logger    *slog.Logger
	// ahead is added to the database's clock when the cutoff is computed
	// (zero; tests run the collector "later").
	ahead time.Duration

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewBundleCollector returns a collector over pool that keeps superseded
// manifest versions for retention (zero: DefaultBundleRetention) and runs
// every interval (zero: DefaultBundleGCInterval). The time is the
// database's.
func NewBundleCollector(pool *pgxpool.Pool, retention, interval time.Duration, logger *slog.Logger) *BundleCollector {
	if retention <= 0 {
		retention = DefaultBundleRetention
	}
	if interval <= 0 {
		interval = DefaultBundleGCInterval
	}
	return &BundleCollector{pool: pool, retention: retention, interval: interval, logger: logger}
}

// runOnce collects once, in one transaction within bundleGCTimeout, and
// says what it deleted. Returns an error if the database fails or the run
// times out (then nothing is deleted).
func (c *BundleCollector) runOnce(ctx context.Context) (Collected, error) {
	ctx, cancel := context.WithTimeout(ctx, bundleGCTimeout)
	defer cancel()
	var n Collected
	err := beginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var cutoff time.Time
		if err := tx.QueryRow(ctx, sqlCutoff, (c.ahead - c.retention).Microseconds()).Scan(&cutoff); err != nil {
			return err
		}
		for _, st := range []struct {
			sql string
			n   *int64
		}{{sqlCollectVersions, &n.Versions}, {sqlCollectEntries, &n.Entries}, {sqlCollectBundles, &n.Bundles}} {
			tag, err := tx.Exec(ctx, st.sql, cutoff)
			if err != nil {
				return err
			}
			*st.n = tag.RowsAffected()
		}
		return nil
	})
	if err != nil {
		return Collected{}, fmt.Errorf("bundle collector: %w", err)
	}
	return n, nil
}

// Start runs the collector until Stop or ctx ends: a run now, then one
// every interval.
func (c *BundleCollector) Start(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		t := time.NewTicker(c.interval)
		defer t.Stop()
		for {
			n, err := c.runOnce(ctx)
			switch {
			case ctx.Err() != nil:
			case err != nil:
				// The next run tries again; a failed run deleted nothing.
				c.logger.WarnContext(ctx, "bundles: garbage collection failed; retrying at the next run", "error", err)
			case n != Collected{}:
				c.logger.InfoContext(ctx, "bundles: collected what no manifest can reach any more", "versions", n.Versions,
					"entries", n.Entries, "legacyBundles", n.Bundles, "retention", c.retention.String())
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the collector and waits for its current run.
func (c *BundleCollector) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
		<-c.done
		c.cancel = nil
	}
}
