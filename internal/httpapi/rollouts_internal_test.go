package httpapi

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/api"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

func TestRolloutPointer(t *testing.T) {
	for _, c := range []struct {
		action lifecycle.RolloutAction
		in     string
		want   string
	}{
		{lifecycle.RolloutUpgrade, "/targetVersion", "/upgrade/targetVersion"},
		{lifecycle.RolloutInstall, "/targetVersion", "/install/version"},
		{lifecycle.RolloutRollback, "/targetVersion", "/rollback/toVersion"},
		{lifecycle.RolloutUpgrade, "/parameters", "/upgrade/parameters"},
		{lifecycle.RolloutReconfigure, "/parameters", "/reconfigure/parameters"},
		{lifecycle.RolloutInstall, "/parameters", "/install/parameters"},
		{lifecycle.RolloutUpgrade, "/path", "/upgrade/path"},
		{lifecycle.RolloutUpgrade, "/strategy", "/upgrade/strategy"},
		{lifecycle.RolloutUpgrade, "/drain/timeout", "/upgrade/drain/timeout"},
		{lifecycle.RolloutUpgrade, "/drain/onTimeout", "/upgrade/drain/onTimeout"},
		{lifecycle.RolloutReconfigure, "/onFailure", "/reconfigure/onFailure"},
		{lifecycle.RolloutRollback, "/timeout", "/rollback/timeout"},
		{lifecycle.RolloutInstall, "/timeout", "/install/timeout"},
		// Not an option: unchanged.
		{lifecycle.RolloutUpgrade, "/timeouts", "/timeouts"},
		{lifecycle.RolloutUpgrade, "/pathway", "/pathway"},
		{lifecycle.RolloutUpgrade, "/waves/0/size/count", "/waves/0/size/count"},
		{lifecycle.RolloutUpgrade, "/waves/2/maxFailures/percent", "/waves/2/maxFailures/percent"},
		{lifecycle.RolloutUpgrade, "/waves", "/waves"},
		{lifecycle.RolloutUpgrade, "/maxInFlight", "/maxInFlight"},
		{lifecycle.RolloutUpgrade, "/onThreshold", "/onThreshold"},
		{lifecycle.RolloutUpgrade, "/window/timeZone", "/window/timeZone"},
		{lifecycle.RolloutUpgrade, "/deadline", "/deadline"},
		{lifecycle.RolloutUpgrade, "/target/notSeenFor", "/target/notSeenFor"},
		{lifecycle.RolloutUpgrade, "/target/labels", "/target/labels"},
		{lifecycle.RolloutUpgrade, "/action", "/action"},
		// An unknown action leaves every pointer alone.
		{"", "/targetVersion", "/targetVersion"},
	} {
		if got := rolloutPointer(c.action, c.in); got != c.want {
			t.Errorf("rolloutPointer(%s, %s) = %s, want %s", c.action, c.in, got, c.want)
		}
	}
}

// resolves reports whether JSON pointer p (RFC 6901) names a value of doc.
func resolves(doc any, p string) bool {
	if p == "" {
		return true
	}
	for _, tok := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch v := doc.(type) {
		case map[string]any:
			next, ok := v[tok]
			if !ok {
				return false
			}
			doc = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v) {
				return false
			}
			doc = v[i]
		default:
			return false
		}
	}
	return true
}

// TestRolloutValidationNamesTheRequestField checks every refusal of
// lifecycle.ValidateRolloutSpec, once translated, against the body the
// client sent: each pointer must name a member of it.
func TestRolloutValidationNamesTheRequestField(t *testing.T) {
	s := func(v string) *string { return &v }
	i := func(v int) *int { return &v }
	badWaves := &[]api.WaveSpec{
		{Size: api.WaveSize{Count: i(0)}, Approval: ptr(api.WaveApproval("sometimes"))},
		{Size: api.WaveSize{Percent: i(10)}, Soak: s("forever"), MinSuccess: i(101), MaxFailures: &api.FailureBudget{Percent: i(101)}},
		{Size: api.WaveSize{Count: i(1), Percent: i(1)}},
	}
	common := func(b api.CreateRolloutRequest) api.CreateRolloutRequest {
		b.ApplicationId = "svc"
		b.Waves = badWaves
		b.MaxInFlight = i(0)
		b.OnThreshold = ptr(api.ThresholdAction("shrug"))
		b.Window = &api.RolloutWindow{Start: "25:00", End: "04:00", TimeZone: "Mars/Olympus"}
		b.Deadline = s("1s")
		b.Target.NotSeenFor = s("1s")
		return b
	}
	for _, c := range []struct {
		name string
		body api.CreateRolloutRequest
		want []string // pointers that must be among the problems
	}{
		{"upgrade", common(api.CreateRolloutRequest{Action: api.RolloutAction("upgrade"), Upgrade: &api.RolloutUpgradeOptions{
			TargetVersion: "two", Path: ptr(api.UpgradePathMode("sideways")), Strategy: ptr(api.UpgradeStrategy("yolo")),
			OnFailure: ptr(api.OnFailure("panic")), Timeout: s("0s"),
			Drain: &api.DrainOverride{Required: true, Timeout: s("5"), OnTimeout: ptr(api.DrainTimeoutAction("wait"))}}}),
			[]string{"/upgrade/targetVersion", "/upgrade/path", "/upgrade/strategy", "/upgrade/onFailure", "/upgrade/timeout",
				"/upgrade/drain/timeout", "/upgrade/drain/onTimeout", "/waves/0/size/count", "/waves/0/approval", "/waves/1/soak",
				"/waves/1/minSuccess", "/waves/1/maxFailures/percent", "/waves/2/size", "/maxInFlight", "/onThreshold",
				"/window/start", "/window/timeZone", "/deadline", "/target/notSeenFor"}},
		{"install", common(api.CreateRolloutRequest{Action: api.RolloutAction("install"), Install: &api.RolloutInstallOptions{Version: "", Timeout: s("0s")}}),
			[]string{"/install/version", "/install/timeout"}},
		{"rollback", common(api.CreateRolloutRequest{Action: api.RolloutAction("rollback"), Rollback: &api.RolloutRollbackOptions{ToVersion: "1.x", Timeout: s("9999h")}}),
			[]string{"/rollback/toVersion", "/rollback/timeout"}},
		{"reconfigure", common(api.CreateRolloutRequest{Action: api.RolloutAction("reconfigure"), Reconfigure: &api.RolloutReconfigureOptions{Parameters: api.ParameterValues{}, OnFailure: ptr(api.OnFailure("x"))}}),
			[]string{"/reconfigure/parameters", "/reconfigure/onFailure"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw, err := json.Marshal(c.body)
			require.NoError(t, err)
			var doc any
			require.NoError(t, json.Unmarshal(raw, &doc))

			in, err := rolloutRequest(c.body)
			require.NoError(t, err)
			_, verr := lifecycle.ValidateRolloutSpec(in.Spec)
			require.Error(t, verr)
			err = rolloutError(in.Spec.Action, verr)
			var de *lifecycle.Error
			require.True(t, errors.As(err, &de))
			got := map[string]bool{}
			for _, f := range de.Fields {
				got[f.Pointer] = true
				assert.True(t, resolves(doc, f.Pointer), "pointer %s (%s) names nothing in the request %s", f.Pointer, f.Detail, raw)
			}
			for _, p := range c.want {
				assert.True(t, got[p], "no problem at %s; got %v", p, de.Fields)
			}
			assert.Contains(t, de.Message, de.Fields[0].Pointer, "the message names the first field as the client sent it")

			// The domain's error is left as it was.
			var orig *lifecycle.Error
			require.True(t, errors.As(verr, &orig))
			assert.NotEqual(t, orig.Fields[0].Pointer, de.Fields[0].Pointer)
		})
	}
}

func TestRolloutRequestOptionsMember(t *testing.T) {
	up := &api.RolloutUpgradeOptions{TargetVersion: "2.0.0"}
	for _, c := range []struct {
		name string
		body api.CreateRolloutRequest
		want []string
	}{
		{"missing", api.CreateRolloutRequest{Action: "upgrade"}, []string{"/upgrade"}},
		{"another", api.CreateRolloutRequest{Action: "install", Install: &api.RolloutInstallOptions{Version: "1.0.0"}, Upgrade: up}, []string{"/upgrade"}},
		{"both wrong", api.CreateRolloutRequest{Action: "rollback", Upgrade: up}, []string{"/upgrade", "/rollback"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := rolloutRequest(c.body)
			var de *lifecycle.Error
			require.True(t, errors.As(err, &de), "%v", err)
			assert.Equal(t, lifecycle.EINVALID, de.Code)
			var got []string
			for _, f := range de.Fields {
				got = append(got, f.Pointer)
			}
			assert.ElementsMatch(t, c.want, got)
		})
	}

	in, err := rolloutRequest(api.CreateRolloutRequest{ApplicationId: "svc", Action: "upgrade", Upgrade: up, RevertOnAbort: ptr(true),
		Target: api.RolloutTarget{Labels: ptr("site=a"), Devices: &[]api.DeviceRef{{ClientId: "c1", DeviceId: "d1"}},
			States: &[]api.DeploymentState{"installed"}}})
	require.NoError(t, err)
	assert.True(t, in.RevertOnAbort)
	assert.Equal(t, "2.0.0", in.Spec.TargetVersion)
	assert.Equal(t, "site=a", in.Target.Selector)
	assert.Equal(t, [][2]string{{"c1", "d1"}}, in.Target.Devices)
	assert.Equal(t, []lifecycle.State{"installed"}, in.Target.States)
}
