package lifecycle

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// VersionFacts is what classifying a rollout's members needs to know of one
// version of the application (from the catalog and its description).
type VersionFacts struct {
	Version   Version
	Yanked    bool
	Lifecycle Lifecycle
	// Parameters are the names the version defines; nil: unknown, every
	// name is accepted.
	Parameters []string
	// Defaults are the version's default values (margo's DefaultValues).
	Defaults map[string]any
	// Immutable names the parameters whose setting says immutable: true.
	Immutable []string
}

func (v *VersionFacts) known(name string) bool {
	return v == nil || v.Parameters == nil || slices.Contains(v.Parameters, name)
}

func (v *VersionFacts) immutable(name string) bool {
	return v != nil && slices.Contains(v.Immutable, name)
}

// ExclusionReason says why a member is excluded from a rollout.
type ExclusionReason string

// The exclusion reasons.
const (
	// ExcludedAtTarget: nothing to do. Upgrade: the member runs the target
	// or a newer version; rollback: it runs the target or an older one;
	// install: the device already has the application; reconfigure: it
	// already has every requested value.
	ExcludedAtTarget ExclusionReason = "at-target"
	// ExcludedPolicyRefused: the supplier's policy refuses (minUpgradeFrom
	// with path: direct or no path, the rollback policy, an immutable or
	// unknown parameter), with the refusal's sentence and the supplier's
	// reason where it declares one.
	ExcludedPolicyRefused ExclusionReason = "policy-refused"
	// ExcludedNoRevision: rollback: the member never ran the target version
	// (no earlier revision of it was ever installed).
	ExcludedNoRevision ExclusionReason = "no-revision"
	// ExcludedUnplaceable: the device's capabilities do not fit the
	// version's requirements (no deployment profile fits).
	ExcludedUnplaceable ExclusionReason = "unplaceable"
	// ExcludedBusy: the member belongs to another active rollout, has an
	// operation in progress, or is being removed.
	ExcludedBusy ExclusionReason = "busy"
	// ExcludedNotSeen: the device was not seen within the selector's
	// notSeenFor.
	ExcludedNotSeen ExclusionReason = "not-seen"
	// ExcludedOperator: the exclude action, after the start.
	ExcludedOperator ExclusionReason = "operator"
)

var allExclusionReasons = []ExclusionReason{
	ExcludedAtTarget, ExcludedPolicyRefused, ExcludedNoRevision, ExcludedUnplaceable, ExcludedBusy, ExcludedNotSeen, ExcludedOperator,
}

// AllExclusionReasons returns every exclusion reason, in the order of the
// vocabulary. The result is a copy.
func AllExclusionReasons() []ExclusionReason { return slices.Clone(allExclusionReasons) }

// Valid reports whether r is one of the declared reasons.
func (r ExclusionReason) Valid() bool { return slices.Contains(allExclusionReasons, r) }

// PlanKind says how an eligible member reaches the target.
type PlanKind string

// The plan kinds.
const (
	PlanDirect PlanKind = "direct" // one operation step
	PlanHops   PlanKind = "hops"   // through intermediate versions (upgrade, path: auto)
)

// MemberPlan is an eligible member's plan as the rollout shows it:
// {"kind": "direct"} or {"kind": "hops", "through": ["1.5.0"]} (the
// versions passed on the way, without the start and the target).
type MemberPlan struct {
	Kind    PlanKind  `json:"kind"`
	Through []Version `json:"through,omitempty"`
}

// Key returns a string that groups members by plan: "direct", or "hops:"
// and the versions passed, joined by ",".
func (p MemberPlan) Key() string {
	if p.Kind != PlanHops {
		return string(PlanDirect)
	}
	s := make([]string, len(p.Through))
	for i, v := range p.Through {
		s[i] = v.String()
	}
	return "hops:" + strings.Join(s, ",")
}

// MemberFacts is what classifying one member reads. For install rollouts a
// member is a device (HasDeployment says whether it already has the
// application); for the other actions it is a deployment of the
// application.
type MemberFacts struct {
	Key           MemberKey
	HasDeployment bool
	State         State
	Removing      bool
	// Version is what the device runs: the version of the installed
	// revision (after a failed upgrade, not the desired one).
	Version Version
	// Revision is the deployment's current revision, whose rollback window
	// counts (RollbackWindowStart).
	Revision int
	// Revisions is the deployment's history (any order): the rollback
	// target is the most recent earlier revision at the target version that
	// was installed.
	Revisions []RevisionTimes
	// Parameters are the current effective values; OperatorSet says which
	// the operator set (nil: unknown, see CarryInput).
	Parameters  map[string]any
	OperatorSet map[string]bool
	// ActiveOperation is the id of an operation in progress ("": none; an
	// operation that already reached its target counts as none).
	ActiveOperation string
	// BusyRollout is the id of another active rollout the member belongs
	// to ("": none).
	BusyRollout string
	// LastSeenAt is when the device was last seen (zero: never).
	LastSeenAt time.Time
	// Placeable says the device's capabilities fit the target version (a
	// deployment profile fits); Misfit says why not.
	Placeable bool
	Misfit    string
	// ValueProblems, for a reconfiguration, says why the member's version
	// refuses the requested values (its parameter schemas, which margo
	// checks); "" when it accepts them.
	ValueProblems string
}

// Classification is one member's classification at start.
type Classification struct {
	Eligible bool
	// Plan and Hops (the versions each operation step publishes, ending
	// with the target; one step but for an upgrade through hops) are set
	// when Eligible.
	Plan MemberPlan
	Hops []Version
	// Reason, Detail (a sentence) and, for policy-refused, SupplierReason
	// (the supplier's own text, when it declares one) and Refusal (the
	// error the single operation would return) are set when not Eligible.
	Reason         ExclusionReason
	Detail         string
	SupplierReason string
	Refusal        error
	// RestoreRevision is, for rollback, the revision the member returns to.
	RestoreRevision int
	// Values are the parameter values of the final revision (install: the
	// requested ones; upgrade: carried over; reconfigure: merged; rollback:
	// nil, the restored revision's), and Changes their diff.
	Values  map[string]any
	Changes []ParamChange
}

// Classifier classifies the members of one rollout. It caches the upgrade
// plan of each installed version, so that a fleet of 100,000 deployments
// on a few versions plans each path once. It is not safe for concurrent
// use.
type Classifier struct {
	s        RolloutSettings
	now      time.Time
	versions map[Version]*VersionFacts
	entries  []CatalogEntry
	target   *VersionFacts
	plans    map[Version]cachedPlan
}

type cachedPlan struct {
	plan Plan
	err  error
}

// NewClassifier prepares the classification of a rollout with settings s
// (validated: ValidateRolloutSpec), over every version of the application
// (any order), at now (the server's clock, read by the caller).
//
// It refuses what is wrong for every member alike: returns EINVALID (type
// "invalid-rollout") with a FieldError at /targetVersion when the target
// is not in versions or is yanked, and at /parameters/{name} for each
// requested parameter the target version (install, upgrade) does not
// define; EINTERNAL when versions lists one version twice.
func NewClassifier(s RolloutSettings, versions []VersionFacts, now time.Time) (*Classifier, error) {
	c := &Classifier{s: s, now: now, versions: make(map[Version]*VersionFacts, len(versions)),
		entries: make([]CatalogEntry, 0, len(versions)), plans: map[Version]cachedPlan{}}
	for i := range versions {
		v := &versions[i]
		if _, dup := c.versions[v.Version]; dup {
			return nil, duplicateVersion(v.Version)
		}
		c.versions[v.Version] = v
		c.entries = append(c.entries, CatalogEntry{Version: v.Version, Yanked: v.Yanked, Upgrade: v.Lifecycle.Upgrade})
	}
	slices.SortFunc(c.entries, func(a, b CatalogEntry) int { return Compare(a.Version, b.Version) })
	var fe []FieldError
	if s.Action != RolloutReconfigure {
		ts := s.Target.String()
		c.target = c.versions[s.Target]
		switch {
		case c.target == nil:
			fe = append(fe, FieldError{Pointer: "/targetVersion", Detail: fmt.Sprintf("version %s is not in the catalog of this application", ts)})
		case c.target.Yanked:
			fe = append(fe, FieldError{Pointer: "/targetVersion", Detail: fmt.Sprintf("version %s was yanked: it cannot be the target of a rollout", ts)})
		}
	}
	if s.Action == RolloutInstall || s.Action == RolloutUpgrade {
		for _, n := range sortedKeys(s.Parameters) {
			if c.target != nil && !c.target.known(n) {
				fe = append(fe, FieldError{Pointer: paramPointer(n), Detail: fmt.Sprintf("unknown parameter %q: version %s does not define it", n, s.Target)})
			}
		}
	}
	if len(fe) > 0 {
		return nil, &Error{Code: EINVALID, Type: ProblemInvalidRollout, Fields: fe,
			Message: fmt.Sprintf("The rollout request is not valid: %s: %s.", fe[0].Pointer, fe[0].Detail) + more(len(fe))}
	}
	return c, nil
}

// Classify classifies one member. The checks, in order (the first that
// excludes decides):
//
//  1. busy: the member belongs to another active rollout, has an operation
//     in progress, is being removed, or its state takes no new revision
//     (install: another rollout installs on the device);
//  2. not-seen: NotSeenFor is set and the device was not seen since
//     now - NotSeenFor (or never);
//  3. at-target (see ExcludedAtTarget);
//  4. unplaceable: install, upgrade and rollback, when !Placeable;
//  5. rollback: no-revision, then the installed version's rollback policy
//     (CheckRollback, never forced);
//  6. upgrade: the path (PlanUpgrade with the rollout's path), then the
//     parameters (CarryOver and CheckImmutable); reconfigure: the
//     parameters (PlanReconfigure).
//
// Facts without a deployment in an upgrade, reconfigure or rollback are
// classified unplaceable (the device has no deployment to change). Schema
// validation of the resulting values is the caller's (margo).
func (c *Classifier) Classify(m MemberFacts) Classification {
	a := c.s.Action
	if a == RolloutInstall {
		return c.classifyInstall(m)
	}
	if !m.HasDeployment {
		return excluded(ExcludedUnplaceable, "the device has no deployment of the application")
	}
	if x, ok := c.busy(m); ok {
		return x
	}
	if x, ok := c.notSeen(m); ok {
		return x
	}
	switch a {
	case RolloutUpgrade:
		return c.classifyUpgrade(m)
	case RolloutReconfigure:
		return c.classifyReconfigure(m)
	case RolloutRollback:
		return c.classifyRollback(m)
	}
	return excluded(ExcludedPolicyRefused, fmt.Sprintf("unknown rollout action %q", a))
}

func excluded(r ExclusionReason, detail string) Classification {
	return Classification{Reason: r, Detail: detail}
}

func refused(err error, supplierReason string) Classification {
	return Classification{Reason: ExcludedPolicyRefused, Detail: errorMessage(err), SupplierReason: supplierReason, Refusal: err}
}

func (c *Classifier) busy(m MemberFacts) (Classification, bool) {
	switch {
	case m.BusyRollout != "":
		return excluded(ExcludedBusy, "member of the active rollout "+m.BusyRollout), true
	case m.Removing:
		return excluded(ExcludedBusy, "the deployment is being removed"), true
	case m.ActiveOperation != "":
		return excluded(ExcludedBusy, "operation "+m.ActiveOperation+" is in progress"), true
	}
	if m.HasDeployment {
		if _, err := Publish(m.State, c.s.Action.OperationKind()); err != nil {
			return excluded(ExcludedBusy, errorMessage(err)), true
		}
	}
	return Classification{}, false
}

func (c *Classifier) notSeen(m MemberFacts) (Classification, bool) {
	if c.s.NotSeenFor <= 0 {
		return Classification{}, false
	}
	since := c.now.Add(-c.s.NotSeenFor)
	switch {
	case m.LastSeenAt.IsZero():
		return excluded(ExcludedNotSeen, "the device was never seen"), true
	case m.LastSeenAt.Before(since):
		return excluded(ExcludedNotSeen, fmt.Sprintf("the device was last seen %s, more than %s ago",
			m.LastSeenAt.UTC().Format(time.RFC3339), FormatDuration(c.s.NotSeenFor))), true
	}
	return Classification{}, false
}

func direct(v Version) (MemberPlan, []Version) { return MemberPlan{Kind: PlanDirect}, []Version{v} }

func (c *Classifier) classifyInstall(m MemberFacts) Classification {
	if m.BusyRollout != "" {
		return excluded(ExcludedBusy, "member of the active rollout "+m.BusyRollout)
	}
	if x, ok := c.notSeen(m); ok {
		return x
	}
	if m.HasDeployment {
		return excluded(ExcludedAtTarget, "the device already has the application")
	}
	if !m.Placeable {
		return excluded(ExcludedUnplaceable, misfit(m, c.s.Target))
	}
	x := Classification{Eligible: true, Values: MergeValues(nil, c.s.Parameters)}
	x.Plan, x.Hops = direct(c.s.Target)
	x.Changes = DiffValues(nil, x.Values)
	return x
}

func misfit(m MemberFacts, v Version) string {
	if m.Misfit != "" {
		return m.Misfit
	}
	return fmt.Sprintf("the device's capabilities fit no deployment profile of %s", v)
}

func (c *Classifier) classifyUpgrade(m MemberFacts) Classification {
	is, ts := m.Version.String(), c.s.Target.String()
	switch o := Compare(m.Version, c.s.Target); {
	case o == 0:
		return excluded(ExcludedAtTarget, "the deployment already runs "+ts)
	case o > 0:
		return excluded(ExcludedAtTarget, fmt.Sprintf("the deployment runs %s, newer than the target %s: an upgrade does not go back (a rollback does)", is, ts))
	}
	if !m.Placeable {
		return excluded(ExcludedUnplaceable, misfit(m, c.s.Target))
	}
	cp, ok := c.plans[m.Version]
	if !ok {
		cp.plan, cp.err = PlanUpgrade(m.Version, c.s.Target, c.entries, c.s.Path)
		c.plans[m.Version] = cp
	}
	if cp.err != nil {
		return refused(cp.err, "")
	}
	cur := c.versions[m.Version]
	var oldDefaults map[string]any
	if cur != nil {
		oldDefaults = cur.Defaults
	}
	t := c.target
	values, changes := CarryOver(CarryInput{Current: m.Parameters, OperatorSet: m.OperatorSet, OldDefaults: oldDefaults,
		TargetParams: t.Parameters, TargetDefaults: t.Defaults, TargetPolicy: t.Lifecycle, Requested: c.s.Parameters})
	if t.Parameters == nil { // unknown names: keep what runs, set what is asked
		values = MergeValues(m.Parameters, c.s.Parameters)
		changes = DiffValues(m.Parameters, values)
	}
	if err := CheckImmutable(m.Parameters, values, func(n string) bool { return cur.immutable(n) || t.immutable(n) }); err != nil {
		return refused(err, "")
	}
	x := Classification{Eligible: true, Hops: slices.Clone(cp.plan.Hops), Values: values, Changes: changes}
	x.Plan = MemberPlan{Kind: PlanDirect}
	if !cp.plan.Direct {
		x.Plan = MemberPlan{Kind: PlanHops, Through: slices.Clone(cp.plan.Hops[:len(cp.plan.Hops)-1])}
	}
	return x
}

func (c *Classifier) classifyReconfigure(m MemberFacts) Classification {
	cur := c.versions[m.Version]
	p, err := PlanReconfigure(m.Parameters, c.s.Parameters, cur.immutable, cur.known)
	if err != nil {
		var de *Error
		if errors.As(err, &de) && de.Type == ProblemNoChange {
			return excluded(ExcludedAtTarget, "the deployment already has every requested value")
		}
		return refused(err, "")
	}
	if m.ValueProblems != "" {
		return excluded(ExcludedPolicyRefused, "version "+m.Version.String()+" refuses these values: "+m.ValueProblems)
	}
	x := Classification{Eligible: true, Values: p.Values, Changes: p.Changes}
	x.Plan, x.Hops = direct(m.Version)
	return x
}

func (c *Classifier) classifyRollback(m MemberFacts) Classification {
	is, ts := m.Version.String(), c.s.Target.String()
	switch o := Compare(m.Version, c.s.Target); {
	case o == 0:
		return excluded(ExcludedAtTarget, "the deployment already runs "+ts)
	case o < 0:
		return excluded(ExcludedAtTarget, fmt.Sprintf("the deployment runs %s, older than the target %s: a rollback does not go forward (an upgrade does)", is, ts))
	}
	if !m.Placeable {
		return excluded(ExcludedUnplaceable, misfit(m, c.s.Target))
	}
	restore := RestoreRevision(m.Revisions, m.Revision, c.s.Target)
	if restore == 0 {
		return excluded(ExcludedNoRevision, fmt.Sprintf("the deployment never ran %s: no earlier revision of it was installed", ts))
	}
	var policy RollbackPolicy
	if cur := c.versions[m.Version]; cur != nil {
		policy = cur.Lifecycle.Rollback
	}
	if _, err := CheckRollback(RollbackInput{Installed: m.Version, Policy: policy, InstalledAt: RollbackWindowStart(m.Revisions, m.Revision),
		Now: c.now, Target: c.s.Target}); err != nil {
		return refused(err, policy.Reason)
	}
	x := Classification{Eligible: true, RestoreRevision: restore}
	x.Plan, x.Hops = direct(c.s.Target)
	return x
}

// RestoreRevision returns the revision a rollback to version target
// restores on a deployment whose current revision is current: the most
// recent earlier revision of history (any order) at that version that the
// device installed; 0 when there is none (the deployment never ran it).
func RestoreRevision(history []RevisionTimes, current int, target Version) int {
	best := 0
	for _, r := range history {
		if r.N < current && r.N > best && r.Version == target && !r.InstalledAt.IsZero() {
			best = r.N
		}
	}
	return best
}

// NoEligibleError is the refusal of a rollout whose eligible set is empty:
// EINVALID (type "no-eligible-members", Extra {"excluded": the counts by
// reason}), with a message naming the counts. Nothing is created.
func NoEligibleError(excludedByReason map[ExclusionReason]int) error {
	total := 0
	var parts []string
	counts := map[string]int{}
	for _, r := range allExclusionReasons {
		if n := excludedByReason[r]; n > 0 {
			total += n
			parts = append(parts, fmt.Sprintf("%d %s", n, r))
			counts[string(r)] = n
		}
	}
	msg := "The rollout has no eligible member: the selector matches none."
	if total > 0 {
		msg = fmt.Sprintf("The rollout has no eligible member: all %d members the selector matches are excluded (%s).", total, strings.Join(parts, ", "))
	}
	return &Error{Code: EINVALID, Type: ProblemNoEligible, Message: msg, Extra: map[string]any{"excluded": counts}}
}
