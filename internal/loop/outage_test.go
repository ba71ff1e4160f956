package loop

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestOutageLogsOnce: an outage is one WARN and one INFO, however many
// passes fail and whatever a wrapped logger reports meanwhile; warnings
// outside an outage and lower levels pass.
func TestOutageLogsOnce(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	o := NewOutage(logger, "webhooks")
	lib := slog.New(o.Handler(logger.Handler())).With("component", "river")
	ctx := context.Background()

	lib.Error("before")
	o.Succeeded(ctx) // no outage: nothing
	for range 100 {
		o.Failed(ctx, "webhooks: dispatching failed", errors.New("connection refused"))
		lib.Error("fetch failed")
		lib.Info("info passes")
	}
	o.Succeeded(ctx)
	o.Succeeded(ctx)
	lib.Warn("after")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var got []string
	for _, l := range lines {
		if !strings.Contains(l, "info passes") {
			got = append(got, l)
		}
	}
	if len(got) != 4 || !strings.Contains(got[0], "before") || !strings.Contains(got[1], "level=WARN msg=\"webhooks: dispatching failed") ||
		!strings.Contains(got[2], "level=INFO msg=\"webhooks: working again\" lines_folded=199") || !strings.Contains(got[3], "after") {
		t.Fatalf("log = %q, want before, one WARN, one INFO with 199 lines folded, after", got)
	}
	if n := strings.Count(buf.String(), "info passes"); n != 100 {
		t.Fatalf("%d INFO lines of the library, want 100", n)
	}
}

// TestOutageRecoveryOnlyAfterWarn: a pass that works while only a wrapped
// logger has reported errors logs no "working again" (no outage was
// reported); the lines folded meanwhile count into the next outage's.
func TestOutageRecoveryOnlyAfterWarn(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	o := NewOutage(logger, "webhooks")
	lib := slog.New(o.Handler(logger.Handler()))
	ctx := context.Background()

	lib.Error("first")
	lib.Error("second") // folded
	o.Succeeded(ctx)    // no WARN was written: nothing
	o.Failed(ctx, "webhooks: dispatching failed", errors.New("connection refused"))
	o.Succeeded(ctx)

	got := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(got) != 3 || !strings.Contains(got[0], "first") || !strings.Contains(got[1], "level=WARN") ||
		!strings.Contains(got[2], "level=INFO msg=\"webhooks: working again\" lines_folded=1") {
		t.Fatalf("log = %q, want first, one WARN, one INFO with 1 line folded", got)
	}
}
