package lifecycle

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Lifecycle is the supplier-declared lifecycle policy of one application
// version: the optional `lifecycle` section of its application description
// (design section 4). The zero Lifecycle is what an application description
// without the section declares: upgrades from any older version, no drain,
// recreate only, no rollback, every parameter kept on upgrade.
type Lifecycle struct {
	Upgrade    UpgradePolicy
	Rollback   RollbackPolicy
	Parameters map[string]ParameterPolicy // by parameter name; absent = keep
	// Substitutions lists the durations a version stored before the ranges
	// were rules declared out of range; the policy above already holds the
	// values used instead. Empty for every version published since.
	Substitutions []Substitution
}

// UpgradePolicy says how a deployment may reach the version that declares it.
type UpgradePolicy struct {
	// MinUpgradeFrom is the oldest installed version a direct upgrade to this
	// version may start from; nil allows any older version.
	MinUpgradeFrom *Version
	// Drain, if not nil, is how the running version is drained before this
	// one replaces it; nil means no drain.
	Drain *DrainPolicy
	// Strategies this version supports, its default first; empty means
	// [recreate].
	Strategies []Strategy
}

// DrainPolicy is how work in flight is finished before a switch.
type DrainPolicy struct {
	// Required says the drain always happens; when false the declared drain
	// settings apply only if an operator asks for a drain.
	Required bool
	// Timeout is how long in-flight work may take to finish; 0 means the
	// supplier did not say and DefaultDrainTimeout applies.
	Timeout time.Duration
	// OnTimeout is what happens when Timeout passes; "" means OnTimeoutAbort.
	OnTimeout OnTimeout
}

// DefaultDrainTimeout is the drain deadline when a DrainPolicy declares none,
// so that no drain can wait forever.
const DefaultDrainTimeout = 10 * time.Minute

// MaxReasonLength bounds RollbackPolicy.Reason, which is shown in refusals.
const MaxReasonLength = 1024

// EffectiveTimeout returns Timeout, or DefaultDrainTimeout when it is 0.
func (d DrainPolicy) EffectiveTimeout() time.Duration {
	if d.Timeout <= 0 {
		return DefaultDrainTimeout
	}
	return d.Timeout
}

// EffectiveOnTimeout returns OnTimeout, or OnTimeoutAbort when it is "".
func (d DrainPolicy) EffectiveOnTimeout() OnTimeout {
	if d.OnTimeout == "" {
		return OnTimeoutAbort
	}
	return d.OnTimeout
}

// OnTimeout is what a drain does when its timeout passes.
type OnTimeout string

// The drain timeout behaviours.
const (
	// OnTimeoutAbort keeps the old version running and fails the operation
	// with reason drain-timeout. It is the default: it never kills work.
	OnTimeoutAbort OnTimeout = "abort"
	// OnTimeoutProceed applies the new revision anyway.
	OnTimeoutProceed OnTimeout = "proceed"
)

// Valid reports whether o is one of the declared behaviours.
func (o OnTimeout) Valid() bool { return o == OnTimeoutAbort || o == OnTimeoutProceed }

// Strategy is how a device replaces the running version with the new one.
type Strategy string

// The upgrade strategies.
const (
	StrategyRecreate  Strategy = "recreate"  // stop old, start new
	StrategyBlueGreen Strategy = "blueGreen" // start new beside old, verify, switch, remove old
)

// Valid reports whether s is one of the declared strategies.
func (s Strategy) Valid() bool { return s == StrategyRecreate || s == StrategyBlueGreen }

// EffectiveStrategies returns Strategies, or [recreate] when none are listed.
// The result is a copy.
func (u UpgradePolicy) EffectiveStrategies() []Strategy {
	if len(u.Strategies) == 0 {
		return []Strategy{StrategyRecreate}
	}
	return slices.Clone(u.Strategies)
}

// DefaultStrategy returns the first listed strategy, recreate when none are.
func (u UpgradePolicy) DefaultStrategy() Strategy {
	if len(u.Strategies) == 0 {
		return StrategyRecreate
	}
	return u.Strategies[0]
}

// Supports reports whether the version supports strategy s.
func (u UpgradePolicy) Supports(s Strategy) bool {
	if len(u.Strategies) == 0 {
		return s == StrategyRecreate
	}
	return slices.Contains(u.Strategies, s)
}

// AllowsDirectFrom reports whether a direct upgrade to this version may start
// from installed, that is installed >= MinUpgradeFrom (always true when
// MinUpgradeFrom is nil). It does not check that installed is older.
func (u UpgradePolicy) AllowsDirectFrom(installed Version) bool {
	return u.MinUpgradeFrom == nil || Compare(installed, *u.MinUpgradeFrom) >= 0
}

// DrainRequired reports whether every upgrade to this version drains first.
func (u UpgradePolicy) DrainRequired() bool {
	return u.Drain != nil && u.Drain.Required
}

// RollbackPolicy says whether a deployment running the version that declares
// it may go back to an older version. The zero RollbackPolicy forbids it:
// "we cannot assume it is OK to roll back".
type RollbackPolicy struct {
	Allowed bool
	// MinVersion is the oldest version one may go back to; nil allows any.
	MinVersion *Version
	// Window is how long after this version became installed a rollback is
	// allowed; 0 means no limit.
	Window time.Duration
	// Reason is the supplier's explanation, shown in refusals.
	Reason string
}

// AllowsTarget reports whether the policy lets a deployment go back to
// target: Allowed and target >= MinVersion. It ignores the window; see
// WithinWindow.
func (r RollbackPolicy) AllowsTarget(target Version) bool {
	return r.Allowed && (r.MinVersion == nil || Compare(target, *r.MinVersion) >= 0)
}

// WithinWindow reports whether now is within Window after installedAt. The
// clock is a parameter: the domain never reads it. A zero Window is no limit.
func (r RollbackPolicy) WithinWindow(installedAt, now time.Time) bool {
	return r.Window <= 0 || now.Sub(installedAt) <= r.Window
}

// OnUpgrade is what happens to an operator-set parameter value on upgrade to
// the version that declares it.
type OnUpgrade string

// The parameter upgrade behaviours.
const (
	OnUpgradeKeep  OnUpgrade = "keep"  // carry the operator's value (default)
	OnUpgradeReset OnUpgrade = "reset" // take this version's default
)

// Valid reports whether o is one of the declared behaviours.
func (o OnUpgrade) Valid() bool { return o == OnUpgradeKeep || o == OnUpgradeReset }

// ParameterPolicy is the lifecycle policy of one parameter.
type ParameterPolicy struct {
	OnUpgrade OnUpgrade // "" means OnUpgradeKeep
}

// OnUpgradeOf returns how parameter name behaves on upgrade to this version:
// its declared OnUpgrade, OnUpgradeKeep when none is declared.
func (l Lifecycle) OnUpgradeOf(name string) OnUpgrade {
	if p, ok := l.Parameters[name]; ok && p.OnUpgrade != "" {
		return p.OnUpgrade
	}
	return OnUpgradeKeep
}

// Validate checks the rules a Lifecycle must satisfy as the policy of the
// version own, and returns every problem found (nil if none). Pointers are
// relative to the lifecycle section ("/upgrade/minUpgradeFrom"); callers
// prefix them with the section's own pointer. It checks: MinUpgradeFrom and
// Rollback.MinVersion strictly lower than own; a declared drain timeout and
// rollback window within their ranges (DurationRangeOf); OnTimeout,
// Strategies and OnUpgrade values known; strategies not repeated; reason not
// longer than MaxReasonLength. It cannot know which parameters exist: the caller checks the Parameters keys.
func (l Lifecycle) Validate(own Version) []FieldError {
	var fe []FieldError
	add := func(p, format string, args ...any) {
		fe = append(fe, FieldError{Pointer: p, Detail: fmt.Sprintf(format, args...)})
	}
	u := l.Upgrade
	if u.MinUpgradeFrom != nil {
		if u.MinUpgradeFrom.IsZero() {
			add("/upgrade/minUpgradeFrom", "must be a version")
		} else if !own.IsZero() && Compare(*u.MinUpgradeFrom, own) >= 0 {
			add("/upgrade/minUpgradeFrom", "must be lower than this version %s, got %s", own, u.MinUpgradeFrom)
		}
	}
	if d := u.Drain; d != nil {
		if d.Timeout != 0 { // 0: not declared
			if e := CheckDuration(DurationDrainTimeout, d.Timeout, "/upgrade/drain/timeout"); e != nil {
				fe = append(fe, *e)
			}
		}
		if d.OnTimeout != "" && !d.OnTimeout.Valid() {
			add("/upgrade/drain/onTimeout", "must be %q or %q, got %q", OnTimeoutAbort, OnTimeoutProceed, d.OnTimeout)
		}
	}
	for i, s := range u.Strategies {
		p := fmt.Sprintf("/upgrade/strategies/%d", i)
		switch {
		case !s.Valid():
			add(p, "unknown strategy %q (known: %s, %s)", s, StrategyRecreate, StrategyBlueGreen)
		case slices.Contains(u.Strategies[:i], s):
			add(p, "strategy %q is listed twice", s)
		}
	}
	r := l.Rollback
	if r.MinVersion != nil {
		if r.MinVersion.IsZero() {
			add("/rollback/minVersion", "must be a version")
		} else if !own.IsZero() && Compare(*r.MinVersion, own) >= 0 {
			add("/rollback/minVersion", "must be lower than this version %s, got %s", own, r.MinVersion)
		}
	}
	if r.Window != 0 { // 0: no limit
		if e := CheckDuration(DurationRollbackWindow, r.Window, "/rollback/window"); e != nil {
			fe = append(fe, *e)
		}
	}
	if n := utf8.RuneCountInString(r.Reason); n > MaxReasonLength {
		add("/rollback/reason", "must be at most %d characters, got %d", MaxReasonLength, n)
	}
	for _, name := range sortedKeys(l.Parameters) {
		if o := l.Parameters[name].OnUpgrade; o != "" && !o.Valid() {
			add("/parameters/"+EscapePointer(name)+"/onUpgrade", "must be %q or %q, got %q", OnUpgradeKeep, OnUpgradeReset, o)
		}
	}
	return fe
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// EscapePointer escapes one reference token of a JSON pointer (RFC 6901):
// "~" becomes "~0" and "/" becomes "~1".
func EscapePointer(token string) string {
	if !strings.ContainsAny(token, "~/") {
		return token
	}
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}

// Summary is the compact form of a Lifecycle for listing versions.
type Summary struct {
	MinUpgradeFrom     string     `json:"minUpgradeFrom,omitempty"`
	DrainRequired      bool       `json:"drainRequired"`
	Strategies         []Strategy `json:"strategies"`
	RollbackAllowed    bool       `json:"rollbackAllowed"`
	RollbackMinVersion string     `json:"rollbackMinVersion,omitempty"`
	RollbackWindow     string     `json:"rollbackWindow,omitempty"`
}

// Summary returns the compact form of l, with defaults applied (strategies
// are never empty).
func (l Lifecycle) Summary() Summary {
	s := Summary{
		DrainRequired:   l.Upgrade.DrainRequired(),
		Strategies:      l.Upgrade.EffectiveStrategies(),
		RollbackAllowed: l.Rollback.Allowed,
	}
	if v := l.Upgrade.MinUpgradeFrom; v != nil {
		s.MinUpgradeFrom = v.String()
	}
	if v := l.Rollback.MinVersion; v != nil {
		s.RollbackMinVersion = v.String()
	}
	if l.Rollback.Window > 0 {
		s.RollbackWindow = l.Rollback.Window.String()
	}
	return s
}
