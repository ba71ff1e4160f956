package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGCTargetDefaultsTo200UnlessGOGCIsSet: the server raises the
// collector's target to defaultGCPercent when the environment sets no
// GOGC, and leaves the runtime's (which read GOGC) alone otherwise.
func TestGCTargetDefaultsTo200UnlessGOGCIsSet(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	tuneGC(func(string) string { return "" })
	require.Equal(t, defaultGCPercent, debug.SetGCPercent(100), "GOGC unset")
	tuneGC(func(k string) string {
		if k == "GOGC" {
			return "100"
		}
		return ""
	})
	require.Equal(t, 100, debug.SetGCPercent(100), "GOGC=100")
}
