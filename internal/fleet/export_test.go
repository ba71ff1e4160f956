package fleet

import (
	"context"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// SetBatcher sets the creation batcher's number of lanes and its test hooks:
// hold is called by a lane with each batch before it is stored, queued with
// the queue's length after each creation is queued.
func SetBatcher(s *Service, lanes int, hold func([]NewDeployment), queued func(int)) {
	s.creations.lanes, s.creations.hold, s.creations.queued = lanes, hold, queued
}

// WrapBatchStore wraps the store call of the creation batcher's lanes (tests
// make it fail or panic).
func WrapBatchStore(s *Service, wrap func(next func(context.Context, []NewDeployment, time.Time) ([]CreateResult, error)) func(context.Context, []NewDeployment, time.Time) ([]CreateResult, error)) {
	s.creations.call = wrap(s.creations.call)
}

// SetReportBatcher sets the report batcher's test hooks: hold is called by
// its lane with each batch before it is stored, queued with the queue's
// length after each report is queued.
func SetReportBatcher(s *Service, hold func([]ReportItem), queued func(int)) {
	s.reports.hold, s.reports.queued = hold, queued
}

// WrapReportStore wraps the store call of the report batcher's lane (tests
// make it fail).
func WrapReportStore(s *Service, wrap func(next func(context.Context, []ReportItem, time.Time) ([]ReportResult, error)) func(context.Context, []ReportItem, time.Time) ([]ReportResult, error)) {
	s.reports.call = wrap(s.reports.call)
}

// LeaseOwner returns the token s's rollout driver leases rollouts with.
func LeaseOwner(s *Service) string { return s.leaseOwner }

// VisitRollout runs one visit of rollout id by s's driver, without claiming
// it first (a visit that follows a claim whose lease may have run out).
func VisitRollout(ctx context.Context, s *Service, id string) error { return s.visitRollout(ctx, id) }

// PublishAgain publishes again the members of rollout id in progress, as a
// visit overlapping the one that published them would.
func PublishAgain(ctx context.Context, s *Service, id string) error {
	r, err := s.store.Rollout(ctx, id)
	if err != nil {
		return err
	}
	st, err := lifecycle.ValidateRolloutSpec(r.Request.Spec)
	if err != nil {
		return err
	}
	ms, err := s.allMembers(ctx, id, MemberFilter{Status: lifecycle.MemberInProgress})
	if err != nil {
		return err
	}
	return s.publishMembers(ctx, r, st, ms)
}

// SetCandidatePage sets how many candidates s's rollout resolution reads
// at a time.
func SetCandidatePage(s *Service, n int) { s.candidatePage = n }

// PlannedUpgrade plans an upgrade of deployment id to version to (a direct
// path) and returns the operation the plan would create, with a new id.
func PlannedUpgrade(ctx context.Context, s *Service, id, to string) (Operation, error) {
	d, err := s.store.Deployment(ctx, id)
	if err != nil {
		return Operation{}, err
	}
	p, err := s.planUpgrade(ctx, d, nil, UpgradeRequest{TargetVersion: to}, nil, 0, Actor{ID: "test"})
	if err != nil {
		return Operation{}, err
	}
	if !p.Allowed {
		return Operation{}, p.Refusal
	}
	return *p.op, nil
}
