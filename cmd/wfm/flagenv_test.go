package main

import (
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serverFlags returns the server's flags (from `wfm -help`, whose lines
// flag.PrintDefaults writes as "  -name type" followed by the usage) and
// each one's usage text.
func serverFlags(t *testing.T) map[string]string {
	t.Helper()
	var help strings.Builder
	_, err := parseConfig([]string{"-help"}, func(string) string { return "" }, &help)
	require.ErrorIs(t, err, flag.ErrHelp)
	text := help.String()
	_, text, ok := strings.Cut(text, "\nFlags of the server")
	require.True(t, ok, "the help lists the server's flags after the commands")
	flags := map[string]string{}
	name := ""
	for _, l := range strings.Split(text, "\n") {
		if m := regexp.MustCompile(`^  -([a-z0-9-]+)`).FindStringSubmatch(l); m != nil {
			name = m[1]
			flags[name] = ""
			continue
		}
		if name != "" {
			flags[name] += strings.TrimSpace(l) + " "
		}
	}
	require.Contains(t, flags, "listen", "flags were read from the help")
	return flags
}

var envInUsage = regexp.MustCompile(`\(env ([A-Z][A-Z0-9_]*)`)

// TestEveryFlagHasAnEnvironmentVariable: each flag of the server names an
// environment variable in its help line, the server reads that variable,
// and README.md's configuration table gives it in the flag's row, so that
// compose files, the Helm chart and systemd units can set everything
// without a command line.
func TestEveryFlagHasAnEnvironmentVariable(t *testing.T) {
	asked := map[string]bool{}
	_, err := parseConfig(nil, recordingEnv(map[string]string{}, asked), io.Discard)
	require.NoError(t, err)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	rows := map[string]string{} // flag -> its row's environment cell
	for _, l := range strings.Split(string(readme), "\n") {
		cells := strings.Split(l, "|")
		if len(cells) < 4 {
			continue
		}
		for _, m := range regexp.MustCompile("`-([a-z0-9-]+)`").FindAllStringSubmatch(cells[1], -1) {
			rows[m[1]] = cells[2]
		}
	}
	for name, usage := range serverFlags(t) {
		m := envInUsage.FindStringSubmatch(usage)
		if !assert.NotNil(t, m, "-%s names no environment variable in its help: %q", name, usage) {
			continue
		}
		assert.True(t, asked[m[1]], "-%s names %s, which the server does not read", name, m[1])
		row, ok := rows[name]
		if assert.True(t, ok, "README.md's configuration table has no row for -%s", name) {
			assert.Contains(t, row, "`"+m[1], "README.md's row of -%s gives its variable %s", name, m[1])
		}
	}
}

// TestLimitsAndTimeoutsFromTheEnvironment: the settings that had only a
// flag are read from their variables, with the flag winning, and bad
// values are refused naming the flag.
func TestLimitsAndTimeoutsFromTheEnvironment(t *testing.T) {
	env := map[string]string{"WFM_DEVICE_RATE": "5.5", "WFM_DEVICE_BURST": "9", "WFM_REPORT_RETENTION": "7", "WFM_SHUTDOWN_TIMEOUT": "45s"}
	c, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 5.5, c.deviceRate)
	assert.Equal(t, 9, c.deviceBurst)
	assert.Equal(t, 7, c.reportRetention)
	assert.Equal(t, 45*time.Second, c.shutdownTimeout)

	c, err = parseConfig([]string{"-device-rate", "1e9", "-device-burst", "3", "-report-retention", "1", "-shutdown-timeout", "0"},
		func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 1e9, c.deviceRate, "the flag wins")
	assert.Equal(t, 3, c.deviceBurst)
	assert.Equal(t, 1, c.reportRetention)
	assert.Zero(t, c.shutdownTimeout)

	c, err = parseConfig(nil, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 20.0, c.deviceRate, "defaults")
	assert.Equal(t, 40, c.deviceBurst)
	assert.Equal(t, 100, c.reportRetention)
	assert.Equal(t, 20*time.Second, c.shutdownTimeout)

	for k, bad := range map[string][]string{
		"WFM_DEVICE_RATE":      {"0", "-1", "x", "NaN", "+Inf"},
		"WFM_DEVICE_BURST":     {"0", "1.5", "x"},
		"WFM_REPORT_RETENTION": {"0", "x"},
		"WFM_SHUTDOWN_TIMEOUT": {"-1s", "20"},
	} {
		for _, v := range bad {
			_, err := parseConfig(nil, func(n string) string { return map[string]string{k: v}[n] }, io.Discard)
			if assert.Error(t, err, "%s=%s", k, v) {
				assert.Contains(t, err.Error(), "-"+strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "WFM_")), "_", "-"), "the message names the flag")
			}
		}
	}
}
