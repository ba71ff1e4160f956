package feed

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// logRule is how events of one type are logged: the message and level of
// their line. A state change's line is named after the state it moves to
// ("rollout paused"), at that state's level in byState, or at level for a
// state not listed there.
type logRule struct {
	level   slog.Level
	message string
	// subject names a state change's line: subject + " " + the state it
	// moves to. Empty for the other types.
	subject string
	byState map[string]slog.Level
}

// logRules is the one table of domain log lines: every event type has a
// line, at the level that says how much a person running the fleet needs
// it (docs/events.md, "Log lines", lists it):
//
//   - WARN: something in the fleet failed or stopped and waits for a person
//     (a deployment or an operation failed, a rollout paused, is aborting,
//     aborted or failed, a webhook subscription was disabled).
//   - INFO: the changes people make or ask for, and how they end
//     (creations, versions added, yanked or deleted, waves started and
//     settled, devices, clients and tokens, operations that succeeded or
//     were cancelled).
//   - DEBUG: the frequent steps of every operation (a deployment moving
//     through installing, a revision published, an operation started or
//     publishing its next step), which the event stream shows.
//
// ERROR is left to wfm's own faults (a request answered 500, background
// work that fails), which are not events.
var logRules = map[lifecycle.EventType]logRule{
	lifecycle.EventDeploymentStateChanged: {level: slog.LevelDebug, subject: "deployment",
		byState: map[string]slog.Level{string(lifecycle.StateFailed): slog.LevelWarn}},
	lifecycle.EventRevisionPublished:      {level: slog.LevelDebug, message: "revision published"},
	lifecycle.EventOperationCreated:       {level: slog.LevelInfo, message: "operation created"},
	lifecycle.EventOperationStarted:       {level: slog.LevelDebug, message: "operation started"},
	lifecycle.EventOperationStepPublished: {level: slog.LevelDebug, message: "operation step published"},
	lifecycle.EventOperationSucceeded:     {level: slog.LevelInfo, message: "operation succeeded"},
	lifecycle.EventOperationFailed:        {level: slog.LevelWarn, message: "operation failed"},
	lifecycle.EventOperationCancelled:     {level: slog.LevelInfo, message: "operation cancelled"},

	lifecycle.EventRolloutCreated: {level: slog.LevelInfo, message: "rollout created"},
	lifecycle.EventRolloutStateChanged: {level: slog.LevelInfo, subject: "rollout", byState: map[string]slog.Level{
		string(lifecycle.RolloutPaused):   slog.LevelWarn,
		string(lifecycle.RolloutAborting): slog.LevelWarn,
		string(lifecycle.RolloutAborted):  slog.LevelWarn,
		string(lifecycle.RolloutFailed):   slog.LevelWarn,
	}},
	lifecycle.EventRolloutWaveStarted:    {level: slog.LevelInfo, message: "rollout wave started"},
	lifecycle.EventRolloutWaveSettled:    {level: slog.LevelInfo, message: "rollout wave settled"},
	lifecycle.EventRolloutMemberExcluded: {level: slog.LevelInfo, message: "rollout member excluded"},

	lifecycle.EventDeviceRegistered:   {level: slog.LevelInfo, message: "device registered"},
	lifecycle.EventDeviceUnregistered: {level: slog.LevelInfo, message: "device unregistered"},
	lifecycle.EventClientAccepted:     {level: slog.LevelInfo, message: "client accepted"},
	lifecycle.EventClientRetired:      {level: slog.LevelInfo, message: "client retired"},

	lifecycle.EventApplicationVersionAdded:    {level: slog.LevelInfo, message: "application version added"},
	lifecycle.EventApplicationVersionYanked:   {level: slog.LevelInfo, message: "application version yanked"},
	lifecycle.EventApplicationVersionUnyanked: {level: slog.LevelInfo, message: "application version unyanked"},
	lifecycle.EventApplicationVersionDeleted:  {level: slog.LevelInfo, message: "application version deleted"},

	lifecycle.EventTokenCreated: {level: slog.LevelInfo, message: "token created"},
	lifecycle.EventTokenRevoked: {level: slog.LevelInfo, message: "token revoked"},

	lifecycle.EventWebhookDisabled: {level: slog.LevelWarn, message: "webhook subscription disabled"},
}

// logLevel returns the level and message of e's line; false for a type
// the table does not know (none: a test holds every type to a row).
func logLevel(e lifecycle.Event) (slog.Level, string, bool) {
	r, ok := logRules[e.Type]
	if !ok {
		return 0, "", false
	}
	if r.subject == "" {
		return r.level, r.message, true
	}
	var b struct {
		To string `json:"to"`
	}
	if json.Unmarshal(e.Body, &b) != nil || b.To == "" {
		return r.level, r.subject + " state changed", true
	}
	if l, ok := r.byState[b.To]; ok {
		return l, r.subject + " " + b.To, true
	}
	return r.level, r.subject + " " + b.To, true
}

// logLine writes e's line at its level (logRules): the message, the
// event's id, type, subject, related things and actor, and its body's
// members under "data" (so the line says what the stream and webhooks say).
func logLine(ctx context.Context, log *slog.Logger, e lifecycle.Event) {
	level, msg, ok := logLevel(e)
	if !ok || !log.Enabled(ctx, level) {
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
	log.Log(ctx, level, msg, attrs...)
}
