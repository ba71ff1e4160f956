package lifecycle

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestChooseStrategy(t *testing.T) {
	both := UpgradePolicy{Strategies: []Strategy{StrategyBlueGreen, StrategyRecreate}}
	blueOnly := UpgradePolicy{Strategies: []Strategy{StrategyBlueGreen}}
	tests := []struct {
		requested Strategy
		target    UpgradePolicy
		want      Strategy // "" for a refusal
	}{
		{"", UpgradePolicy{}, StrategyRecreate},
		{"", both, StrategyBlueGreen},
		{"", blueOnly, StrategyBlueGreen},
		{StrategyRecreate, UpgradePolicy{}, StrategyRecreate},
		{StrategyRecreate, both, StrategyRecreate},
		{StrategyBlueGreen, both, StrategyBlueGreen},
		{StrategyBlueGreen, UpgradePolicy{}, ""},
		{StrategyRecreate, blueOnly, ""},
		{"bluegreen", both, ""},
		{"rolling", UpgradePolicy{}, ""},
	}
	for _, tt := range tests {
		got, err := ChooseStrategy(tt.requested, tt.target)
		if tt.want == "" {
			if ErrorCode(err) != EINVALID || ErrorType(err) != ProblemStrategyUnsupported {
				t.Errorf("ChooseStrategy(%q, %v) = %q, %v; want EINVALID/strategy-unsupported", tt.requested, tt.target.Strategies, got, err)
				continue
			}
			e := asError(t, err)
			if len(e.Fields) != 1 || e.Fields[0].Pointer != "/strategy" || e.Extra["strategy"] != string(tt.requested) || e.Extra["supported"] == nil {
				t.Errorf("ChooseStrategy(%q, %v) error = %+v, want a field at /strategy and Extra strategy, supported", tt.requested, tt.target.Strategies, e)
			}
			if c := StrategyCheck(tt.requested, tt.target); c.Passed || c.Name != CheckStrategySupported || c.Detail != e.Message {
				t.Errorf("StrategyCheck(%q, %v) = %+v, want failed with the refusal's message", tt.requested, tt.target.Strategies, c)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ChooseStrategy(%q, %v) = %q, %v; want %q", tt.requested, tt.target.Strategies, got, err, tt.want)
		}
		if c := StrategyCheck(tt.requested, tt.target); !c.Passed || !strings.Contains(c.Detail, string(tt.want)) {
			t.Errorf("StrategyCheck(%q, %v) = %+v, want passed naming %s", tt.requested, tt.target.Strategies, c, tt.want)
		}
	}
}

func TestChooseDrain(t *testing.T) {
	required := &DrainPolicy{Required: true, Timeout: 5 * time.Minute, OnTimeout: OnTimeoutProceed}
	requiredDefaults := &DrainPolicy{Required: true}
	recommended := &DrainPolicy{Required: false, Timeout: 2 * time.Minute, OnTimeout: OnTimeoutProceed}
	tests := []struct {
		name     string
		override *DrainPolicy
		declared *DrainPolicy
		want     *DrainPolicy
	}{
		{"nothing declared, nothing asked", nil, nil, nil},
		{"target requires", nil, required, &DrainPolicy{Required: true, Timeout: 5 * time.Minute, OnTimeout: OnTimeoutProceed}},
		{"target requires, defaults filled in", nil, requiredDefaults, &DrainPolicy{Required: true, Timeout: DefaultDrainTimeout, OnTimeout: OnTimeoutAbort}},
		{"target only recommends", nil, recommended, nil},
		{"request skips a required drain", &DrainPolicy{Required: false}, required, nil},
		{"request asks, target recommends settings", &DrainPolicy{Required: true}, recommended, &DrainPolicy{Required: true, Timeout: 2 * time.Minute, OnTimeout: OnTimeoutProceed}},
		{"request asks, nothing declared", &DrainPolicy{Required: true}, nil, &DrainPolicy{Required: true, Timeout: DefaultDrainTimeout, OnTimeout: OnTimeoutAbort}},
		{"request overrides the timeout only", &DrainPolicy{Required: true, Timeout: time.Minute}, required, &DrainPolicy{Required: true, Timeout: time.Minute, OnTimeout: OnTimeoutProceed}},
		{"request overrides onTimeout only", &DrainPolicy{Required: true, OnTimeout: OnTimeoutAbort}, required, &DrainPolicy{Required: true, Timeout: 5 * time.Minute, OnTimeout: OnTimeoutAbort}},
		{"request overrides everything", &DrainPolicy{Required: true, Timeout: 30 * time.Second, OnTimeout: OnTimeoutAbort}, required, &DrainPolicy{Required: true, Timeout: 30 * time.Second, OnTimeout: OnTimeoutAbort}},
		{"negative request timeout counts as unset", &DrainPolicy{Required: true, Timeout: -time.Second}, nil, &DrainPolicy{Required: true, Timeout: DefaultDrainTimeout, OnTimeout: OnTimeoutAbort}},
	}
	for _, tt := range tests {
		target := UpgradePolicy{Drain: tt.declared}
		got := ChooseDrain(tt.override, target)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) || (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
			t.Errorf("ChooseDrain(%s: %+v, %+v) = %+v, want %+v", tt.name, tt.override, tt.declared, got, tt.want)
		}
		if got != nil && (got == tt.override || got == tt.declared) {
			t.Errorf("ChooseDrain(%s) returned one of its inputs", tt.name)
		}
		c := DrainCheck(tt.override, target)
		if c.Name != CheckDrain || !c.Passed || c.Detail == "" {
			t.Errorf("DrainCheck(%s) = %+v, want a passed drain check with a detail", tt.name, c)
		}
		if drains := !strings.HasPrefix(c.Detail, "no drain"); drains != (got != nil) {
			t.Errorf("DrainCheck(%s).Detail = %q, but ChooseDrain = %+v", tt.name, c.Detail, got)
		}
	}
	if c := DrainCheck(&DrainPolicy{}, UpgradePolicy{Drain: required}); !strings.Contains(c.Detail, "overrides") {
		t.Errorf("DrainCheck(skip a required drain).Detail = %q, want it to say the request overrides the target", c.Detail)
	}
}
