package lifecycle

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// DurationField names a duration wfm accepts, from an operation request, a
// token request or an application description's lifecycle section. Each
// field has its own accepted range (DurationRangeOf): a rollback window may
// legitimately be months while a step timeout should not exceed a week.
type DurationField string

// The duration fields. Their names are how the documentation and the
// contract (openapi.yaml's x-wfm-duration) refer to them.
const (
	// DurationStepTimeout is an operation request's `timeout`: how long each
	// step may take to install, on top of its drain timeout.
	DurationStepTimeout DurationField = "timeout"
	// DurationDrainTimeout is a drain's `timeout`: an upgrade request's
	// drain override and a description's lifecycle.upgrade.drain.timeout.
	DurationDrainTimeout DurationField = "drain.timeout"
	// DurationRollbackWindow is a description's lifecycle.rollback.window.
	DurationRollbackWindow DurationField = "rollback.window"
	// DurationTokenExpiry is a token request's `expiresIn`.
	DurationTokenExpiry DurationField = "expiresIn"
	// DurationInstallTimeout is a create-deployment request's `timeout`:
	// how long the device may take to install revision 1.
	DurationInstallTimeout DurationField = "install.timeout"
	// DurationRemoveTimeout is a deletion's `timeout` query parameter: how
	// long the device may take to confirm the removal.
	DurationRemoveTimeout DurationField = "remove.timeout"
	// DurationWaveSoak is a rollout wave's `soak`: how long to wait after
	// the wave settled before the next may start. 0s (the default) is none.
	DurationWaveSoak DurationField = "wave.soak"
	// DurationRolloutDeadline is a rollout request's `deadline`: how long
	// the rollout may run before it fails with deadline-passed.
	DurationRolloutDeadline DurationField = "rollout.deadline"
	// DurationNotSeenFor is a rollout target's `notSeenFor`: devices not
	// seen for longer are excluded. Its minimum is well above the minute
	// at which lastSeenAt is recorded.
	DurationNotSeenFor DurationField = "target.notSeenFor"
)

// DefaultStepTimeout is how long a step may take to install when the
// request says nothing (on top of any drain timeout).
const DefaultStepTimeout = 30 * time.Minute

// DefaultInstallTimeout and DefaultRemoveTimeout are how long a first
// install and a removal may take when the request says nothing.
const (
	DefaultInstallTimeout = 30 * time.Minute
	DefaultRemoveTimeout  = 30 * time.Minute
)

// DefaultRolloutDeadline is how long a rollout may run when the request
// says nothing.
const DefaultRolloutDeadline = 168 * time.Hour

// DurationRange is the accepted range of one duration field, both bounds
// included, and what an absent value means.
type DurationRange struct {
	Min, Max time.Duration
	// Default is the value used when the field is absent; 0 means the
	// absence itself has a meaning (no limit, never expires).
	Default time.Duration
}

// durationRanges is the one table of duration ranges: the request path
// (internal/fleet, internal/access) and publishing (internal/margo) check
// against it, openapi.yaml states it (a contract test compares them), and
// versions stored before the ranges were rules are read through it.
var durationRanges = map[DurationField]DurationRange{
	DurationStepTimeout:    {Min: time.Second, Max: 168 * time.Hour, Default: DefaultStepTimeout},
	DurationDrainTimeout:   {Min: time.Second, Max: 168 * time.Hour, Default: DefaultDrainTimeout},
	DurationRollbackWindow: {Min: time.Second, Max: 8760 * time.Hour},
	DurationTokenExpiry:    {Min: time.Second, Max: 87600 * time.Hour},
	DurationInstallTimeout: {Min: time.Second, Max: 168 * time.Hour, Default: DefaultInstallTimeout},
	DurationRemoveTimeout:  {Min: time.Second, Max: 168 * time.Hour, Default: DefaultRemoveTimeout},
	// A soak may be none: its absence and 0s mean the same.
	DurationWaveSoak:        {Min: 0, Max: 168 * time.Hour},
	DurationRolloutDeadline: {Min: time.Minute, Max: 8760 * time.Hour, Default: DefaultRolloutDeadline},
	DurationNotSeenFor:      {Min: 5 * time.Minute, Max: 8760 * time.Hour},
}

// DurationFields returns every duration field, sorted.
func DurationFields() []DurationField {
	out := make([]DurationField, 0, len(durationRanges))
	for f := range durationRanges {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

// DurationRangeOf returns the accepted range of f (the zero DurationRange,
// which accepts nothing, for an unknown field).
func DurationRangeOf(f DurationField) DurationRange { return durationRanges[f] }

// Contains reports whether d is within the range.
func (r DurationRange) Contains(d time.Duration) bool { return d >= r.Min && d <= r.Max }

// String returns the range as documented: "from 1s to 168h".
func (r DurationRange) String() string {
	return "from " + FormatDuration(r.Min) + " to " + FormatDuration(r.Max)
}

// Used returns the value used in place of d: d itself when it is within
// the range; Max when d is above it; below it, the field's Default, or Min
// when the field has none. A field without a Default reads its absence as
// "no limit" (a rollback window): a declared limit, however short, must
// never widen into none, so it gets the shortest value in range. Only
// versions stored before the ranges were rules can hold such values:
// publishing refuses them (and refused values <= 0 before that, so the
// values below a range are sub-second ones such as 500ms).
func (r DurationRange) Used(d time.Duration) time.Duration {
	switch {
	case d < r.Min && r.Default == 0:
		return r.Min
	case d < r.Min:
		return r.Default
	case d > r.Max:
		return r.Max
	}
	return d
}

// CheckDuration checks a duration given for field f against its range.
// pointer names the member in the caller's document.
//
// Returns nil when d is within range, else a FieldError saying the range.
func CheckDuration(f DurationField, d time.Duration, pointer string) *FieldError {
	r := DurationRangeOf(f)
	if r.Contains(d) {
		return nil
	}
	return &FieldError{Pointer: pointer, Detail: fmt.Sprintf("must be a duration %s, got %s", r, FormatDuration(d))}
}

// ParseDuration reads s, a duration in Go's syntax (time.ParseDuration:
// 90s, 10m, 1h30m), given for field f, and checks it against f's range.
//
// Returns the duration, or a FieldError naming pointer when s is not a
// duration or is outside the range.
func ParseDuration(f DurationField, s, pointer string) (time.Duration, *FieldError) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, &FieldError{Pointer: pointer, Detail: "must be a duration such as 90s, 10m or 72h, " + DurationRangeOf(f).String()}
	}
	if fe := CheckDuration(f, d, pointer); fe != nil {
		return 0, fe
	}
	return d, nil
}

// FormatDuration writes d as time.Duration.String does, without the zero
// trailing units: 10m rather than 10m0s, 168h rather than 168h0m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Substitution records a duration declared outside its field's range by a
// version stored before the ranges were rules, and the value used instead
// (DurationRange.Used). Publishing refuses such values, so only stored
// versions carry substitutions; they keep working with the used value.
type Substitution struct {
	// Pointer is the member, relative to the lifecycle section
	// ("/upgrade/drain/timeout").
	Pointer string
	Field   DurationField
	// Declared is the value as the description wrote it.
	Declared string
	// Used is the value wfm uses (DurationRange.Used), always within the
	// range.
	Used time.Duration
}

// Substitute returns the Substitution for a declared value d (written as
// declared) of field f at pointer, and whether one is needed (d outside
// the range).
func Substitute(f DurationField, d time.Duration, declared, pointer string) (Substitution, bool) {
	r := DurationRangeOf(f)
	if r.Contains(d) {
		return Substitution{}, false
	}
	return Substitution{Pointer: pointer, Field: f, Declared: declared, Used: r.Used(d)}, true
}

// Message says what the substitution does, for the lifecycle view:
// "drain.timeout 0s is out of range (from 1s to 168h); 10m is used".
func (s Substitution) Message() string {
	return fmt.Sprintf("%s %s is out of range (%s); %s is used", s.Field, s.Declared, DurationRangeOf(s.Field), FormatDuration(s.Used))
}
