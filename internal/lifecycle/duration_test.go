package lifecycle

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		field DurationField
		in    string
		want  time.Duration
		ok    bool
	}{
		{DurationStepTimeout, "10m", 10 * time.Minute, true},
		{DurationStepTimeout, "1s", time.Second, true},
		{DurationStepTimeout, "168h", 168 * time.Hour, true},
		{DurationStepTimeout, "0s", 0, false}, // the defect: 0s meant the 30m default
		{DurationStepTimeout, "0", 0, false},
		{DurationStepTimeout, "999ms", 0, false},
		{DurationStepTimeout, "-5m", 0, false},
		{DurationStepTimeout, "168h1s", 0, false},
		{DurationStepTimeout, "5", 0, false},
		{DurationStepTimeout, "ten minutes", 0, false},
		{DurationStepTimeout, "", 0, false},
		{DurationDrainTimeout, "0s", 0, false}, // the defect: 0s meant the 10m default
		{DurationDrainTimeout, "90s", 90 * time.Second, true},
		{DurationDrainTimeout, "169h", 0, false},
		{DurationRollbackWindow, "2160h", 2160 * time.Hour, true}, // months are fine for a window
		{DurationRollbackWindow, "8760h", 8760 * time.Hour, true},
		{DurationRollbackWindow, "8761h", 0, false},
		{DurationRollbackWindow, "0s", 0, false},
		{DurationTokenExpiry, "720h", 720 * time.Hour, true},
		{DurationTokenExpiry, "87601h", 0, false},
		{DurationInstallTimeout, "45m", 45 * time.Minute, true},
		{DurationInstallTimeout, "0s", 0, false},
		{DurationRemoveTimeout, "169h", 0, false},
		{DurationWaveSoak, "0s", 0, true}, // the one field where 0s is a value: no soak
		{DurationWaveSoak, "2h", 2 * time.Hour, true},
		{DurationWaveSoak, "169h", 0, false},
		{DurationRolloutDeadline, "59s", 0, false},
		{DurationRolloutDeadline, "8760h", 8760 * time.Hour, true},
		{DurationNotSeenFor, "1m", 0, false}, // below the resolution of lastSeenAt
		{DurationNotSeenFor, "24h", 24 * time.Hour, true},
		{"unknown", "10m", 0, false},
	}
	for _, tt := range tests {
		got, fe := ParseDuration(tt.field, tt.in, "/x")
		if (fe == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseDuration(%s, %q) = %s, %v, want %s, ok %v", tt.field, tt.in, got, fe, tt.want, tt.ok)
		}
		if fe != nil && (fe.Pointer != "/x" || fe.Detail == "") {
			t.Errorf("ParseDuration(%s, %q) error = %+v, want pointer /x and a detail", tt.field, tt.in, fe)
		}
	}
}

func TestDurationRanges(t *testing.T) {
	want := map[DurationField]string{
		DurationDrainTimeout:    "from 1s to 168h",
		DurationRollbackWindow:  "from 1s to 8760h",
		DurationStepTimeout:     "from 1s to 168h",
		DurationTokenExpiry:     "from 1s to 87600h",
		DurationInstallTimeout:  "from 1s to 168h",
		DurationRemoveTimeout:   "from 1s to 168h",
		DurationWaveSoak:        "from 0s to 168h",
		DurationRolloutDeadline: "from 1m to 8760h",
		DurationNotSeenFor:      "from 5m to 8760h",
	}
	fields := DurationFields()
	if len(fields) != len(want) {
		t.Fatalf("DurationFields() = %v, want the %d fields of %v", fields, len(want), want)
	}
	for _, f := range fields {
		r := DurationRangeOf(f)
		if got := r.String(); got != want[f] {
			t.Errorf("DurationRangeOf(%s) = %s, want %s", f, got, want[f])
		}
		if r.Default != 0 && !r.Contains(r.Default) {
			t.Errorf("DurationRangeOf(%s).Default = %s, outside its own range", f, r.Default)
		}
	}
}

func TestDurationUsed(t *testing.T) {
	tests := []struct {
		field DurationField
		in    time.Duration
		want  time.Duration
	}{
		{DurationDrainTimeout, 0, DefaultDrainTimeout},
		{DurationDrainTimeout, -time.Minute, DefaultDrainTimeout},
		{DurationDrainTimeout, 5 * time.Minute, 5 * time.Minute},
		{DurationDrainTimeout, 500 * time.Hour, 168 * time.Hour},
		{DurationDrainTimeout, 500 * time.Millisecond, DefaultDrainTimeout},
		// A declared window, however short, never becomes "no limit" (what
		// its absence means): the shortest window in range is used.
		{DurationRollbackWindow, 500 * time.Millisecond, time.Second},
		{DurationRollbackWindow, 0, time.Second},
		{DurationRollbackWindow, 9000 * time.Hour, 8760 * time.Hour},
		{DurationStepTimeout, 0, DefaultStepTimeout},
	}
	for _, tt := range tests {
		if got := DurationRangeOf(tt.field).Used(tt.in); got != tt.want {
			t.Errorf("DurationRangeOf(%s).Used(%s) = %s, want %s", tt.field, tt.in, got, tt.want)
		}
	}
}

func TestSubstitute(t *testing.T) {
	if _, ok := Substitute(DurationDrainTimeout, time.Minute, "1m", "/upgrade/drain/timeout"); ok {
		t.Errorf("Substitute(drain.timeout, 1m) substitutes a value within range")
	}
	tests := []struct {
		field    DurationField
		in       time.Duration
		declared string
		want     string
	}{
		{DurationDrainTimeout, 0, "0s", "drain.timeout 0s is out of range (from 1s to 168h); 10m is used"},
		{DurationDrainTimeout, 200 * time.Hour, "200h", "drain.timeout 200h is out of range (from 1s to 168h); 168h is used"},
		{DurationDrainTimeout, 500 * time.Millisecond, "500ms", "drain.timeout 500ms is out of range (from 1s to 168h); 10m is used"},
		{DurationRollbackWindow, 500 * time.Millisecond, "500ms", "rollback.window 500ms is out of range (from 1s to 8760h); 1s is used"},
	}
	for _, tt := range tests {
		s, ok := Substitute(tt.field, tt.in, tt.declared, "/p")
		if !ok || s.Message() != tt.want || s.Pointer != "/p" || s.Declared != tt.declared {
			t.Errorf("Substitute(%s, %s) = %+v (%q), %v, want %q", tt.field, tt.in, s, s.Message(), ok, tt.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for in, want := range map[time.Duration]string{
		time.Second: "1s", 10 * time.Minute: "10m", 168 * time.Hour: "168h", 90 * time.Minute: "1h30m",
		90 * time.Second: "1m30s", 1500 * time.Millisecond: "1.5s", 0: "0s", time.Hour + time.Second: "1h0m1s",
	} {
		if got := FormatDuration(in); got != want {
			t.Errorf("FormatDuration(%s) = %q, want %q", in, got, want)
		}
	}
}
