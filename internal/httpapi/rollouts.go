package httpapi

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/wfm-dev/wfm/api"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// The /mgmt/v1/rollouts handlers translate the contract's shapes to
// fleet's rollout use cases and back. The contract nests an action's
// options in the member of the action's name (upgrade.targetVersion,
// install.version...); lifecycle.RolloutSpec is flat (TargetVersion,
// Parameters...). rolloutRequest flattens, rolloutPointer maps the domain's
// JSON pointers back to the request as the client wrote it, and
// rolloutBody nests again.

func rolloutPath(id string) string { return "/mgmt/v1/rollouts/" + id }

// rolloutRequest translates a create or plan body. The options member of
// the action is required and a member of another action is refused: both
// are EINVALID (invalid-request) naming the member; everything else is
// checked by fleet and lifecycle.
func rolloutRequest(b api.CreateRolloutRequest) (fleet.RolloutRequest, error) {
	a := lifecycle.RolloutAction(b.Action)
	out := fleet.RolloutRequest{ApplicationID: b.ApplicationId, RevertOnAbort: deref(b.RevertOnAbort),
		Spec: lifecycle.RolloutSpec{Action: a, MaxInFlight: b.MaxInFlight, OnThreshold: lifecycle.OnThreshold(deref(b.OnThreshold)),
			Deadline: b.Deadline, NotSeenFor: b.Target.NotSeenFor}}
	var fe []lifecycle.FieldError
	members := []struct {
		action lifecycle.RolloutAction
		given  bool
	}{{lifecycle.RolloutInstall, b.Install != nil}, {lifecycle.RolloutUpgrade, b.Upgrade != nil},
		{lifecycle.RolloutReconfigure, b.Reconfigure != nil}, {lifecycle.RolloutRollback, b.Rollback != nil}}
	for _, m := range members {
		switch {
		case m.action == a && !m.given:
			fe = append(fe, lifecycle.FieldError{Pointer: "/" + string(a), Detail: "is required for a" + articleOf(string(a)) + " " + string(a) + " rollout"})
		case m.action != a && m.given:
			fe = append(fe, lifecycle.FieldError{Pointer: "/" + string(m.action), Detail: "does not apply to a" + articleOf(string(a)) + " " + string(a) + " rollout; give the options of the action in /" + string(a)})
		}
	}
	if len(fe) > 0 {
		return out, &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-request", Fields: fe,
			Message: "The rollout request is not valid: " + fe[0].Pointer + ": " + fe[0].Detail + "."}
	}
	s := &out.Spec
	switch a {
	case lifecycle.RolloutInstall:
		o := b.Install
		s.TargetVersion, s.Timeout, out.ProfileID = o.Version, o.Timeout, deref(o.ProfileId)
		if o.Parameters != nil {
			s.Parameters = *o.Parameters
		}
	case lifecycle.RolloutUpgrade:
		o := b.Upgrade
		s.TargetVersion, s.Timeout = o.TargetVersion, o.Timeout
		s.Path, s.Strategy, s.OnFailure = lifecycle.PathMode(deref(o.Path)), lifecycle.Strategy(deref(o.Strategy)), lifecycle.OnFailure(deref(o.OnFailure))
		if o.Parameters != nil {
			s.Parameters = *o.Parameters
		}
		if d := o.Drain; d != nil {
			s.Drain = &lifecycle.DrainSpec{Required: d.Required, Timeout: d.Timeout, OnTimeout: lifecycle.OnTimeout(deref(d.OnTimeout))}
		}
	case lifecycle.RolloutReconfigure:
		o := b.Reconfigure
		s.Parameters, s.Timeout, s.OnFailure = o.Parameters, o.Timeout, lifecycle.OnFailure(deref(o.OnFailure))
	case lifecycle.RolloutRollback:
		s.TargetVersion, s.Timeout = b.Rollback.ToVersion, b.Rollback.Timeout
	}
	if b.Waves != nil {
		s.Waves = make([]lifecycle.WaveSpec, len(*b.Waves))
		for i, w := range *b.Waves {
			ws := lifecycle.WaveSpec{Size: lifecycle.WaveAmount{Count: w.Size.Count, Percent: w.Size.Percent},
				Approval: lifecycle.WaveApproval(deref(w.Approval)), Soak: w.Soak, MinSuccess: w.MinSuccess}
			if m := w.MaxFailures; m != nil {
				ws.MaxFailures = &lifecycle.WaveAmount{Count: m.Count, Percent: m.Percent}
			}
			s.Waves[i] = ws
		}
	}
	if w := b.Window; w != nil {
		s.Window = &lifecycle.RolloutWindowSpec{Start: w.Start, End: w.End, TimeZone: w.TimeZone}
	}
	t := b.Target
	out.Target = fleet.RolloutTarget{Selector: deref(t.Labels), ClientIDs: deref(t.Clients), Versions: deref(t.Versions)}
	for _, d := range deref(t.Devices) {
		out.Target.Devices = append(out.Target.Devices, [2]string{d.ClientId, d.DeviceId})
	}
	for _, st := range deref(t.States) {
		out.Target.States = append(out.Target.States, lifecycle.State(st))
	}
	return out, nil
}

func articleOf(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "n"
	}
	return ""
}

// optionPointers are the pointers of lifecycle.ValidateRolloutSpec that
// name an option of the action: in the contract they are inside the
// action's member (/upgrade/path). The others (/action, /waves/…,
// /maxInFlight, /onThreshold, /window/…, /deadline, /target/notSeenFor)
// are where the domain says.
var optionPointers = []string{"/parameters", "/path", "/strategy", "/drain", "/onFailure", "/timeout"}

// rolloutPointer maps a JSON pointer of the flat lifecycle.RolloutSpec to
// the request body of a rollout of action a, as the client sent it:
// /targetVersion is /install/version, /upgrade/targetVersion or
// /rollback/toVersion; an option is inside the action's member
// (/drain/timeout of an upgrade is /upgrade/drain/timeout); any other
// pointer is unchanged.
func rolloutPointer(a lifecycle.RolloutAction, p string) string {
	if !a.Valid() {
		return p
	}
	if p == "/targetVersion" {
		switch a {
		case lifecycle.RolloutInstall:
			return "/install/version"
		case lifecycle.RolloutRollback:
			return "/rollback/toVersion"
		}
		return "/" + string(a) + "/targetVersion"
	}
	for _, o := range optionPointers {
		if p == o || strings.HasPrefix(p, o+"/") {
			return "/" + string(a) + p
		}
	}
	return p
}

// rolloutError returns err with every field pointer (and the pointer its
// message names) mapped by rolloutPointer; other errors unchanged. The
// domain error is copied, never changed in place.
func rolloutError(a lifecycle.RolloutAction, err error) error {
	var de *lifecycle.Error
	if !errors.As(err, &de) || len(de.Fields) == 0 {
		return err
	}
	c := *de
	c.Fields = slices.Clone(de.Fields)
	for i, f := range c.Fields {
		if mapped := rolloutPointer(a, f.Pointer); mapped != f.Pointer {
			c.Fields[i].Pointer = mapped
			if i == 0 {
				c.Message = strings.Replace(c.Message, ": "+f.Pointer+":", ": "+mapped+":", 1)
			}
		}
	}
	return &c
}

// rolloutIfMatch translates If-Match for a rollout as ifMatch does for a
// deployment.
func rolloutIfMatch(header *string, id string) fleet.Precondition {
	return preconditionOf(header, id, rolloutETag)
}

func amountBody(a lifecycle.WaveAmount) api.FailureBudget {
	return api.FailureBudget{Count: a.Count, Percent: a.Percent}
}

func countsBody(c lifecycle.WaveCounts) api.MemberStatusCounts {
	return api.MemberStatusCounts{Pending: c.Pending, InProgress: c.InProgress, Succeeded: c.Succeeded, Failed: c.Failed,
		Cancelled: c.Cancelled, Reverted: c.Reverted, NotReverted: c.NotReverted, Removed: c.Removed, Excluded: c.Excluded}
}

func exclusionCountsBody(m map[lifecycle.ExclusionReason]int) api.ExclusionCounts {
	return api.ExclusionCounts{AtTarget: m[lifecycle.ExcludedAtTarget], PolicyRefused: m[lifecycle.ExcludedPolicyRefused],
		NoRevision: m[lifecycle.ExcludedNoRevision], Unplaceable: m[lifecycle.ExcludedUnplaceable], Busy: m[lifecycle.ExcludedBusy],
		NotSeen: m[lifecycle.ExcludedNotSeen], Operator: m[lifecycle.ExcludedOperator]}
}

func memberPlanBody(p lifecycle.MemberPlan) api.MemberPlan {
	out := api.MemberPlan{Kind: api.MemberPlanKind(p.Kind)}
	if out.Kind == "" {
		out.Kind = api.MemberPlanKind(lifecycle.PlanDirect)
	}
	if len(p.Through) > 0 {
		through := make([]string, len(p.Through))
		for i, v := range p.Through {
			through[i] = v.String()
		}
		out.Through = &through
	}
	return out
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func uuidPtr(s string) *uuid.UUID {
	if s == "" {
		return nil
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return nil
	}
	return &id
}

// waveSpecBody spells a validated wave's request part.
func waveSpecBody(w lifecycle.Wave) (api.WaveSize, api.WaveApproval, string, int, api.FailureBudget) {
	return api.WaveSize{Count: w.Size.Count, Percent: w.Size.Percent}, api.WaveApproval(w.Approval), w.Soak.String(), w.MinSuccess, amountBody(w.MaxFailures)
}

// optionsBody nests a rollout's flat options in the member of its action.
func optionsBody(out *api.Rollout, req fleet.RolloutRequest) {
	s := req.Spec
	params := func() *api.ParameterValues {
		if len(s.Parameters) == 0 {
			return nil
		}
		p := api.ParameterValues(s.Parameters)
		return &p
	}
	onFailure := func() *api.OnFailure {
		if s.OnFailure == "" {
			return nil
		}
		return ptr(api.OnFailure(s.OnFailure))
	}
	switch s.Action {
	case lifecycle.RolloutInstall:
		out.Install = &api.RolloutInstallOptions{Version: s.TargetVersion, ProfileId: nonEmpty(req.ProfileID), Parameters: params(), Timeout: s.Timeout}
	case lifecycle.RolloutUpgrade:
		o := &api.RolloutUpgradeOptions{TargetVersion: s.TargetVersion, Parameters: params(), OnFailure: onFailure(), Timeout: s.Timeout}
		if s.Path != "" {
			o.Path = ptr(api.UpgradePathMode(s.Path))
		}
		if s.Strategy != "" {
			o.Strategy = ptr(api.UpgradeStrategy(s.Strategy))
		}
		if d := s.Drain; d != nil {
			o.Drain = &api.DrainOverride{Required: d.Required, Timeout: d.Timeout}
			if d.OnTimeout != "" {
				o.Drain.OnTimeout = ptr(api.DrainTimeoutAction(d.OnTimeout))
			}
		}
		out.Upgrade = o
	case lifecycle.RolloutReconfigure:
		out.Reconfigure = &api.RolloutReconfigureOptions{Parameters: api.ParameterValues(nonNil(s.Parameters)), OnFailure: onFailure(), Timeout: s.Timeout}
	case lifecycle.RolloutRollback:
		out.Rollback = &api.RolloutRollbackOptions{ToVersion: s.TargetVersion, Timeout: s.Timeout}
	}
}

func targetBody(req fleet.RolloutRequest) api.RolloutTarget {
	t := req.Target
	out := api.RolloutTarget{Labels: nonEmpty(t.Selector), NotSeenFor: req.Spec.NotSeenFor}
	if len(t.ClientIDs) > 0 {
		out.Clients = ptr(slices.Clone(t.ClientIDs))
	}
	if len(t.Devices) > 0 {
		ds := make([]api.DeviceRef, len(t.Devices))
		for i, d := range t.Devices {
			ds[i] = api.DeviceRef{ClientId: d[0], DeviceId: d[1]}
		}
		out.Devices = &ds
	}
	if len(t.Versions) > 0 {
		out.Versions = ptr(slices.Clone(t.Versions))
	}
	if len(t.States) > 0 {
		ss := make([]api.DeploymentState, len(t.States))
		for i, s := range t.States {
			ss[i] = api.DeploymentState(s)
		}
		out.States = &ss
	}
	return out
}

func rolloutBody(r fleet.Rollout) api.Rollout {
	out := api.Rollout{Id: uuid.MustParse(r.ID), ApplicationId: r.ApplicationID, Action: api.RolloutAction(r.Action),
		Target: targetBody(r.Request), MaxInFlight: r.MaxInFlight, OnThreshold: api.ThresholdAction(r.OnThreshold),
		RevertOnAbort: r.Request.RevertOnAbort, Deadline: r.Deadline.String(), DeadlineAt: r.DeadlineAt,
		State: api.RolloutState(r.State), StateCause: api.RolloutCause(r.Cause), StateChangedAt: r.StateChangedAt,
		History: make([]api.RolloutTransition, 0, len(r.History)), Waves: make([]api.RolloutWave, 0, len(r.Waves)),
		Counts: api.RolloutCounts{Total: r.Counts.Total, Eligible: r.Counts.Eligible, Excluded: r.Counts.Excluded,
			ExcludedByReason: exclusionCountsBody(r.Counts.ExcludedByReason), ByStatus: countsBody(r.Counts.ByStatus)},
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, CreatedBy: r.CreatedBy, Generation: r.Generation}
	optionsBody(&out, r.Request)
	if w := r.Request.Spec.Window; w != nil {
		out.Window = &api.RolloutWindow{Start: w.Start, End: w.End, TimeZone: w.TimeZone}
	}
	for _, t := range r.History {
		tr := api.RolloutTransition{To: api.RolloutState(t.To), Cause: api.RolloutCause(t.Cause), At: t.At, Actor: t.Actor, Detail: nonEmpty(t.Detail)}
		if t.From != "" {
			tr.From = ptr(api.RolloutState(t.From))
		}
		out.History = append(out.History, tr)
	}
	for _, w := range r.Waves {
		wb := api.RolloutWave{Index: w.Index, ResolvedSize: w.ResolvedSize, AllowedFailures: w.AllowedFailures,
			State: api.WaveState(w.State), Counts: countsBody(w.Counts), StartedAt: timePtr(w.StartedAt),
			SettledAt: timePtr(w.SettledAt), SoakUntil: timePtr(w.SoakUntil), FinishedAt: timePtr(w.FinishedAt),
			ApprovedAt: timePtr(w.ApprovedAt), ApprovedBy: nonEmpty(w.ApprovedBy)}
		wb.Size, wb.Approval, wb.Soak, wb.MinSuccess, wb.MaxFailures = waveSpecBody(w.Wave)
		out.Waves = append(out.Waves, wb)
	}
	if r.CurrentWave > 0 {
		out.CurrentWave = ptr(r.CurrentWave)
	}
	if w := r.Waiting; w != nil {
		out.Waiting = waitingBody(*w)
	}
	if a := r.Abort; a != nil {
		out.Abort = &api.RolloutAbort{Revert: a.Revert, Forced: a.Forced, Reason: nonEmpty(a.Reason), RequestedBy: a.RequestedBy, At: a.At}
	}
	return out
}

func waitingBody(w lifecycle.RolloutWaiting) *api.RolloutWaiting {
	out := &api.RolloutWaiting{Reason: api.RolloutWaitingReason(w.Reason), Message: w.Message, Until: timePtr(w.Until)}
	if w.Count > 0 {
		out.Count = ptr(w.Count)
	}
	if o := w.Oldest; o != nil {
		out.OldestMember = &api.RolloutWaitingMember{DeploymentId: uuidPtr(o.DeploymentID), ClientId: o.ClientID, DeviceId: o.DeviceID,
			OperationId: uuidPtr(o.OperationID), Since: o.Since, LastSeenAt: timePtr(o.LastSeenAt)}
	}
	return out
}

func memberBody(m fleet.RolloutMember) api.RolloutMember {
	out := api.RolloutMember{ClientId: m.ClientID, DeviceId: m.DeviceID, DeploymentId: uuidPtr(m.DeploymentID),
		Classification: api.MemberClassification(m.Classification), Status: api.MemberStatus(m.Status),
		OperationId: uuidPtr(m.OperationID), FromVersion: nonEmpty(m.FromVersion), Result: nonEmpty(m.Result),
		UpdatedAt: timePtr(m.UpdatedAt)}
	if m.Reason != "" {
		out.Reason = ptr(api.ExclusionReason(m.Reason))
	}
	// The supplier's reason is the detail that matters to an operator of a
	// policy refusal; the contract has one member for it.
	d := m.ReasonDetail
	if sr := m.SupplierReason; sr != "" && !strings.Contains(d, sr) {
		if d != "" {
			d += ": "
		}
		d += sr
	}
	out.ReasonDetail = nonEmpty(d)
	if m.Plan != nil {
		out.Plan = ptr(memberPlanBody(*m.Plan))
	}
	if m.Wave > 0 {
		out.Wave = ptr(m.Wave)
	}
	if m.FromRevision > 0 {
		out.FromRevision = ptr(m.FromRevision)
	}
	if rv := m.Revert; rv != nil {
		out.Revert = &api.MemberRevert{Outcome: api.MemberRevertOutcome(rv.Outcome), OperationId: uuidPtr(rv.OperationID),
			Reason: nonEmpty(rv.Reason)}
		if rv.ToRevision > 0 {
			out.Revert.ToRevision = ptr(rv.ToRevision)
		}
		if rv.Forced {
			out.Revert.Forced = ptr(true)
		}
	}
	return out
}

func examplesBody(es []fleet.PlanExample) []api.PlanExample {
	out := make([]api.PlanExample, 0, len(es))
	for _, e := range es {
		out = append(out, api.PlanExample{ClientId: e.ClientID, DeviceId: e.DeviceID, DeploymentId: uuidPtr(e.DeploymentID),
			FromVersion: nonEmpty(e.FromVersion), ReasonDetail: nonEmpty(e.ReasonDetail)})
	}
	return out
}

func planRolloutBody(p fleet.RolloutPlan) api.RolloutPlan {
	out := api.RolloutPlan{ApplicationId: p.ApplicationID, Action: api.RolloutAction(p.Action), Total: p.Total,
		Eligible: p.Eligible, Excluded: p.Excluded, ExcludedByReason: exclusionCountsBody(p.ExcludedByReason),
		Plans: make([]api.PlanGroup, 0, len(p.Plans)), Exclusions: make([]api.ExclusionGroup, 0, len(p.Exclusions)),
		Waves: make([]api.PlannedWave, 0, len(p.Waves))}
	for _, g := range p.Plans {
		out.Plans = append(out.Plans, api.PlanGroup{Plan: memberPlanBody(g.Plan), Count: g.Count, Examples: examplesBody(g.Examples)})
	}
	for _, g := range p.Exclusions {
		out.Exclusions = append(out.Exclusions, api.ExclusionGroup{Reason: api.ExclusionReason(g.Reason), Count: g.Count, Examples: examplesBody(g.Examples)})
	}
	for _, w := range p.Waves {
		pw := api.PlannedWave{Index: w.Index, ResolvedSize: w.ResolvedSize, AllowedFailures: w.AllowedFailures}
		pw.Size, pw.Approval, pw.Soak, pw.MinSuccess, pw.MaxFailures = waveSpecBody(w.Wave)
		out.Waves = append(out.Waves, pw)
	}
	return out
}

// CreateRollout starts a rollout.
func (s *Server) CreateRollout(ctx context.Context, req api.CreateRolloutRequestObject) (api.CreateRolloutResponseObject, error) {
	in, err := rolloutRequest(*req.Body)
	if err != nil {
		return nil, err
	}
	r, err := s.fleet.CreateRollout(ctx, in, actorFrom(ctx))
	if err != nil {
		return nil, rolloutError(in.Spec.Action, err)
	}
	return api.CreateRollout201JSONResponse{Body: rolloutBody(r),
		Headers: api.CreateRollout201ResponseHeaders{Location: rolloutPath(r.ID), ETag: rolloutETag(r.ID, r.Generation)}}, nil
}

// PlanRollout answers what creating a rollout would do, changing nothing.
func (s *Server) PlanRollout(ctx context.Context, req api.PlanRolloutRequestObject) (api.PlanRolloutResponseObject, error) {
	in, err := rolloutRequest(*req.Body)
	if err != nil {
		return nil, err
	}
	p, err := s.fleet.PlanRollout(ctx, in)
	if err != nil {
		return nil, rolloutError(in.Spec.Action, err)
	}
	return api.PlanRollout200JSONResponse(planRolloutBody(p)), nil
}

// ListRollouts lists rollouts, newest first.
func (s *Server) ListRollouts(ctx context.Context, req api.ListRolloutsRequestObject) (api.ListRolloutsResponseObject, error) {
	p := req.Params
	rs, next, err := s.fleet.Rollouts(ctx, fleet.RolloutFilter{ApplicationID: deref(p.ApplicationId), State: lifecycle.RolloutState(deref(p.State))},
		deref(p.Limit), deref(p.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListRollouts200JSONResponse{Items: make([]api.Rollout, 0, len(rs))}
	for _, r := range rs {
		out.Items = append(out.Items, rolloutBody(r))
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}

// GetRollout returns one rollout with its progress.
func (s *Server) GetRollout(ctx context.Context, req api.GetRolloutRequestObject) (api.GetRolloutResponseObject, error) {
	r, err := s.fleet.Rollout(ctx, req.RolloutId)
	if err != nil {
		return nil, err
	}
	return api.GetRollout200JSONResponse{Body: rolloutBody(r), Headers: api.GetRollout200ResponseHeaders{ETag: rolloutETag(r.ID, r.Generation)}}, nil
}

// ListRolloutMembers lists a rollout's members.
func (s *Server) ListRolloutMembers(ctx context.Context, req api.ListRolloutMembersRequestObject) (api.ListRolloutMembersResponseObject, error) {
	p := req.Params
	ms, next, err := s.fleet.RolloutMembers(ctx, req.RolloutId, fleet.MemberFilter{Wave: deref(p.Wave), Status: lifecycle.MemberStatus(deref(p.Status)),
		Classification: string(deref(p.Classification)), Reason: lifecycle.ExclusionReason(deref(p.Reason))}, deref(p.Limit), deref(p.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListRolloutMembers200JSONResponse{Items: make([]api.RolloutMember, 0, len(ms))}
	for _, m := range ms {
		out.Items = append(out.Items, memberBody(m))
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}

// rolloutAction is the shape of the actions that take a rollout and answer
// it: pause, resume, approve, cancel (abort and exclude add a body).
type rolloutAction func(ctx context.Context, id string, actor fleet.Actor, expect fleet.Precondition) (fleet.Rollout, error)

func (s *Server) act(ctx context.Context, id string, ifMatch *string, do rolloutAction) (api.Rollout, string, error) {
	r, err := do(ctx, id, actorFrom(ctx), rolloutIfMatch(ifMatch, id))
	if err != nil {
		return api.Rollout{}, "", err
	}
	return rolloutBody(r), rolloutETag(r.ID, r.Generation), nil
}

// PauseRollout pauses a running rollout.
func (s *Server) PauseRollout(ctx context.Context, req api.PauseRolloutRequestObject) (api.PauseRolloutResponseObject, error) {
	body, tag, err := s.act(ctx, req.RolloutId, req.Params.IfMatch, s.fleet.PauseRollout)
	if err != nil {
		return nil, err
	}
	return api.PauseRollout200JSONResponse{Body: body, Headers: api.PauseRollout200ResponseHeaders{ETag: tag}}, nil
}

// ResumeRollout resumes a paused rollout.
func (s *Server) ResumeRollout(ctx context.Context, req api.ResumeRolloutRequestObject) (api.ResumeRolloutResponseObject, error) {
	body, tag, err := s.act(ctx, req.RolloutId, req.Params.IfMatch, s.fleet.ResumeRollout)
	if err != nil {
		return nil, err
	}
	return api.ResumeRollout200JSONResponse{Body: body, Headers: api.ResumeRollout200ResponseHeaders{ETag: tag}}, nil
}

// ApproveRollout starts the manual wave a rollout waits for.
func (s *Server) ApproveRollout(ctx context.Context, req api.ApproveRolloutRequestObject) (api.ApproveRolloutResponseObject, error) {
	body, tag, err := s.act(ctx, req.RolloutId, req.Params.IfMatch, s.fleet.ApproveRollout)
	if err != nil {
		return nil, err
	}
	return api.ApproveRollout200JSONResponse{Body: body, Headers: api.ApproveRollout200ResponseHeaders{ETag: tag}}, nil
}

// CancelRollout cancels a rollout: nothing new starts.
func (s *Server) CancelRollout(ctx context.Context, req api.CancelRolloutRequestObject) (api.CancelRolloutResponseObject, error) {
	body, tag, err := s.act(ctx, req.RolloutId, req.Params.IfMatch, s.fleet.CancelRollout)
	if err != nil {
		return nil, err
	}
	return api.CancelRollout200JSONResponse{Body: body, Headers: api.CancelRollout200ResponseHeaders{ETag: tag}}, nil
}

// AbortRollout aborts a rollout, optionally reverting what it changed.
func (s *Server) AbortRollout(ctx context.Context, req api.AbortRolloutRequestObject) (api.AbortRolloutResponseObject, error) {
	var b api.AbortRolloutRequest
	if req.Body != nil {
		b = *req.Body
	}
	in := fleet.AbortRequest{Revert: deref(b.Revert), Force: deref(b.Force), Reason: deref(b.Reason)}
	if in.Force {
		// Set before the abort's transaction commits: its audit row is
		// written in it.
		setAuditDetail(ctx, map[string]any{"force": true, "reason": in.Reason, "revert": in.Revert})
	}
	body, tag, err := s.act(ctx, req.RolloutId, req.Params.IfMatch,
		func(ctx context.Context, id string, actor fleet.Actor, expect fleet.Precondition) (fleet.Rollout, error) {
			return s.fleet.AbortRollout(ctx, id, in, actor, expect)
		})
	if err != nil {
		return nil, err
	}
	return api.AbortRollout200JSONResponse{Body: body, Headers: api.AbortRollout200ResponseHeaders{ETag: tag}}, nil
}

// ExcludeRolloutMember excludes one member from a rollout.
func (s *Server) ExcludeRolloutMember(ctx context.Context, req api.ExcludeRolloutMemberRequestObject) (api.ExcludeRolloutMemberResponseObject, error) {
	b := req.Body
	m := fleet.MemberRef{ClientID: deref(b.ClientId), DeviceID: deref(b.DeviceId)}
	if b.DeploymentId != nil {
		m.DeploymentID = b.DeploymentId.String()
	}
	body, tag, err := s.act(ctx, req.RolloutId, req.Params.IfMatch,
		func(ctx context.Context, id string, actor fleet.Actor, expect fleet.Precondition) (fleet.Rollout, error) {
			return s.fleet.ExcludeRolloutMember(ctx, id, m, actor, expect)
		})
	if err != nil {
		return nil, err
	}
	return api.ExcludeRolloutMember200JSONResponse{Body: body, Headers: api.ExcludeRolloutMember200ResponseHeaders{ETag: tag}}, nil
}
