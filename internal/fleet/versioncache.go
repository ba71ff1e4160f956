package fleet

import (
	"sync"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// versionCache remembers the catalog versions creations read (application
// id and version → the version row, description bytes and digest
// included), so that a creation costs no catalog read once its version was
// seen. Only versions that were not yanked are kept. A remembered version
// may since have been yanked or deleted, or deleted and added again with
// other content, by any server process: the store re-checks each creation's
// version in its transaction, under a share lock (it exists, is not yanked,
// and has the digest the creation was rendered from: NewDeployment.VersionDigest),
// so a stale entry never makes a deployment; a creation refused because the
// digest changed (errVersionChanged) drops the entry and is prepared again
// (CreateDeployment) or answered as retryable (CreateDeployments).
type versionCache struct {
	mu       sync.Mutex
	versions map[[2]string]catalog.Version
}

// maxCachedVersions bounds the cache: it is emptied when full (versions
// used by creations are few; this is a guard, not an eviction policy).
const maxCachedVersions = 4096

func newVersionCache() *versionCache {
	return &versionCache{versions: map[[2]string]catalog.Version{}}
}

func (c *versionCache) get(appID, version string) (catalog.Version, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.versions[[2]string{appID, version}]
	return v, ok
}

func (c *versionCache) put(appID, version string, v catalog.Version) {
	if v.Yanked {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.versions) >= maxCachedVersions {
		clear(c.versions)
	}
	c.versions[[2]string{appID, version}] = v
}

func (c *versionCache) drop(appID, version string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.versions, [2]string{appID, version})
}

// ProblemVersionChanged is the problem type of a creation whose catalog
// version was deleted and added again with other content while the
// creation was being prepared: nothing was made; retry.
const ProblemVersionChanged = "version-changed"

// VersionChanged returns the error the store answers for a creation
// rendered from a version whose stored digest is no longer digest.
func VersionChanged(appID, version string) error {
	return lifecycle.Retryable(ProblemVersionChanged, 1,
		"Version "+version+" of "+appID+" changed while the deployment was being prepared; nothing was changed. Retry.")
}

// versionChanged reports whether err is VersionChanged's.
func versionChanged(err error) bool { return lifecycle.ErrorType(err) == ProblemVersionChanged }
