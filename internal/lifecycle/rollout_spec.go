package lifecycle

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	// The window's time zone is an IANA name read with time.LoadLocation.
	// The embedded database makes zones work on a machine without
	// zoneinfo files (a scratch or distroless image): a rollout window must
	// not depend on what the host happens to have installed. It adds about
	// 450 KB to the binary.
	_ "time/tzdata"
)

// RolloutAction is the change a rollout applies to each member.
type RolloutAction string

// The rollout actions.
const (
	RolloutInstall     RolloutAction = "install"     // create a deployment on each matching device without the application
	RolloutUpgrade     RolloutAction = "upgrade"     // upgrade each deployment to the target version
	RolloutReconfigure RolloutAction = "reconfigure" // change parameter values of each deployment
	RolloutRollback    RolloutAction = "rollback"    // return each deployment to its most recent revision at the target version
)

// Valid reports whether a is one of the declared actions.
func (a RolloutAction) Valid() bool {
	return a == RolloutInstall || a == RolloutUpgrade || a == RolloutReconfigure || a == RolloutRollback
}

// OperationKind returns the kind of the operation the action starts on one
// member.
func (a RolloutAction) OperationKind() OperationKind { return OperationKind(a) }

// WaveApproval says whether a wave starts on its own or waits for approve.
type WaveApproval string

// The wave approvals.
const (
	ApprovalAuto   WaveApproval = "auto"   // the wave starts when the one before passed (and soaked)
	ApprovalManual WaveApproval = "manual" // the wave waits for the approve action, the rollout paused (approval-required)
)

// OnThreshold is what a rollout does when a wave exceeds a threshold.
type OnThreshold string

// The threshold behaviours.
const (
	OnThresholdPause OnThreshold = "pause" // pause (cause threshold-exceeded); resume accepts the wave as it is
	OnThresholdAbort OnThreshold = "abort" // abort (cause threshold-exceeded), without revert
)

// OnFailure is what one member's operation does when it fails, as for a
// single upgrade or reconfiguration.
type OnFailure string

// The failure behaviours of an operation.
const (
	OnFailureHalt     OnFailure = "halt"     // stop; the deployment stays failed (the default)
	OnFailureRollback OnFailure = "rollback" // roll back to the revision before, where its policy allows
)

// WaveAmount is a number of members: exactly one of Count or Percent (of
// the eligible members for a wave's size, of the wave for its maxFailures).
type WaveAmount struct {
	Count   *int
	Percent *int
}

// CountOf returns a WaveAmount of n members.
func CountOf(n int) WaveAmount { return WaveAmount{Count: &n} }

// PercentOf returns a WaveAmount of p percent.
func PercentOf(p int) WaveAmount { return WaveAmount{Percent: &p} }

// String spells the amount as the contract does: {"count": 3} as "3",
// {"percent": 10} as "10%".
func (a WaveAmount) String() string {
	switch {
	case a.Count != nil:
		return strconv.Itoa(*a.Count)
	case a.Percent != nil:
		return strconv.Itoa(*a.Percent) + "%"
	}
	return "none"
}

// WaveSpec is one wave as requested.
type WaveSpec struct {
	Size     WaveAmount
	Approval WaveApproval // "": auto
	// Soak is a duration such as "30m" (DurationWaveSoak's range); nil: none.
	Soak *string
	// MinSuccess is the percent of the wave that must succeed; nil: 100.
	MinSuccess *int
	// MaxFailures; nil: the percent 100 - MinSuccess (see Wave).
	MaxFailures *WaveAmount
}

// RolloutWindowSpec is a daily time window as requested: "HH:MM" start and
// end (end before start: across midnight) in an IANA time zone.
type RolloutWindowSpec struct {
	Start, End, TimeZone string
}

// DrainSpec is an upgrade request's drain, replacing the one the target
// version declares (see ChooseDrain).
type DrainSpec struct {
	Required bool
	// Timeout is a duration such as "5m" (DurationDrainTimeout's range);
	// nil: the target's, else DefaultDrainTimeout.
	Timeout   *string
	OnTimeout OnTimeout
}

// RolloutSpec is a rollout as requested (the create and plan operations'
// body, translated by the handler). Options that do not apply to the
// action must be absent. The target selector is the caller's, except
// NotSeenFor.
type RolloutSpec struct {
	Action RolloutAction
	// TargetVersion: install, upgrade and rollback; absent for reconfigure.
	TargetVersion string
	// Parameters: install, the values; upgrade, the values to set over the
	// carried-over ones; reconfigure, the changes (at least one); absent
	// for rollback (it restores each member's revision).
	Parameters map[string]any
	// Path, Strategy and Drain: upgrade only.
	Path     PathMode
	Strategy Strategy
	Drain    *DrainSpec
	// OnFailure: upgrade and reconfigure; "": halt.
	OnFailure OnFailure
	// Timeout of each member's operation step (install: of its install),
	// a duration such as "10m"; nil: the default.
	Timeout *string
	// Waves; none: DefaultWaves.
	Waves []WaveSpec
	// MaxInFlight bounds the member operations running at once; nil:
	// DefaultMaxInFlight.
	MaxInFlight *int
	OnThreshold OnThreshold // "": pause
	Window      *RolloutWindowSpec
	// Deadline is a duration such as "48h" after the start past which a
	// rollout not ended fails; nil: DefaultRolloutDeadline.
	Deadline *string
	// NotSeenFor excludes (not-seen) the devices not seen for this long, a
	// duration such as "24h"; nil: no device is excluded for it.
	NotSeenFor *string
}

// Wave is one validated wave, defaults applied.
type Wave struct {
	Size     WaveAmount
	Approval WaveApproval
	Soak     time.Duration
	// MinSuccess is the percent (0..100) of the wave's counted members
	// (see WaveCounts.Counted) that must succeed, checked when the wave
	// settles: 100 when the request says nothing, 0 when it gives only
	// MaxFailures (which alone then decides).
	MinSuccess int
	// MaxFailures is how many of the wave's counted members may fail,
	// checked as results arrive. When the request says nothing it is the
	// percent 100 - MinSuccess: exactly the failures the wave can have and
	// still pass MinSuccess, so that the default stops a wave as soon as it
	// can no longer pass and never before (100% success, the default,
	// gives 0: the first failure stops the wave; a fixed default of
	// {"count": 0} would make any MinSuccess below 100 meaningless).
	MaxFailures WaveAmount
}

// RolloutWindow is a validated daily window. Minutes count from local
// midnight in Location.
type RolloutWindow struct {
	Start, End int // minutes after midnight, 0..1439; End < Start crosses midnight
	Location   *time.Location
}

// RolloutSettings is a validated RolloutSpec, defaults applied.
type RolloutSettings struct {
	Action     RolloutAction
	Target     Version // zero for reconfigure
	Parameters map[string]any
	Path       PathMode // upgrade: direct or auto; "" otherwise
	Strategy   Strategy // "" : the target's default
	Drain      *DrainPolicy
	OnFailure  OnFailure
	// Timeout is each member's step timeout (install: its install
	// timeout), default applied.
	Timeout time.Duration
	Waves   []Wave
	// DefaultWaves says the request gave no waves: Waves are DefaultWaves,
	// and their empty waves are dropped rather than refused.
	DefaultWaves bool
	MaxInFlight  int
	OnThreshold  OnThreshold
	Window       *RolloutWindow // nil: any time
	Deadline     time.Duration
	NotSeenFor   time.Duration // 0: no device excluded for it
}

// Bounds and defaults of a rollout's options.
const (
	DefaultMaxInFlight = 50
	MaxMaxInFlight     = 10000
	MaxRolloutWaves    = 100
	MaxWaveCount       = 1_000_000
)

// DefaultWaves returns the waves of a rollout that names none: one canary,
// then 10%, then the rest, each with the defaults (auto, no soak, 100%
// success, no failure).
func DefaultWaves() []Wave {
	w := func(a WaveAmount) Wave {
		return Wave{Size: a, Approval: ApprovalAuto, MinSuccess: 100, MaxFailures: PercentOf(0)}
	}
	return []Wave{w(CountOf(1)), w(PercentOf(10)), w(PercentOf(100))}
}

// ProblemInvalidRollout is the problem type of a rollout request that
// breaks a rule of its options.
const ProblemInvalidRollout = "invalid-rollout"

var clockPattern = regexp.MustCompile(`^([01][0-9]|2[0-3]):([0-5][0-9])$`)

// ValidateRolloutSpec checks a rollout request's options and returns them
// with the defaults applied. It checks what does not depend on the catalog
// or the fleet: the action and the options it allows, the target version's
// spelling, the path, strategy, drain and onFailure values, every duration
// against its range, the waves (at most MaxRolloutWaves; each size exactly
// one of a count >= 1 or a percent 1..100; approval, minSuccess 0..100,
// maxFailures exactly one of a count >= 0 or a percent 0..100),
// maxInFlight 1..MaxMaxInFlight, onThreshold, and the window ("HH:MM"
// start and end that differ, an IANA time zone). Whether the sizes add up
// depends on the eligible count: ResolveWaveSizes.
//
// Returns EINVALID (type "invalid-rollout") listing every problem at once,
// each a FieldError with a JSON pointer into the request body: /action,
// /targetVersion, /parameters, /path, /strategy, /drain/timeout,
// /drain/onTimeout, /onFailure, /timeout, /waves, /waves/{i}/size,
// /waves/{i}/approval, /waves/{i}/soak, /waves/{i}/minSuccess,
// /waves/{i}/maxFailures, /maxInFlight, /onThreshold, /window/start,
// /window/end, /window/timeZone, /deadline, /target/notSeenFor.
func ValidateRolloutSpec(s RolloutSpec) (RolloutSettings, error) {
	var fe []FieldError
	add := func(p, format string, args ...any) {
		fe = append(fe, FieldError{Pointer: p, Detail: fmt.Sprintf(format, args...)})
	}
	dur := func(f DurationField, v *string, p string) time.Duration {
		if v == nil {
			return DurationRangeOf(f).Default
		}
		d, e := parseRolloutDuration(f, *v, p)
		if e != nil {
			fe = append(fe, *e)
		}
		return d
	}
	out := RolloutSettings{Action: s.Action, Parameters: MergeValues(nil, s.Parameters), Strategy: s.Strategy,
		OnFailure: s.OnFailure, OnThreshold: s.OnThreshold, MaxInFlight: DefaultMaxInFlight}
	if len(s.Parameters) == 0 {
		out.Parameters = nil
	}
	a := s.Action
	only := func(p string, set bool, allowed ...RolloutAction) {
		if set && a.Valid() && !slices.Contains(allowed, a) {
			add(p, "does not apply to a%s %s rollout", article(string(a)), a)
		}
	}
	if !a.Valid() {
		add("/action", "must be %q, %q, %q or %q, got %q", RolloutInstall, RolloutUpgrade, RolloutReconfigure, RolloutRollback, a)
	}

	switch {
	case a == RolloutReconfigure:
		only("/targetVersion", s.TargetVersion != "", RolloutInstall, RolloutUpgrade, RolloutRollback)
	case s.TargetVersion == "" && a.Valid():
		add("/targetVersion", "is required for a%s %s rollout", article(string(a)), a)
	case s.TargetVersion != "":
		v, msg := parseVersion(s.TargetVersion)
		if msg != "" {
			add("/targetVersion", "%s", msg)
		}
		out.Target = v
	}
	only("/parameters", len(s.Parameters) > 0, RolloutInstall, RolloutUpgrade, RolloutReconfigure)
	if a == RolloutReconfigure && len(s.Parameters) == 0 {
		add("/parameters", "a reconfigure rollout must set at least one parameter")
	}
	only("/path", s.Path != "", RolloutUpgrade)
	only("/strategy", s.Strategy != "", RolloutUpgrade)
	only("/drain", s.Drain != nil, RolloutUpgrade)
	only("/onFailure", s.OnFailure != "", RolloutUpgrade, RolloutReconfigure)
	if a == RolloutUpgrade {
		out.Path = s.Path
		if out.Path == "" {
			out.Path = PathDirect
		}
		if !out.Path.Valid() {
			add("/path", "must be %q or %q, got %q", PathDirect, PathAuto, s.Path)
		}
	}
	if s.Strategy != "" && !s.Strategy.Valid() {
		add("/strategy", "unknown strategy %q; the known strategies are %s and %s", s.Strategy, StrategyRecreate, StrategyBlueGreen)
	}
	if d := s.Drain; d != nil {
		out.Drain = &DrainPolicy{Required: d.Required, OnTimeout: d.OnTimeout}
		if d.Timeout != nil {
			t, e := ParseDuration(DurationDrainTimeout, *d.Timeout, "/drain/timeout")
			if e != nil {
				fe = append(fe, *e)
			}
			out.Drain.Timeout = t
		}
		if d.OnTimeout != "" && !d.OnTimeout.Valid() {
			add("/drain/onTimeout", "must be %q or %q, got %q", OnTimeoutAbort, OnTimeoutProceed, d.OnTimeout)
		}
	}
	switch s.OnFailure {
	case "":
		if a == RolloutUpgrade || a == RolloutReconfigure {
			out.OnFailure = OnFailureHalt
		}
	case OnFailureHalt, OnFailureRollback:
	default:
		add("/onFailure", "must be %q or %q, got %q", OnFailureHalt, OnFailureRollback, s.OnFailure)
	}
	timeoutField := DurationStepTimeout
	if a == RolloutInstall {
		timeoutField = DurationInstallTimeout
	}
	out.Timeout = DurationRangeOf(timeoutField).Default
	if s.Timeout != nil {
		t, e := ParseDuration(timeoutField, *s.Timeout, "/timeout")
		if e != nil {
			fe = append(fe, *e)
		}
		out.Timeout = t
	}

	switch n := len(s.Waves); {
	case n == 0:
		out.Waves, out.DefaultWaves = DefaultWaves(), true
	case n > MaxRolloutWaves:
		add("/waves", "must have at most %d waves, got %d", MaxRolloutWaves, n)
	default:
		out.Waves = make([]Wave, n)
		for i, ws := range s.Waves {
			p := fmt.Sprintf("/waves/%d", i)
			w := Wave{Size: ws.Size, Approval: ws.Approval, MinSuccess: 100}
			if e := checkAmount(ws.Size, 1, MaxWaveCount, 1, p+"/size"); e != nil {
				fe = append(fe, *e)
			}
			switch ws.Approval {
			case "":
				w.Approval = ApprovalAuto
			case ApprovalAuto, ApprovalManual:
			default:
				add(p+"/approval", "must be %q or %q, got %q", ApprovalAuto, ApprovalManual, ws.Approval)
			}
			w.Soak = dur(DurationWaveSoak, ws.Soak, p+"/soak")
			if m := ws.MinSuccess; m != nil {
				if *m < 0 || *m > 100 {
					add(p+"/minSuccess", "must be a percent from 0 to 100, got %d", *m)
				}
				w.MinSuccess = *m
			}
			if mf := ws.MaxFailures; mf != nil {
				if e := checkAmount(*mf, 0, MaxWaveCount, 0, p+"/maxFailures"); e != nil {
					fe = append(fe, *e)
				}
				w.MaxFailures = *mf
				if ws.MinSuccess == nil {
					// "Stop if more than maxFailures fail": the wave passes
					// with up to that many failures, and minSuccess, not
					// given, asks nothing more (100 would fail the wave at its
					// first failure whatever maxFailures allowed).
					w.MinSuccess = 0
				}
			} else {
				w.MaxFailures = PercentOf(100 - min(max(w.MinSuccess, 0), 100))
			}
			out.Waves[i] = w
		}
	}

	if m := s.MaxInFlight; m != nil {
		if *m < 1 || *m > MaxMaxInFlight {
			add("/maxInFlight", "must be from 1 to %d, got %d", MaxMaxInFlight, *m)
		}
		out.MaxInFlight = *m
	}
	switch s.OnThreshold {
	case "":
		out.OnThreshold = OnThresholdPause
	case OnThresholdPause, OnThresholdAbort:
	default:
		add("/onThreshold", "must be %q or %q, got %q", OnThresholdPause, OnThresholdAbort, s.OnThreshold)
	}
	if w := s.Window; w != nil {
		win, wfe := parseWindow(*w)
		fe = append(fe, wfe...)
		out.Window = win
	}
	out.Deadline = dur(DurationRolloutDeadline, s.Deadline, "/deadline")
	out.NotSeenFor = dur(DurationNotSeenFor, s.NotSeenFor, "/target/notSeenFor")

	if len(fe) > 0 {
		return out, &Error{Code: EINVALID, Type: ProblemInvalidRollout, Fields: fe,
			Message: fmt.Sprintf("The rollout request is not valid: %s: %s.", fe[0].Pointer, fe[0].Detail) + more(len(fe))}
	}
	return out, nil
}

func more(n int) string {
	switch n {
	case 1:
		return ""
	case 2:
		return " One more problem is listed in errors."
	}
	return fmt.Sprintf(" %d more problems are listed in errors.", n-1)
}

func article(word string) string {
	if word != "" && slices.Contains([]byte("aeiou"), word[0]) {
		return "n"
	}
	return ""
}

// checkAmount checks that a names exactly one of a count within
// [minCount, maxCount] or a percent within [minPercent, 100].
func checkAmount(a WaveAmount, minCount, maxCount, minPercent int, pointer string) *FieldError {
	switch {
	case (a.Count == nil) == (a.Percent == nil):
		return &FieldError{Pointer: pointer, Detail: "must be exactly one of {\"count\": N} or {\"percent\": P}"}
	case a.Count != nil && (*a.Count < minCount || *a.Count > maxCount):
		return &FieldError{Pointer: pointer + "/count", Detail: fmt.Sprintf("must be from %d to %d, got %d", minCount, maxCount, *a.Count)}
	case a.Percent != nil && (*a.Percent < minPercent || *a.Percent > 100):
		return &FieldError{Pointer: pointer + "/percent", Detail: fmt.Sprintf("must be a percent from %d to 100, got %d", minPercent, *a.Percent)}
	}
	return nil
}

// parseRolloutDuration is ParseDuration for the fields of
// DurationRangeOf.
func parseRolloutDuration(f DurationField, s, pointer string) (time.Duration, *FieldError) {
	r := DurationRangeOf(f)
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, &FieldError{Pointer: pointer, Detail: "must be a duration such as 90s, 10m or 72h, " + r.String()}
	}
	if !r.Contains(d) {
		return 0, &FieldError{Pointer: pointer, Detail: fmt.Sprintf("must be a duration %s, got %s", r, FormatDuration(d))}
	}
	return d, nil
}

// parseWindow reads a window request; the FieldErrors name /window/….
func parseWindow(w RolloutWindowSpec) (*RolloutWindow, []FieldError) {
	var fe []FieldError
	clock := func(s, p string) int {
		m := clockPattern.FindStringSubmatch(s)
		if m == nil {
			fe = append(fe, FieldError{Pointer: p, Detail: fmt.Sprintf("must be a time of day HH:MM from 00:00 to 23:59, got %q", s)})
			return 0
		}
		h, _ := strconv.Atoi(m[1])
		mm, _ := strconv.Atoi(m[2])
		return h*60 + mm
	}
	out := &RolloutWindow{Start: clock(w.Start, "/window/start"), End: clock(w.End, "/window/end")}
	if len(fe) == 0 && out.Start == out.End {
		fe = append(fe, FieldError{Pointer: "/window/end", Detail: "must differ from start (a window of the whole day is no window: leave window out)"})
	}
	switch w.TimeZone {
	case "", "Local":
		fe = append(fe, FieldError{Pointer: "/window/timeZone", Detail: "must be an IANA time zone such as Europe/Berlin or UTC"})
	default:
		loc, err := time.LoadLocation(w.TimeZone)
		if err != nil {
			fe = append(fe, FieldError{Pointer: "/window/timeZone", Detail: fmt.Sprintf("unknown time zone %q; want an IANA time zone such as Europe/Berlin or UTC", w.TimeZone)})
		}
		out.Location = loc
	}
	if len(fe) > 0 {
		return nil, fe
	}
	return out, nil
}

// minuteOfDay returns the local wall-clock minute of t in the window's
// zone.
func (w RolloutWindow) minuteOfDay(t time.Time) int {
	l := t.In(w.Location)
	return l.Hour()*60 + l.Minute()
}

// Contains reports whether t is inside the window: its wall clock in the
// window's zone is at or after Start and before End (End before Start:
// from Start to midnight and from midnight to End).
func (w RolloutWindow) Contains(t time.Time) bool {
	m := w.minuteOfDay(t)
	if w.Start < w.End {
		return m >= w.Start && m < w.End
	}
	return m >= w.Start || m < w.End
}

// NextOpen returns t when t is inside the window, else the first instant
// after t at which it opens (the next Start on the wall clock of its zone).
// A Start that a daylight-saving change skips on some day opens that day
// where the clock lands; a window that the change skips entirely opens the
// next day.
func (w RolloutWindow) NextOpen(t time.Time) time.Time {
	if w.Contains(t) {
		return t
	}
	l := t.In(w.Location)
	for day := 0; day <= 7; day++ {
		c := time.Date(l.Year(), l.Month(), l.Day()+day, w.Start/60, w.Start%60, 0, 0, w.Location)
		if c.After(t) && w.Contains(c) {
			return c
		}
	}
	return t.Add(24 * time.Hour) // unreachable for a valid window
}

// String spells the window as requested: "22:00-04:00 Europe/Berlin".
func (w RolloutWindow) String() string {
	return fmt.Sprintf("%02d:%02d-%02d:%02d %s", w.Start/60, w.Start%60, w.End/60, w.End%60, w.Location)
}
