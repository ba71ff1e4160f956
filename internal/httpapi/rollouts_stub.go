package httpapi

// TEMPORARY: the /mgmt/v1/rollouts contract landed before its use cases.
// Every rollout operation answers 501 not-implemented (a problem, like
// every other answer) so that the server builds and serves the rest; the
// handlers that replace this file translate to the rollout use cases.

import (
	"context"
	"net/http"

	"github.com/wfm-dev/wfm/api"
)

// notImplemented answers a rollout operation with 501 not-implemented.
type notImplemented struct{ r *http.Request }

func notImplementedYet(ctx context.Context) notImplemented {
	return notImplemented{r: requestFrom(ctx)}
}

func (n notImplemented) visit(w http.ResponseWriter) error {
	writeProblem(w, n.r, problem{Type: ProblemBase + "not-implemented", Status: http.StatusNotImplemented,
		Detail: "Fleet rollouts are in the contract but not implemented by this server yet."})
	return nil
}

func (n notImplemented) VisitListRolloutsResponse(w http.ResponseWriter) error  { return n.visit(w) }
func (n notImplemented) VisitCreateRolloutResponse(w http.ResponseWriter) error { return n.visit(w) }
func (n notImplemented) VisitPlanRolloutResponse(w http.ResponseWriter) error   { return n.visit(w) }
func (n notImplemented) VisitGetRolloutResponse(w http.ResponseWriter) error    { return n.visit(w) }
func (n notImplemented) VisitAbortRolloutResponse(w http.ResponseWriter) error  { return n.visit(w) }
func (n notImplemented) VisitApproveRolloutResponse(w http.ResponseWriter) error {
	return n.visit(w)
}
func (n notImplemented) VisitCancelRolloutResponse(w http.ResponseWriter) error { return n.visit(w) }
func (n notImplemented) VisitExcludeRolloutMemberResponse(w http.ResponseWriter) error {
	return n.visit(w)
}
func (n notImplemented) VisitListRolloutMembersResponse(w http.ResponseWriter) error {
	return n.visit(w)
}
func (n notImplemented) VisitPauseRolloutResponse(w http.ResponseWriter) error  { return n.visit(w) }
func (n notImplemented) VisitResumeRolloutResponse(w http.ResponseWriter) error { return n.visit(w) }

// ListRollouts is not implemented yet (501).
func (s *Server) ListRollouts(ctx context.Context, _ api.ListRolloutsRequestObject) (api.ListRolloutsResponseObject, error) {
	return notImplementedYet(ctx), nil
}

// CreateRollout is not implemented yet (501).
func (s *Server) CreateRollout(ctx context.Context, _ api.CreateRolloutRequestObject) (api.CreateRolloutResponseObject, error) {
	return notImplementedYet(ctx), nil
}

// PlanRollout is not implemented yet (501).
func (s *Server) PlanRollout(ctx context.Context, _ api.PlanRolloutRequestObject) (api.PlanRolloutResponseObject, error) {
	return notImplementedYet(ctx), nil
}

// GetRollout is not implemented yet (501).
func (s *Server) GetRollout(ctx context.Context, _ api.GetRolloutRequestObject) (api.GetRolloutResponseObject, error) {
	return notImplementedYet(ctx), nil
}

// AbortRollout is not implemented yet (501).
func (s *Server) AbortRollout(ctx context.Context, _ api.AbortRolloutRequestObject) (api.AbortRolloutResponseObject, error) {
	return notImplementedYet(ctx), nil
}

// ApproveRollout is not implemented yet (501).
func (s *Server) ApproveRollout(ctx context.Context, _ api.ApproveRolloutRequestObject) (api.ApproveRolloutResponseObject, error) {
	return notImplementedYet(ctx), nil
}

// CancelRollout is not implemented yet (501).
func (s *Server) CancelRollout(ctx context.Context, _ api.CancelRolloutRequestObject) (api.CancelRolloutResponseObject, error) {
	return notImplementedYet(ctx), nil
}

// ExcludeRolloutMember is not implemented yet (501).
func (s *Server) ExcludeRolloutMember(ctx context.Context, _ api.ExcludeRolloutMemberRequestObject) (api.ExcludeRolloutMemberResponseObject, error) {
	return notImplementedYet(ctx), nil
}

// ListRolloutMembers is not implemented yet (501).
func (s *Server) ListRolloutMembers(ctx context.Context, _ api.ListRolloutMembersRequestObject) (api.ListRolloutMembersResponseObject, error) {
	return notImplementedYet(ctx), nil
}

// PauseRollout is not implemented yet (501).
func (s *Server) PauseRollout(ctx context.Context, _ api.PauseRolloutRequestObject) (api.PauseRolloutResponseObject, error) {
	return notImplementedYet(ctx), nil
}

// ResumeRollout is not implemented yet (501).
func (s *Server) ResumeRollout(ctx context.Context, _ api.ResumeRolloutRequestObject) (api.ResumeRolloutResponseObject, error) {
	return notImplementedYet(ctx), nil
}
