package fleet

import (
	"context"
	"time"
)

// SetBatcher sets the creation batcher's number of lanes and its test hooks:
// hold is called by a lane with each batch before it is stored, queued with
// the queue's length after each creation is queued.
func SetBatcher(s *Service, lanes int, hold func([]NewDeployment), queued func(int)) {
	s.batcher.lanes, s.batcher.hold, s.batcher.queued = lanes, hold, queued
}

// WrapBatchStore wraps the store call of the creation batcher's lanes (tests
// make it fail or panic).
func WrapBatchStore(s *Service, wrap func(next func(context.Context, []NewDeployment, time.Time) ([]CreateResult, error)) func(context.Context, []NewDeployment, time.Time) ([]CreateResult, error)) {
	s.batcher.call = wrap(s.batcher.call)
}
