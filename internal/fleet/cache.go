package fleet

import (
	"sync"
	"sync/atomic"
)

// manifestCache remembers each client's manifest and status so that the
// device poll is answered from memory. Entries are dropped on change
// notifications; a generation number per client keeps a slow reader from
// storing what it read before a drop (the read-invalidate-store race).
type manifestCache struct {
	mu      sync.RWMutex
	entries map[string]Manifest
	gens    map[string]uint64
	epoch   uint64 // bumped by clear

	hits, misses atomic.Uint64 // lookups, for the metrics
}

func newManifestCache() *manifestCache {
	return &manifestCache{entries: map[string]Manifest{}, gens: map[string]uint64{}}
}

// get returns the cached manifest and, on a miss, the generation to hand
// back to put.
func (c *manifestCache) get(clientID string) (Manifest, bool, uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m, ok := c.entries[clientID]
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
