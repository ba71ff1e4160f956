package telemetry_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/sampling"
	"github.com/wfm-dev/wfm/internal/telemetry"
)

// TestTLSHandshakeErrorsAreSampled: a flood of failed handshakes from one
// address logs its first lines, then one line with the count of the rest;
// other server errors are always logged.
func TestTLSHandshakeErrorsAreSampled(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	s := sampling.New(sampling.Config[string]{First: 3, Interval: time.Minute, MaxKeys: 100, Now: func() time.Time { return now },
		Flush: telemetry.LogSuppressedAt(log, slog.LevelInfo)})
	errLog := telemetry.NewServerErrorLog(log, s.Allow)

	for i := range 1000 {
		errLog.Printf("http: TLS handshake error from 192.0.2.1:%d: remote error: tls: bad certificate", 40000+i)
	}
	errLog.Printf("http: TLS handshake error from [2001:db8::1]:443: EOF")
	errLog.Printf("http: Accept error: too many open files; retrying in 5ms")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3+1+1, "3 lines of the flood, the other address, the other error")
	for _, l := range lines[:4] {
		assert.Contains(t, l, "level=INFO ", "a failed handshake is noise anyone can make: INFO")
	}
	assert.Contains(t, lines[4], "Accept error")
	assert.Contains(t, lines[4], "level=WARN ", "the server's own errors stay warnings")

	now = now.Add(time.Minute)
	require.NoError(t, s.Flush(t.Context(), false))
	assert.Contains(t, buf.String(), `level=INFO msg="log lines suppressed (repeated)" kind="TLS handshake errors from 192.0.2.1" count=997`)
}
