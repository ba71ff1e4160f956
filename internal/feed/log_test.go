package feed

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// TestEveryEventTypeHasALogLine: each event type the log records has its
// row in logRules, and its line comes out at the row's level with the
// row's message; failures and stops are WARN, routine changes INFO, the
// frequent steps of an operation DEBUG (docs/events.md, "Log lines").
func TestEveryEventTypeHasALogLine(t *testing.T) {
	for _, typ := range lifecycle.EventTypes() {
		_, ok := logRules[typ]
		assert.True(t, ok, "event type %s has no row in logRules", typ)
	}
	for typ := range logRules {
		_, known := typ.SubjectKind()
		assert.True(t, known, "logRules has a row for %s, which is not an event type", typ)
	}

	ev := func(typ lifecycle.EventType, body string) lifecycle.Event {
		return lifecycle.Event{ID: 7, Type: typ, Subject: lifecycle.Ref{Kind: "x", ID: "1"}, Actor: "bootstrap", Body: json.RawMessage(body)}
	}
	tests := []struct {
		e     lifecycle.Event
		level slog.Level
		msg   string
	}{
		{ev(lifecycle.EventDeploymentStateChanged, `{"from":"installing","to":"failed","reason":"InstallFailed"}`), slog.LevelWarn, "deployment failed"},
		{ev(lifecycle.EventDeploymentStateChanged, `{"from":"pending","to":"installing"}`), slog.LevelDebug, "deployment installing"},
		{ev(lifecycle.EventDeploymentStateChanged, `{"from":"installing","to":"installed"}`), slog.LevelDebug, "deployment installed"},
		{ev(lifecycle.EventRevisionPublished, `{"revision":2}`), slog.LevelDebug, "revision published"},
		{ev(lifecycle.EventOperationCreated, `{"operation":"upgrade"}`), slog.LevelInfo, "operation created"},
		{ev(lifecycle.EventOperationStarted, `{"operation":"upgrade"}`), slog.LevelDebug, "operation started"},
		{ev(lifecycle.EventOperationStepPublished, `{"step":1}`), slog.LevelDebug, "operation step published"},
		{ev(lifecycle.EventOperationSucceeded, `{"operation":"upgrade"}`), slog.LevelInfo, "operation succeeded"},
		{ev(lifecycle.EventOperationFailed, `{"operation":"upgrade","reason":"StepFailed"}`), slog.LevelWarn, "operation failed"},
		{ev(lifecycle.EventOperationCancelled, `{"operation":"upgrade"}`), slog.LevelInfo, "operation cancelled"},
		{ev(lifecycle.EventRolloutCreated, `{"action":"install"}`), slog.LevelInfo, "rollout created"},
		{ev(lifecycle.EventRolloutStateChanged, `{"from":"","to":"running"}`), slog.LevelInfo, "rollout running"},
		{ev(lifecycle.EventRolloutStateChanged, `{"from":"running","to":"paused"}`), slog.LevelWarn, "rollout paused"},
		{ev(lifecycle.EventRolloutStateChanged, `{"from":"running","to":"aborting"}`), slog.LevelWarn, "rollout aborting"},
		{ev(lifecycle.EventRolloutStateChanged, `{"from":"aborting","to":"aborted"}`), slog.LevelWarn, "rollout aborted"},
		{ev(lifecycle.EventRolloutStateChanged, `{"from":"running","to":"failed"}`), slog.LevelWarn, "rollout failed"},
		{ev(lifecycle.EventRolloutStateChanged, `{"from":"running","to":"succeeded"}`), slog.LevelInfo, "rollout succeeded"},
		{ev(lifecycle.EventRolloutStateChanged, `{"from":"running","to":"cancelled"}`), slog.LevelInfo, "rollout cancelled"},
		{ev(lifecycle.EventRolloutStateChanged, `{}`), slog.LevelInfo, "rollout state changed"},
		{ev(lifecycle.EventRolloutWaveStarted, `{"wave":1,"size":5}`), slog.LevelInfo, "rollout wave started"},
		{ev(lifecycle.EventRolloutWaveSettled, `{"wave":1}`), slog.LevelInfo, "rollout wave settled"},
		{ev(lifecycle.EventRolloutMemberExcluded, `{}`), slog.LevelInfo, "rollout member excluded"},
		{ev(lifecycle.EventDeviceRegistered, `{}`), slog.LevelInfo, "device registered"},
		{ev(lifecycle.EventDeviceUnregistered, `{}`), slog.LevelInfo, "device unregistered"},
		{ev(lifecycle.EventClientAccepted, `{}`), slog.LevelInfo, "client accepted"},
		{ev(lifecycle.EventClientRetired, `{}`), slog.LevelInfo, "client retired"},
		{ev(lifecycle.EventApplicationVersionAdded, `{"version":"1.0.0"}`), slog.LevelInfo, "application version added"},
		{ev(lifecycle.EventApplicationVersionYanked, `{"version":"1.0.0"}`), slog.LevelInfo, "application version yanked"},
		{ev(lifecycle.EventApplicationVersionUnyanked, `{"version":"1.0.0"}`), slog.LevelInfo, "application version unyanked"},
		{ev(lifecycle.EventApplicationVersionDeleted, `{"version":"1.0.0"}`), slog.LevelInfo, "application version deleted"},
		{ev(lifecycle.EventTokenCreated, `{"name":"ci"}`), slog.LevelInfo, "token created"},
		{ev(lifecycle.EventTokenRevoked, `{"name":"ci"}`), slog.LevelInfo, "token revoked"},
		{ev(lifecycle.EventWebhookDisabled, `{"reason":"gone"}`), slog.LevelWarn, "webhook subscription disabled"},
	}
	covered := map[lifecycle.EventType]bool{}
	for _, tt := range tests {
		covered[tt.e.Type] = true
		var buf bytes.Buffer
		logLine(t.Context(), slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), tt.e)
		var line map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &line), "%s %s: one JSON line: %q", tt.e.Type, tt.e.Body, buf.String())
		assert.Equal(t, tt.level.String(), line["level"], "%s %s: level", tt.e.Type, tt.e.Body)
		assert.Equal(t, tt.msg, line["msg"], "%s %s: message", tt.e.Type, tt.e.Body)
		assert.Equal(t, string(tt.e.Type), line["type"])
		assert.Equal(t, "bootstrap", line["actor"])
	}
	for _, typ := range lifecycle.EventTypes() {
		assert.True(t, covered[typ], "the cases above have no event of type %s", typ)
	}

	// Below the configured level, no line (and no work).
	var buf bytes.Buffer
	logLine(t.Context(), slog.New(slog.NewTextHandler(&buf, nil)), ev(lifecycle.EventOperationStarted, `{}`))
	assert.Empty(t, buf.String(), "a DEBUG line at the default level")
	logLine(t.Context(), slog.New(slog.NewTextHandler(&buf, nil)), ev(lifecycle.EventOperationCreated, `{}`))
	assert.True(t, strings.HasPrefix(buf.String(), "time="), "an INFO line at the default level: %q", buf.String())
}
