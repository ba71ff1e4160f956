package lifecycle

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func vp(s string) *Version {
	v := MustParseVersion(s)
	return &v
}

func TestUpgradePolicyDefaults(t *testing.T) {
	var u UpgradePolicy
	if got := u.DefaultStrategy(); got != StrategyRecreate {
		t.Errorf("zero UpgradePolicy.DefaultStrategy() = %q, want recreate", got)
	}
	if !u.Supports(StrategyRecreate) || u.Supports(StrategyBlueGreen) {
		t.Errorf("zero UpgradePolicy supports recreate only")
	}
	if got := u.EffectiveStrategies(); !slices.Equal(got, []Strategy{StrategyRecreate}) {
		t.Errorf("EffectiveStrategies() = %v, want [recreate]", got)
	}
	if !u.AllowsDirectFrom(MustParseVersion("0.0.1")) {
		t.Errorf("zero UpgradePolicy must allow any older version")
	}
	if u.DrainRequired() {
		t.Errorf("zero UpgradePolicy must not require a drain")
	}

	u = UpgradePolicy{Strategies: []Strategy{StrategyBlueGreen, StrategyRecreate}, MinUpgradeFrom: vp("1.5")}
	if got := u.DefaultStrategy(); got != StrategyBlueGreen {
		t.Errorf("DefaultStrategy() = %q, want blueGreen (the first listed)", got)
	}
	if !u.Supports(StrategyRecreate) || !u.Supports(StrategyBlueGreen) || u.Supports("canary") {
		t.Errorf("Supports disagrees with Strategies %v", u.Strategies)
	}
	for _, tt := range []struct {
		installed string
		want      bool
	}{
		{"1.0.0", false}, {"1.5.0-rc.1", false}, {"1.5.0", true}, {"1.5", true}, {"1.9.9", true},
	} {
		if got := u.AllowsDirectFrom(MustParseVersion(tt.installed)); got != tt.want {
			t.Errorf("AllowsDirectFrom(%s) with minUpgradeFrom 1.5.0 = %v, want %v", tt.installed, got, tt.want)
		}
	}
}

func TestDrainPolicyDefaults(t *testing.T) {
	var d DrainPolicy
	if d.EffectiveTimeout() != DefaultDrainTimeout || d.EffectiveOnTimeout() != OnTimeoutAbort {
		t.Errorf("zero DrainPolicy: timeout %s onTimeout %q, want %s abort", d.EffectiveTimeout(), d.EffectiveOnTimeout(), DefaultDrainTimeout)
	}
	d = DrainPolicy{Timeout: time.Minute, OnTimeout: OnTimeoutProceed}
	if d.EffectiveTimeout() != time.Minute || d.EffectiveOnTimeout() != OnTimeoutProceed {
		t.Errorf("declared DrainPolicy not kept: %+v", d)
	}
}

func TestRollbackPolicy(t *testing.T) {
	var zero RollbackPolicy
	if zero.AllowsTarget(MustParseVersion("1.0")) {
		t.Errorf("zero RollbackPolicy must forbid rollback")
	}
	r := RollbackPolicy{Allowed: true, MinVersion: vp("1.8.0"), Window: 72 * time.Hour}
	for _, tt := range []struct {
		target string
		want   bool
	}{{"1.7.9", false}, {"1.8.0-rc.1", false}, {"1.8.0", true}, {"1.9.0", true}} {
		if got := r.AllowsTarget(MustParseVersion(tt.target)); got != tt.want {
			t.Errorf("AllowsTarget(%s) with minVersion 1.8.0 = %v, want %v", tt.target, got, tt.want)
		}
	}
	installed := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		after time.Duration
		want  bool
	}{{0, true}, {72 * time.Hour, true}, {72*time.Hour + time.Second, false}} {
		if got := r.WithinWindow(installed, installed.Add(tt.after)); got != tt.want {
			t.Errorf("WithinWindow(+%s) with window 72h = %v, want %v", tt.after, got, tt.want)
		}
	}
	noLimit := RollbackPolicy{Allowed: true}
	if !noLimit.WithinWindow(installed, installed.Add(10000*time.Hour)) {
		t.Errorf("a zero Window must be no limit")
	}
}

func TestOnUpgradeOf(t *testing.T) {
	l := Lifecycle{Parameters: map[string]ParameterPolicy{"a": {OnUpgrade: OnUpgradeReset}, "b": {}}}
	for name, want := range map[string]OnUpgrade{"a": OnUpgradeReset, "b": OnUpgradeKeep, "c": OnUpgradeKeep} {
		if got := l.OnUpgradeOf(name); got != want {
			t.Errorf("OnUpgradeOf(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestLifecycleValidate(t *testing.T) {
	own := MustParseVersion("2.0.0")
	tests := []struct {
		name string
		l    Lifecycle
		own  Version
		want []string
	}{
		{"zero", Lifecycle{}, own, nil},
		{"full valid", Lifecycle{
			Upgrade: UpgradePolicy{MinUpgradeFrom: vp("1.5"), Drain: &DrainPolicy{Required: true, Timeout: time.Minute, OnTimeout: OnTimeoutProceed},
				Strategies: []Strategy{StrategyRecreate, StrategyBlueGreen}},
			Rollback:   RollbackPolicy{Allowed: true, MinVersion: vp("1.8"), Window: time.Hour, Reason: "schema"},
			Parameters: map[string]ParameterPolicy{"a": {OnUpgrade: OnUpgradeReset}, "b": {}},
		}, own, nil},
		{"minUpgradeFrom equal", Lifecycle{Upgrade: UpgradePolicy{MinUpgradeFrom: vp("2.0")}}, own, []string{"/upgrade/minUpgradeFrom"}},
		{"minUpgradeFrom higher", Lifecycle{Upgrade: UpgradePolicy{MinUpgradeFrom: vp("2.1")}}, own, []string{"/upgrade/minUpgradeFrom"}},
		{"minUpgradeFrom prerelease of own is lower", Lifecycle{Upgrade: UpgradePolicy{MinUpgradeFrom: vp("2.0.0-rc.1")}}, own, nil},
		{"minUpgradeFrom zero", Lifecycle{Upgrade: UpgradePolicy{MinUpgradeFrom: &Version{}}}, own, []string{"/upgrade/minUpgradeFrom"}},
		{"own unknown skips ordering", Lifecycle{Upgrade: UpgradePolicy{MinUpgradeFrom: vp("9")}}, Version{}, nil},
		{"negative timeout", Lifecycle{Upgrade: UpgradePolicy{Drain: &DrainPolicy{Timeout: -time.Second}}}, own, []string{"/upgrade/drain/timeout"}},
		{"bad onTimeout", Lifecycle{Upgrade: UpgradePolicy{Drain: &DrainPolicy{OnTimeout: "retry"}}}, own, []string{"/upgrade/drain/onTimeout"}},
		{"bad and repeated strategies", Lifecycle{Upgrade: UpgradePolicy{Strategies: []Strategy{StrategyRecreate, "canary", StrategyRecreate}}}, own,
			[]string{"/upgrade/strategies/1", "/upgrade/strategies/2"}},
		{"rollback minVersion equal", Lifecycle{Rollback: RollbackPolicy{Allowed: true, MinVersion: vp("2")}}, own, []string{"/rollback/minVersion"}},
		{"negative window", Lifecycle{Rollback: RollbackPolicy{Window: -time.Hour}}, own, []string{"/rollback/window"}},
		{"drain timeout above its range", Lifecycle{Upgrade: UpgradePolicy{Drain: &DrainPolicy{Timeout: 169 * time.Hour}}}, own, []string{"/upgrade/drain/timeout"}},
		{"drain timeout below its range", Lifecycle{Upgrade: UpgradePolicy{Drain: &DrainPolicy{Timeout: time.Millisecond}}}, own, []string{"/upgrade/drain/timeout"}},
		{"window above its range", Lifecycle{Rollback: RollbackPolicy{Window: 8761 * time.Hour}}, own, []string{"/rollback/window"}},
		{"window of months", Lifecycle{Rollback: RollbackPolicy{Window: 4380 * time.Hour}}, own, nil},
		{"long reason", Lifecycle{Rollback: RollbackPolicy{Reason: strings.Repeat("é", MaxReasonLength+1)}}, own, []string{"/rollback/reason"}},
		{"bad onUpgrade, escaped name", Lifecycle{Parameters: map[string]ParameterPolicy{"a/b~c": {OnUpgrade: "merge"}, "z": {OnUpgrade: "drop"}}}, own,
			[]string{"/parameters/a~1b~0c/onUpgrade", "/parameters/z/onUpgrade"}},
	}
	for _, tt := range tests {
		var got []string
		for _, f := range tt.l.Validate(tt.own) {
			got = append(got, f.Pointer)
			if f.Detail == "" {
				t.Errorf("%s: Validate gave %s without a detail", tt.name, f.Pointer)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Validate(%s) pointers = %v, want %v", tt.name, tt.own, got, tt.want)
		}
	}
}

func TestSummary(t *testing.T) {
	got := Lifecycle{}.Summary()
	if got.MinUpgradeFrom != "" || got.DrainRequired || got.RollbackAllowed || !slices.Equal(got.Strategies, []Strategy{StrategyRecreate}) {
		t.Errorf("zero Lifecycle Summary() = %+v, want defaults", got)
	}
	l := Lifecycle{
		Upgrade:  UpgradePolicy{MinUpgradeFrom: vp("1.5"), Drain: &DrainPolicy{Required: true}, Strategies: []Strategy{StrategyBlueGreen}},
		Rollback: RollbackPolicy{Allowed: true, MinVersion: vp("1.8"), Window: 72 * time.Hour},
	}
	got = l.Summary()
	want := Summary{MinUpgradeFrom: "1.5.0", DrainRequired: true, Strategies: []Strategy{StrategyBlueGreen},
		RollbackAllowed: true, RollbackMinVersion: "1.8.0", RollbackWindow: "72h0m0s"}
	if got.MinUpgradeFrom != want.MinUpgradeFrom || got.DrainRequired != want.DrainRequired || !slices.Equal(got.Strategies, want.Strategies) ||
		got.RollbackAllowed != want.RollbackAllowed || got.RollbackMinVersion != want.RollbackMinVersion || got.RollbackWindow != want.RollbackWindow {
		t.Errorf("Summary() = %+v, want %+v", got, want)
	}
	got.Strategies[0] = StrategyRecreate
	if l.Upgrade.Strategies[0] != StrategyBlueGreen {
		t.Errorf("Summary shares its Strategies with the Lifecycle")
	}
}

func TestEscapePointer(t *testing.T) {
	for in, want := range map[string]string{"a": "a", "a/b": "a~1b", "~": "~0", "~/": "~0~1", "": ""} {
		if got := EscapePointer(in); got != want {
			t.Errorf("EscapePointer(%q) = %q, want %q", in, got, want)
		}
	}
}
