package lifecycle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecideRevert(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	v := MustParseVersion
	entries := []CatalogEntry{
		{Version: v("1.0.0")}, {Version: v("1.5.0")},
		{Version: v("2.0.0"), Upgrade: UpgradePolicy{MinUpgradeFrom: vp("1.5.0")}},
	}
	allowed := RollbackPolicy{Allowed: true, Window: 72 * time.Hour}
	forbidden := RollbackPolicy{Reason: "2.0 migrates the schema"}
	// base: an upgrade rollout moved the member from revision 4 (1.5.0) to
	// revision 5 (2.0.0), installed an hour ago.
	base := func(f func(*RevertInput)) RevertInput {
		in := RevertInput{Action: RolloutUpgrade, Status: MemberSucceeded, Changed: true, BaseRevision: 4, BaseVersion: v("1.5.0"),
			Version: v("2.0.0"), Revision: 5, Policy: allowed, Entries: entries, Now: now,
			Revisions: []RevisionTimes{{N: 4, Version: v("1.5.0"), InstalledAt: now.Add(-48 * time.Hour)}, {N: 5, Version: v("2.0.0"), InstalledAt: now.Add(-time.Hour)}}}
		if f != nil {
			f(&in)
		}
		return in
	}
	force := func(in *RevertInput) { in.Force, in.ForceReason, in.ForceAllowed = true, "INC-7", true }
	tests := []struct {
		name      string
		in        RevertInput
		kind      RevertKind
		op        OperationKind
		to        int
		allowed   bool
		forced    bool
		supplier  string
		errType   string // of Refusal
		wantCode  Code   // of the returned error
		reasonHas string
	}{
		{"upgrade reverted", base(nil), RevertRestore, OperationRollback, 4, true, false, "", "", "", ""},
		{"upgrade refused by the supplier", base(func(in *RevertInput) { in.Policy = forbidden }), RevertRestore, OperationRollback, 4, false, false,
			"2.0 migrates the schema", ProblemRollbackForbidden, "", "migrates"},
		{"upgrade refused, forced", base(func(in *RevertInput) { in.Policy = forbidden; force(in) }), RevertRestore, OperationRollback, 4, true, true,
			"2.0 migrates the schema", "", "", ""},
		{"force without the right", base(func(in *RevertInput) { in.Policy, in.Force, in.ForceReason = forbidden, true, "x" }), "", "", 0, false, false, "", "", EFORBIDDEN, ""},
		{"force without a reason", base(func(in *RevertInput) { in.Policy, in.Force, in.ForceAllowed = forbidden, true, true }), "", "", 0, false, false, "", "", EINVALID, ""},
		{"outside the window", base(func(in *RevertInput) { in.Revisions[1].InstalledAt = now.Add(-100 * time.Hour) }), RevertRestore, OperationRollback, 4, false, false,
			"", ProblemRollbackForbidden, "", "window"},
		{"a multi-hop member goes back past all hops", base(func(in *RevertInput) {
			in.BaseRevision, in.BaseVersion = 3, v("1.0.0")
			in.Revisions = append(in.Revisions, RevisionTimes{N: 3, Version: v("1.0.0"), InstalledAt: now.Add(-72 * time.Hour)})
		}), RevertRestore, OperationRollback, 3, true, false, "", "", "", ""},
		{"a multi-hop member stopped half way", base(func(in *RevertInput) {
			in.Status, in.BaseRevision, in.BaseVersion, in.Version, in.Revision = MemberFailed, 3, v("1.0.0"), v("1.5.0"), 4
			in.Policy = RollbackPolicy{Allowed: true, MinVersion: vp("1.2.0"), Reason: "1.5 renames a column"}
		}), RevertRestore, OperationRollback, 3, false, false, "1.5 renames a column", ProblemRollbackForbidden, "", "as far as 1.2.0"},
		{"a step that never installed restores without policy", base(func(in *RevertInput) {
			in.Status, in.Version, in.Policy = MemberCancelled, v("1.5.0"), forbidden
		}), RevertRestore, OperationRollback, 4, true, false, "", "", "", ""},
		{"reconfigure restores without policy", base(func(in *RevertInput) {
			in.Action, in.Version, in.Policy = RolloutReconfigure, v("1.5.0"), forbidden
		}), RevertRestore, OperationRollback, 4, true, false, "", "", "", ""},
		{"install removes", base(func(in *RevertInput) { in.Action, in.BaseRevision, in.BaseVersion = RolloutInstall, 0, Version{} }),
			RevertRemove, OperationRemove, 0, true, false, "", "", "", ""},
		{"a rollback rollout reverts by an upgrade", base(func(in *RevertInput) {
			in.Action, in.BaseVersion, in.Version, in.Policy = RolloutRollback, v("2.0.0"), v("1.5.0"), forbidden
		}), RevertUpgrade, OperationUpgrade, 4, true, false, "", "", "", ""},
		{"a rollback rollout's revert meets minUpgradeFrom", base(func(in *RevertInput) {
			in.Action, in.BaseVersion, in.Version = RolloutRollback, v("2.0.0"), v("1.0.0")
			force(in)
		}), RevertUpgrade, OperationUpgrade, 4, false, false, "", ProblemUpgradePathRequired, "", "minUpgradeFrom"},
		{"unchanged members stay", base(func(in *RevertInput) { in.Changed = false }), RevertNone, "", 0, false, false, "", "", "", ""},
		{"pending members stay", base(func(in *RevertInput) { in.Status = MemberPending }), RevertNone, "", 0, false, false, "", "", "", ""},
		{"excluded members stay", base(func(in *RevertInput) { in.Status = MemberExcluded }), RevertNone, "", 0, false, false, "", "", "", ""},
		{"removed members stay", base(func(in *RevertInput) { in.Status = MemberRemoved }), RevertNone, "", 0, false, false, "", "", "", ""},
		{"in-progress members are cancelled first", base(func(in *RevertInput) { in.Status = MemberInProgress }), RevertNone, "", 0, false, false, "", "", "", ""},
		{"a changed member without a base", base(func(in *RevertInput) { in.BaseRevision = 0 }), "", "", 0, false, false, "", "", EINTERNAL, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecideRevert(tt.in)
			if tt.wantCode != "" {
				require.Error(t, err)
				assert.Equal(t, tt.wantCode, ErrorCode(err))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.kind, got.Kind)
			assert.Equal(t, tt.op, got.Operation)
			assert.Equal(t, tt.to, got.ToRevision)
			assert.Equal(t, tt.allowed, got.Allowed)
			assert.Equal(t, tt.forced, got.Forced)
			assert.Equal(t, tt.supplier, got.SupplierReason)
			if tt.errType != "" {
				assert.Equal(t, tt.errType, ErrorType(got.Refusal))
				assert.Contains(t, got.Reason, tt.reasonHas)
			} else {
				assert.Nil(t, got.Refusal)
				assert.Empty(t, got.Reason)
			}
			if tt.forced {
				assert.Equal(t, []string{RollbackNotAllowed}, got.OverriddenRules)
			}
		})
	}
}
