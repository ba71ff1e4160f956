package lifecycle

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var rbInstalledAt = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// safePolicy is the design's example: 2.0 may go back to 1.8 or later
// within 72 hours.
var safePolicy = RollbackPolicy{Allowed: true, MinVersion: vp("1.8.0"), Window: 72 * time.Hour,
	Reason: "2.0 migrates the schema; 1.7 and older cannot read it"}

// rin returns a rollback input from 2.0.0 (installed at rbInstalledAt) to target at
// now, under policy.
func rin(policy RollbackPolicy, target string, now time.Time) RollbackInput {
	return RollbackInput{Installed: MustParseVersion("2.0.0"), Policy: policy, InstalledAt: rbInstalledAt, Now: now,
		Target: MustParseVersion(target)}
}

// withInput returns in changed by f.
func withInput(in RollbackInput, f func(*RollbackInput)) RollbackInput {
	f(&in)
	return in
}

func TestCheckRollback(t *testing.T) {
	forced := func(in RollbackInput) RollbackInput {
		in.Force, in.ForceReason, in.ForceAllowed = true, "INC-42: 2.0 corrupts orders", true
		return in
	}
	yanked := func(in RollbackInput) RollbackInput { in.TargetYanked = true; return in }
	tests := []struct {
		name       string
		in         RollbackInput
		wantCode   Code   // "" when allowed
		wantType   string // for refusals
		wantRule   string // Extra "rule" of a refusal
		wantForced []string
	}{
		{name: "allowed", in: rin(safePolicy, "1.9", rbInstalledAt.Add(time.Hour))},
		{name: "at the minimum version", in: rin(safePolicy, "1.8.0", rbInstalledAt.Add(time.Hour))},
		{name: "prerelease of the minimum is below it", in: rin(safePolicy, "1.8.0-rc.1", rbInstalledAt.Add(time.Hour)),
			wantCode: EINVALID, wantType: ProblemRollbackForbidden, wantRule: RollbackBelowMinVersion},
		{name: "below the minimum version", in: rin(safePolicy, "1.7.9", rbInstalledAt.Add(time.Hour)),
			wantCode: EINVALID, wantType: ProblemRollbackForbidden, wantRule: RollbackBelowMinVersion},
		{name: "at the installation instant", in: rin(safePolicy, "1.9", rbInstalledAt)},
		{name: "exactly at the end of the window", in: rin(safePolicy, "1.9", rbInstalledAt.Add(72*time.Hour))},
		{name: "1ns after the window", in: rin(safePolicy, "1.9", rbInstalledAt.Add(72*time.Hour+time.Nanosecond)),
			wantCode: EINVALID, wantType: ProblemRollbackForbidden, wantRule: RollbackOutsideWindow},
		{name: "clock before installation is within the window", in: rin(safePolicy, "1.9", rbInstalledAt.Add(-time.Hour))},
		{name: "unknown installation time is outside the window",
			in:       RollbackInput{Installed: MustParseVersion("2.0"), Policy: safePolicy, Now: rbInstalledAt, Target: MustParseVersion("1.9")},
			wantCode: EINVALID, wantType: ProblemRollbackForbidden, wantRule: RollbackOutsideWindow},
		{name: "no limits", in: rin(RollbackPolicy{Allowed: true}, "0.1", rbInstalledAt.Add(10*365*24*time.Hour))},
		{name: "unknown installation time without a window",
			in: RollbackInput{Installed: MustParseVersion("2.0"), Policy: RollbackPolicy{Allowed: true}, Now: rbInstalledAt, Target: MustParseVersion("1.9")}},
		{name: "absent policy forbids", in: rin(RollbackPolicy{}, "1.9", rbInstalledAt),
			wantCode: EINVALID, wantType: ProblemRollbackForbidden, wantRule: RollbackNotAllowed},
		{name: "bounds without allowed still forbid", in: rin(RollbackPolicy{MinVersion: vp("1.0"), Window: time.Hour}, "1.9", rbInstalledAt),
			wantCode: EINVALID, wantType: ProblemRollbackForbidden, wantRule: RollbackNotAllowed},
		{name: "every rule fails, the first is named", in: rin(RollbackPolicy{MinVersion: vp("1.8"), Window: time.Hour}, "1.0", rbInstalledAt.Add(2*time.Hour)),
			wantCode: EINVALID, wantType: ProblemRollbackForbidden, wantRule: RollbackNotAllowed},
		{name: "yanked target", in: yanked(rin(safePolicy, "1.9", rbInstalledAt)),
			wantCode: EINVALID, wantType: ProblemVersionYanked, wantRule: RollbackTargetYanked},
		{name: "yanked target and policy refusal", in: yanked(rin(RollbackPolicy{}, "1.9", rbInstalledAt)),
			wantCode: EINVALID, wantType: ProblemRollbackForbidden, wantRule: RollbackNotAllowed},

		// Direction, never overridable.
		{name: "same version", in: rin(safePolicy, "2.0", rbInstalledAt),
			wantCode: EINVALID, wantType: ProblemAlreadyAtVersion},
		{name: "same version forced", in: forced(rin(safePolicy, "2.0", rbInstalledAt)),
			wantCode: EINVALID, wantType: ProblemAlreadyAtVersion},
		{name: "newer target", in: rin(safePolicy, "2.1", rbInstalledAt),
			wantCode: EINVALID, wantType: ProblemRollbackTargetNewer},
		{name: "newer target forced", in: forced(rin(safePolicy, "2.1", rbInstalledAt)),
			wantCode: EINVALID, wantType: ProblemRollbackTargetNewer},
		{name: "zero target", in: RollbackInput{Installed: MustParseVersion("2.0"), Policy: safePolicy},
			wantCode: EINVALID, wantType: ProblemInvalidVersion},

		// Break-glass.
		{name: "forced over absent policy", in: forced(rin(RollbackPolicy{}, "1.9", rbInstalledAt)),
			wantForced: []string{RollbackNotAllowed}},
		{name: "forced over every rule", in: forced(yanked(rin(RollbackPolicy{MinVersion: vp("1.8"), Window: time.Hour}, "1.0", rbInstalledAt.Add(2*time.Hour)))),
			wantForced: []string{RollbackNotAllowed, RollbackBelowMinVersion, RollbackOutsideWindow, RollbackTargetYanked}},
		{name: "forced over the window", in: forced(rin(safePolicy, "1.9", rbInstalledAt.Add(73*time.Hour))),
			wantForced: []string{RollbackOutsideWindow}},
		{name: "forced over a yank", in: forced(yanked(rin(safePolicy, "1.9", rbInstalledAt))),
			wantForced: []string{RollbackTargetYanked}},
		{name: "force not needed", in: forced(rin(safePolicy, "1.9", rbInstalledAt))},
		{name: "force without reason", in: withInput(forced(rin(RollbackPolicy{}, "1.9", rbInstalledAt)), func(in *RollbackInput) { in.ForceReason = "" }),
			wantCode: EINVALID, wantType: ProblemForceReasonRequired},
		{name: "force with a blank reason", in: withInput(forced(rin(RollbackPolicy{}, "1.9", rbInstalledAt)), func(in *RollbackInput) { in.ForceReason = " \t\n" }),
			wantCode: EINVALID, wantType: ProblemForceReasonRequired},
		{name: "force with a reason too long", in: withInput(forced(rin(RollbackPolicy{}, "1.9", rbInstalledAt)), func(in *RollbackInput) { in.ForceReason = strings.Repeat("é", MaxReasonLength+1) }),
			wantCode: EINVALID, wantType: ProblemInvalidRequest},
		{name: "force with a reason at the bound", in: withInput(forced(rin(RollbackPolicy{}, "1.9", rbInstalledAt)), func(in *RollbackInput) { in.ForceReason = strings.Repeat("é", MaxReasonLength) }),
			wantForced: []string{RollbackNotAllowed}},
		{name: "force not permitted", in: withInput(forced(rin(RollbackPolicy{}, "1.9", rbInstalledAt)), func(in *RollbackInput) { in.ForceAllowed = false }),
			wantCode: EFORBIDDEN, wantType: ProblemBreakGlassForbidden},
		{name: "force not permitted wins over a missing reason", in: RollbackInput{Installed: MustParseVersion("2.0"), Target: MustParseVersion("1.0"), Now: rbInstalledAt, InstalledAt: rbInstalledAt, Force: true},
			wantCode: EFORBIDDEN, wantType: ProblemBreakGlassForbidden},
		{name: "force not permitted even when not needed", in: withInput(forced(rin(safePolicy, "1.9", rbInstalledAt)), func(in *RollbackInput) { in.ForceAllowed = false }),
			wantCode: EFORBIDDEN, wantType: ProblemBreakGlassForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := fmt.Sprintf("%s -> %s at +%s, force %v", tt.in.Installed, tt.in.Target, tt.in.Now.Sub(tt.in.InstalledAt), tt.in.Force)
			d, err := CheckRollback(tt.in)
			if tt.wantCode == "" {
				if err != nil {
					t.Fatalf("CheckRollback(%v) = %v, want allowed", in, err)
				}
				if d.Forced != (tt.wantForced != nil) || !slices.Equal(d.OverriddenRules, tt.wantForced) {
					t.Errorf("CheckRollback(%v) = forced %v %v, want forced %v %v", in, d.Forced, d.OverriddenRules, tt.wantForced != nil, tt.wantForced)
				}
				// Allowed: every check passed but those the override set aside.
				for _, c := range d.Checks {
					if !c.Passed && !d.Forced {
						t.Errorf("CheckRollback(%v) allowed with failed check %+v", in, c)
					}
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckRollback(%v) = allowed %+v, want %s/%s", in, d, tt.wantCode, tt.wantType)
			}
			if ErrorCode(err) != tt.wantCode || ErrorType(err) != tt.wantType {
				t.Fatalf("CheckRollback(%v) = %s/%s (%v), want %s/%s", in, ErrorCode(err), ErrorType(err), err, tt.wantCode, tt.wantType)
			}
			if tt.wantRule != "" {
				if got := asError(t, err).Extra["rule"]; got != tt.wantRule {
					t.Errorf("CheckRollback(%v) rule = %v, want %v", in, got, tt.wantRule)
				}
			}
			if d.Forced || d.OverriddenRules != nil {
				t.Errorf("CheckRollback(%v) refused but Forced = %v, OverriddenRules = %v", in, d.Forced, d.OverriddenRules)
			}
		})
	}
}

func TestCheckRollbackForbiddenExtra(t *testing.T) {
	_, err := CheckRollback(rin(safePolicy, "1.7.0", rbInstalledAt.Add(100*time.Hour)))
	e := asError(t, err)
	want := map[string]any{
		"installed":  "2.0.0",
		"target":     "1.7.0",
		"rule":       RollbackBelowMinVersion,
		"rules":      []string{RollbackBelowMinVersion, RollbackOutsideWindow},
		"reason":     safePolicy.Reason,
		"minVersion": "1.8.0",
		"window":     "72h0m0s",
		"windowEnd":  "2025-03-04T12:00:00Z",
	}
	if fmt.Sprint(e.Extra) != fmt.Sprint(want) {
		t.Errorf("CheckRollback(2.0 -> 1.7, +100h) Extra = %v, want %v", e.Extra, want)
	}
	// A person reads the supplier's reason and every broken rule.
	for _, s := range []string{safePolicy.Reason, "1.8.0", "72h0m0s", "force: true"} {
		if !strings.Contains(e.Message, s) {
			t.Errorf("CheckRollback(2.0 -> 1.7, +100h) message %q does not mention %q", e.Message, s)
		}
	}

	// Without a supplier reason, Extra has none.
	_, err = CheckRollback(rin(RollbackPolicy{}, "1.9", rbInstalledAt))
	if _, ok := asError(t, err).Extra["reason"]; ok {
		t.Errorf("CheckRollback(absent policy) Extra = %v, want no reason", asError(t, err).Extra)
	}
}

func TestCheckRollbackForceErrors(t *testing.T) {
	in := rin(RollbackPolicy{}, "1.9", rbInstalledAt)
	in.Force, in.ForceAllowed = true, true
	_, err := CheckRollback(in)
	if e := asError(t, err); len(e.Fields) != 1 || e.Fields[0].Pointer != "/reason" {
		t.Errorf("CheckRollback(force, no reason) Fields = %v, want one at /reason", e.Fields)
	}

	in.ForceAllowed, in.ForceReason = false, "because"
	in.ForceRefusal = "break-glass overrides are disabled on this server"
	_, err = CheckRollback(in)
	if e := asError(t, err); !strings.Contains(e.Message, in.ForceRefusal) {
		t.Errorf("CheckRollback(force refused) message %q does not carry the caller's explanation %q", e.Message, in.ForceRefusal)
	}
	in.ForceRefusal = ""
	_, err = CheckRollback(in)
	if e := asError(t, err); e.Message == "" || e.Extra["rules"] == nil {
		t.Errorf("CheckRollback(force refused, no explanation) = %+v, want a generic message and the rules", e)
	}
}

func TestCheckRollbackChecks(t *testing.T) {
	forcedIn := rin(RollbackPolicy{}, "1.9", rbInstalledAt)
	forcedIn.Force, forcedIn.ForceAllowed, forcedIn.ForceReason = true, true, "incident"
	tests := []struct {
		name string
		in   RollbackInput
		want []string
	}{
		{"allowed", rin(safePolicy, "1.9", rbInstalledAt),
			[]string{"+target-older", "+target-not-yanked", "+rollback-allowed", "+rollback-min-version", "+rollback-window"}},
		{"refused", rin(safePolicy, "1.0", rbInstalledAt.Add(73*time.Hour)),
			[]string{"+target-older", "+target-not-yanked", "+rollback-allowed", "-rollback-min-version", "-rollback-window"}},
		{"forced", forcedIn,
			[]string{"+target-older", "+target-not-yanked", "-rollback-allowed", "+rollback-min-version", "+rollback-window", "+break-glass"}},
		{"newer", rin(safePolicy, "3.0", rbInstalledAt), []string{"-target-older"}},
	}
	for _, tt := range tests {
		d, _ := CheckRollback(tt.in)
		if got := checkNames(d.Checks); !slices.Equal(got, tt.want) {
			t.Errorf("CheckRollback(%s).Checks = %v, want %v", tt.name, got, tt.want)
		}
	}
	d, err := CheckRollback(rin(safePolicy, "1.9", rbInstalledAt))
	if err != nil || d.SupplierReason != safePolicy.Reason {
		t.Errorf("CheckRollback(allowed).SupplierReason = %q, %v; want %q", d.SupplierReason, err, safePolicy.Reason)
	}
}
