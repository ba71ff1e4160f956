package pglaunch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFileName is the file in a data folder that LockFolder locks.
const LockFileName = "wfm.lock"

// FolderLock is a process's hold of a data folder (LockFolder, ShareFolder).
type FolderLock struct {
	f *os.File
}

// HeldError is the error of LockFolder when another process holds the
// folder: PID is the holder's process id as its lock file says (0 when the
// file does not say yet).
type HeldError struct {
	Dir  string
	PID  int
	File string
}

func (e *HeldError) Error() string {
	holder := "a wfm server (one with DATABASE_URL, or one starting)"
	if e.PID > 0 {
		holder = "a wfm server (PID " + strconv.Itoa(e.PID) + ") that runs its private PostgreSQL"
	}
	return fmt.Sprintf("data folder %s is in use by %s (lock file %s)", e.Dir, holder, e.File)
}

// LockFolder takes the exclusive lock of data folder dir (created with its
// missing parents; as root, searchable by every user whatever the umask, as
// the private PostgreSQL running as the OS user postgres needs): an flock on dir/wfm.lock, which holds
// the locking process's id. Two processes that each started a private
// PostgreSQL in one folder would connect to each other's server, restart
// it and run their job queues against it; the second one refuses instead.
// The lock ends with the process (the kernel drops it), also on SIGKILL,
// and the file is left in place: deleting it would let a third process
// lock a new file while a second one holds the deleted one.
//
// Returns a *HeldError when another process holds the lock, at once
// (without waiting).
func LockFolder(dir string) (*FolderLock, error) {
	return lockFolder(dir, syscall.LOCK_EX)
}

// ShareFolder takes a shared lock of data folder dir, as a server with
// DATABASE_URL does: replicas sharing the folder coexist, while LockFolder
// (a private-PostgreSQL server, wfm remove-data) refuses as long as one of
// them runs, and ShareFolder refuses while LockFolder's holder runs. A
// shared holder empties the lock file rather than writing its id (the
// file cannot name every holder), so a HeldError names no PID for it.
//
// Returns a *HeldError when a process holds the exclusive lock, at once.
func ShareFolder(dir string) (*FolderLock, error) {
	return lockFolder(dir, syscall.LOCK_SH)
}

func lockFolder(dir string, how int) (*FolderLock, error) {
	if err := mkdirSearchable(dir); err != nil {
		return nil, err
	}
	file := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o644) // close-on-exec: postgres does not inherit it
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &HeldError{Dir: dir, PID: readPID(f), File: file}
		}
		return nil, fmt.Errorf("lock %s: %w", file, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write lock file: %w", err)
	}
	if how == syscall.LOCK_SH {
		return &FolderLock{f: f}, nil
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write lock file: %w", err)
	}
	return &FolderLock{f: f}, nil
}

// Release ends the hold.
func (l *FolderLock) Release() error {
	return l.f.Close() // closing the only descriptor drops the flock
}

// readPID returns the process id written in the lock file f, 0 when there
// is none (its holder is between locking and writing it).
func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		return 0
	}
	return pid
}

// mkdirSearchable creates dir and its missing parents, mode 0755, and,
// as root, makes those it created searchable whatever the umask (as
// mkdirParents does for the cluster's parents).
func mkdirSearchable(dir string) error {
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create data folder: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil
	}
	for _, d := range created {
		if err := os.Chmod(d, 0o755); err != nil {
			return fmt.Errorf("make %s searchable: %w", d, err)
		}
	}
	return nil
}
