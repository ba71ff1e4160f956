package httpapi

import (
	"context"

	"github.com/google/uuid"

	"github.com/wfm-dev/wfm/api"
	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

func actorFrom(ctx context.Context) fleet.Actor {
	p := principalFrom(ctx)
	return fleet.Actor{ID: p.TokenID, Admin: p.Role.Allows(access.Admin)}
}

func planBody(s *Server, ctx context.Context, p fleet.Plan) api.Plan {
	out := api.Plan{Allowed: p.Allowed, Type: api.PlannedOperationType(p.Type), Checks: make([]api.PlanCheck, 0, len(p.Checks))}
	for _, c := range p.Checks {
		out.Checks = append(out.Checks, api.PlanCheck{Name: c.Name, Passed: c.Passed, Detail: c.Detail})
	}
	if !p.From.IsZero() {
		out.FromVersion = ptr(p.From.String())
	}
	if !p.To.IsZero() {
		out.ToVersion = ptr(p.To.String())
	}
	if len(p.Hops) > 0 {
		hops := make([]string, len(p.Hops))
		for i, h := range p.Hops {
			hops[i] = h.String()
		}
		out.Hops = &hops
	}
	if p.Strategy != "" {
		out.Strategy = ptr(string(p.Strategy))
	}
	if p.Drain != nil {
		out.Drain = &api.DrainRules{Required: p.Drain.Required, Timeout: p.Drain.EffectiveTimeout().String(), OnTimeout: api.DrainTimeoutAction(p.Drain.EffectiveOnTimeout())}
	}
	if len(p.Parameters) > 0 {
		changes := make([]api.ParameterChange, 0, len(p.Parameters))
		for _, c := range p.Parameters {
			changes = append(changes, api.ParameterChange{Name: c.Name, Kind: string(c.Kind), Before: c.Before, After: c.After})
		}
		out.Parameters = &changes
	}
	if p.ToRevision > 0 {
		out.ToRevision = ptr(p.ToRevision)
	}
	if p.Forced {
		out.Forced = ptr(true)
	}
	if p.Refusal != nil {
		pr := problemFromError(s.log, requestFrom(ctx), p.Refusal)
		body := api.Problem{Type: pr.Type, Title: pr.Title, Status: pr.Status, Detail: ptr(pr.Detail)}
		for k, v := range pr.Extra {
			body.Set(k, v)
		}
		if len(pr.Errors) > 0 {
			fields := make([]api.FieldProblem, len(pr.Errors))
			for i, f := range pr.Errors {
				fields[i] = api.FieldProblem{Field: f.Field, Message: f.Message}
			}
			body.Errors = &fields
		}
		out.Problem = &body
	}
	return out
}

func operationBody(o fleet.Operation) api.Operation {
	out := api.Operation{Id: uuid.MustParse(o.ID), DeploymentId: uuid.MustParse(o.DeploymentID), Type: api.OperationType(o.Type),
		State: api.OperationState(o.State), OnFailure: api.OnFailure(o.OnFailure), RequestedBy: o.RequestedBy,
		Deadline: o.Deadline, CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt, Steps: make([]api.OperationStep, 0, len(o.Steps)),
		FromVersion: ptr(o.FromVersion.String()), ToVersion: ptr(o.ToVersion.String()), Strategy: ptr(string(o.Strategy))}
	if o.Reason != "" {
		out.Reason = ptr(o.Reason)
	}
	if o.Drain != nil {
		out.Drain = &api.DrainRules{Required: o.Drain.Required, Timeout: o.Drain.EffectiveTimeout().String(), OnTimeout: api.DrainTimeoutAction(o.Drain.EffectiveOnTimeout())}
	}
	if o.Forced {
		out.Forced, out.ForceReason = ptr(true), ptr(o.ForceReason)
	}
	if o.FollowUp != "" {
		out.FollowUp = ptr(uuid.MustParse(o.FollowUp))
	}
	if !o.FinishedAt.IsZero() {
		out.FinishedAt = ptr(o.FinishedAt)
	}
	for _, st := range o.Steps {
		step := api.OperationStep{N: st.N, Version: st.Version.String(), State: api.OperationStepState(st.State)}
		if st.Revision > 0 {
			step.Revision = ptr(st.Revision)
		}
		if !st.PublishedAt.IsZero() {
			step.PublishedAt = ptr(st.PublishedAt)
		}
		if !st.FinishedAt.IsZero() {
			step.FinishedAt = ptr(st.FinishedAt)
		}
		out.Steps = append(out.Steps, step)
	}
	return out
}

func accepted(o fleet.Operation) api.OperationAcceptedJSONResponse {
	return api.OperationAcceptedJSONResponse{Body: operationBody(o), Headers: api.OperationAcceptedResponseHeaders{Location: "/mgmt/v1/operations/" + o.ID}}
}

// upgradeInput translates an upgrade's body into the domain's request.
func upgradeInput(b *api.UpgradeRequest) fleet.UpgradeRequest {
	in := fleet.UpgradeRequest{TargetVersion: b.TargetVersion, Path: lifecycle.PathMode(deref(b.Path)), Strategy: lifecycle.Strategy(deref(b.Strategy)),
		OnFailure: string(deref(b.OnFailure)), Timeout: b.Timeout}
	if b.Parameters != nil {
		in.Parameters = *b.Parameters
	}
	if b.Drain != nil {
		in.Drain = &fleet.DrainOverride{Required: b.Drain.Required, Timeout: b.Drain.Timeout, OnTimeout: lifecycle.OnTimeout(deref(b.Drain.OnTimeout))}
	}
	return in
}

// reconfigureInput translates a reconfiguration's body into the domain's request.
func reconfigureInput(b *api.ReconfigureRequest) fleet.ReconfigureRequest {
	return fleet.ReconfigureRequest{Parameters: b.Parameters, OnFailure: string(deref(b.OnFailure)), Timeout: b.Timeout}
}

// rollbackInput translates a rollback's body (optional) into the domain's request.
func rollbackInput(body *api.RollbackRequest) (api.RollbackRequest, fleet.RollbackRequest) {
	var b api.RollbackRequest
	if body != nil {
		b = *body
	}
	return b, fleet.RollbackRequest{ToRevision: deref(b.ToRevision), Force: deref(b.Force), Reason: deref(b.Reason), Timeout: b.Timeout}
}

// planOnly refuses the deprecated dryRun member set to false in the body of
// a plan operation, which only plans: the request contradicts itself.
func planOnly(dryRun *bool) error {
	if dryRun != nil && !*dryRun {
		return &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-request",
			Message: "The request is not valid: /dryRun is false, but this operation only plans; leave dryRun out.",
			Fields:  []lifecycle.FieldError{{Pointer: "/dryRun", Detail: "must be left out (or true): this operation only plans"}}}
	}
	return nil
}

// UpgradeDeployment starts an upgrade (or, with the deprecated dryRun, plans it).
func (s *Server) UpgradeDeployment(ctx context.Context, req api.UpgradeDeploymentRequestObject) (api.UpgradeDeploymentResponseObject, error) {
	dry := deref(req.Body.DryRun)
	p, op, err := s.fleet.Upgrade(ctx, req.DeploymentId, upgradeInput(req.Body), actorFrom(ctx), dry, ifMatch(req.Params.IfMatch, req.DeploymentId))
	if err != nil {
		return nil, err
	}
	if dry {
		return api.UpgradeDeployment200JSONResponse(planBody(s, ctx, p)), nil
	}
	return api.UpgradeDeployment202JSONResponse{OperationAcceptedJSONResponse: accepted(op)}, nil
}

// PlanUpgrade answers what an upgrade would do, changing nothing.
func (s *Server) PlanUpgrade(ctx context.Context, req api.PlanUpgradeRequestObject) (api.PlanUpgradeResponseObject, error) {
	if err := planOnly(req.Body.DryRun); err != nil {
		return nil, err
	}
	p, _, err := s.fleet.Upgrade(ctx, req.DeploymentId, upgradeInput(req.Body), actorFrom(ctx), true, fleet.Precondition{})
	if err != nil {
		return nil, err
	}
	return api.PlanUpgrade200JSONResponse(planBody(s, ctx, p)), nil
}

// ReconfigureDeployment starts a reconfiguration (or, with the deprecated dryRun, plans it).
func (s *Server) ReconfigureDeployment(ctx context.Context, req api.ReconfigureDeploymentRequestObject) (api.ReconfigureDeploymentResponseObject, error) {
	dry := deref(req.Body.DryRun)
	p, op, err := s.fleet.Reconfigure(ctx, req.DeploymentId, reconfigureInput(req.Body), actorFrom(ctx), dry, ifMatch(req.Params.IfMatch, req.DeploymentId))
	if err != nil {
		return nil, err
	}
	if dry {
		return api.ReconfigureDeployment200JSONResponse(planBody(s, ctx, p)), nil
	}
	return api.ReconfigureDeployment202JSONResponse{OperationAcceptedJSONResponse: accepted(op)}, nil
}

// PlanReconfiguration answers what a reconfiguration would do, changing nothing.
func (s *Server) PlanReconfiguration(ctx context.Context, req api.PlanReconfigurationRequestObject) (api.PlanReconfigurationResponseObject, error) {
	if err := planOnly(req.Body.DryRun); err != nil {
		return nil, err
	}
	p, _, err := s.fleet.Reconfigure(ctx, req.DeploymentId, reconfigureInput(req.Body), actorFrom(ctx), true, fleet.Precondition{})
	if err != nil {
		return nil, err
	}
	return api.PlanReconfiguration200JSONResponse(planBody(s, ctx, p)), nil
}

// RollbackDeployment starts a rollback (or, with the deprecated dryRun, plans it).
func (s *Server) RollbackDeployment(ctx context.Context, req api.RollbackDeploymentRequestObject) (api.RollbackDeploymentResponseObject, error) {
	b, in := rollbackInput(req.Body)
	if in.Force {
		// Set before the operation's transaction commits: the audit row of
		// the change is written in it. "forced": the override was needed
		// (and used), as the plan decides.
		setAuditDetail(ctx, map[string]any{"force": true, "reason": in.Reason, "forced": false})
		audit := ctx
		ctx = fleet.WithPlanned(ctx, func(p fleet.Plan) { setAuditDetail(audit, map[string]any{"forced": p.Forced}) })
	}
	dry := deref(b.DryRun)
	p, op, err := s.fleet.Rollback(ctx, req.DeploymentId, in, actorFrom(ctx), dry, ifMatch(req.Params.IfMatch, req.DeploymentId))
	if err != nil {
		return nil, err
	}
	if dry {
		return api.RollbackDeployment200JSONResponse(planBody(s, ctx, p)), nil
	}
	return api.RollbackDeployment202JSONResponse{OperationAcceptedJSONResponse: accepted(op)}, nil
}

// PlanRollback answers what a rollback would do, changing nothing.
func (s *Server) PlanRollback(ctx context.Context, req api.PlanRollbackRequestObject) (api.PlanRollbackResponseObject, error) {
	b, in := rollbackInput(req.Body)
	if err := planOnly(b.DryRun); err != nil {
		return nil, err
	}
	p, _, err := s.fleet.Rollback(ctx, req.DeploymentId, in, actorFrom(ctx), true, fleet.Precondition{})
	if err != nil {
		return nil, err
	}
	return api.PlanRollback200JSONResponse(planBody(s, ctx, p)), nil
}

// ListOperations lists operations.
func (s *Server) ListOperations(ctx context.Context, req api.ListOperationsRequestObject) (api.ListOperationsResponseObject, error) {
	ops, next, err := s.fleet.Operations(ctx, fleet.OperationFilter{DeploymentID: deref(req.Params.DeploymentId), State: string(deref(req.Params.State))},
		deref(req.Params.Limit), deref(req.Params.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListOperations200JSONResponse{Items: make([]api.Operation, 0, len(ops))}
	for _, o := range ops {
		out.Items = append(out.Items, operationBody(o))
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}

// GetOperation returns one operation.
func (s *Server) GetOperation(ctx context.Context, req api.GetOperationRequestObject) (api.GetOperationResponseObject, error) {
	o, err := s.fleet.Operation(ctx, req.OperationId)
	if err != nil {
		return nil, err
	}
	return api.GetOperation200JSONResponse(operationBody(o)), nil
}

// CancelOperation cancels an operation.
func (s *Server) CancelOperation(ctx context.Context, req api.CancelOperationRequestObject) (api.CancelOperationResponseObject, error) {
	o, err := s.fleet.CancelOperation(ctx, req.OperationId, actorFrom(ctx))
	if err != nil {
		return nil, err
	}
	return api.CancelOperation200JSONResponse(operationBody(o)), nil
}

// GetUpgradePath answers the upgrade path between two versions.
func (s *Server) GetUpgradePath(ctx context.Context, req api.GetUpgradePathRequestObject) (api.GetUpgradePathResponseObject, error) {
	path, direct, err := s.fleet.UpgradePath(ctx, req.ApplicationId, req.Params.From, req.Params.To)
	if err != nil {
		return nil, err
	}
	out := api.GetUpgradePath200JSONResponse{Direct: direct, Path: make([]string, len(path))}
	for i, v := range path {
		out.Path[i] = v.String()
	}
	return out, nil
}
