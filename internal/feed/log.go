package feed

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// logMessage returns the message of e's info log line, and false for the
// events not worth a line: the ones a person running the fleet wants in the
// log without a stream open (something failed, finished or changed hands).
// The frequent, expected steps (a deployment moving through installing, a
// revision published, an operation started) are left to the stream.
func logMessage(e lifecycle.Event) (string, bool) {
	switch e.Type {
	case lifecycle.EventDeploymentStateChanged:
		var b lifecycle.DeploymentStateChangedBody
		if json.Unmarshal(e.Body, &b) == nil && b.To == lifecycle.StateFailed {
			return "deployment failed", true
		}
		return "", false
	case lifecycle.EventOperationSucceeded:
		return "operation succeeded", true
	case lifecycle.EventOperationFailed:
		return "operation failed", true
	case lifecycle.EventOperationCancelled:
		return "operation cancelled", true
	case lifecycle.EventRolloutCreated:
		return "rollout created", true
	case lifecycle.EventRolloutStateChanged:
		var b struct {
			To string `json:"to"`
		}
		if json.Unmarshal(e.Body, &b) == nil && b.To != "" {
			return "rollout " + b.To, true
		}
		return "rollout state changed", true
	case lifecycle.EventRolloutWaveSettled:
		return "rollout wave settled", true
	case lifecycle.EventRolloutMemberExcluded:
		return "rollout member excluded", true
	case lifecycle.EventDeviceRegistered:
		return "device registered", true
	case lifecycle.EventDeviceUnregistered:
		return "device unregistered", true
	case lifecycle.EventClientAccepted:
		return "client accepted", true
	case lifecycle.EventClientRetired:
		return "client retired", true
	case lifecycle.EventApplicationVersionYanked:
		return "application version yanked", true
	case lifecycle.EventApplicationVersionUnyanked:
		return "application version unyanked", true
	case lifecycle.EventApplicationVersionDeleted:
		return "application version deleted", true
	case lifecycle.EventTokenCreated:
		return "token created", true
	case lifecycle.EventTokenRevoked:
		return "token revoked", true
	}
	return "", false
}

// logLine writes e's info line, if it has one: the message, the event's id,
// type, subject, related things and actor, and its body's members under
// "data" (so the line says what the stream and webhooks say).
func logLine(ctx context.Context, log *slog.Logger, e lifecycle.Event) {
	msg, ok := logMessage(e)
	if !ok || !log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	attrs := []any{"event_id", e.ID, "type", string(e.Type), "subject", e.Subject.String(), "actor", e.Actor}
	if len(e.Related) > 0 {
		rel := make([]string, len(e.Related))
		for i, r := range e.Related {
			rel[i] = r.String()
		}
		attrs = append(attrs, "related", rel)
	}
	var body map[string]any
	if json.Unmarshal(e.Body, &body) == nil && len(body) > 0 {
		keys := make([]string, 0, len(body))
		for k := range body {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		data := make([]any, 0, len(keys))
		for _, k := range keys {
			data = append(data, slog.Any(k, body[k]))
		}
		attrs = append(attrs, slog.Group("data", data...))
	}
	log.InfoContext(ctx, msg, attrs...)
}
