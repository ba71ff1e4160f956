package pglaunch

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// maxSocketPath is the longest socket path every Unix takes: sun_path holds
// 108 bytes on Linux and 104 on the BSDs and macOS, the terminating NUL
// included.
const maxSocketPath = 103

// prepareDataDir returns the folder the cluster lives in, ready for initdb or
// a start: asked itself (created 0700 with its missing parents), the folder
// asked links to, or, when running as root and a folder above asked is out
// of the server user's reach, a fresh folder under fallback that asked is
// made a symbolic link to (see the package comment).
func prepareDataDir(asked, fallback string, cred *syscall.Credential) (string, error) {
	dir := asked
	if fi, err := os.Lstat(asked); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		real, err := filepath.EvalSymlinks(asked)
		if err != nil {
			return "", fmt.Errorf("data dir %s is a symbolic link to a folder that is gone (remove the link to start afresh): %w", asked, err)
		}
		dir = real
	}
	if cred != nil {
		blocked, err := firstBlocked(dir, cred)
		if err != nil {
			return "", err
		}
		if blocked != nil {
			return relocate(dir, fallback, blocked, cred)
		}
	}
	if err := mkdirParents(dir, cred); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create data dir: %w", err)
	}
	if cred == nil {
		return dir, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); errors.Is(err, fs.ErrNotExist) {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return "", fmt.Errorf("hand data dir to OS user %q: %w", serverUser, err)
		}
	}
	return dir, nil
}

// mkdirParents creates the missing parents of dir. When the server runs as
// another user, the ones it creates are made searchable (the umask may have
// removed the bit); they are ours, so we may.
func mkdirParents(dir string, cred *syscall.Credential) error {
	var created []string
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create data dir parent: %w", err)
	}
	if cred != nil {
		for _, d := range created {
			if err := os.Chmod(d, 0o755); err != nil {
				return fmt.Errorf("make %s searchable: %w", d, err)
			}
		}
	}
	return nil
}

// blockedFolder names an existing folder above a data dir that the server
// user cannot enter.
type blockedFolder struct {
	path string
	mode fs.FileMode
	uid  uint32
}

func (b *blockedFolder) String() string {
	return fmt.Sprintf("%s is mode %v owned by uid %d", b.path, b.mode, b.uid)
}

// firstBlocked returns the nearest existing folder above dir that cred cannot
// search, or nil. Folders that do not exist yet do not count: Start creates
// them searchable.
func firstBlocked(dir string, cred *syscall.Credential) (*blockedFolder, error) {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("check data dir parent: %w", err)
		default:
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && !canSearch(st, cred) {
				return &blockedFolder{path: d, mode: fi.Mode().Perm(), uid: st.Uid}, nil
			}
		}
		if d == filepath.Dir(d) {
			return nil, nil
		}
	}
}

// canSearch applies the Unix permission check for the x bit of a folder:
// the owner class decides for the owner, the group class for members, the
// other class for the rest (ACLs are ignored).
func canSearch(st *syscall.Stat_t, cred *syscall.Credential) bool {
	perm := uint32(st.Mode) & 0o777
	switch {
	case st.Uid == cred.Uid:
		return perm&0o100 != 0
	case st.Gid == cred.Gid || slices.Contains(cred.Groups, st.Gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// relocate places a new cluster in a fresh folder under fallback, owned by
// the server user, and makes dir a symbolic link to it. An existing dir
// that holds anything is left alone: moving someone's data is not ours to
// decide.
func relocate(dir, fallback string, blocked *blockedFolder, cred *syscall.Credential) (string, error) {
	cannot := fmt.Sprintf("the OS user %q (uid %d) cannot reach %s (%s)", serverUser, cred.Uid, dir, blocked)
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return "", fmt.Errorf("%s, and it already holds files: move it under a folder that user can enter, or chmod o+x %s",
			cannot, blocked.path)
	}
	fallback, err := filepath.Abs(fallback)
	if err != nil {
		return "", fmt.Errorf("%s; fallback folder: %w", cannot, err)
	}
	if err := mkdirParents(filepath.Join(fallback, "cluster"), cred); err != nil {
		return "", fmt.Errorf("%s; fallback folder: %w", cannot, err)
	}
	if b, err := firstBlocked(filepath.Join(fallback, "cluster"), cred); err != nil || b != nil {
		return "", fmt.Errorf("%s, nor the fallback folder %s (%v, %w): put the data dir under a folder that user can enter, "+
			"or chmod o+x %s, or set DATABASE_URL", cannot, fallback, b, err, blocked.path)
	}
	real, err := os.MkdirTemp(fallback, "postgres-")
	if err != nil {
		return "", fmt.Errorf("%s; create a cluster folder in %s: %w", cannot, fallback, err)
	}
	if err := os.Chown(real, int(cred.Uid), int(cred.Gid)); err != nil {
		_ = os.Remove(real)
		return "", fmt.Errorf("hand data dir to OS user %q: %w", serverUser, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		_ = os.Remove(real)
		return "", fmt.Errorf("create data dir parent: %w", err)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		_ = os.Remove(real)
		return "", fmt.Errorf("replace the empty data dir by a link: %w", err)
	}
	if err := os.Symlink(real, dir); err != nil {
		_ = os.Remove(real)
		return "", fmt.Errorf("link data dir to %s: %w", real, err)
	}
	return real, nil
}

// writeAccessRules writes pg_hba.conf and pg_ident.conf on every start (so a
// cluster made by an earlier build, which trusted every local user on
// 127.0.0.1, is converted): only Unix-socket connections as "postgres", with
// peer authentication, from this process's OS user (me) and the server's.
func writeAccessRules(dataDir, me string, cred *syscall.Credential) error {
	users := []string{me}
	if cred != nil && me != serverUser {
		users = append(users, serverUser)
	}
	const header = "# Written by wfm (internal/pglaunch) at every start of this private cluster;\n" +
		"# changes are overwritten. See the package comment of pglaunch.\n"
	hba := header +
		"# Unix socket only (there is no TCP listener), superuser only, and only for\n" +
		"# the OS users that the map \"wfm\" in pg_ident.conf names.\n" +
		"local all postgres peer map=wfm\n"
	ident := header + "# The OS users admitted as the database user postgres.\n"
	for _, u := range users {
		ident += "wfm " + quoteConfToken(u) + " postgres\n"
	}
	for name, content := range map[string]string{"pg_hba.conf": hba, "pg_ident.conf": ident} {
		if err := writeServerFile(filepath.Join(dataDir, name), content, cred); err != nil {
			return err
		}
	}
	return nil
}

// writeServerFile replaces path with content (0600, owned by the server
// user), through a rename so that a crash never leaves half a file.
func writeServerFile(path, content string, cred *syscall.Credential) error {
	tmp := path + ".wfm-new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if cred != nil {
		if err := os.Chown(tmp, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("hand %s to OS user %q: %w", filepath.Base(path), serverUser, err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

// prepareSocketDir returns the folder for the server's socket and whether
// it was made here (and is to be removed by Stop): given when set, else the
// data dir (0700, owned by the server user: postgres checks that itself)
// when the socket's path fits, else a fresh private folder under the
// temporary folder.
func prepareSocketDir(given, dataDir string, port int, cred *syscall.Credential) (string, bool, error) {
	if given != "" {
		return given, false, nil
	}
	if len(filepath.Join(dataDir, socketName(port))) <= maxSocketPath {
		return dataDir, false, nil
	}
	dir, err := os.MkdirTemp("", "wfm-pg-") // mode 0700
	if err != nil {
		return "", false, fmt.Errorf("create socket folder: %w", err)
	}
	if len(filepath.Join(dir, socketName(port))) > maxSocketPath {
		_ = os.Remove(dir)
		return "", false, fmt.Errorf("socket path in %s is longer than %d bytes; set TMPDIR to a shorter folder", dir, maxSocketPath)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.Remove(dir)
			return "", false, fmt.Errorf("hand socket folder to OS user %q: %w", serverUser, err)
		}
	}
	return dir, true, nil
}

func socketName(port int) string { return ".s.PGSQL." + strconv.Itoa(port) }

// socketURL is a libpq/pgx connection URL through the socket in dir.
func socketURL(dir string, port int, database string) string {
	return "postgres://postgres@/" + url.PathEscape(database) +
		"?host=" + url.QueryEscape(dir) + "&port=" + strconv.Itoa(port) + "&sslmode=disable"
}

// quoteListItem quotes one entry of a comma-separated server setting such as
// unix_socket_directories, so that a folder name with a comma or a space
// stays one entry.
func quoteListItem(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoteConfToken quotes a user name for pg_hba.conf or pg_ident.conf.
func quoteConfToken(s string) string { return `"` + s + `"` }
