package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/wfm-dev/wfm/internal/pglaunch"
)

// dataEntries are the entries wfm makes in a data folder; remove-data
// deletes these and nothing else ("postgres" through pglaunch.RemoveCluster).
var dataEntries = []string{"admin-token", "pki", "webhook-key"}

// removeData is "wfm remove-data": it deletes a data folder's private
// PostgreSQL (the cluster its postgres link points to, under /var/lib/wfm
// when wfm ran as root in a folder the OS user postgres cannot enter, and
// the link), the rest of what wfm keeps there (admin token, development
// CA, webhook key, lock file), and the folder itself once empty, and prints
// each path it removed. It holds the folder's exclusive lock meanwhile, so it
// refuses while any server uses the folder (a private-PostgreSQL server's
// exclusive lock, or the shared lock of servers with DATABASE_URL). Files wfm did not make
// are left, and named.
func removeData(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("wfm remove-data", flag.ContinueOnError)
	flags.SetOutput(stderr)
	dataDir := getenv("WFM_DATA_DIR")
	if dataDir == "" {
		dataDir = ".data"
	}
	flags.StringVar(&dataDir, "data-dir", dataDir, "the data folder to delete, with the private PostgreSQL it holds or links to (env WFM_DATA_DIR)")
	flags.Usage = func() {
		fmt.Fprintln(stderr, "Usage: wfm remove-data [-data-dir <dir>]\n\nDeletes the data folder of a wfm that ran without DATABASE_URL: "+
			"its private PostgreSQL (also the cluster under /var/lib/wfm its postgres link points to), admin token, development CA and "+
			"webhook key. Refuses while a server runs in it.")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("remove-data: unexpected arguments: %s", strings.Join(flags.Args(), " "))
	}
	if _, err := os.Stat(dataDir); errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(stdout, "%s does not exist: nothing removed (a cluster that wfm, run as root, placed in /var/lib/wfm/postgres-… "+
			"for a data folder deleted by hand is left there: remove it with rm -rf once no data folder links to it)\n", dataDir)
		return nil
	}
	lock, err := pglaunch.LockFolder(dataDir)
	if err != nil {
		return fmt.Errorf("remove-data: %w", inUse(err, "stop that process first"))
	}
	defer func() { _ = lock.Release() }()
	removed, err := pglaunch.RemoveCluster(filepath.Join(dataDir, "postgres"))
	for _, p := range removed {
		fmt.Fprintln(stdout, "removed", p)
	}
	if err != nil {
		return fmt.Errorf("remove-data: %w", err)
	}
	for _, name := range append(dataEntries, pglaunch.LockFileName) {
		p := filepath.Join(dataDir, name)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("remove-data: %w", err)
		}
		fmt.Fprintln(stdout, "removed", p)
	}
	left, err := os.ReadDir(dataDir)
	if err != nil {
		return fmt.Errorf("remove-data: %w", err)
	}
	if len(left) > 0 {
		names := make([]string, len(left))
		for i, e := range left {
			names[i] = e.Name()
		}
		fmt.Fprintf(stdout, "kept %s: it holds files wfm did not make (%s)\n", dataDir, strings.Join(names, ", "))
		return nil
	}
	if err := os.Remove(dataDir); err != nil {
		return fmt.Errorf("remove-data: %w", err)
	}
	fmt.Fprintln(stdout, "removed", dataDir)
	return nil
}

// inUse completes err with what to do when it is a *pglaunch.HeldError
// (another process runs its private PostgreSQL in the data folder).
func inUse(err error, todo string) error {
	var held *pglaunch.HeldError
	if errors.As(err, &held) {
		return fmt.Errorf("%w: %s", err, todo)
	}
	return err
}
