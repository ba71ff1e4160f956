package lifecycle

import (
	"fmt"
	"time"
)

// RevertKind says what an abort with revert does to one member.
type RevertKind string

// The revert kinds.
const (
	// RevertNone: the rollout did not change the member (or it is no
	// longer its member): it is left as it is and its status stays.
	RevertNone RevertKind = "none"
	// RevertRestore: publish the member's pre-rollout revision again
	// (OperationRollback restoring BaseRevision), after the installed
	// version's rollback policy allowed it when the version goes down.
	RevertRestore RevertKind = "restore"
	// RevertUpgrade: the rollout rolled the member back; its revert
	// restores the pre-rollout revision as an upgrade (OperationUpgrade),
	// which minUpgradeFrom governs.
	RevertUpgrade RevertKind = "upgrade"
	// RevertRemove: the rollout installed the member; its revert removes
	// the deployment (OperationRemove). No policy applies.
	RevertRemove RevertKind = "remove"
)

// RevertInput is what deciding one member's revert reads.
type RevertInput struct {
	Action RolloutAction
	Status MemberStatus
	// Changed says the rollout published at least one revision to the
	// member (install: created its deployment).
	Changed bool
	// BaseRevision and BaseVersion are the member's revision from before
	// the rollout, the one a revert returns to, and its version.
	BaseRevision int
	BaseVersion  Version
	BaseYanked   bool
	// Version is what the device runs now (the installed revision's
	// version: for a multi-hop member that stopped half way, the hop it
	// reached); Revision is the current revision and Revisions the history,
	// for the rollback window (RollbackWindowStart).
	Version   Version
	Revision  int
	Revisions []RevisionTimes
	// Policy is the rollback policy of Version: the version being left
	// decides.
	Policy RollbackPolicy
	// Entries is the application's catalog, for a revert that is an
	// upgrade (minUpgradeFrom).
	Entries []CatalogEntry
	Now     time.Time
	// Force, ForceReason, ForceAllowed and ForceRefusal are the abort's
	// break-glass request, as in RollbackInput. An override sets aside the
	// rollback policy only, never minUpgradeFrom (a version that cannot be
	// reached directly cannot run the data it would find).
	Force        bool
	ForceReason  string
	ForceAllowed bool
	ForceRefusal string
}

// Revert is the decided revert of one member.
type Revert struct {
	Kind RevertKind
	// Operation is the kind of the operation that reverts ("" for none).
	Operation OperationKind
	// ToRevision is the revision restored (BaseRevision; 0 for remove and
	// none).
	ToRevision int
	// Allowed says the revert runs; when false the member becomes
	// not-reverted with Reason (a sentence), SupplierReason (the installed
	// version's rollback.reason, when it declares one) and Refusal (the
	// error a single operation would return).
	Allowed        bool
	Reason         string
	SupplierReason string
	Refusal        error
	// Forced and OverriddenRules say a break-glass override set rules
	// aside; the caller audits it with the reason.
	Forced          bool
	OverriddenRules []string
	// Checks lists the checks evaluated.
	Checks []Check
}

// DecideRevert decides what an abort with revert does to one member:
//
//   - a member the rollout did not change, or no longer its member
//     (pending, in progress: cancel it first, excluded, removed, already
//     reverted or not): none;
//   - install: remove the deployment the rollout created;
//   - otherwise the member returns to BaseRevision, by the versions:
//     the same version as before (a reconfiguration, or a step that never
//     installed): restore, no policy; a higher version (an upgrade, with
//     every hop: the member goes back past all of them in one step):
//     restore where the installed version's rollback policy allows going
//     back to BaseVersion (CheckRollback, with the abort's break-glass
//     override); a lower version (a rollback rollout): an upgrade to
//     BaseVersion, which must be direct (PlanUpgrade, path direct:
//     minUpgradeFrom).
//
// A refusal is not an error: Allowed is false and the member is listed
// not-reverted with the supplier's reason.
//
// Returns the break-glass errors of CheckRollback (EFORBIDDEN
// "break-glass-forbidden", EINVALID "force-reason-required"), which refuse
// the abort request as a whole; EINTERNAL for a changed member without a
// base revision or version (a bug of the caller).
func DecideRevert(in RevertInput) (Revert, error) {
	switch in.Status {
	case MemberSucceeded, MemberFailed, MemberCancelled:
	default:
		return Revert{Kind: RevertNone}, nil
	}
	if !in.Changed {
		return Revert{Kind: RevertNone}, nil
	}
	if in.Action == RolloutInstall {
		return Revert{Kind: RevertRemove, Operation: OperationRemove, Allowed: true}, nil
	}
	if in.BaseRevision <= 0 || in.BaseVersion.IsZero() || in.Version.IsZero() {
		return Revert{}, Errorf(EINTERNAL, "revert of a changed member without its base revision or versions (base %d %q, now %q)", in.BaseRevision, in.BaseVersion, in.Version)
	}
	r := Revert{Kind: RevertRestore, Operation: OperationRollback, ToRevision: in.BaseRevision}
	bs, vs := in.BaseVersion.String(), in.Version.String()
	switch o := Compare(in.Version, in.BaseVersion); {
	case o == 0:
		r.Allowed = true
		r.Checks = []Check{{Name: CheckRollbackAllowed, Passed: true,
			Detail: fmt.Sprintf("the member runs %s as before the rollout: restoring revision %d is a reconfiguration, not a version rollback", vs, in.BaseRevision)}}
		return r, nil
	case o > 0:
		dec, err := CheckRollback(RollbackInput{Installed: in.Version, Policy: in.Policy, InstalledAt: RollbackWindowStart(in.Revisions, in.Revision),
			Now: in.Now, Target: in.BaseVersion, TargetYanked: in.BaseYanked,
			Force: in.Force, ForceReason: in.ForceReason, ForceAllowed: in.ForceAllowed, ForceRefusal: in.ForceRefusal})
		r.Checks, r.SupplierReason = dec.Checks, dec.SupplierReason
		switch ErrorCode(err) {
		case "":
			r.Allowed, r.Forced, r.OverriddenRules = true, dec.Forced, dec.OverriddenRules
			return r, nil
		case EFORBIDDEN:
			return Revert{}, err
		}
		if ErrorType(err) == ProblemForceReasonRequired || ErrorType(err) == ProblemInvalidRequest {
			return Revert{}, err
		}
		r.Reason, r.Refusal = fmt.Sprintf("Not reverted from %s to %s: %s", vs, bs, errorMessage(err)), err
		return r, nil
	}
	r.Kind, r.Operation = RevertUpgrade, OperationUpgrade
	plan, err := PlanUpgrade(in.Version, in.BaseVersion, in.Entries, PathDirect)
	r.Checks = plan.Checks
	if err != nil {
		r.Reason, r.Refusal = fmt.Sprintf("Not reverted from %s to %s: %s", vs, bs, errorMessage(err)), err
		return r, nil
	}
	r.Allowed = true
	return r, nil
}
