package fleet

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
)

// resolved is what creating and planning a rollout share: the validated
// settings, the counts of the classified members and the sized waves (the
// members themselves go to resolve's page function as they are classified).
type resolved struct {
	settings lifecycle.RolloutSettings
	waves    []lifecycle.SizedWave
	excluded map[lifecycle.ExclusionReason]int
	total    int
	eligible int
	// noEligible is NoEligibleError when no member is eligible (waves nil).
	noEligible error
}

// candidatePage is how many candidates resolve reads and classifies at a
// time (Service.candidatePage): what it holds of a fleet at once.
const candidatePage = 2000

// invalidTarget is a bad target of a rollout request (EINVALID naming the field).
func invalidTarget(pointer, detail string) error {
	return &lifecycle.Error{Code: lifecycle.EINVALID, Type: lifecycle.ProblemInvalidRollout,
		Message: "The rollout request is not valid: " + pointer + ": " + detail + ".",
		Fields:  []lifecycle.FieldError{{Pointer: pointer, Detail: detail}}}
}

// versionFacts reads every catalog version of appID with its description.
func (s *Service) versionFacts(ctx context.Context, appID string) ([]lifecycle.VersionFacts, map[lifecycle.Version]*margo.ApplicationDescription, error) {
	versions, err := s.catalog.All(ctx, appID)
	if lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND {
		return nil, nil, &lifecycle.Error{Code: lifecycle.ENOTFOUND, Type: "not-found", Message: "There is no application " + appID + ".",
			Fields: []lifecycle.FieldError{{Pointer: "/applicationId", Detail: "no such application"}}}
	}
	if err != nil {
		return nil, nil, err
	}
	facts := make([]lifecycle.VersionFacts, 0, len(versions))
	descs := make(map[lifecycle.Version]*margo.ApplicationDescription, len(versions))
	for _, v := range versions {
		desc, err := s.catalog.Description(v)
		if err != nil {
			return nil, nil, err
		}
		descs[v.Version] = desc
		f := lifecycle.VersionFacts{Version: v.Version, Yanked: v.Yanked, Lifecycle: desc.Lifecycle,
			Parameters: desc.ParameterNames(), Defaults: desc.DefaultValues()}
		for _, n := range f.Parameters {
			if desc.Immutable(n) {
				f.Immutable = append(f.Immutable, n)
			}
		}
		facts = append(facts, f)
	}
	return facts, descs, nil
}

// placement decides whether devices fit a version, once per distinct
// capabilities document and profile; when the version's profiles do not
// read the devices' identity (margo.PlacementIgnoresIdentity), once per
// distinct document without it (RolloutCandidate.FitKey): a fleet of
// devices alike but for their ids and serial numbers is parsed once.
type placement struct {
	desc *margo.ApplicationDescription
	// anonymous: desc's placement ignores the devices' identity.
	anonymous bool
	cache     map[string]placed
}

func newPlacement(desc *margo.ApplicationDescription) *placement {
	return &placement{desc: desc, anonymous: desc != nil && desc.PlacementIgnoresIdentity(), cache: map[string]placed{}}
}

// maxPlacements bounds the fits a placement remembers.
const maxPlacements = 4096

type placed struct {
	profile string
	misfit  string
}

// known returns the fit of c's capabilities for profileID when it is known
// without reading them: their fit key's, when p shares fits by key.
func (p *placement) known(c RolloutCandidate, profileID string) (placed, bool) {
	if p.desc == nil {
		return placed{misfit: "the target version is not in the catalog"}, true
	}
	if p.anonymous && c.FitKey != "" {
		// A misfit's message names the device: only a fit is shared.
		if r, ok := p.cache[profileID+"\x01"+c.FitKey]; ok && r.misfit == "" {
			return r, true
		}
	}
	return placed{}, false
}

// fit decides where c fits for profileID; c's Capabilities must have been
// read unless known says.
func (p *placement) fit(c RolloutCandidate, profileID string) (placed, error) {
	if r, ok := p.known(c, profileID); ok {
		return r, nil
	}
	key := profileID + "\x00" + string(c.Capabilities)
	if p.anonymous && c.FitKey != "" {
		key = profileID + "\x01" + c.FitKey
	} else if r, ok := p.cache[key]; ok {
		return r, nil
	}
	if len(p.cache) >= maxPlacements {
		clear(p.cache) // bounded: a fleet of distinct documents does not fill memory
	}
	caps, err := margo.ParseCapabilities(c.Capabilities, c.DeviceID)
	if err != nil {
		return placed{}, lifecycle.Errorf(lifecycle.EINTERNAL, "stored capabilities of %s/%s: %v", c.ClientID, c.DeviceID, err)
	}
	var r placed
	prof, err := margo.ChooseProfile(p.desc, caps, profileID)
	switch {
	case err == nil:
		r.profile = prof.ID
	case lifecycle.ErrorCode(err) == lifecycle.EINVALID:
		r.misfit = message(err)
	default:
		return placed{}, err
	}
	p.cache[key] = r
	return r, nil
}

// fitPage decides where each of cands fits (profiles[i] the profile asked
// for cands[i]), reading the capabilities only of the candidates whose fit
// is not known by their fit key: at first one per unknown key, then those
// whose key turned out a misfit (its message names each device).
func (s *Service) fitPage(ctx context.Context, place *placement, cands []RolloutCandidate, profiles []string, fits []placed) error {
	done := make([]bool, len(cands))
	for round := 0; round < 2; round++ {
		var need [][2]string
		var at []int
		first := map[string]bool{}
		for i, c := range cands {
			if done[i] {
				continue
			}
			if r, ok := place.known(c, profiles[i]); ok {
				fits[i], done[i] = r, true
				continue
			}
			if round == 0 && place.anonymous && c.FitKey != "" {
				k := profiles[i] + "\x01" + c.FitKey
				if first[k] {
					continue // decided by the first of its key
				}
				first[k] = true
			}
			need = append(need, [2]string{c.ClientID, c.DeviceID})
			at = append(at, i)
		}
		if len(need) == 0 {
			return nil
		}
		caps, err := s.store.DeviceCapabilities(ctx, need)
		if err != nil {
			return err
		}
		for _, i := range at {
			c := cands[i]
			c.Capabilities = caps[[2]string{c.ClientID, c.DeviceID}]
			if c.Capabilities == nil {
				return lifecycle.Errorf(lifecycle.EINTERNAL, "device %s/%s: capabilities gone while its rollout was resolved", c.ClientID, c.DeviceID)
			}
			if fits[i], err = place.fit(c, profiles[i]); err != nil {
				return err
			}
			done[i] = true
		}
	}
	for i, c := range cands {
		if !done[i] {
			return lifecycle.Errorf(lifecycle.EINTERNAL, "device %s/%s: placement undecided", c.ClientID, c.DeviceID)
		}
	}
	return nil
}

// resolve validates req and classifies its members at now, writing
// nothing: the part of CreateRollout that PlanRollout shares. It reads the
// candidates a page at a time, in the stable order of their keys, and
// gives each page's members (Ord numbered from 0 across pages, Wave not
// set) to page as they are classified, so that what it holds is bounded
// by a page whatever the size of the fleet; the eligible members' waves
// follow from their places among the eligible (lifecycle.WaveStarts).
func (s *Service) resolve(ctx context.Context, req RolloutRequest, now time.Time, page func([]RolloutMember) error) (resolved, error) {
	var out resolved
	settings, err := lifecycle.ValidateRolloutSpec(req.Spec)
	if err != nil {
		return out, err
	}
	out.settings = settings
	install := settings.Action == lifecycle.RolloutInstall
	sel, err := ParseSelector(req.Target.Selector)
	if err != nil {
		return out, invalidTarget("/target/labels", message(err))
	}
	if install && len(req.Target.Versions) > 0 {
		return out, invalidTarget("/target/versions", "an install rollout selects devices, not deployments: versions does not apply")
	}
	if install && len(req.Target.States) > 0 {
		return out, invalidTarget("/target/states", "an install rollout selects devices, not deployments: states does not apply")
	}
	q := CandidateQuery{ApplicationID: req.ApplicationID, Install: install, Selector: sel, ClientIDs: req.Target.ClientIDs,
		Devices: req.Target.Devices, States: req.Target.States, Revisions: settings.Action == lifecycle.RolloutRollback}
	for i, v := range req.Target.Versions {
		pv, err := lifecycle.ParseVersion(v)
		if err != nil {
			return out, invalidTarget("/target/versions/"+itoa(i), message(err))
		}
		q.Versions = append(q.Versions, pv.String())
	}
	for i, st := range req.Target.States {
		if !slices.Contains(lifecycle.AllStates(), st) {
			return out, invalidTarget("/target/states/"+itoa(i), "unknown deployment state "+string(st))
		}
	}
	facts, descs, err := s.versionFacts(ctx, req.ApplicationID)
	if err != nil {
		return out, err
	}
	cl, err := lifecycle.NewClassifier(settings, facts, now)
	if err != nil {
		return out, err
	}
	// The values given must be valid for the target version (install,
	// upgrade): the whole request is refused otherwise, naming the value, as
	// the single operation would. A reconfiguration's values are checked
	// against each member's own version below.
	if d := descs[settings.Target]; d != nil && settings.Action != lifecycle.RolloutReconfigure && len(settings.Parameters) > 0 {
		if err := d.CheckValues(settings.Parameters, false); err != nil {
			return out, err
		}
	}
	place := newPlacement(descs[settings.Target])
	out.excluded = map[lifecycle.ExclusionReason]int{}
	var after lifecycle.MemberKey
	members := make([]RolloutMember, 0, s.candidatePage)
	for cp := range s.candidatePages(ctx, q, install) {
		if cp.err != nil {
			return out, cp.err
		}
		cands := cp.cands
		members = members[:0]
		for i, c := range cands {
			k := c.key(install)
			// The pages follow each other in the order of the keys; the
			// waves are taken in it.
			if (out.total > 0 || i > 0) && lifecycle.CompareMemberKeys(after, k) >= 0 {
				return out, lifecycle.Errorf(lifecycle.EINTERNAL, "rollout candidates out of order: %v after %v (is the database's collation C?)", k, after)
			}
			after = k
		}
		if err := s.classifyPage(ctx, cands, install, settings, cl, place, descs, req.ProfileID, out.total, &members); err != nil {
			return out, err
		}
		for _, m := range members {
			if m.Classification == ClassEligible {
				out.eligible++
			} else {
				out.excluded[m.Reason]++
			}
		}
		out.total += len(cands)
		if err := page(members); err != nil {
			return out, err
		}
	}
	if out.eligible == 0 {
		out.noEligible = lifecycle.NoEligibleError(out.excluded)
		return out, nil
	}
	out.waves, err = lifecycle.ResolveWaveSizes(settings.Waves, out.eligible, settings.DefaultWaves)
	return out, err
}

// candidatePageRead is one page of candidates, or the error that ended
// their reading.
type candidatePageRead struct {
	cands []RolloutCandidate
	err   error
}

// candidatePages reads the candidates of q a page at a time, in key order,
// one page ahead of its consumer: the database reads the next page while
// the consumer classifies this one. The reading goroutine stops when the
// consumer stops ranging (the sequence's yield returns false) and is
// waited for; at most two pages are held.
func (s *Service) candidatePages(ctx context.Context, q CandidateQuery, install bool) iter.Seq[candidatePageRead] {
	return func(yield func(candidatePageRead) bool) {
		parent := ctx
		ctx, cancel := context.WithCancel(ctx)
		pages := make(chan candidatePageRead, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer close(pages)
			err := s.store.RolloutCandidates(ctx, q, s.candidatePage, func(cands []RolloutCandidate) error {
				select {
				case pages <- candidatePageRead{cands: cands}:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			if err != nil && ctx.Err() == nil {
				select {
				case pages <- candidatePageRead{err: err}:
				case <-ctx.Done():
				}
			}
		}()
		defer func() {
			cancel()
			<-done
		}()
		for p := range pages {
			if !yield(p) {
				return
			}
		}
		if err := parent.Err(); err != nil {
			// The reader stopped for it, perhaps without a page to say so:
			// the candidates were not all read.
			yield(candidatePageRead{err: err})
		}
	}
}

// key is c's member key.
func (c RolloutCandidate) key(install bool) lifecycle.MemberKey {
	k := lifecycle.MemberKey{ClientID: c.ClientID, DeviceID: c.DeviceID}
	if !install && c.Deployment != nil {
		k.DeploymentID = c.Deployment.ID
	}
	return k
}

// classifyPage classifies one page of candidates (in order, the first of
// them at ord first) into members, without their waves.
func (s *Service) classifyPage(ctx context.Context, cands []RolloutCandidate, install bool, settings lifecycle.RolloutSettings,
	cl *lifecycle.Classifier, place *placement, descs map[lifecycle.Version]*margo.ApplicationDescription, profileID string,
	first int, members *[]RolloutMember) error {
	// The candidates' active operations, read at once: one whose goal the
	// device already reached (an install it finished, not yet settled by
	// the scheduler) does not make the member busy: creating the member's
	// operation settles it.
	var activeIDs []string
	for _, c := range cands {
		if c.ActiveOperation != "" && c.Deployment != nil {
			activeIDs = append(activeIDs, c.ActiveOperation)
		}
	}
	var active map[string]Operation
	if len(activeIDs) > 0 {
		var err error
		if active, err = s.store.OperationsByID(ctx, activeIDs); err != nil {
			return err
		}
	}
	// Where each candidate fits, when the action places it.
	placing := func(c RolloutCandidate) bool {
		return settings.Action != lifecycle.RolloutReconfigure && (install || c.Deployment != nil)
	}
	profiles, fits := make([]string, len(cands)), make([]placed, len(cands))
	var toFit []int
	for i, c := range cands {
		if !placing(c) {
			continue
		}
		profile := profileID
		if !install {
			profile = ""
			if place.desc != nil {
				if _, ok := place.desc.Profile(c.Deployment.ProfileID); ok {
					profile = c.Deployment.ProfileID
				}
			}
		}
		profiles[i] = profile
		toFit = append(toFit, i)
	}
	if len(toFit) > 0 {
		fc, fp, ff := make([]RolloutCandidate, len(toFit)), make([]string, len(toFit)), make([]placed, len(toFit))
		for j, i := range toFit {
			fc[j], fp[j] = cands[i], profiles[i]
		}
		if err := s.fitPage(ctx, place, fc, fp, ff); err != nil {
			return err
		}
		for j, i := range toFit {
			fits[i] = ff[j]
		}
	}
	for i, c := range cands {
		m := RolloutMember{Ord: first + i, ClientID: c.ClientID, DeviceID: c.DeviceID}
		f := lifecycle.MemberFacts{Key: c.key(install), HasDeployment: c.Deployment != nil, ActiveOperation: c.ActiveOperation,
			BusyRollout: c.BusyRollout, LastSeenAt: c.LastSeenAt, Placeable: true}
		if d := c.Deployment; d != nil && !install {
			m.DeploymentID, m.FromVersion, m.FromRevision = d.ID, d.Version.String(), d.Revision
			f.State, f.Removing, f.Version, f.Revision = d.State, d.Removing, d.Version, d.Revision
			if !c.InstalledVersion.IsZero() {
				// What the device runs (a failed deployment still runs its
				// installed revision): the revision and the version a
				// revert restores describe the same revision.
				f.Version = c.InstalledVersion
				m.FromVersion = c.InstalledVersion.String()
				if d.InstalledRevision > 0 {
					m.FromRevision = d.InstalledRevision
				}
			}
			f.Revisions, f.Parameters = c.Revisions, d.Parameters
		}
		if placing(c) {
			p := fits[i]
			f.Placeable, f.Misfit, m.ProfileID = p.misfit == "", p.misfit, p.profile
		}
		if op, ok := active[f.ActiveOperation]; ok && c.Deployment != nil && reached(op, *c.Deployment) {
			f.ActiveOperation = ""
		}
		if settings.Action == lifecycle.RolloutReconfigure && c.Deployment != nil {
			if d := descs[c.Deployment.Version]; d != nil {
				if err := d.CheckValues(settings.Parameters, false); err != nil {
					f.ValueProblems = fieldsMessage(err)
				}
			}
		}
		x := cl.Classify(f)
		if x.Eligible {
			plan := x.Plan
			m.Classification, m.Plan, m.Status, m.RestoreRevision = ClassEligible, &plan, lifecycle.MemberPending, x.RestoreRevision
		} else {
			m.Classification, m.Status = ClassExcluded, lifecycle.MemberExcluded
			m.Reason, m.ReasonDetail, m.SupplierReason = x.Reason, x.Detail, x.SupplierReason
		}
		*members = append(*members, m)
	}
	return nil
}

func itoa(i int) string { return strconv.Itoa(i) }

// freshStepInput is the step input of rollout r being created: every
// member of each wave pending (r's counts are read from its members, which
// are not stored yet).
func freshStepInput(r Rollout, settings lifecycle.RolloutSettings, now time.Time) lifecycle.RolloutStepInput {
	in := stepInput(r, settings, now)
	for i, w := range r.Waves {
		in.Counts[i] = lifecycle.WaveCounts{Pending: w.ResolvedSize}
	}
	return in
}

// CreateRollout validates the request, resolves and classifies its
// members, sizes its waves and stores the rollout running (cause started)
// with its members, history and events in one transaction. The members
// are written as they are classified, a page at a time (resolve).
//
// Returns EINVALID naming the field for a bad request (an unknown selector,
// waves that do not cover, a target version that does not exist or is
// yanked); lifecycle.NoEligibleError (EINVALID, type no-eligible-members,
// the counts by reason) when no member is eligible, creating nothing;
// ECONFLICT (rollout-member) when a member joined another rollout while
// this one was resolved.
func (s *Service) CreateRollout(ctx context.Context, req RolloutRequest, actor Actor) (Rollout, error) {
	now := s.now().UTC()
	createdBy := actor.ID
	if createdBy == "" {
		createdBy = ActorOf(ctx)
	}
	r := Rollout{ID: newUUID(), ApplicationID: req.ApplicationID, Request: req,
		State: lifecycle.InitialRolloutState, Cause: lifecycle.RolloutCauseStarted, StateChangedAt: now,
		CurrentWave: 1, CreatedAt: now, UpdatedAt: now, CreatedBy: createdBy, Generation: 1}
	r.Action = req.Spec.Action
	err := s.store.InsertRollout(ctx, r, func(write func([]RolloutMember) error) (Rollout, []lifecycle.Event, error) {
		res, err := s.resolve(ctx, req, now, write)
		if err != nil {
			return r, nil, err
		}
		if res.noEligible != nil {
			return r, nil, res.noEligible
		}
		settings := res.settings
		r.Action, r.DeadlineAt = res.settings.Action, now.Add(res.settings.Deadline)
		for _, w := range res.waves {
			r.Waves = append(r.Waves, RolloutWave{Index: len(r.Waves) + 1, Wave: w.Wave, ResolvedSize: w.Size,
				AllowedFailures: w.MaxFailures.Allowed(w.Size), State: WavePending})
		}
		started := startWave(&r.Waves[0], now)
		var events []lifecycle.Event
		add := func(body lifecycle.EventBody) error {
			e, err := lifecycle.NewEvent(now, createdBy, lifecycle.Ref{Kind: lifecycle.SubjectRollout, ID: r.ID}, body,
				lifecycle.Ref{Kind: lifecycle.SubjectApplication, ID: r.ApplicationID})
			events = append(events, e)
			return err
		}
		target := ""
		if !res.settings.Target.IsZero() {
			target = res.settings.Target.String()
		}
		err = errors.Join(
			add(lifecycle.RolloutCreatedBody{Action: r.Action, Target: target, Eligible: res.eligible, Excluded: res.total - res.eligible, Waves: len(r.Waves)}),
			add(lifecycle.RolloutStateChangedBody{To: r.State, Cause: r.Cause}))
		if started {
			err = errors.Join(err, add(lifecycle.RolloutWaveStartedBody{Wave: 1, Size: r.Waves[0].ResolvedSize}))
		} else if dec, derr := lifecycle.DecideRolloutStep(freshStepInput(r, settings, now)); derr != nil {
			err = errors.Join(err, derr)
		} else if dec.To == lifecycle.RolloutPaused && dec.Cause == lifecycle.RolloutCauseApprovalRequired {
			// A first wave that waits for approval: the rollout is created
			// paused, in the driver's first step taken in this transaction,
			// so that the answer shows the state it stays in, with a
			// current ETag. Its history has both moves.
			r.History = []RolloutTransition{{To: r.State, Cause: r.Cause, At: now, Actor: createdBy},
				{From: r.State, To: dec.To, Cause: dec.Cause, At: now, Actor: lifecycle.ActorScheduler, Detail: dec.Reason}}
			r.Waiting = dec.Waiting
			err = errors.Join(err, add(lifecycle.RolloutStateChangedBody{From: r.State, To: dec.To, Cause: dec.Cause, Detail: dec.Reason}))
			r.State, r.Cause = dec.To, dec.Cause
		}
		return r, events, err
	})
	if err != nil {
		return Rollout{}, err
	}
	s.wake()
	return s.Rollout(ctx, r.ID)
}

// PlanRollout answers what CreateRollout would do, writing nothing. It
// refuses what CreateRollout refuses, except that an empty eligible set is
// answered (with its counts), not refused. It keeps the counts and the
// first examples of each group, not the members.
func (s *Service) PlanRollout(ctx context.Context, req RolloutRequest) (RolloutPlan, error) {
	plans := map[string]*PlanGroup{}
	exclusions := map[lifecycle.ExclusionReason]*ExclusionGroup{}
	res, err := s.resolve(ctx, req, s.now().UTC(), func(ms []RolloutMember) error {
		for _, m := range ms {
			ex := PlanExample{DeploymentID: m.DeploymentID, ClientID: m.ClientID, DeviceID: m.DeviceID, FromVersion: m.FromVersion, ReasonDetail: m.ReasonDetail}
			if m.Plan != nil {
				key := m.Plan.Key()
				g := plans[key]
				if g == nil {
					g = &PlanGroup{Plan: *m.Plan}
					plans[key] = g
				}
				g.Count++
				if len(g.Examples) < MaxPlanExamples {
					g.Examples = append(g.Examples, ex)
				}
				continue
			}
			g := exclusions[m.Reason]
			if g == nil {
				g = &ExclusionGroup{Reason: m.Reason}
				exclusions[m.Reason] = g
			}
			g.Count++
			if len(g.Examples) < MaxPlanExamples {
				g.Examples = append(g.Examples, ex)
			}
		}
		return nil
	})
	if err != nil {
		return RolloutPlan{}, err
	}
	p := RolloutPlan{ApplicationID: req.ApplicationID, Action: res.settings.Action, Total: res.total, Eligible: res.eligible,
		Excluded: res.total - res.eligible, ExcludedByReason: res.excluded}
	for _, g := range plans {
		p.Plans = append(p.Plans, *g)
	}
	sort.SliceStable(p.Plans, func(i, j int) bool {
		if p.Plans[i].Count != p.Plans[j].Count {
			return p.Plans[i].Count > p.Plans[j].Count
		}
		return p.Plans[i].Plan.Key() < p.Plans[j].Plan.Key()
	})
	for _, g := range exclusions {
		p.Exclusions = append(p.Exclusions, *g)
	}
	sort.SliceStable(p.Exclusions, func(i, j int) bool {
		if p.Exclusions[i].Count != p.Exclusions[j].Count {
			return p.Exclusions[i].Count > p.Exclusions[j].Count
		}
		return p.Exclusions[i].Reason < p.Exclusions[j].Reason
	})
	for _, w := range res.waves {
		p.Waves = append(p.Waves, PlannedWave{Index: len(p.Waves) + 1, Wave: w.Wave, ResolvedSize: w.Size, AllowedFailures: w.MaxFailures.Allowed(w.Size)})
	}
	return p, nil
}

// fieldsMessage spells the field problems of err ("/parameters/x: too
// long; ..."), or its message when it has none.
func fieldsMessage(err error) string {
	var de *lifecycle.Error
	if !errors.As(err, &de) || len(de.Fields) == 0 {
		return message(err)
	}
	parts := make([]string, len(de.Fields))
	for i, f := range de.Fields {
		parts[i] = f.Pointer + ": " + f.Detail
	}
	return strings.Join(parts, "; ")
}
