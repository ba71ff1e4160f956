package lifecycle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var clNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// clVersions is a catalog where 2.0.0 requires >= 1.5.0 and forbids going
// back (with the supplier's reason), 2.1.0 allows going back to 1.5.0 or
// later within 72h, and 1.2.0 is yanked.
func clVersions() []VersionFacts {
	params := []string{"port", "mode", "region"}
	defaults := map[string]any{"port": 8080, "mode": "fast"}
	return []VersionFacts{
		{Version: MustParseVersion("2.1.0"), Parameters: params, Defaults: defaults, Immutable: []string{"region"},
			Lifecycle: Lifecycle{Upgrade: UpgradePolicy{MinUpgradeFrom: vp("1.5.0")},
				Rollback: RollbackPolicy{Allowed: true, MinVersion: vp("1.5.0"), Window: 72 * time.Hour}}},
		{Version: MustParseVersion("1.0.0"), Parameters: params, Defaults: defaults, Immutable: []string{"region"}},
		{Version: MustParseVersion("1.2.0"), Yanked: true},
		{Version: MustParseVersion("1.5.0"), Parameters: params, Defaults: defaults, Immutable: []string{"region"},
			Lifecycle: Lifecycle{Rollback: RollbackPolicy{Allowed: true}}},
		{Version: MustParseVersion("2.0.0"), Parameters: params, Defaults: defaults, Immutable: []string{"region"},
			Lifecycle: Lifecycle{Upgrade: UpgradePolicy{MinUpgradeFrom: vp("1.5.0")},
				Rollback: RollbackPolicy{Reason: "2.0 migrates the schema; older versions cannot read it"}}},
	}
}

// member returns a deployment on version v, installed, seen a minute ago,
// placeable, whose history ran 1.0.0 (rev 1), 1.5.0 (rev 2) and v (rev 3)
// installed an hour ago.
func member(v string, f ...func(*MemberFacts)) MemberFacts {
	m := MemberFacts{Key: MemberKey{"c1", "d1", "dep-" + v}, HasDeployment: true, State: StateInstalled,
		Version: MustParseVersion(v), Revision: 3, Parameters: map[string]any{"port": 9000, "region": "eu"},
		LastSeenAt: clNow.Add(-time.Minute), Placeable: true,
		Revisions: []RevisionTimes{
			{N: 1, Version: MustParseVersion("1.0.0"), InstalledAt: clNow.Add(-48 * time.Hour)},
			{N: 2, Version: MustParseVersion("1.5.0"), InstalledAt: clNow.Add(-24 * time.Hour)},
			{N: 3, Version: MustParseVersion(v), PublishedAt: clNow.Add(-time.Hour), InstalledAt: clNow.Add(-time.Hour)},
		}}
	for _, g := range f {
		g(&m)
	}
	return m
}

func TestClassify(t *testing.T) {
	upgrade := func(path PathMode, f ...func(*RolloutSettings)) RolloutSettings {
		s := RolloutSettings{Action: RolloutUpgrade, Target: MustParseVersion("2.0.0"), Path: path, NotSeenFor: 24 * time.Hour}
		for _, g := range f {
			g(&s)
		}
		return s
	}
	reconfigure := RolloutSettings{Action: RolloutReconfigure, Parameters: map[string]any{"port": 9001}}
	rollback := RolloutSettings{Action: RolloutRollback, Target: MustParseVersion("1.5.0")}
	install := RolloutSettings{Action: RolloutInstall, Target: MustParseVersion("2.0.0"), Parameters: map[string]any{"port": 1}, NotSeenFor: time.Hour}
	v := MustParseVersion
	hops := func(through ...string) MemberPlan {
		p := MemberPlan{Kind: PlanHops}
		for _, s := range through {
			p.Through = append(p.Through, v(s))
		}
		return p
	}
	type want struct {
		eligible  bool
		plan      MemberPlan
		hops      []string
		reason    ExclusionReason
		errType   string // of Refusal
		supplier  string
		restore   int
		detailHas string
	}
	directPlan := MemberPlan{Kind: PlanDirect}
	tests := []struct {
		name string
		s    RolloutSettings
		m    MemberFacts
		want want
	}{
		// The mixed fleet: 1.5.0 goes direct, 1.0.0 hops through 1.5.0 with
		// path auto and is refused with path direct.
		{"upgrade 1.5.0 direct", upgrade(PathAuto), member("1.5.0"), want{eligible: true, plan: directPlan, hops: []string{"2.0.0"}}},
		{"upgrade 1.0.0 auto hops", upgrade(PathAuto), member("1.0.0"), want{eligible: true, plan: hops("1.5.0"), hops: []string{"1.5.0", "2.0.0"}}},
		{"upgrade 1.0.0 direct refused", upgrade(PathDirect), member("1.0.0"),
			want{reason: ExcludedPolicyRefused, errType: ProblemUpgradePathRequired, detailHas: "minUpgradeFrom"}},
		{"upgrade at target", upgrade(PathAuto), member("2.0.0"), want{reason: ExcludedAtTarget, detailHas: "already runs 2.0.0"}},
		{"upgrade past target", upgrade(PathAuto), member("2.1.0"), want{reason: ExcludedAtTarget, detailHas: "newer than the target"}},
		{"busy in another rollout", upgrade(PathAuto), member("1.5.0", func(m *MemberFacts) { m.BusyRollout = "r-1" }),
			want{reason: ExcludedBusy, detailHas: "r-1"}},
		{"busy with an operation", upgrade(PathAuto), member("1.5.0", func(m *MemberFacts) { m.ActiveOperation = "op-7" }),
			want{reason: ExcludedBusy, detailHas: "op-7"}},
		{"busy being removed", upgrade(PathAuto), member("1.5.0", func(m *MemberFacts) { m.Removing = true }), want{reason: ExcludedBusy, detailHas: "removed"}},
		{"busy while upgrading", upgrade(PathAuto), member("1.5.0", func(m *MemberFacts) { m.State = StateUpgrading }), want{reason: ExcludedBusy, detailHas: "under way"}},
		{"a failed deployment is eligible", upgrade(PathAuto), member("1.5.0", func(m *MemberFacts) { m.State = StateFailed }),
			want{eligible: true, plan: directPlan, hops: []string{"2.0.0"}}},
		{"never seen", upgrade(PathAuto), member("1.5.0", func(m *MemberFacts) { m.LastSeenAt = time.Time{} }), want{reason: ExcludedNotSeen, detailHas: "never"}},
		{"not seen for two days", upgrade(PathAuto), member("1.5.0", func(m *MemberFacts) { m.LastSeenAt = clNow.Add(-48 * time.Hour) }),
			want{reason: ExcludedNotSeen, detailHas: "more than 24h ago"}},
		{"not seen is not checked without notSeenFor", upgrade(PathAuto, func(s *RolloutSettings) { s.NotSeenFor = 0 }),
			member("1.5.0", func(m *MemberFacts) { m.LastSeenAt = time.Time{} }), want{eligible: true, plan: directPlan, hops: []string{"2.0.0"}}},
		{"unplaceable", upgrade(PathAuto), member("1.5.0", func(m *MemberFacts) { m.Placeable, m.Misfit = false, "needs arm64" }),
			want{reason: ExcludedUnplaceable, detailHas: "needs arm64"}},
		{"an immutable parameter", upgrade(PathAuto, func(s *RolloutSettings) { s.Parameters = map[string]any{"region": "us"} }), member("1.5.0"),
			want{reason: ExcludedPolicyRefused, errType: ProblemImmutableParameter, detailHas: "region"}},
		{"no deployment in an upgrade", upgrade(PathAuto), member("1.5.0", func(m *MemberFacts) { m.HasDeployment = false }),
			want{reason: ExcludedUnplaceable, detailHas: "no deployment"}},

		{"reconfigure", reconfigure, member("1.5.0"), want{eligible: true, plan: directPlan, hops: []string{"1.5.0"}}},
		{"reconfigure at target", reconfigure, member("1.5.0", func(m *MemberFacts) { m.Parameters["port"] = 9001 }),
			want{reason: ExcludedAtTarget, detailHas: "every requested value"}},
		{"reconfigure refused by the version's schemas", reconfigure, member("1.5.0", func(m *MemberFacts) { m.ValueProblems = "/parameters/port: at most 9000" }),
			want{reason: ExcludedPolicyRefused, detailHas: "/parameters/port: at most 9000"}},
		{"reconfigure immutable", RolloutSettings{Action: RolloutReconfigure, Parameters: map[string]any{"region": "us"}}, member("1.5.0"),
			want{reason: ExcludedPolicyRefused, errType: ProblemImmutableParameter}},
		{"reconfigure unknown on this version", RolloutSettings{Action: RolloutReconfigure, Parameters: map[string]any{"color": "red"}}, member("1.5.0"),
			want{reason: ExcludedPolicyRefused, errType: ProblemInvalidParameterValues}},

		{"rollback allowed", rollback, member("2.1.0"), want{eligible: true, plan: directPlan, hops: []string{"1.5.0"}, restore: 2}},
		{"rollback forbidden by the supplier", rollback, member("2.0.0"),
			want{reason: ExcludedPolicyRefused, errType: ProblemRollbackForbidden, supplier: "2.0 migrates the schema; older versions cannot read it", detailHas: "migrates"}},
		{"rollback outside the window", rollback, member("2.1.0", func(m *MemberFacts) { m.Revisions[2].InstalledAt = clNow.Add(-100 * time.Hour) }),
			want{reason: ExcludedPolicyRefused, errType: ProblemRollbackForbidden, detailHas: "window"}},
		{"rollback never ran it", rollback, member("2.1.0", func(m *MemberFacts) { m.Revisions = m.Revisions[2:] }),
			want{reason: ExcludedNoRevision, detailHas: "never ran 1.5.0"}},
		{"rollback ran it but never installed it", rollback, member("2.1.0", func(m *MemberFacts) { m.Revisions[1].InstalledAt = time.Time{} }),
			want{reason: ExcludedNoRevision}},
		{"rollback at target", rollback, member("1.5.0"), want{reason: ExcludedAtTarget}},
		{"rollback below target", rollback, member("1.0.0"), want{reason: ExcludedAtTarget, detailHas: "does not go forward"}},
		{"rollback unplaceable", rollback, member("2.1.0", func(m *MemberFacts) { m.Placeable = false }), want{reason: ExcludedUnplaceable, detailHas: "no deployment profile"}},

		{"install", install, MemberFacts{Placeable: true, LastSeenAt: clNow}, want{eligible: true, plan: directPlan, hops: []string{"2.0.0"}}},
		{"install where it is", install, MemberFacts{HasDeployment: true, Placeable: true, LastSeenAt: clNow}, want{reason: ExcludedAtTarget}},
		{"install unplaceable", install, MemberFacts{LastSeenAt: clNow}, want{reason: ExcludedUnplaceable}},
		{"install busy", install, MemberFacts{BusyRollout: "r-2", Placeable: true, LastSeenAt: clNow}, want{reason: ExcludedBusy}},
		{"install not seen", install, MemberFacts{Placeable: true}, want{reason: ExcludedNotSeen}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewClassifier(tt.s, clVersions(), clNow)
			require.NoError(t, err)
			got := c.Classify(tt.m)
			w := tt.want
			assert.Equal(t, w.eligible, got.Eligible, "Eligible (%s: %s)", got.Reason, got.Detail)
			if w.eligible {
				assert.Equal(t, w.plan, got.Plan)
				var hs []string
				for _, h := range got.Hops {
					hs = append(hs, h.String())
				}
				assert.Equal(t, w.hops, hs)
				assert.Equal(t, w.restore, got.RestoreRevision)
				assert.Empty(t, got.Reason)
				return
			}
			assert.Equal(t, w.reason, got.Reason)
			assert.NotEmpty(t, got.Detail)
			assert.Contains(t, got.Detail, w.detailHas)
			assert.Equal(t, w.supplier, got.SupplierReason)
			if w.errType != "" {
				assert.Equal(t, w.errType, ErrorType(got.Refusal))
			} else {
				assert.Nil(t, got.Refusal)
			}
			assert.Nil(t, got.Hops)
		})
	}
}

// TestClassifyMixedFleet classifies a fleet on 1.0.0 and 1.5.0 to 2.0.0
// (which requires >= 1.5.0): with path auto every member is eligible, the
// 1.0.0 ones through 1.5.0; with path direct the 1.0.0 ones are refused.
func TestClassifyMixedFleet(t *testing.T) {
	var fleet []MemberFacts
	for i := range 30 {
		v := "1.5.0"
		if i%3 == 0 {
			v = "1.0.0"
		}
		fleet = append(fleet, member(v))
	}
	for _, tc := range []struct {
		path               PathMode
		byPlan             map[string]int
		excludedByReason   map[ExclusionReason]int
		wantRefusalTypeAll string
	}{
		{PathAuto, map[string]int{"direct": 20, "hops:1.5.0": 10}, map[ExclusionReason]int{}, ""},
		{PathDirect, map[string]int{"direct": 20}, map[ExclusionReason]int{ExcludedPolicyRefused: 10}, ProblemUpgradePathRequired},
	} {
		c, err := NewClassifier(RolloutSettings{Action: RolloutUpgrade, Target: MustParseVersion("2.0.0"), Path: tc.path}, clVersions(), clNow)
		require.NoError(t, err)
		byPlan, byReason := map[string]int{}, map[ExclusionReason]int{}
		for _, m := range fleet {
			x := c.Classify(m)
			if x.Eligible {
				byPlan[x.Plan.Key()]++
				continue
			}
			byReason[x.Reason]++
			assert.Equal(t, tc.wantRefusalTypeAll, ErrorType(x.Refusal))
		}
		assert.Equal(t, tc.byPlan, byPlan, "path %s", tc.path)
		assert.Equal(t, tc.excludedByReason, byReason, "path %s", tc.path)
	}
}

func TestNewClassifier(t *testing.T) {
	tests := []struct {
		name   string
		s      RolloutSettings
		vs     func([]VersionFacts) []VersionFacts
		code   Code
		fields []string
	}{
		{"unknown target", RolloutSettings{Action: RolloutUpgrade, Target: MustParseVersion("3.0.0")}, nil, EINVALID, []string{"/targetVersion"}},
		{"yanked target", RolloutSettings{Action: RolloutRollback, Target: MustParseVersion("1.2.0")}, nil, EINVALID, []string{"/targetVersion"}},
		{"unknown parameter", RolloutSettings{Action: RolloutInstall, Target: MustParseVersion("2.0.0"), Parameters: map[string]any{"b": 1, "a/x": 2}}, nil,
			EINVALID, []string{"/parameters/a~1x", "/parameters/b"}},
		{"reconfigure needs no target", RolloutSettings{Action: RolloutReconfigure, Parameters: map[string]any{"b": 1}}, nil, "", nil},
		{"a version twice", RolloutSettings{Action: RolloutUpgrade, Target: MustParseVersion("2.0.0")},
			func(vs []VersionFacts) []VersionFacts { return append(vs, vs[0]) }, EINTERNAL, nil},
	}
	for _, tt := range tests {
		vs := clVersions()
		if tt.vs != nil {
			vs = tt.vs(vs)
		}
		_, err := NewClassifier(tt.s, vs, clNow)
		assert.Equal(t, tt.code, ErrorCode(err), tt.name)
		if len(tt.fields) > 0 {
			var ptrs []string
			for _, f := range err.(*Error).Fields {
				ptrs = append(ptrs, f.Pointer)
			}
			assert.Equal(t, tt.fields, ptrs, tt.name)
		}
	}
}

func TestNoEligibleError(t *testing.T) {
	err := NoEligibleError(map[ExclusionReason]int{ExcludedBusy: 2, ExcludedAtTarget: 5})
	assert.Equal(t, EINVALID, ErrorCode(err))
	assert.Equal(t, ProblemNoEligible, ErrorType(err))
	assert.Equal(t, "The rollout has no eligible member: all 7 members the selector matches are excluded (5 at-target, 2 busy).", err.(*Error).Message)
	assert.Equal(t, map[string]int{"at-target": 5, "busy": 2}, err.(*Error).Extra["excluded"])
	assert.Contains(t, NoEligibleError(nil).Error(), "matches none")
}

func TestMemberPlanKey(t *testing.T) {
	assert.Equal(t, "direct", MemberPlan{Kind: PlanDirect}.Key())
	assert.Equal(t, "hops:1.5.0,1.8.0", MemberPlan{Kind: PlanHops, Through: []Version{MustParseVersion("1.5.0"), MustParseVersion("1.8.0")}}.Key())
}

func TestRestoreRevision(t *testing.T) {
	v1, v2 := MustParseVersion("1.0.0"), MustParseVersion("2.0.0")
	at := clNow
	h := []RevisionTimes{{N: 5, Version: v1, InstalledAt: at}, {N: 2, Version: v1, InstalledAt: at}, {N: 7, Version: v1}, {N: 8, Version: v2, InstalledAt: at}, {N: 9, Version: v1, InstalledAt: at}}
	for _, tc := range []struct {
		current int
		target  Version
		want    int
	}{
		{8, v1, 5}, // 7 never installed; 9 is not earlier
		{5, v1, 2},
		{2, v1, 0},
		{9, v2, 8},
		{8, v2, 0},
	} {
		if got := RestoreRevision(h, tc.current, tc.target); got != tc.want {
			t.Errorf("RestoreRevision(%d, %s) = %d, want %d", tc.current, tc.target, got, tc.want)
		}
	}
}
