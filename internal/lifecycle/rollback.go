package lifecycle

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// RollbackInput is everything CheckRollback looks at: a move of a deployment
// from the version it runs to a lower one (a rollback or a downgrade,
// including "roll back to revision n" when that revision has a lower
// version).
type RollbackInput struct {
	// Installed is the version the deployment runs.
	Installed Version
	// Policy is the lifecycle.rollback of the INSTALLED version: the version
	// being left decides, not the target (design section 4).
	Policy RollbackPolicy
	// InstalledAt is when the rollback window of Installed started on the
	// deployment: RollbackWindowStart, which every caller uses (when the
	// version became installed, or, if it never did, when it was first
	// published). The zero time means unknown, which is outside every
	// window.
	InstalledAt time.Time
	// Now is the server's clock, read by the caller.
	Now time.Time
	// Target is the version to go back to.
	Target Version
	// TargetYanked says Target is yanked in the catalog.
	TargetYanked bool
	// Force asks for a break-glass override of the rules above.
	Force bool
	// ForceReason is the operator's reason for the override, recorded in the
	// audit log and on the revision. Required with Force.
	ForceReason string
	// ForceAllowed is the caller's verdict on whether this request may
	// override at all: the server setting allows overrides and the caller
	// has the admin role.
	ForceAllowed bool
	// ForceRefusal says, when ForceAllowed is false, why, in a sentence
	// that is shown to the caller as is: for example "break-glass overrides
	// are disabled on this server" or "a break-glass override needs the
	// admin role; this token has the operator role". "" gives a generic
	// sentence.
	ForceRefusal string
}

// RollbackDecision is the outcome of an allowed rollback.
type RollbackDecision struct {
	// Forced says a break-glass override set aside at least one rule; the
	// caller records it, with the reason, in the audit log and on the
	// revision.
	Forced bool `json:"forced"`
	// OverriddenRules lists the rules the override set aside (RollbackNotAllowed,
	// RollbackBelowMinVersion, RollbackOutsideWindow, RollbackTargetYanked),
	// in that order; nil when nothing was overridden.
	OverriddenRules []string `json:"overriddenRules,omitempty"`
	// SupplierReason is the installed version's rollback.reason, for plans
	// and audit records; "" when it declares none.
	SupplierReason string `json:"supplierReason,omitempty"`
	// Checks lists every check evaluated, passed or not; also on refusal.
	Checks []Check `json:"checks"`
}

// The rules of a rollback, as named in a "rollback-forbidden" refusal's
// Extra "rule" and in RollbackDecision.OverriddenRules.
const (
	RollbackNotAllowed      = "not-allowed"       // the installed version does not declare rollback safe
	RollbackBelowMinVersion = "below-min-version" // target < the installed version's rollback.minVersion
	RollbackOutsideWindow   = "outside-window"    // now is past the installed version's rollback.window
	RollbackTargetYanked    = "version-yanked"    // the target version is yanked
)

// Problem types of CheckRollback's errors that the planner does not share.
const (
	ProblemRollbackForbidden   = "rollback-forbidden"    // EINVALID: a rule of the installed version refuses
	ProblemRollbackTargetNewer = "rollback-target-newer" // EINVALID: the target is not lower
	ProblemForceReasonRequired = "force-reason-required" // EINVALID: force without a reason
	ProblemBreakGlassForbidden = "break-glass-forbidden" // EFORBIDDEN: this caller may not override
)

const (
	defaultBreakGlassForbidden  = "this caller may not override rollback rules"
	breakGlassHint              = "An admin can override this with force: true and a reason (break-glass), where the server allows overrides."
	rollbackReconfigurationHint = "going back to an earlier revision of the same version is a reconfiguration, not a rollback"
)

// CheckRollback decides whether a deployment may move from in.Installed to
// the lower version in.Target (design section 4, "Rollback / downgrade").
// It is governed by the rollback policy of the installed version and
// allowed only when all of these hold:
//
//   - the policy says allowed (the zero policy, i.e. an absent section,
//     forbids: "we cannot assume it is OK to roll back");
//   - target >= the policy's MinVersion, if set;
//   - in.Now - in.InstalledAt <= the policy's Window, if set (inclusive: a
//     rollback exactly at the end of the window is allowed; an unknown
//     InstalledAt is outside the window; a Now before InstalledAt, a clock
//     skew, is inside);
//   - the target is not yanked. A yank says a version must no longer be
//     deployed; a rollback to one is refused like a policy breach, and like
//     one it can be overridden (an emergency may need the last version that
//     worked, even if it was yanked later).
//
// Break-glass: with in.Force, a request that fails any of these rules is
// allowed with Forced true and OverriddenRules naming every rule set aside.
// A request with in.Force is checked for permission and reason even when no
// rule needs overriding, because asking for an override is itself an
// admin act (it is then allowed with Forced false). The direction rules
// below are never overridable.
//
// Errors, in the order they are checked (the decision still carries the
// Checks evaluated):
//   - EINVALID (type "invalid-version") if Installed or Target is the zero
//     Version;
//   - EINVALID (type "already-at-version") if Target == Installed (going
//     back to an earlier revision of the same version is a reconfiguration);
//   - EINVALID (type "rollback-target-newer") if Target > Installed (that is
//     an upgrade: PlanUpgrade);
//   - EFORBIDDEN (type "break-glass-forbidden", Extra {"installed",
//     "target", "rules": the rules an override would set aside, if any}) if
//     Force and not ForceAllowed; the message carries ForceRefusal;
//   - EINVALID (type "force-reason-required", FieldError /reason) if Force
//     and ForceReason is blank; EINVALID (type "invalid-request",
//     FieldError /reason) if it is longer than MaxReasonLength characters;
//   - EINVALID (type "rollback-forbidden", Extra {"installed", "target",
//     "rule": the first failed policy rule, "rules": every failed rule,
//     "reason": the supplier's reason when it declares one, "minVersion" and
//     "window" when set, "windowEnd" when the window is set and InstalledAt
//     known}) if a policy rule fails and Force is not set;
//   - EINVALID (type "version-yanked", Extra {"installed", "target", "rule"})
//     if only the yank refuses and Force is not set.
func CheckRollback(in RollbackInput) (RollbackDecision, error) {
	var d RollbackDecision
	if in.Installed.IsZero() || in.Target.IsZero() {
		return d, &Error{Code: EINVALID, Type: ProblemInvalidVersion,
			Message: "a rollback needs both the installed and the target version"}
	}
	p := in.Policy
	d.SupplierReason = p.Reason
	is, ts := in.Installed.String(), in.Target.String()
	check := func(name string, passed bool, format string, args ...any) {
		d.Checks = append(d.Checks, Check{Name: name, Passed: passed, Detail: fmt.Sprintf(format, args...)})
	}
	extra := map[string]any{"installed": is, "target": ts}

	order := Compare(in.Target, in.Installed)
	switch {
	case order < 0:
		check(CheckTargetOlder, true, "%s is older than the installed %s", ts, is)
	case order == 0:
		check(CheckTargetOlder, false, "the deployment already runs %s; %s", ts, rollbackReconfigurationHint)
		return d, &Error{Code: EINVALID, Type: ProblemAlreadyAtVersion, Extra: extra,
			Message: fmt.Sprintf("The deployment already runs %s, so there is no version to go back to; %s.", ts, rollbackReconfigurationHint)}
	default:
		check(CheckTargetOlder, false, "%s is newer than the installed %s: that is an upgrade", ts, is)
		return d, &Error{Code: EINVALID, Type: ProblemRollbackTargetNewer, Extra: extra,
			Message: fmt.Sprintf("%s is newer than the installed %s: a move to a higher version is an upgrade, not a rollback. Request an upgrade instead.", ts, is)}
	}

	var failed []string // every failed rule, in the order of the constants
	if in.TargetYanked {
		check(CheckTargetNotYanked, false, "%s is yanked", ts)
	} else {
		check(CheckTargetNotYanked, true, "%s is not yanked", ts)
	}
	var why []string // sentences for the failed policy rules
	if p.Allowed {
		check(CheckRollbackAllowed, true, "%s declares that going back from it is safe (rollback.allowed)", is)
	} else {
		failed = append(failed, RollbackNotAllowed)
		s := fmt.Sprintf("%s does not declare that going back from it is safe (lifecycle.rollback.allowed), and wfm cannot assume it is", is)
		why = append(why, s)
		check(CheckRollbackAllowed, false, "%s", s)
	}
	switch {
	case p.MinVersion == nil:
		check(CheckRollbackMinVersion, true, "%s sets no rollback.minVersion: any older version", is)
	case Compare(in.Target, *p.MinVersion) >= 0:
		check(CheckRollbackMinVersion, true, "%s is at least %s, the oldest version %s allows going back to", ts, p.MinVersion, is)
	default:
		failed = append(failed, RollbackBelowMinVersion)
		s := fmt.Sprintf("%s allows going back only as far as %s, and %s is older", is, p.MinVersion, ts)
		why = append(why, s)
		check(CheckRollbackMinVersion, false, "%s", s)
	}
	if p.MinVersion != nil {
		extra["minVersion"] = p.MinVersion.String()
	}
	if p.Window > 0 {
		extra["window"] = p.Window.String()
		var s string
		switch {
		case in.InstalledAt.IsZero():
			s = fmt.Sprintf("%s allows going back only within %s after it became installed, and when it became installed is unknown", is, p.Window)
		case p.WithinWindow(in.InstalledAt, in.Now):
			end := in.InstalledAt.Add(p.Window)
			extra["windowEnd"] = end.UTC().Format(time.RFC3339Nano)
			check(CheckRollbackWindow, true, "within the rollback window of %s: it ends %s", p.Window, end.UTC().Format(time.RFC3339))
		default:
			end := in.InstalledAt.Add(p.Window)
			extra["windowEnd"] = end.UTC().Format(time.RFC3339Nano)
			s = fmt.Sprintf("%s allows going back only within %s after it became installed, and that window ended at %s", is, p.Window, end.UTC().Format(time.RFC3339))
		}
		if s != "" {
			failed = append(failed, RollbackOutsideWindow)
			why = append(why, s)
			check(CheckRollbackWindow, false, "%s", s)
		}
	} else {
		check(CheckRollbackWindow, true, "%s sets no rollback.window: no time limit", is)
	}
	if in.TargetYanked {
		failed = append(failed, RollbackTargetYanked)
	}

	if in.Force {
		if err := checkForce(in, failed); err != nil {
			check(CheckBreakGlass, false, "%s", errorMessage(err))
			return d, err
		}
		if len(failed) == 0 {
			check(CheckBreakGlass, true, "requested but not needed: every rule allows this rollback")
		} else {
			check(CheckBreakGlass, true, "override sets aside %s; reason: %q", strings.Join(failed, ", "), strings.TrimSpace(in.ForceReason))
			d.Forced, d.OverriddenRules = true, failed
		}
		return d, nil
	}
	if len(why) > 0 {
		extra["rule"] = failed[0]
		extra["rules"] = failed
		if p.Reason != "" {
			extra["reason"] = p.Reason
		}
		msg := fmt.Sprintf("Rolling back from %s to %s is forbidden: %s.", is, ts, strings.Join(why, "; also, "))
		if p.Reason != "" {
			msg += fmt.Sprintf(" The supplier of %s says: %q.", is, p.Reason)
		}
		return d, &Error{Code: EINVALID, Type: ProblemRollbackForbidden, Extra: extra, Message: msg + " " + breakGlassHint}
	}
	if in.TargetYanked {
		extra["rule"] = RollbackTargetYanked
		return d, &Error{Code: EINVALID, Type: ProblemVersionYanked, Extra: extra,
			Message: fmt.Sprintf("Version %s was yanked: a rollback to it is refused. %s", ts, breakGlassHint)}
	}
	return d, nil
}

// RevisionTimes is what RollbackWindowStart reads of one revision of a
// deployment.
type RevisionTimes struct {
	// N is the revision's number.
	N int
	// Version is the revision's version.
	Version Version
	// PublishedAt is when wfm published the revision (created it).
	PublishedAt time.Time
	// InstalledAt is when the device first confirmed the revision
	// installed; zero when it never did.
	InstalledAt time.Time
}

// RollbackWindowStart returns when the rollback window of the version of
// revision current started on a deployment with the revisions history (in
// any order). Manual and automatic (onFailure: rollback) rollbacks both take
// CheckRollback's InstalledAt from it, so that one rule measures both.
//
// A window belongs to a version, not to a revision: it covers the run of
// revisions of current's version that ends at current (consecutive numbers,
// all of that version: a reconfiguration extends the run, any other version
// ends it, and so does a number missing from history, which need hold only
// the revisions of the run). The window starts
//
//  1. when the device first confirmed a revision of the run installed (the
//     earliest InstalledAt of the run), if it ever did;
//  2. otherwise (the version never became installed: its install or upgrade
//     failed, or has not finished), when wfm first published a revision of
//     the run (the earliest PublishedAt): the earliest moment the device
//     could have begun to run that version. A version that never became
//     installed thus gets no longer a window than one that had, and the
//     window is not skipped.
//
// The result is the zero time when current is not in history or no time is
// known; CheckRollback counts that as outside every window.
func RollbackWindowStart(history []RevisionTimes, current int) time.Time {
	byN := make(map[int]RevisionTimes, len(history))
	for _, r := range history {
		byN[r.N] = r
	}
	cur, ok := byN[current]
	if !ok {
		return time.Time{}
	}
	var installed, published time.Time
	earliest := func(t *time.Time, c time.Time) {
		if !c.IsZero() && (t.IsZero() || c.Before(*t)) {
			*t = c
		}
	}
	for n := current; ; n-- {
		r, ok := byN[n]
		if !ok || Compare(r.Version, cur.Version) != 0 {
			break
		}
		earliest(&installed, r.InstalledAt)
		earliest(&published, r.PublishedAt)
	}
	if !installed.IsZero() {
		return installed
	}
	return published
}

// checkForce returns the refusal of a break-glass request, nil if it may
// proceed.
func checkForce(in RollbackInput, failed []string) error {
	if !in.ForceAllowed {
		why := in.ForceRefusal
		if why == "" {
			why = defaultBreakGlassForbidden
		}
		extra := map[string]any{"installed": in.Installed.String(), "target": in.Target.String()}
		if len(failed) > 0 {
			extra["rules"] = failed
		}
		return &Error{Code: EFORBIDDEN, Type: ProblemBreakGlassForbidden, Extra: extra,
			Message: fmt.Sprintf("A break-glass override (force: true) is not permitted: %s.", strings.TrimSuffix(why, "."))}
	}
	reason := strings.TrimSpace(in.ForceReason)
	if reason == "" {
		msg := "a break-glass override (force: true) needs a reason: it is recorded in the audit log and on the revision"
		return &Error{Code: EINVALID, Type: ProblemForceReasonRequired, Message: "A break-glass override needs a reason.",
			Fields: []FieldError{{Pointer: "/reason", Detail: msg}}}
	}
	if n := utf8.RuneCountInString(reason); n > MaxReasonLength {
		msg := fmt.Sprintf("must be at most %d characters, got %d", MaxReasonLength, n)
		return &Error{Code: EINVALID, Type: ProblemInvalidRequest, Message: "The override reason is too long: " + msg + ".",
			Fields: []FieldError{{Pointer: "/reason", Detail: msg}}}
	}
	return nil
}
