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

// RemoveCluster deletes the private cluster at asked (a data dir as given
// to Start: a folder, or a symbolic link to the folder the cluster was
// placed in, under FallbackDir when the server user could not reach asked)
// and returns what it removed, the link's target first. Deleting only the
// link, as deleting the folder that holds it does, would leave the cluster
// behind in /var/lib/wfm. A folder that holds anything but a cluster (no
// PG_VERSION) is not touched. Nothing at asked is no error.
//
// Returns an error, and removes nothing, when a postmaster still runs on
// the cluster (its postmaster.pid names a live process) or a folder is not
// a cluster.
func RemoveCluster(asked string) ([]string, error) {
	fi, err := os.Lstat(asked)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	link := fi.Mode()&fs.ModeSymlink != 0
	dir := asked
	if link {
		target, err := os.Readlink(asked)
		if err != nil {
			return nil, err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(asked), target)
		}
		dir = target
	}
	gone := false
	if err := removableCluster(dir); errors.Is(err, fs.ErrNotExist) && link {
		gone = true // a link to a folder already deleted: only the link is left
	} else if err != nil {
		return nil, err
	}
	var removed []string
	if !gone {
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("remove the private PostgreSQL's cluster: %w", err)
		}
		removed = append(removed, dir)
	}
	if link {
		if err := os.Remove(asked); err != nil {
			return removed, fmt.Errorf("remove the link to the cluster: %w", err)
		}
		removed = append(removed, asked)
	}
	return removed, nil
}

// removableCluster returns nil when dir is an empty folder or a cluster no
// live postmaster runs on.
func removableCluster(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		return fmt.Errorf("%s holds files but no PostgreSQL cluster (no PG_VERSION): not removed", dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return nil // not a postmaster's file
	}
	if err := syscall.Kill(pid, 0); (err == nil || errors.Is(err, syscall.EPERM)) && !isZombie(pid) {
		return fmt.Errorf("PostgreSQL (PID %d) still runs on %s: stop it first", pid, dir)
	}
	return nil
}
