package fleet

import (
	"sync"
	"sync/atomic"
	"time"
)

// manifestCache remembers each client's manifest and status so that the
// device poll is answered from memory. Entries are dropped on change
// notifications; a generation number per client keeps a slow reader from
// storing what it read before a drop (the read-invalidate-store race).
//
// While notifications arrive the cache is current. When the notification
// connection is lost it goes stale: its entries are still served for the
// staleness bound after the moment it was last known current, then looked
// up in the store as misses are, until a check of every entry against the
// store (resync) makes it current again. Keeping the entries through an
// outage is what lets devices poll while the database is away; the bound
// is what keeps a replica cut off from a database that others still write
// from serving what changed there for ever.
type manifestCache struct {
	mu      sync.RWMutex
	entries map[string]Manifest
	gens    map[string]uint64
	epoch   uint64 // bumped by clear and resync

	// bound is how long entries are served after staleSince; staleSince is
	// when the cache was last known current (zero: it is current).
	bound      time.Duration
	staleSince time.Time

	hits, misses atomic.Uint64 // lookups, for the metrics
}

func newManifestCache(bound time.Duration) *manifestCache {
	return &manifestCache{entries: map[string]Manifest{}, gens: map[string]uint64{}, bound: bound}
}

// get returns the cached manifest and, on a miss, the generation to hand
// back to put. A stale cache past its bound misses.
func (c *manifestCache) get(clientID string, now time.Time) (Manifest, bool, uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m, ok := c.entries[clientID]
	if ok && !c.staleSince.IsZero() && !now.Before(c.staleSince.Add(c.bound)) {
		ok = false
	}
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return m, ok, c.gens[clientID] + c.epoch<<32
}

// put stores m unless the client was invalidated since gen was read.
func (c *manifestCache) put(clientID string, m Manifest, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gens[clientID]+c.epoch<<32 != gen {
		return
	}
	c.entries[clientID] = m
}

func (c *manifestCache) invalidate(clientID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, clientID)
	c.gens[clientID]++
}

func (c *manifestCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
	c.epoch++
}

// lost marks the cache stale since since, the moment it was last known
// current, unless it is stale already (an outage starts once).
func (c *manifestCache) lost(since time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.staleSince.IsZero() {
		c.staleSince = since
	}
}

// state returns when the cache was last known current (zero: it is) and
// its bound.
func (c *manifestCache) state() (staleSince time.Time, bound time.Duration) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.staleSince, c.bound
}

// cachedVersion is what a resync compares of an entry with the store.
type cachedVersion struct {
	status  ClientStatus
	version uint64
}

// beginResync returns what every entry holds, to be compared with the
// store by a read that starts after this call, once change notifications
// arrive again. It bumps the epoch: a reader that read the store before
// then (maybe before a change whose notification was missed) stores
// nothing, and one that reads after it is covered by notifications.
func (c *manifestCache) beginResync() map[string]cachedVersion {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	out := make(map[string]cachedVersion, len(c.entries))
	for id, m := range c.entries {
		out[id] = cachedVersion{status: m.Status, version: m.Version}
	}
	return out
}

// endResync drops the entries whose client the store no longer has as it
// was cached (changed, or gone), and makes the cache current. It returns
// how many it dropped.
func (c *manifestCache) endResync(cached, stored map[string]cachedVersion) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	dropped := 0
	for id, was := range cached {
		if now, ok := stored[id]; ok && now == was {
			continue
		}
		delete(c.entries, id)
		c.gens[id]++
		dropped++
	}
	c.staleSince = time.Time{}
	return dropped
}
