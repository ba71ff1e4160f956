package lifecycle

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sp(s string) *string { return &s }
func ip(n int) *int       { return &n }

func TestValidateRolloutSpecDefaults(t *testing.T) {
	got, err := ValidateRolloutSpec(RolloutSpec{Action: RolloutUpgrade, TargetVersion: "2.0"})
	require.NoError(t, err)
	assert.Equal(t, MustParseVersion("2.0.0"), got.Target)
	assert.Equal(t, PathDirect, got.Path)
	assert.Equal(t, OnFailureHalt, got.OnFailure)
	assert.Equal(t, DefaultStepTimeout, got.Timeout)
	assert.True(t, got.DefaultWaves)
	assert.Equal(t, DefaultWaves(), got.Waves)
	assert.Equal(t, DefaultMaxInFlight, got.MaxInFlight)
	assert.Equal(t, OnThresholdPause, got.OnThreshold)
	assert.Nil(t, got.Window)
	assert.Equal(t, DefaultRolloutDeadline, got.Deadline)
	assert.Zero(t, got.NotSeenFor)

	inst, err := ValidateRolloutSpec(RolloutSpec{Action: RolloutInstall, TargetVersion: "1.0.0", Parameters: map[string]any{"a": 1}})
	require.NoError(t, err)
	assert.Equal(t, DefaultInstallTimeout, inst.Timeout)
	assert.Equal(t, OnFailure(""), inst.OnFailure, "an install has no onFailure")
	assert.Equal(t, PathMode(""), inst.Path, "only an upgrade has a path")

	// A wave's maxFailures defaults to what its minSuccess leaves.
	w, err := ValidateRolloutSpec(RolloutSpec{Action: RolloutReconfigure, Parameters: map[string]any{"a": 1},
		Waves:       []WaveSpec{{Size: CountOf(5), MinSuccess: ip(90), Soak: sp("30m")}, {Size: PercentOf(100), Approval: ApprovalManual, MaxFailures: &WaveAmount{Count: ip(3)}}},
		MaxInFlight: ip(7), OnThreshold: OnThresholdAbort, Deadline: sp("48h"), NotSeenFor: sp("24h"),
		Window: &RolloutWindowSpec{Start: "22:00", End: "04:30", TimeZone: "Europe/Berlin"}})
	require.NoError(t, err)
	assert.False(t, w.DefaultWaves)
	assert.Equal(t, []Wave{
		{Size: CountOf(5), Approval: ApprovalAuto, Soak: 30 * time.Minute, MinSuccess: 90, MaxFailures: PercentOf(10)},
		{Size: PercentOf(100), Approval: ApprovalManual, MinSuccess: 0, MaxFailures: CountOf(3)}, // maxFailures alone decides
	}, w.Waves)
	assert.Equal(t, 7, w.MaxInFlight)
	assert.Equal(t, OnThresholdAbort, w.OnThreshold)
	assert.Equal(t, 48*time.Hour, w.Deadline)
	assert.Equal(t, 24*time.Hour, w.NotSeenFor)
	require.NotNil(t, w.Window)
	assert.Equal(t, "22:00-04:30 Europe/Berlin", w.Window.String())
}

func TestValidateRolloutSpec(t *testing.T) {
	up := func(f func(*RolloutSpec)) RolloutSpec {
		s := RolloutSpec{Action: RolloutUpgrade, TargetVersion: "2.0.0"}
		f(&s)
		return s
	}
	win := func(start, end, tz string) func(*RolloutSpec) {
		return func(s *RolloutSpec) { s.Window = &RolloutWindowSpec{Start: start, End: end, TimeZone: tz} }
	}
	wave := func(w WaveSpec) func(*RolloutSpec) {
		return func(s *RolloutSpec) { s.Waves = []WaveSpec{w} }
	}
	tests := []struct {
		name string
		spec RolloutSpec
		want []string // pointers, in order
	}{
		{"unknown action", RolloutSpec{Action: "deploy"}, []string{"/action"}},
		{"upgrade without a target", up(func(s *RolloutSpec) { s.TargetVersion = "" }), []string{"/targetVersion"}},
		{"a bad target version", up(func(s *RolloutSpec) { s.TargetVersion = "v2" }), []string{"/targetVersion"}},
		{"reconfigure with a target", RolloutSpec{Action: RolloutReconfigure, TargetVersion: "1.0.0", Parameters: map[string]any{"a": 1}}, []string{"/targetVersion"}},
		{"reconfigure without parameters", RolloutSpec{Action: RolloutReconfigure}, []string{"/parameters"}},
		{"rollback with parameters and a path", RolloutSpec{Action: RolloutRollback, TargetVersion: "1.0.0", Parameters: map[string]any{"a": 1}, Path: PathAuto},
			[]string{"/parameters", "/path"}},
		{"install with upgrade options", RolloutSpec{Action: RolloutInstall, TargetVersion: "1.0.0", Strategy: StrategyRecreate,
			Drain: &DrainSpec{Required: true}, OnFailure: OnFailureRollback}, []string{"/strategy", "/drain", "/onFailure"}},
		{"a bad path", up(func(s *RolloutSpec) { s.Path = "shortest" }), []string{"/path"}},
		{"a bad strategy", up(func(s *RolloutSpec) { s.Strategy = "canary" }), []string{"/strategy"}},
		{"a bad drain", up(func(s *RolloutSpec) { s.Drain = &DrainSpec{Timeout: sp("0s"), OnTimeout: "wait"} }), []string{"/drain/timeout", "/drain/onTimeout"}},
		{"a bad onFailure", up(func(s *RolloutSpec) { s.OnFailure = "retry" }), []string{"/onFailure"}},
		{"a timeout out of range", up(func(s *RolloutSpec) { s.Timeout = sp("200h") }), []string{"/timeout"}},
		{"a timeout that is no duration", up(func(s *RolloutSpec) { s.Timeout = sp("soon") }), []string{"/timeout"}},
		{"too many waves", up(func(s *RolloutSpec) { s.Waves = make([]WaveSpec, MaxRolloutWaves+1) }), []string{"/waves"}},
		{"a size with neither", up(wave(WaveSpec{})), []string{"/waves/0/size"}},
		{"a size with both", up(wave(WaveSpec{Size: WaveAmount{Count: ip(1), Percent: ip(1)}})), []string{"/waves/0/size"}},
		{"a size of 0", up(wave(WaveSpec{Size: CountOf(0)})), []string{"/waves/0/size/count"}},
		{"a size of 0%", up(wave(WaveSpec{Size: PercentOf(0)})), []string{"/waves/0/size/percent"}},
		{"a size over 100%", up(wave(WaveSpec{Size: PercentOf(101)})), []string{"/waves/0/size/percent"}},
		{"a bad approval", up(wave(WaveSpec{Size: PercentOf(100), Approval: "later"})), []string{"/waves/0/approval"}},
		{"a soak out of range", up(wave(WaveSpec{Size: PercentOf(100), Soak: sp("169h")})), []string{"/waves/0/soak"}},
		{"a negative soak", up(wave(WaveSpec{Size: PercentOf(100), Soak: sp("-1s")})), []string{"/waves/0/soak"}},
		{"minSuccess over 100", up(wave(WaveSpec{Size: PercentOf(100), MinSuccess: ip(101)})), []string{"/waves/0/minSuccess"}},
		{"maxFailures negative", up(wave(WaveSpec{Size: PercentOf(100), MaxFailures: &WaveAmount{Count: ip(-1)}})), []string{"/waves/0/maxFailures/count"}},
		{"maxFailures with neither", up(wave(WaveSpec{Size: PercentOf(100), MaxFailures: &WaveAmount{}})), []string{"/waves/0/maxFailures"}},
		{"maxInFlight 0", up(func(s *RolloutSpec) { s.MaxInFlight = ip(0) }), []string{"/maxInFlight"}},
		{"maxInFlight too high", up(func(s *RolloutSpec) { s.MaxInFlight = ip(MaxMaxInFlight + 1) }), []string{"/maxInFlight"}},
		{"a bad onThreshold", up(func(s *RolloutSpec) { s.OnThreshold = "ignore" }), []string{"/onThreshold"}},
		{"a bad window", up(win("25:00", "4:00", "Mars/Olympus")), []string{"/window/start", "/window/end", "/window/timeZone"}},
		{"a window of the whole day", up(win("22:00", "22:00", "UTC")), []string{"/window/end"}},
		{"a window without a zone", up(win("22:00", "04:00", "")), []string{"/window/timeZone"}},
		{"a window in the server's zone", up(win("22:00", "04:00", "Local")), []string{"/window/timeZone"}},
		{"a deadline too short", up(func(s *RolloutSpec) { s.Deadline = sp("30s") }), []string{"/deadline"}},
		{"a notSeenFor out of range", up(func(s *RolloutSpec) { s.NotSeenFor = sp("0s") }), []string{"/target/notSeenFor"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ValidateRolloutSpec(tt.spec)
			var de *Error
			require.True(t, errors.As(err, &de), "ValidateRolloutSpec() = %v, want an *Error", err)
			assert.Equal(t, EINVALID, de.Code)
			assert.Equal(t, ProblemInvalidRollout, de.Type)
			var got []string
			for _, f := range de.Fields {
				got = append(got, f.Pointer)
				assert.NotEmpty(t, f.Detail)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("ValidateRolloutSpec() pointers = %v, want %v (%v)", got, tt.want, de.Fields)
			}
		})
	}
}

func TestRolloutWindow(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04", s, berlin)
		require.NoError(t, err)
		return v
	}
	night := RolloutWindow{Start: 22 * 60, End: 4 * 60, Location: berlin}  // across midnight
	day := RolloutWindow{Start: 9 * 60, End: 17*60 + 30, Location: berlin} // within a day
	dst := RolloutWindow{Start: 2*60 + 30, End: 3 * 60, Location: berlin}  // skipped on 2026-03-29
	tests := []struct {
		name     string
		w        RolloutWindow
		t        string
		contains bool
		next     string
	}{
		{"night: before start", night, "2026-12-01 21:59", false, "2026-12-01 22:00"},
		{"night: at start", night, "2026-12-01 22:00", true, "2026-12-01 22:00"},
		{"night: after midnight", night, "2026-12-02 03:59", true, "2026-12-02 03:59"},
		{"night: at end", night, "2026-12-02 04:00", false, "2026-12-02 22:00"},
		{"day: before", day, "2026-12-01 08:00", false, "2026-12-01 09:00"},
		{"day: inside", day, "2026-12-01 17:29", true, "2026-12-01 17:29"},
		{"day: after", day, "2026-12-01 17:30", false, "2026-12-02 09:00"},
		{"a window a DST change skips opens the next day", dst, "2026-03-29 01:00", false, "2026-03-30 02:30"},
	}
	for _, tt := range tests {
		now := at(tt.t)
		if got := tt.w.Contains(now); got != tt.contains {
			t.Errorf("%s: Contains(%s) = %v, want %v", tt.name, tt.t, got, tt.contains)
		}
		if got := tt.w.NextOpen(now); !got.Equal(at(tt.next)) {
			t.Errorf("%s: NextOpen(%s) = %s, want %s", tt.name, tt.t, got.In(berlin), tt.next)
		}
	}
	// The same instant in UTC reads Berlin's wall clock.
	if !night.Contains(time.Date(2026, 12, 1, 21, 30, 0, 0, time.UTC)) {
		t.Errorf("Contains(21:30 UTC = 22:30 Berlin) = false, want true")
	}
}
