package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/page"
)

// durations reads the requested durations of an operation request. A nil
// value is absent and reads as 0: the field's default applies. A given
// value must be a duration within its field's range
// (lifecycle.ParseDuration), so an explicit "0s" is refused rather than
// read as absent: it used to mean "the default", which is not what it says.
type durations []lifecycle.FieldError

// read returns the duration s gives for field f (0 when s is nil), and
// records a problem naming pointer when s is not a duration in range.
func (ds *durations) read(f lifecycle.DurationField, s *string, pointer string) time.Duration {
	if s == nil {
		return 0
	}
	d, fe := lifecycle.ParseDuration(f, *s, pointer)
	if fe != nil {
		*ds = append(*ds, *fe)
	}
	return d
}

// err returns EINVALID (invalid-request) listing every problem, or nil.
func (ds durations) err() error {
	if len(ds) == 0 {
		return nil
	}
	return &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-request", Message: "A duration is not valid.", Fields: ds}
}

// Actor is who asks for an operation.
type Actor struct {
	ID    string
	Admin bool
}

// Plan is what an operation would do (the answer of a dry run).
type Plan struct {
	Allowed    bool
	Type       lifecycle.OperationKind
	From, To   lifecycle.Version
	Hops       []lifecycle.Version
	Strategy   lifecycle.Strategy
	Drain      *lifecycle.DrainPolicy
	Parameters []lifecycle.ParamChange
	Checks     []lifecycle.Check
	ToRevision int
	Forced     bool
	// Refusal is why the operation is not allowed (nil when Allowed).
	Refusal error

	op *Operation // the operation to create when allowed
}

// UpgradeRequest asks for an upgrade.
type UpgradeRequest struct {
	TargetVersion string
	Path          lifecycle.PathMode
	Strategy      lifecycle.Strategy
	Drain         *DrainOverride // nil: as the target declares
	Parameters    map[string]any
	OnFailure     string
	// Timeout is how long each step may take to install, as requested: a
	// duration such as "10m" within lifecycle.DurationStepTimeout's range;
	// nil for the default (lifecycle.DefaultStepTimeout).
	Timeout *string
}

// DrainOverride is an upgrade request's drain, replacing the one the target
// version declares.
type DrainOverride struct {
	Required bool
	// Timeout is a duration such as "5m" within
	// lifecycle.DurationDrainTimeout's range; nil for the default
	// (lifecycle.DefaultDrainTimeout).
	Timeout   *string
	OnTimeout lifecycle.OnTimeout
}

// ReconfigureRequest asks for new parameter values.
type ReconfigureRequest struct {
	Parameters map[string]any
	OnFailure  string
	Timeout    *string // as UpgradeRequest.Timeout
}

// RollbackRequest asks to go back to an earlier revision.
type RollbackRequest struct {
	ToRevision int // 0: the last revision installed before the current one
	Force      bool
	Reason     string
	Timeout    *string // as UpgradeRequest.Timeout
}

// Run either returns the plan (dryRun) or creates the operation it plans.
// The deployment must meet expect, checked on its locked row.
//
// Returns the plan's refusal when not allowed (and not a dry run);
// ECONFLICT (operation-in-progress) when another operation is active;
// EPRECONDITION (precondition-failed) when the deployment does not meet
// expect.
func (s *Service) run(ctx context.Context, p Plan, dryRun bool, expect Precondition) (Plan, Operation, error) {
	planned(ctx, p)
	if dryRun {
		return p, Operation{}, nil
	}
	if !p.Allowed {
		return p, Operation{}, p.Refusal
	}
	op := *p.op
	// Checked first by the caller (Upgrade, Reconfigure, Rollback) and
	// again on the locked deployment: a rollout that took it as a member
	// meanwhile wins.
	created, err := s.store.CreateOperation(ctx, op, func(d Deployment, hold RolloutHold) error {
		if hold.Active {
			return rolloutMemberError("Deployment "+d.ID, hold.RolloutID)
		}
		if err := expect.check(d); err != nil {
			return err
		}
		if d.Revision != op.BaseRevision {
			return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "conflict",
				Message: "The deployment changed while the operation was planned; plan it again."}
		}
		return publishable(d, op.Type)
	}, s.now().UTC())
	if err != nil {
		return p, Operation{}, err
	}
	s.wake()
	return p, created, nil
}

// ready refuses operations on a deployment that has one running, or cannot
// take a new revision now.
// knownActive, when not nil, is the id of d's active operation ("" none)
// as read with d (a rollout wave's members are read at once): not read
// again.
func (s *Service) ready(ctx context.Context, d Deployment, knownActive *string, kind lifecycle.OperationKind) error {
	var active string
	if knownActive != nil {
		active = *knownActive
	} else {
		var err error
		if active, err = s.store.ActiveOperation(ctx, d.ID); err != nil {
			return err
		}
	}
	if active != "" {
		op, err := s.store.Operation(ctx, active)
		if err != nil {
			return err
		}
		if reached(op, d) || (op.State != lifecycle.OperationQueued && op.State != lifecycle.OperationRunning) {
			// Its goal reached (the store settles it with the new
			// operation), or it ended since it was found (the scheduler
			// settled it meanwhile): not in progress. The creation checks
			// again under the deployment's lock.
			return publishable(d, kind)
		}
		return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "operation-in-progress",
			Message: "Deployment " + d.ID + " already has an operation in progress: " + active + " (GET /mgmt/v1/operations/" + active + "; cancel it or wait for it to end).",
			Extra:   map[string]any{"deploymentId": d.ID, "activeOperation": active}}
	}
	return publishable(d, kind)
}

// reached reports whether the device already runs what op set out to
// install (lifecycle.Operation.Reached).
func reached(op Operation, d Deployment) bool {
	a := lifecycle.Operation{ID: op.ID, Kind: op.Type, State: op.State}
	for _, st := range op.Steps {
		a.Steps = append(a.Steps, lifecycle.Step{N: st.N, State: st.State, Revision: st.Revision, Version: st.Version.String()})
	}
	return a.Reached(lifecycle.Deployment{ID: d.ID, State: d.State, Revision: d.Revision, InstalledRevision: d.InstalledRevision})
}

// publishable refuses operations on deployments that cannot take a new
// revision now.
func publishable(d Deployment, kind lifecycle.OperationKind) error {
	if d.Removing {
		return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "deployment-removed", Message: "Deployment " + d.ID + " is being removed or was removed."}
	}
	if _, err := lifecycle.Publish(d.State, kind); err != nil {
		return err
	}
	return nil
}

// Upgrade plans (and unless dryRun starts) an upgrade.
//
// Returns EINVALID (invalid-request) naming /timeout or /drain/timeout when
// a requested duration is not one within its field's range ("0s" included).
// Unless dryRun, the deployment must meet expect (see run).
func (s *Service) Upgrade(ctx context.Context, id string, req UpgradeRequest, actor Actor, dryRun bool, expect Precondition) (Plan, Operation, error) {
	// A member of an active rollout refuses before anything else (a
	// policy refusal would hide why: the rollout owns the deployment).
	if !dryRun {
		if err := s.checkNotMember(ctx, id); err != nil {
			return Plan{}, Operation{}, err
		}
	}
	var ds durations
	timeout := ds.read(lifecycle.DurationStepTimeout, req.Timeout, "/timeout")
	var drain *lifecycle.DrainPolicy
	if req.Drain != nil {
		drain = &lifecycle.DrainPolicy{Required: req.Drain.Required, OnTimeout: req.Drain.OnTimeout,
			Timeout: ds.read(lifecycle.DurationDrainTimeout, req.Drain.Timeout, "/drain/timeout")}
	}
	if err := ds.err(); err != nil {
		return Plan{}, Operation{}, err
	}
	d, err := s.store.Deployment(ctx, id)
	if err != nil {
		return Plan{}, Operation{}, err
	}
	p, err := s.planUpgrade(ctx, d, nil, req, drain, timeout, actor)
	if err != nil {
		return Plan{}, Operation{}, err
	}
	return s.run(ctx, p, dryRun, expect)
}

// message is the sentence of a domain error (its text otherwise).
func message(err error) string {
	var de *lifecycle.Error
	if errors.As(err, &de) {
		return de.Message
	}
	return err.Error()
}

func refuse(p Plan, err error) (Plan, error) {
	if lifecycle.ErrorCode(err) == lifecycle.EINTERNAL || lifecycle.ErrorCode(err) == lifecycle.EUNAVAILABLE {
		return Plan{}, err
	}
	p.Allowed, p.Refusal = false, err
	return p, nil
}

func (s *Service) planUpgrade(ctx context.Context, d Deployment, active *string, req UpgradeRequest, drain *lifecycle.DrainPolicy, timeout time.Duration, actor Actor) (Plan, error) {
	p := Plan{Type: lifecycle.OperationUpgrade, From: d.Version}
	target, err := lifecycle.ParseVersion(req.TargetVersion)
	if err != nil {
		return refuse(p, err)
	}
	p.To = target
	if err := s.ready(ctx, d, active, lifecycle.OperationUpgrade); err != nil {
		p.Checks = append(p.Checks, lifecycle.Check{Name: "deployment-ready", Passed: false, Detail: message(err)})
		return refuse(p, err)
	}
	p.Checks = append(p.Checks, lifecycle.Check{Name: "deployment-ready", Passed: true, Detail: "state " + string(d.State)})
	versions, err := s.catalog.All(ctx, d.ApplicationID)
	if err != nil {
		return Plan{}, err
	}
	entries := make([]lifecycle.CatalogEntry, 0, len(versions))
	var targetV, currentV *catalog.Version
	for i := range versions {
		v := versions[i]
		desc, err := s.catalog.Description(v)
		if err != nil {
			return Plan{}, err
		}
		entries = append(entries, lifecycle.CatalogEntry{Version: v.Version, Yanked: v.Yanked, Upgrade: desc.Lifecycle.Upgrade})
		if v.Version == target {
			targetV = &versions[i]
		}
		if v.Version == d.Version {
			currentV = &versions[i]
		}
	}
	mode := req.Path
	if mode == "" {
		mode = lifecycle.PathDirect
	}
	// minUpgradeFrom is about what the device runs: after a failed upgrade
	// that is the last installed revision, not the desired one.
	from := d.Version
	if d.InstalledRevision > 0 && d.InstalledRevision != d.Revision {
		r, err := s.store.Revision(ctx, d.ID, d.InstalledRevision)
		if err != nil {
			return Plan{}, err
		}
		from = r.Version
		p.From = from
		for i := range versions {
			if versions[i].Version == from {
				currentV = &versions[i]
			}
		}
	}
	plan, err := lifecycle.PlanUpgrade(from, target, entries, mode)
	p.Checks = append(p.Checks, plan.Checks...)
	if err != nil {
		return refuse(p, err)
	}
	p.Hops = plan.Hops
	tdesc, err := s.catalog.Description(*targetV)
	if err != nil {
		return Plan{}, err
	}
	cdesc, err := s.catalog.Description(*currentV)
	if err != nil {
		return Plan{}, err
	}
	if err := tdesc.CheckValues(req.Parameters, false); err != nil {
		p.Checks = append(p.Checks, lifecycle.Check{Name: "parameter-values", Passed: false, Detail: message(err)})
		return refuse(p, err)
	}
	values, changes := lifecycle.CarryOver(lifecycle.CarryInput{
		Current: d.Parameters, OldDefaults: cdesc.DefaultValues(), TargetParams: tdesc.ParameterNames(),
		TargetDefaults: tdesc.DefaultValues(), TargetPolicy: tdesc.Lifecycle, Requested: req.Parameters,
	})
	p.Parameters = changes
	// immutable: a value set at install may not change, by request or reset.
	if err := lifecycle.CheckImmutable(d.Parameters, values, func(n string) bool { return cdesc.Immutable(n) || tdesc.Immutable(n) }); err != nil {
		p.Checks = append(p.Checks, lifecycle.Check{Name: "immutable-parameters", Passed: false, Detail: message(err)})
		return refuse(p, err)
	}
	if err := tdesc.CheckValues(values, true); err != nil {
		p.Checks = append(p.Checks, lifecycle.Check{Name: "parameter-values", Passed: false, Detail: message(err)})
		return refuse(p, err)
	}
	p.Checks = append(p.Checks, lifecycle.Check{Name: "parameter-values", Passed: true, Detail: "valid for " + target.String()})
	p.Checks = append(p.Checks, lifecycle.StrategyCheck(req.Strategy, tdesc.Lifecycle.Upgrade), lifecycle.DrainCheck(drain, tdesc.Lifecycle.Upgrade))
	strategy, err := lifecycle.ChooseStrategy(req.Strategy, tdesc.Lifecycle.Upgrade)
	if err != nil {
		return refuse(p, err)
	}
	p.Strategy = strategy
	p.Drain = lifecycle.ChooseDrain(drain, tdesc.Lifecycle.Upgrade)
	p.Allowed = true
	p.op = s.newOperation(d, lifecycle.OperationUpgrade, target, values, d.ProfileID, strategy, p.Drain, req.OnFailure, timeout, actor, p.Hops)
	return p, nil
}

func (s *Service) newOperation(d Deployment, kind lifecycle.OperationKind, to lifecycle.Version, values map[string]any, profile string,
	strategy lifecycle.Strategy, drain *lifecycle.DrainPolicy, onFailure string, timeout time.Duration, actor Actor, hops []lifecycle.Version) *Operation {
	if timeout <= 0 {
		timeout = lifecycle.DefaultStepTimeout
	}
	if onFailure == "" {
		onFailure = OnFailureHalt
	}
	now := s.now().UTC()
	op := &Operation{ID: newUUID(), DeploymentID: d.ID, Type: kind, State: lifecycle.OperationQueued, FromVersion: d.Version, ToVersion: to,
		Parameters: values, ProfileID: profile, Strategy: strategy, Drain: drain, OnFailure: onFailure, StepTimeout: timeout,
		RequestedBy: actor.ID, BaseRevision: d.Revision, Deadline: now.Add(stepBudget(timeout, drain))}
	if len(hops) == 0 {
		hops = []lifecycle.Version{to}
	}
	for i, h := range hops {
		op.Steps = append(op.Steps, Step{N: i + 1, Version: h, State: lifecycle.StepPending})
	}
	return op
}

// stepBudget is how long one step may take: its drain, then its install.
func stepBudget(timeout time.Duration, drain *lifecycle.DrainPolicy) time.Duration {
	if drain != nil {
		return drain.EffectiveTimeout() + timeout
	}
	return timeout
}

// Reconfigure plans (and unless dryRun starts) a change of parameter values.
//
// Returns EINVALID (invalid-request) naming /timeout when the requested
// timeout is not a duration within its range ("0s" included).
// Unless dryRun, the deployment must meet expect (see run).
func (s *Service) Reconfigure(ctx context.Context, id string, req ReconfigureRequest, actor Actor, dryRun bool, expect Precondition) (Plan, Operation, error) {
	// A member of an active rollout refuses before anything else (a
	// policy refusal would hide why: the rollout owns the deployment).
	if !dryRun {
		if err := s.checkNotMember(ctx, id); err != nil {
			return Plan{}, Operation{}, err
		}
	}
	var ds durations
	timeout := ds.read(lifecycle.DurationStepTimeout, req.Timeout, "/timeout")
	if err := ds.err(); err != nil {
		return Plan{}, Operation{}, err
	}
	d, err := s.store.Deployment(ctx, id)
	if err != nil {
		return Plan{}, Operation{}, err
	}
	pl, err := s.planReconfigure(ctx, d, nil, req, timeout, actor)
	if err != nil {
		return Plan{}, Operation{}, err
	}
	return s.run(ctx, pl, dryRun, expect)
}

// planReconfigure plans a change of parameter values of d (Reconfigure's
// plan; a rollout's reconfigure members are planned by it too).
func (s *Service) planReconfigure(ctx context.Context, d Deployment, active *string, req ReconfigureRequest, timeout time.Duration, actor Actor) (Plan, error) {
	p := Plan{Type: lifecycle.OperationReconfigure, From: d.Version, To: d.Version}
	if err := s.ready(ctx, d, active, lifecycle.OperationReconfigure); err != nil {
		p.Checks = append(p.Checks, lifecycle.Check{Name: "deployment-ready", Passed: false, Detail: message(err)})
		return refuse(p, err)
	}
	v, err := s.catalog.Get(ctx, d.ApplicationID, d.Version.String())
	if err != nil {
		return Plan{}, err
	}
	desc, err := s.catalog.Description(v)
	if err != nil {
		return Plan{}, err
	}
	rp, err := lifecycle.PlanReconfigure(d.Parameters, req.Parameters, desc.Immutable, func(n string) bool { return slices.Contains(desc.ParameterNames(), n) })
	p.Parameters, p.Checks = rp.Changes, append(p.Checks, rp.Checks...)
	if err != nil {
		return refuse(p, err)
	}
	if err := desc.CheckValues(req.Parameters, false); err != nil {
		p.Checks = append(p.Checks, lifecycle.Check{Name: "parameter-values", Passed: false, Detail: message(err)})
		return refuse(p, err)
	}
	values := lifecycle.MergeValues(d.Parameters, req.Parameters)
	if err := desc.CheckValues(values, true); err != nil {
		return refuse(p, err)
	}
	p.Checks = append(p.Checks, lifecycle.Check{Name: "parameter-values", Passed: true, Detail: "valid"})
	p.Strategy = desc.Lifecycle.Upgrade.DefaultStrategy()
	p.Drain = lifecycle.ChooseDrain(nil, desc.Lifecycle.Upgrade) // drain as the version declares
	p.Allowed = true
	p.op = s.newOperation(d, lifecycle.OperationReconfigure, d.Version, values, d.ProfileID, p.Strategy, p.Drain, req.OnFailure, timeout, actor, nil)
	return p, nil
}

// Rollback plans (and unless dryRun starts) a return to an earlier revision.
// forceRefusal, when not empty, explains why this caller may not override
// policy (not an admin, or overrides disabled by the server).
//
// Returns EINVALID (invalid-request) naming /timeout when the requested
// timeout is not a duration within its range ("0s" included).
// Unless dryRun, the deployment must meet expect (see run).
func (s *Service) Rollback(ctx context.Context, id string, req RollbackRequest, actor Actor, dryRun bool, expect Precondition) (Plan, Operation, error) {
	// A member of an active rollout refuses before anything else (a
	// policy refusal would hide why: the rollout owns the deployment).
	if !dryRun {
		if err := s.checkNotMember(ctx, id); err != nil {
			return Plan{}, Operation{}, err
		}
	}
	var ds durations
	timeout := ds.read(lifecycle.DurationStepTimeout, req.Timeout, "/timeout")
	if err := ds.err(); err != nil {
		return Plan{}, Operation{}, err
	}
	d, err := s.store.Deployment(ctx, id)
	if err != nil {
		return Plan{}, Operation{}, err
	}
	p, err := s.planRollback(ctx, d, nil, req, timeout, actor)
	if err != nil {
		return Plan{}, Operation{}, err
	}
	return s.run(ctx, p, dryRun, expect)
}

func (s *Service) planRollback(ctx context.Context, d Deployment, active *string, req RollbackRequest, timeout time.Duration, actor Actor) (Plan, error) {
	p := Plan{Type: lifecycle.OperationRollback, From: d.Version}
	if err := s.ready(ctx, d, active, lifecycle.OperationRollback); err != nil {
		p.Checks = append(p.Checks, lifecycle.Check{Name: "deployment-ready", Passed: false, Detail: message(err)})
		return refuse(p, err)
	}
	revs, err := s.allRevisions(ctx, d.ID)
	if err != nil {
		return Plan{}, err
	}
	var current, target *Revision
	for i := range revs {
		if revs[i].N == d.Revision {
			current = &revs[i]
		}
	}
	n := req.ToRevision
	if n == 0 {
		for i := range revs { // newest first
			if revs[i].N < d.Revision && !revs[i].InstalledAt.IsZero() {
				n = revs[i].N
				break
			}
		}
		if n == 0 {
			return refuse(p, &lifecycle.Error{Code: lifecycle.EINVALID, Type: "no-rollback-target",
				Message: "Deployment " + d.ID + " has no earlier installed revision to go back to."})
		}
	}
	for i := range revs {
		if revs[i].N == n {
			target = &revs[i]
		}
	}
	if target == nil || n >= d.Revision || current == nil {
		return refuse(p, &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-rollback-target",
			Message: fmt.Sprintf("Revision %d is not an earlier revision of deployment %s (the current one is %d).", n, d.ID, d.Revision),
			Fields:  []lifecycle.FieldError{{Pointer: "/toRevision", Detail: "an earlier revision"}}})
	}
	p.To, p.ToRevision = target.Version, n
	installedV, err := s.catalog.Get(ctx, d.ApplicationID, current.Version.String())
	if err != nil {
		return Plan{}, err
	}
	idesc, err := s.catalog.Description(installedV)
	if err != nil {
		return Plan{}, err
	}
	forced, forceReason := false, ""
	if req.Force && !actor.Admin {
		return refuse(p, &lifecycle.Error{Code: lifecycle.EFORBIDDEN, Type: "break-glass-forbidden",
			Message: "force is a break-glass override: only the admin role may use it."})
	}
	switch c := lifecycle.Compare(target.Version, current.Version); {
	case c < 0: // a version downgrade: the installed version's supplier decides
		tv, err := s.catalog.Get(ctx, d.ApplicationID, target.Version.String())
		if err != nil {
			return Plan{}, err
		}
		refusal := ""
		if !actor.Admin {
			refusal = "only the admin role may override a rollback policy"
		} else if !s.policy.AllowOverrides {
			refusal = "this server disables rollback overrides"
		}
		dec, err := lifecycle.CheckRollback(lifecycle.RollbackInput{
			Installed: current.Version, Policy: idesc.Lifecycle.Rollback, InstalledAt: rollbackWindowStart(revs, current.N),
			Now: s.now(), Target: target.Version, TargetYanked: tv.Yanked, Force: req.Force, ForceReason: req.Reason,
			ForceAllowed: refusal == "", ForceRefusal: refusal,
		})
		p.Checks = append(p.Checks, dec.Checks...)
		if err != nil {
			return refuse(p, err)
		}
		forced, forceReason = dec.Forced, req.Reason
	case c > 0:
		return refuse(p, &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-rollback-target",
			Message: fmt.Sprintf("Revision %d runs %s, newer than the current %s: upgrade instead.", n, target.Version, current.Version)})
	default:
		p.Checks = append(p.Checks, lifecycle.Check{Name: "rollback-allowed", Passed: true,
			Detail: "same version: restoring earlier parameter values is a reconfiguration, not a version rollback"})
	}
	p.Forced = forced
	p.Parameters = lifecycle.DiffValues(d.Parameters, target.Parameters)
	p.Strategy = target.Strategy
	if p.Strategy == "" {
		p.Strategy = lifecycle.StrategyRecreate
	}
	tv, err := s.catalog.Get(ctx, d.ApplicationID, target.Version.String())
	if err != nil {
		return Plan{}, err
	}
	tdesc, err := s.catalog.Description(tv)
	if err != nil {
		return Plan{}, err
	}
	p.Drain = lifecycle.ChooseDrain(nil, tdesc.Lifecycle.Upgrade) // drain as the target version declares
	p.Allowed = true
	op := s.newOperation(d, lifecycle.OperationRollback, target.Version, target.Parameters, target.ProfileID, p.Strategy, p.Drain, OnFailureHalt, timeout, actor, nil)
	op.RestoreRevision, op.Forced, op.ForceReason = n, forced, forceReason
	p.op = op
	return p, nil
}

func (s *Service) allRevisions(ctx context.Context, id string) ([]Revision, error) {
	var all []Revision
	before := 0
	for {
		rs, err := s.store.Revisions(ctx, id, before, page.MaxLimit)
		if err != nil {
			return nil, err
		}
		all = append(all, rs...)
		if len(rs) < page.MaxLimit {
			return all, nil
		}
		before = rs[len(rs)-1].N
	}
}

// UpgradePath answers the path from one version of an application to
// another, or the refusal.
func (s *Service) UpgradePath(ctx context.Context, appID, from, to string) ([]lifecycle.Version, bool, error) {
	f, err := lifecycle.ParseVersion(from)
	if err != nil {
		return nil, false, err
	}
	t, err := lifecycle.ParseVersion(to)
	if err != nil {
		return nil, false, err
	}
	versions, err := s.catalog.All(ctx, appID)
	if err != nil {
		return nil, false, err
	}
	entries := make([]lifecycle.CatalogEntry, 0, len(versions))
	for _, v := range versions {
		desc, err := s.catalog.Description(v)
		if err != nil {
			return nil, false, err
		}
		entries = append(entries, lifecycle.CatalogEntry{Version: v.Version, Yanked: v.Yanked, Upgrade: desc.Lifecycle.Upgrade})
	}
	plan, err := lifecycle.PlanUpgrade(f, t, entries, lifecycle.PathAuto)
	if err != nil {
		return nil, false, err
	}
	return append([]lifecycle.Version{f}, plan.Hops...), plan.Direct, nil
}

// Operation returns one operation. Returns ENOTFOUND if there is none.
func (s *Service) Operation(ctx context.Context, id string) (Operation, error) {
	return s.store.Operation(ctx, id)
}

// Operations returns a page of operations, newest first.
func (s *Service) Operations(ctx context.Context, f OperationFilter, limit int, cursor string) ([]Operation, string, error) {
	limit, after, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	ops, err := s.store.Operations(ctx, f, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	ops, next := page.Trim(ops, limit, func(o Operation) string { return o.CreatedAt.UTC().Format(time.RFC3339Nano) + "|" + o.ID })
	return ops, next, nil
}

// CancelOperation cancels an active operation.
//
// Returns ENOTFOUND if there is none, ECONFLICT if it already ended;
// ECONFLICT (rollout-member, naming the rollout) if an active rollout
// started it.
func (s *Service) CancelOperation(ctx context.Context, id string, actor Actor) (Operation, error) {
	if rid, err := s.store.ActiveRolloutOfOperation(ctx, id); err != nil {
		return Operation{}, err
	} else if rid != "" {
		return Operation{}, rolloutMemberError("Operation "+id+" was started by a rollout: its deployment", rid)
	}
	return s.store.CancelOperation(ctx, id, "cancelled by "+actor.ID, s.now().UTC())
}
