package margo

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

const (
	statusExample      = "testdata/status-example-001.json"
	exampleDeployment  = "a3e2f5dc-912e-494f-8395-52cf3769bc06"
	statusExampleSteps = 2
)

func loadStatus(t testing.TB) map[string]any {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(readFile(t, statusExample), &doc))
	return doc
}

func mustParseStatus(t testing.TB, raw []byte, deploymentID string) *StatusReport {
	t.Helper()
	r, err := ParseStatusReport(raw, deploymentID)
	require.NoError(t, err, "ParseStatusReport: %s", describeErr(err))
	return r
}

func TestParseStatusReportExample(t *testing.T) {
	raw := readFile(t, statusExample)
	r := mustParseStatus(t, raw, exampleDeployment)
	want := &StatusReport{
		DeploymentID:           exampleDeployment,
		DeviceID:               "plant-alfa-zone1-edge01",
		AdoptedManifestVersion: 7,
		State:                  StatePending,
		Components: []ComponentStatus{
			{Name: "digitron-orchestrator", State: StatePending},
			{Name: "database-services", State: StatePending},
		},
	}
	got := *r
	got.JSON = nil
	if !reflect.DeepEqual(&got, want) {
		t.Errorf("ParseStatusReport(example) = %+v, want %+v", &got, want)
	}
	assert.Len(t, r.Components, statusExampleSteps)

	// The JSON keeps everything, the empty errors included.
	var gotDoc, wantDoc any
	require.NoError(t, json.Unmarshal(r.JSON, &gotDoc))
	require.NoError(t, json.Unmarshal(raw, &wantDoc))
	assert.Equal(t, wantDoc, gotDoc)

	again := mustParseStatus(t, r.JSON, exampleDeployment)
	if !reflect.DeepEqual(again, r) {
		t.Errorf("ParseStatusReport(JSON) = %+v, want %+v", again, r)
	}
}

func TestParseStatusReportErrors(t *testing.T) {
	doc := loadStatus(t)
	set(t, doc, "/status/state", "failed")
	set(t, doc, "/status/error", map[string]any{"code": "E42", "source": "helm", "message": "chart not found", "details": []any{1}})
	set(t, doc, "/components/1/state", "failed")
	set(t, doc, "/components/1/error/message", "image pull back-off")
	delete(doc["components"].([]any)[0].(map[string]any), "error")
	r := mustParseStatus(t, toJSON(t, doc), exampleDeployment)
	assert.Equal(t, StateFailed, r.State)
	assert.Equal(t, &StatusError{Code: "E42", Source: "helm", Message: "chart not found"}, r.Error)
	assert.Nil(t, r.Components[0].Error)
	assert.Equal(t, &StatusError{Message: "image pull back-off"}, r.Components[1].Error)
}

// TestParseStatusReportDefects breaks the example in one way per case and
// expects exactly the listed problems.
func TestParseStatusReportDefects(t *testing.T) {
	tests := []struct {
		name   string
		mutate mutation
		want   []string
	}{
		{"no deploymentId", delM("/deploymentId"), []string{"/deploymentId"}},
		{"deploymentId a number", setM("/deploymentId", 7), []string{"/deploymentId"}},
		{"deploymentId too long", setM("/deploymentId", strings.Repeat("a", MaxDeploymentIDLength+1)), []string{"/deploymentId"}},
		{"deviceId not a device id", setM("/deviceId", "plant alfa"), []string{"/deviceId"}},
		{"deviceId null", setM("/deviceId", nil), []string{"/deviceId"}},
		{"no adoptedManifestVersion", delM("/adoptedManifestVersion"), []string{"/adoptedManifestVersion"}},
		{"adoptedManifestVersion a string", setM("/adoptedManifestVersion", "7"), []string{"/adoptedManifestVersion"}},
		{"no status", delM("/status"), []string{"/status"}},
		{"status a string", setM("/status", "pending"), []string{"/status"}},
		{"no status.state", delM("/status/state"), []string{"/status/state"}},
		{"unknown status.state", setM("/status/state", "running"), []string{"/status/state"}},
		{"status.state in capitals", setM("/status/state", "Installed"), []string{"/status/state"}},
		{"status.error a string", setM("/status/error", "boom"), []string{"/status/error"}},
		{"status.error.code a number", setM("/status/error/code", 42), []string{"/status/error/code"}},
		{"status.error.message too long", setM("/status/error/message", strings.Repeat("m", MaxErrorMessageLength+1)), []string{"/status/error/message"}},
		{"no components", delM("/components"), []string{"/components"}},
		{"components an object", setM("/components", map[string]any{}), []string{"/components"}},
		{"component a string", setM("/components/0", "database-services"), []string{"/components/0"}},
		{"component without name", delM("/components/1/name"), []string{"/components/1/name"}},
		{"component with empty name", setM("/components/1/name", ""), []string{"/components/1/name"}},
		{"component name twice", setM("/components/1/name", "digitron-orchestrator"), []string{"/components/1/name"}},
		{"component without state", delM("/components/0/state"), []string{"/components/0/state"}},
		{"component state unknown", setM("/components/0/state", "upgrading"), []string{"/components/0/state"}},
		{"component error.source a list", setM("/components/0/error/source", []any{}), []string{"/components/0/error/source"}},
		{"several at once", func(t testing.TB, doc map[string]any) {
			set(t, doc, "/adoptedManifestVersion", 0)
			set(t, doc, "/components/0/state", "ok")
			set(t, doc, "/x-wfm-extensions", map[string]any{"phase": "done"})
		}, []string{"/adoptedManifestVersion", "/components/0/state", "/x-wfm-extensions/phase"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := loadStatus(t)
			tt.mutate(t, doc)
			r, err := ParseStatusReport(toJSON(t, doc), exampleDeployment)
			if err == nil {
				t.Fatalf("ParseStatusReport(...) accepted it: %s", r.JSON)
			}
			e := problemOf(t, err, lifecycle.EINVALID)
			assert.Equal(t, ProblemInvalidStatus, e.Type)
			if got := fieldPointersOf(e); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseStatusReport(...) pointers = %q, want %q\n%s", got, tt.want, describeErr(err))
			}
		})
	}
}

func TestParseStatusReportAccepts(t *testing.T) {
	tests := []struct {
		name   string
		mutate mutation
	}{
		{"no deviceId", delM("/deviceId")},
		{"child deviceId", setM("/deviceId", "gw-1/plc-7")},
		{"no components", setM("/components", []any{})},
		{"no errors", func(t testing.TB, doc map[string]any) {
			delete(doc["status"].(map[string]any), "error")
			for _, c := range doc["components"].([]any) {
				delete(c.(map[string]any), "error")
			}
		}},
		{"unknown members", func(t testing.TB, doc map[string]any) {
			doc["reportedAt"] = "2026-01-02T03:04:05Z"
			doc["x-acme-extensions"] = map[string]any{"anything": []any{nil}}
			set(t, doc, "/status/progress", 0.5)
			set(t, doc, "/components/0/restarts", 3)
			set(t, doc, "/status/error/details", map[string]any{})
		}},
		{"all six states", func(t testing.TB, doc map[string]any) {
			var comps []any
			for _, s := range []string{"pending", "installing", "installed", "failed", "removing", "removed"} {
				comps = append(comps, map[string]any{"name": "c-" + s, "state": s})
			}
			doc["components"] = comps
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := loadStatus(t)
			tt.mutate(t, doc)
			r := mustParseStatus(t, toJSON(t, doc), exampleDeployment)
			again := mustParseStatus(t, r.JSON, exampleDeployment)
			if !reflect.DeepEqual(again, r) {
				t.Errorf("ParseStatusReport(JSON) = %+v, want %+v", again, r)
			}
		})
	}
}

func TestParseStatusReportDeploymentIDMismatch(t *testing.T) {
	_, err := ParseStatusReport(readFile(t, statusExample), "b3e2f5dc-912e-494f-8395-52cf3769bc06")
	e := problemOf(t, err, lifecycle.EINVALID)
	assert.Equal(t, ProblemDeploymentIDMismatch, e.Type)
	assert.Equal(t, []string{"/deploymentId"}, fieldPointersOf(e))

	doc := loadStatus(t)
	delete(doc, "components")
	_, err = ParseStatusReport(toJSON(t, doc), "other")
	e = problemOf(t, err, lifecycle.EINVALID)
	assert.Equal(t, ProblemDeploymentIDMismatch, e.Type)
	assert.Equal(t, []string{"/deploymentId", "/components"}, fieldPointersOf(e))
}

// TestParseStatusReportManifestVersion feeds number literals as written:
// the version is an exact integer in [1, 2^64-1], however it is spelled.
func TestParseStatusReportManifestVersion(t *testing.T) {
	tests := []struct {
		literal string
		want    uint64 // 0: refused
	}{
		{"1", 1},
		{"7", 7},
		{"1e3", 1000},
		{"1E3", 1000},
		{"1e+3", 1000},
		{"1000.0", 1000},
		{"1.5e1", 15},
		{"12.50e1", 125},
		{"100e-2", 1},
		{"0.1e1", 1},
		{"9007199254740993", 9007199254740993},    // 2^53+1: a float64 would say ...992
		{"9007199254740993e0", 9007199254740993},  // the same, as a float literal
		{"9223372036854775808", 1 << 63},          // beyond int64
		{"18446744073709551615", 1<<64 - 1},       // 2^64-1
		{"1.8446744073709551615e19", 1<<64 - 1},   // the same
		{"18446744073709551615.000", 1<<64 - 1},   //
		{"0", 0},                                  // below 1
		{"-0", 0},                                 //
		{"0.0", 0},                                //
		{"-1", 0},                                 // negative
		{"-1e3", 0},                               //
		{"1.5", 0},                                // fraction
		{"1e-1", 0},                               //
		{"1.0000000000000000001", 0},              // a float64 would round it to 1
		{"18446744073709551616", 0},               // 2^64
		{"18446744073709551615.5", 0},             // fraction near the top
		{"1.8446744073709551616e19", 0},           // 2^64
		{"1e20", 0},                               //
		{"1e-999999999999999999999", 0},           // tiny
		{"123456789012345678901234567890e-10", 0}, // a fraction, 30 digits
		{"123456789012345678900000000000e-10", 12345678901234567890},
	}
	// Beyond float64's range the tree reader refuses any number as
	// malformed, before the exact reading.
	_, err := ParseStatusReport([]byte(`{"deploymentId":"d","adoptedManifestVersion":1e999999999999999999999,"status":{"state":"installed"},"components":[]}`), "d")
	problemOf(t, err, lifecycle.EMALFORMED)

	for _, tt := range tests {
		t.Run(tt.literal, func(t *testing.T) {
			raw := `{"deploymentId":"d","adoptedManifestVersion":` + tt.literal + `,"status":{"state":"installed"},"components":[]}`
			r, err := ParseStatusReport([]byte(raw), "d")
			if tt.want == 0 {
				if err == nil {
					t.Fatalf("ParseStatusReport(%s) = %d, want refused", tt.literal, r.AdoptedManifestVersion)
				}
				e := problemOf(t, err, lifecycle.EINVALID)
				assert.Equal(t, []string{"/adoptedManifestVersion"}, fieldPointersOf(e))
				return
			}
			require.NoError(t, err, "ParseStatusReport(%s): %s", tt.literal, describeErr(err))
			if r.AdoptedManifestVersion != tt.want {
				t.Errorf("ParseStatusReport(%s).AdoptedManifestVersion = %d, want %d", tt.literal, r.AdoptedManifestVersion, tt.want)
			}
			// The canonical JSON writes the exact integer.
			assert.Contains(t, string(r.JSON), `"adoptedManifestVersion":`+formatNumber(tt.want)+`,`)
			again := mustParseStatus(t, r.JSON, "d")
			assert.Equal(t, r, again)
		})
	}
}

func TestExactInteger(t *testing.T) {
	tests := []struct {
		lit    string
		lo, hi uint64
		want   uint64
		ok     bool
	}{
		{"0", 0, 10, 0, true},
		{"-0.0e5", 0, 10, 0, true},
		{"10", 0, 10, 10, true},
		{"11", 0, 10, 0, false},
		{"1e1", 0, 10, 10, true},
		{"", 0, 10, 0, false},
		{strings.Repeat("1", maxNumberLiteral+1), 0, 10, 0, false},
		{"0." + strings.Repeat("0", 3000) + "1e3001", 0, 10, 1, true},
	}
	for _, tt := range tests {
		got, msg := exactInteger(tt.lit, tt.lo, tt.hi)
		if got != tt.want || (msg == "") != tt.ok {
			t.Errorf("exactInteger(%.20q, %d, %d) = %d, %q; want %d, ok %v", tt.lit, tt.lo, tt.hi, got, msg, tt.want, tt.ok)
		}
	}
}

func TestParseStatusReportExtension(t *testing.T) {
	ptrOf := func(i int64) *int64 { return &i }
	yes, no := true, false
	tests := []struct {
		name string
		ext  string
		want *StatusExtension
		errs []string
	}{
		{"full", `{"phase":"draining","inFlight":12,"healthy":true,"message":"finishing 12 jobs"}`,
			&StatusExtension{Phase: PhaseDraining, InFlight: ptrOf(12), Healthy: &yes, Message: "finishing 12 jobs"}, nil},
		{"empty", `{}`, &StatusExtension{}, nil},
		{"drained", `{"phase":"drained","inFlight":0}`, &StatusExtension{Phase: PhaseDrained, InFlight: ptrOf(0)}, nil},
		{"starting-new", `{"phase":"starting-new","healthy":false}`, &StatusExtension{Phase: PhaseStartingNew, Healthy: &no}, nil},
		{"verifying", `{"phase":"verifying"}`, &StatusExtension{Phase: PhaseVerifying}, nil},
		{"switching", `{"phase":"switching"}`, &StatusExtension{Phase: PhaseSwitching}, nil},
		{"inFlight 1e2", `{"inFlight":1e2}`, &StatusExtension{InFlight: ptrOf(100)}, nil},
		{"inFlight max", `{"inFlight":9223372036854775807}`, &StatusExtension{InFlight: ptrOf(1<<63 - 1)}, nil},
		{"not an object", `"draining"`, nil, []string{"/x-wfm-extensions"}},
		{"null", `null`, nil, []string{"/x-wfm-extensions"}},
		{"unknown phase", `{"phase":"drain"}`, nil, []string{"/x-wfm-extensions/phase"}},
		{"phase a number", `{"phase":1}`, nil, []string{"/x-wfm-extensions/phase"}},
		{"negative inFlight", `{"inFlight":-1}`, nil, []string{"/x-wfm-extensions/inFlight"}},
		{"fractional inFlight", `{"inFlight":2.5}`, nil, []string{"/x-wfm-extensions/inFlight"}},
		{"inFlight beyond int64", `{"inFlight":9223372036854775808}`, nil, []string{"/x-wfm-extensions/inFlight"}},
		{"inFlight a string", `{"inFlight":"3"}`, nil, []string{"/x-wfm-extensions/inFlight"}},
		{"healthy a string", `{"healthy":"yes"}`, nil, []string{"/x-wfm-extensions/healthy"}},
		{"message too long", `{"message":"` + strings.Repeat("m", MaxExtensionMessageLength+1) + `"}`, nil, []string{"/x-wfm-extensions/message"}},
		{"unknown member", `{"phase":"draining","inflight":3}`, nil, []string{"/x-wfm-extensions/inflight"}},
		{"several", `{"phase":"x","inFlight":-2,"healthy":1,"message":2,"extra":true}`, nil, []string{
			"/x-wfm-extensions/extra", "/x-wfm-extensions/phase", "/x-wfm-extensions/inFlight", "/x-wfm-extensions/healthy", "/x-wfm-extensions/message"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := `{"deploymentId":"d","adoptedManifestVersion":3,"status":{"state":"installing"},"components":[],"x-wfm-extensions":` + tt.ext + `}`
			r, err := ParseStatusReport([]byte(raw), "d")
			if tt.errs != nil {
				if err == nil {
					t.Fatalf("ParseStatusReport(...) accepted extension %s: %+v", tt.ext, r.Extension)
				}
				e := problemOf(t, err, lifecycle.EINVALID)
				if got := fieldPointersOf(e); !reflect.DeepEqual(got, tt.errs) {
					t.Errorf("ParseStatusReport(...) pointers = %q, want %q\n%s", got, tt.errs, describeErr(err))
				}
				return
			}
			require.NoError(t, err, describeErr(err))
			if !reflect.DeepEqual(r.Extension, tt.want) {
				t.Errorf("ParseStatusReport(...).Extension = %+v, want %+v", r.Extension, tt.want)
			}
			assert.Equal(t, r, mustParseStatus(t, r.JSON, "d"))
		})
	}
	// Other vendors' extensions are not ours to check.
	raw := `{"deploymentId":"d","adoptedManifestVersion":3,"status":{"state":"installing"},"components":[],"x-acme-extensions":{"phase":"x"}}`
	assert.Nil(t, mustParseStatus(t, []byte(raw), "d").Extension)
}

func TestParseStatusReportMalformed(t *testing.T) {
	for name, raw := range map[string]string{
		"empty":     "",
		"array":     `[]`,
		"yaml":      "deploymentId: d\n",
		"duplicate": `{"deploymentId":"d","deploymentId":"d"}`,
		"truncated": `{"deploymentId":"d",`,
		"deep":      `{"x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`,
		"100k deep": `{"x":` + strings.Repeat("[", 30_000) + strings.Repeat("]", 30_000) + `}`,
		"bad UTF-8": "{\"deploymentId\":\"\xc3\x28\"}",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseStatusReport([]byte(raw), "d")
			e := problemOf(t, err, lifecycle.EMALFORMED)
			assert.Equal(t, ProblemMalformedStatus, e.Type)
		})
	}
}

func TestParseStatusReportBounds(t *testing.T) {
	comps := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = `{"name":"c` + formatNumber(int64(i)) + `","state":"installed"}`
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	report := func(components string) []byte {
		return []byte(`{"deploymentId":"d","adoptedManifestVersion":1,"status":{"state":"installed"},"components":` + components + `}`)
	}
	r := mustParseStatus(t, report(comps(MaxComponentStatuses)), "d")
	assert.Len(t, r.Components, MaxComponentStatuses)

	_, err := ParseStatusReport(report(comps(MaxComponentStatuses+1)), "d")
	e := problemOf(t, err, lifecycle.EINVALID)
	assert.Equal(t, []string{"/components"}, fieldPointersOf(e))

	_, err = ParseStatusReport(report(`[`+strings.Repeat(`{"name":"x","state":"installed"},`, 2000)+`{}]`), "d")
	e = problemOf(t, err, lifecycle.ETOOLARGE)
	assert.Equal(t, ProblemStatusTooLarge, e.Type)

	// Every component wrong: the list of problems is capped.
	_, err = ParseStatusReport(report(`[`+strings.TrimSuffix(strings.Repeat(`{"name":1,"state":2},`, MaxComponentStatuses), ",")+`]`), "d")
	e = problemOf(t, err, lifecycle.EINVALID)
	assert.Len(t, e.Fields, MaxProblems)
	assert.Contains(t, e.Message, "512 problem(s)")
}

func TestStateAndPhaseValid(t *testing.T) {
	for _, s := range []DeploymentState{StatePending, StateInstalling, StateInstalled, StateFailed, StateRemoving, StateRemoved} {
		assert.True(t, s.Valid(), "%q.Valid()", s)
	}
	assert.False(t, DeploymentState("upgrading").Valid())
	for _, p := range []Phase{PhaseDraining, PhaseDrained, PhaseStartingNew, PhaseVerifying, PhaseSwitching} {
		assert.True(t, p.Valid(), "%q.Valid()", p)
	}
	assert.False(t, Phase("").Valid())
}

// FuzzParseStatusReport reads arbitrary bytes as a status report. It must
// never panic; every refusal is a *lifecycle.Error with a documented code;
// every accepted report reads back from its JSON to the same report and the
// same JSON, and agrees with the path's deployment id.
func FuzzParseStatusReport(f *testing.F) {
	ex := readFile(f, statusExample)
	f.Add(ex, exampleDeployment)
	r, err := ParseStatusReport(ex, exampleDeployment)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(r.JSON, exampleDeployment)
	f.Add([]byte(`{"deploymentId":"d","adoptedManifestVersion":18446744073709551615,"status":{"state":"failed","error":{"code":"c"}},"components":[{"name":"a","state":"removed","error":{}}],"x-wfm-extensions":{"phase":"draining","inFlight":1e2,"healthy":false,"message":"m"}}`), "d")
	f.Add([]byte(`{"deploymentId":"d","adoptedManifestVersion":1.0e0,"status":{"state":"removed"},"components":[],"x":[1e20,-0.0,0.5]}`), "d")
	f.Add([]byte(`{"deploymentId":"","adoptedManifestVersion":9007199254740993e0,"status":{"state":"installed"},"components":[]}`), "")
	allowed := map[lifecycle.Code]bool{lifecycle.EMALFORMED: true, lifecycle.EINVALID: true, lifecycle.ETOOLARGE: true}
	check := func(t *testing.T, raw []byte, deploymentID string) {
		r, err := ParseStatusReport(raw, deploymentID)
		if err != nil {
			var e *lifecycle.Error
			if !errors.As(err, &e) || !allowed[e.Code] {
				t.Fatalf("ParseStatusReport(...) error %T %v, want a *lifecycle.Error with a documented code", err, err)
			}
			if e.Code == lifecycle.EINVALID && (len(e.Fields) == 0 || len(e.Fields) > MaxProblems) {
				t.Fatalf("ParseStatusReport(...) EINVALID with %d fields", len(e.Fields))
			}
			return
		}
		if r.DeploymentID != deploymentID || r.AdoptedManifestVersion == 0 || !r.State.Valid() {
			t.Fatalf("ParseStatusReport(...) accepted %+v for path %q", r, deploymentID)
		}
		again, err := ParseStatusReport(r.JSON, deploymentID)
		if err != nil {
			t.Fatalf("accepted, but its JSON is refused: %v\n%s", err, r.JSON)
		}
		if !reflect.DeepEqual(again, r) {
			t.Fatalf("ParseStatusReport(JSON) = %+v, want %+v", again, r)
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, deploymentID string) {
		check(t, raw, deploymentID)
		// Also read the report as POSTed to the deployment it names.
		var doc struct {
			DeploymentID string `json:"deploymentId"`
		}
		if json.Unmarshal(raw, &doc) == nil && doc.DeploymentID != deploymentID {
			check(t, raw, doc.DeploymentID)
		}
	})
}

func TestParseStatusReportRefusesNUL(t *testing.T) {
	raw := []byte(`{"deploymentId":"d","adoptedManifestVersion":1,"status":{"state":"installed","error":{"message":"a\u0000b"}},"components":[]}`)
	_, err := ParseStatusReport(raw, "d")
	if lifecycle.ErrorCode(err) != lifecycle.EMALFORMED {
		t.Fatalf("ParseStatusReport(NUL) = %v, want EMALFORMED", err)
	}
}
