package lifecycle

import (
	"errors"
	"fmt"
	"strings"
)

// Check is one rule evaluated for an operation, with its outcome. Plans and
// decisions carry their checks so that a dry run can show every rule, passed
// or not, with a sentence saying why (design section 4, "Dry run").
type Check struct {
	// Name is stable: program against it (one of the Check… constants).
	Name string `json:"name"`
	// Passed says the rule holds. An operation is allowed exactly when
	// every check of its plan or decision passed, with one exception: a
	// check that a break-glass override set aside stays failed (see
	// RollbackDecision.OverriddenRules).
	Passed bool `json:"passed"`
	// Detail is a sentence a person understands.
	Detail string `json:"detail"`
}

// The stable names of the checks. A plan or decision lists the checks it
// evaluated in the order of this list; a check that an earlier failure makes
// meaningless (the min-upgrade-from check of a target that does not exist)
// is left out rather than reported as failed.
const (
	CheckTargetExists        = "target-exists"        // the target version is in the catalog
	CheckTargetNewer         = "target-newer"         // upgrade: target > installed
	CheckTargetOlder         = "target-older"         // rollback: target < installed
	CheckTargetNotYanked     = "target-not-yanked"    // the target version is not yanked
	CheckMinUpgradeFrom      = "min-upgrade-from"     // installed >= the target's minUpgradeFrom
	CheckPath                = "path"                 // a direct upgrade, or a chain and path: auto
	CheckRollbackAllowed     = "rollback-allowed"     // the installed version's rollback.allowed
	CheckRollbackMinVersion  = "rollback-min-version" // target >= the installed version's rollback.minVersion
	CheckRollbackWindow      = "rollback-window"      // within the installed version's rollback.window
	CheckBreakGlass          = "break-glass"          // a requested override is permitted and has a reason
	CheckKnownParameters     = "known-parameters"     // every requested parameter exists
	CheckImmutableParameters = "immutable-parameters" // no immutable parameter changes
	CheckParametersChanged   = "parameters-changed"   // a reconfiguration changes at least one value
	CheckStrategySupported   = "strategy-supported"   // the target lists the chosen strategy
	CheckDrain               = "drain"                // the drain the operation will use (informational)
)

// ProblemStrategyUnsupported is the problem type of a strategy the target
// version does not list.
const ProblemStrategyUnsupported = "strategy-unsupported"

// ChooseStrategy returns the strategy an upgrade to a version with policy
// target uses: requested when it is not "", else the target's default (its
// first listed strategy, recreate when it lists none). The request wins over
// the target's default, but only within what the target supports: a version
// that lists only blueGreen cannot be recreated by asking.
//
// Returns EINVALID (type "strategy-unsupported", a FieldError at /strategy,
// Extra {"strategy", "supported"}) if requested is not a known strategy or
// is one the target does not list.
func ChooseStrategy(requested Strategy, target UpgradePolicy) (Strategy, error) {
	if requested == "" {
		return target.DefaultStrategy(), nil
	}
	supported := target.EffectiveStrategies()
	names := make([]string, len(supported))
	for i, s := range supported {
		names[i] = string(s)
	}
	var msg string
	switch {
	case !requested.Valid():
		msg = fmt.Sprintf("unknown strategy %q; the known strategies are %s and %s, and the target version supports %s",
			requested, StrategyRecreate, StrategyBlueGreen, strings.Join(names, ", "))
	case !target.Supports(requested):
		msg = fmt.Sprintf("the target version does not support the strategy %s; it supports %s (leave the strategy out to use %s, its default)",
			requested, strings.Join(names, ", "), target.DefaultStrategy())
	default:
		return requested, nil
	}
	return "", &Error{Code: EINVALID, Type: ProblemStrategyUnsupported, Message: msg,
		Fields: []FieldError{{Pointer: "/strategy", Detail: msg}},
		Extra:  map[string]any{"strategy": string(requested), "supported": names}}
}

// StrategyCheck returns the dry-run check (CheckStrategySupported) of
// ChooseStrategy(requested, target): passed with the chosen strategy and
// where it comes from, or failed with the refusal's message.
func StrategyCheck(requested Strategy, target UpgradePolicy) Check {
	s, err := ChooseStrategy(requested, target)
	if err != nil {
		return Check{Name: CheckStrategySupported, Detail: errorMessage(err)}
	}
	if requested == "" {
		return Check{Name: CheckStrategySupported, Passed: true,
			Detail: fmt.Sprintf("%s, the target version's default strategy", s)}
	}
	return Check{Name: CheckStrategySupported, Passed: true,
		Detail: fmt.Sprintf("%s, as requested; the target version supports it", s)}
}

// ChooseDrain returns the drain an operation uses when the request says
// override (nil: the request says nothing) and the target version declares
// target.Drain. The result is nil for no drain; otherwise it is a new value
// (it never aliases an input) with Required true, Timeout > 0 and OnTimeout
// set.
//
// Precedence, field by field: the request, then the target version's
// declaration, then the defaults (DefaultDrainTimeout, OnTimeoutAbort):
//   - no override: drain exactly when the target requires it
//     (drain.required: true), with its timeout and onTimeout;
//   - an override with Required false: no drain, even when the target
//     requires one (the design lets the request override the declared drain;
//     DrainCheck says so in the plan);
//   - an override with Required true: drain, with the override's Timeout and
//     OnTimeout where set (Timeout > 0, OnTimeout not ""), else the target's
//     declared ones (also when the target declares drain.required: false:
//     those are the supplier's settings for a drain an operator asks for),
//     else the defaults.
//
// ChooseDrain does not validate override: the caller refuses a negative
// timeout or an unknown onTimeout in the request before (a Timeout <= 0
// counts as not set).
func ChooseDrain(override *DrainPolicy, target UpgradePolicy) *DrainPolicy {
	declared := target.Drain
	if override == nil {
		if declared == nil || !declared.Required {
			return nil
		}
		return &DrainPolicy{Required: true, Timeout: declared.EffectiveTimeout(), OnTimeout: declared.EffectiveOnTimeout()}
	}
	if !override.Required {
		return nil
	}
	d := &DrainPolicy{Required: true, Timeout: override.Timeout, OnTimeout: override.OnTimeout}
	if declared != nil {
		if d.Timeout <= 0 {
			d.Timeout = declared.Timeout
		}
		if d.OnTimeout == "" {
			d.OnTimeout = declared.OnTimeout
		}
	}
	d.Timeout = d.EffectiveTimeout()
	d.OnTimeout = d.EffectiveOnTimeout()
	return d
}

// DrainCheck returns the dry-run check (CheckDrain) of ChooseDrain(override,
// target). It always passes (a drain is a setting, not a rule that can
// fail); its Detail says whether the operation drains, with which timeout
// and behaviour on timeout, and whether that comes from the target version
// or from the request.
func DrainCheck(override *DrainPolicy, target UpgradePolicy) Check {
	d := ChooseDrain(override, target)
	var detail string
	switch {
	case d == nil && override != nil && target.DrainRequired():
		detail = "no drain: the request overrides the drain the target version requires"
	case d == nil && override != nil:
		detail = "no drain, as requested"
	case d == nil:
		detail = "no drain: the target version does not require one"
	case override != nil:
		detail = fmt.Sprintf("drain first, as requested: in-flight work gets %s, then the operation will %s", d.Timeout, onTimeoutPhrase(d.OnTimeout))
	default:
		detail = fmt.Sprintf("drain first, as the target version requires: in-flight work gets %s, then the operation will %s", d.Timeout, onTimeoutPhrase(d.OnTimeout))
	}
	return Check{Name: CheckDrain, Passed: true, Detail: detail}
}

func onTimeoutPhrase(o OnTimeout) string {
	if o == OnTimeoutProceed {
		return "proceed anyway (onTimeout: proceed)"
	}
	return "abort and keep the old version running (onTimeout: abort)"
}

// errorMessage returns the Message of an *Error, err.Error() otherwise.
func errorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}
