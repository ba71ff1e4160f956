package fleet

import (
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// rollbackWindowStart is lifecycle.RollbackWindowStart over a deployment's
// revisions (any order): when the rollback window of revision cur's version
// started. Manual (PlanRollback) and automatic (onFailure: rollback)
// rollbacks both measure the window with it.
func rollbackWindowStart(revs []Revision, cur int) time.Time {
	times := make([]lifecycle.RevisionTimes, len(revs))
	for i, r := range revs {
		times[i] = lifecycle.RevisionTimes{N: r.N, Version: r.Version, PublishedAt: r.CreatedAt, InstalledAt: r.InstalledAt}
	}
	return lifecycle.RollbackWindowStart(times, cur)
}

// rollbackWindowStartIn is rollbackWindowStart over the revisions a
// scheduler visit loaded, by number.
func rollbackWindowStartIn(revs map[int]Revision, cur int) time.Time {
	list := make([]Revision, 0, len(revs))
	for _, r := range revs {
		list = append(list, r)
	}
	return rollbackWindowStart(list, cur)
}
