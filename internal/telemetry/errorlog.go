package telemetry

import (
	"context"
	stdlog "log"
	"log/slog"
	"net"
	"strings"
	"time"
)

// tlsHandshakePrefix starts the line net/http logs for every failed TLS
// handshake (a scanner, a client without a certificate, a wrong CA).
const tlsHandshakePrefix = "http: TLS handshake error from "

// NewServerErrorLog returns a logger for http.Server.ErrorLog that writes
// each line to log at WARN, except TLS handshake errors: those are INFO
// (anyone who reaches the port causes them: scanners, a client without a
// certificate) and go through sample first, keyed by the client's address:
// when sample(key) is false the line is dropped (the sampler counts it and
// reports the count later, see LogSuppressedAt). sample nil: every line is
// logged.
func NewServerErrorLog(log *slog.Logger, sample func(key string) bool) *stdlog.Logger {
	return stdlog.New(errorLogWriter{log: log, sample: sample}, "", 0)
}

type errorLogWriter struct {
	log    *slog.Logger
	sample func(key string) bool
}

func (w errorLogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimRight(string(p), "\n")
	if rest, ok := strings.CutPrefix(msg, tlsHandshakePrefix); ok {
		addr, _, _ := strings.Cut(rest, ": ")
		if host, _, err := net.SplitHostPort(addr); err == nil {
			addr = host
		}
		if w.sample != nil && !w.sample("TLS handshake errors from "+addr) {
			return len(p), nil
		}
		w.log.Info(msg)
		return len(p), nil
	}
	w.log.Warn(msg)
	return len(p), nil
}

// LogSuppressed returns a sampler flush function that reports, at WARN,
// how many lines of a kind were not logged in an interval.
func LogSuppressed(log *slog.Logger) func(ctx context.Context, key string, count int, start, end time.Time) error {
	return LogSuppressedAt(log, slog.LevelWarn)
}

// LogSuppressedAt is LogSuppressed at level: the level of the lines the
// sampler thins out, so that a count of INFO lines is not a warning.
func LogSuppressedAt(log *slog.Logger, level slog.Level) func(ctx context.Context, key string, count int, start, end time.Time) error {
	return func(ctx context.Context, key string, count int, start, end time.Time) error {
		log.Log(ctx, level, "log lines suppressed (repeated)", "kind", key, "count", count,
			"interval_start", start.UTC().Format(time.RFC3339), "interval_end", end.UTC().Format(time.RFC3339))
		return nil
	}
}
