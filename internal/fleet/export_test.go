package fleet

// SetBatcher sets the creation batcher's number of lanes and its test hooks:
// hold is called by a lane with each batch before it is stored, queued with
// the queue's length after each creation is queued.
func SetBatcher(s *Service, lanes int, hold func([]NewDeployment), queued func(int)) {
	s.batcher.lanes, s.batcher.hold, s.batcher.queued = lanes, hold, queued
}
