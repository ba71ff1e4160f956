package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// dirPrefix names the private servers' folders, so that sweepStale finds
// the ones left behind.
const dirPrefix = "wfm-pgtest-"

// makeServerDir creates the folder of a private server and locks it for the
// life of this process. The returned file holds the lock; closing it (or the
// process ending in any way, Ctrl-C and SIGKILL included) releases it.
func makeServerDir() (dir string, lock *os.File, err error) {
	base := fastTempDir()
	sweepStale(base)
	dir, err = os.MkdirTemp(base, dirPrefix)
	if err != nil && base != os.TempDir() {
		base = os.TempDir()
		sweepStale(base)
		dir, err = os.MkdirTemp(base, dirPrefix)
	}
	if err != nil {
		return "", nil, fmt.Errorf("create server folder: %w", err)
	}
	// MkdirTemp makes it 0700; when the tests run as root the server runs
	// as the OS user postgres, which must enter it.
	if err := os.Chmod(dir, 0o711); err != nil {
		return dir, nil, fmt.Errorf("open server folder to the server user: %w", err)
	}
	lock, err = os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return dir, nil, fmt.Errorf("create server folder lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = lock.Close()
		return dir, nil, fmt.Errorf("lock server folder: %w", err)
	}
	return dir, lock, nil
}

// sweepStale removes the folders of private servers whose test binary died
// without cleaning up (a Ctrl-C or a test timeout kills it before Main's
// cleanup; the kernel kills its postgres, but the cluster stays on disk).
// A folder whose lock nobody holds is such a leftover; a folder younger
// than a minute is left alone, since its owner may not have locked it yet.
// Errors are ignored: sweeping is a courtesy.
func sweepStale(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		f, err := os.Open(filepath.Join(dir, "lock"))
		if err != nil {
			continue
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			_ = os.RemoveAll(dir)
		}
		_ = f.Close()
	}
}
