package postgres

import (
	"strconv"
	"strings"
	"time"

	"github.com/wfm-dev/wfm/internal/page"
)

// where builds a WHERE clause from conditions whose values are always bound
// parameters, never spliced into the SQL: each "$?" of a condition becomes
// the next $n (a bare "?" is left alone: it is jsonb's key-exists operator).
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, vals ...any) {
	for _, v := range vals {
		w.args = append(w.args, v)
		cond = strings.Replace(cond, "$?", "$"+strconv.Itoa(len(w.args)), 1)
	}
	w.conds = append(w.conds, cond)
}

// sql is the clause's body ("true" when there is no condition).
func (w *where) sql() string {
	if len(w.conds) == 0 {
		return "true"
	}
	return strings.Join(w.conds, " AND ")
}

// limit binds the page size and returns its placeholder.
func (w *where) limit(n int) string {
	w.args = append(w.args, n)
	return "$" + strconv.Itoa(len(w.args))
}

// beforeCursor adds the keyset condition of a newest-first list ordered by
// (created_at, id): the cursor is "<RFC 3339 time>|<uuid>". Returns
// EINVALID for a cursor this server did not issue.
func (w *where) beforeCursor(after, createdCol, idCol string) error {
	if after == "" {
		return nil
	}
	ts, id, ok := strings.Cut(after, "|")
	t, err := time.Parse(time.RFC3339Nano, ts)
	if !ok || err != nil || !validUUID(id) {
		return page.BadCursor()
	}
	w.add("("+createdCol+", "+idCol+") < ($?, $?::uuid)", t, id)
	return nil
}

// likeEscaper escapes the wildcards of a LIKE pattern (and its escape
// character, '\'), so that a value matches only itself.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
