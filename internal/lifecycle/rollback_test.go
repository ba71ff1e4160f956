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

func TestRollbackWindowStart(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }
	rev := func(n int, v string, published, installed int) RevisionTimes {
		r := RevisionTimes{N: n, Version: MustParseVersion(v), PublishedAt: at(published)}
		if installed >= 0 {
			r.InstalledAt = at(installed)
		}
		return r
	}
	const never = -1
	tests := []struct {
		name    string
		history []RevisionTimes
		current int
		want    time.Time
	}{
		{"installed: when it became installed",
			[]RevisionTimes{rev(1, "1.0.0", 0, 1), rev(2, "2.0.0", 5, 6)}, 2, at(6)},
		{"a reconfiguration keeps the version's window",
			[]RevisionTimes{rev(1, "1.0.0", 0, 1), rev(2, "2.0.0", 5, 6), rev(3, "2.0.0", 9, 10)}, 3, at(6)},
		{"a failed reconfiguration keeps the version's window",
			[]RevisionTimes{rev(1, "1.0.0", 0, 1), rev(2, "2.0.0", 5, 6), rev(3, "2.0.0", 9, never)}, 3, at(6)},
		{"any order",
			[]RevisionTimes{rev(3, "2.0.0", 9, 10), rev(1, "1.0.0", 0, 1), rev(2, "2.0.0", 5, 6)}, 3, at(6)},
		{"never installed (failed upgrade): when it was first published",
			[]RevisionTimes{rev(1, "1.0.0", 0, 1), rev(2, "2.0.0", 5, never)}, 2, at(5)},
		{"never installed, reconfigured while failing: the first publication",
			[]RevisionTimes{rev(1, "1.0.0", 0, 1), rev(2, "2.0.0", 5, never), rev(3, "2.0.0", 7, never)}, 3, at(5)},
		{"another version ends the run: a version installed again starts a new window",
			[]RevisionTimes{rev(1, "2.0.0", 0, 1), rev(2, "3.0.0", 5, never), rev(3, "2.0.0", 8, 9)}, 3, at(9)},
		{"another version ends the run, also when never installed",
			[]RevisionTimes{rev(1, "2.0.0", 0, 1), rev(2, "3.0.0", 5, 6), rev(3, "2.0.0", 8, never)}, 3, at(8)},
		{"a missing number ends the run (only the run need be loaded)",
			[]RevisionTimes{rev(1, "2.0.0", 0, 1), rev(3, "2.0.0", 8, never)}, 3, at(8)},
		{"revisions after current do not count",
			[]RevisionTimes{rev(1, "1.0.0", 0, 1), rev(2, "2.0.0", 5, never), rev(3, "2.0.0", 7, 8)}, 2, at(5)},
		{"current unknown: zero", []RevisionTimes{rev(1, "1.0.0", 0, 1)}, 2, time.Time{}},
		{"no history: zero", nil, 1, time.Time{}},
		{"no time known: zero", []RevisionTimes{{N: 1, Version: MustParseVersion("1.0.0")}}, 1, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RollbackWindowStart(tt.history, tt.current); !got.Equal(tt.want) {
				t.Errorf("RollbackWindowStart(%v, %d) = %v, want %v", tt.history, tt.current, got, tt.want)
			}
		})
	}
}

// TestRollbackWindowOfFailedVersion runs the one rule through CheckRollback
// as both kinds of rollback use it: a version whose upgrade failed is held to
// its window from its first publication.
func TestRollbackWindowOfFailedVersion(t *testing.T) {
	published := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	history := []RevisionTimes{
		{N: 1, Version: MustParseVersion("1.0.0"), PublishedAt: published.Add(-time.Hour), InstalledAt: published.Add(-time.Hour)},
		{N: 2, Version: MustParseVersion("2.0.0"), PublishedAt: published},
	}
	policy := RollbackPolicy{Allowed: true, Window: time.Hour}
	tests := []struct {
		name    string
		now     time.Time
		allowed bool
	}{
		{"within the window of the publication", published.Add(30 * time.Minute), true},
		{"at its end", published.Add(time.Hour), true},
		{"after it", published.Add(time.Hour + time.Second), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CheckRollback(RollbackInput{Installed: MustParseVersion("2.0.0"), Policy: policy,
				InstalledAt: RollbackWindowStart(history, 2), Now: tt.now, Target: MustParseVersion("1.0.0")})
			if (err == nil) != tt.allowed {
				t.Errorf("CheckRollback at %v = %v, want allowed %v", tt.now, err, tt.allowed)
			}
		})
	}
}
