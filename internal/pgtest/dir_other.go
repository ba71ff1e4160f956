//go:build !linux

package pgtest

import "os"

// fastTempDir returns the usual temporary folder; only Linux is known to
// have a memory file system at a fixed place.
func fastTempDir() string { return os.TempDir() }
