package lifecycle

import (
	"fmt"
	"strings"
)

// SortKey returns a string whose byte order (C collation) is v's SemVer
// precedence, so that a database can order and page versions with a plain
// index: for any a and b, Compare(a, b) == strings.Compare(a.SortKey(), b.SortKey()).
//
// Layout: major, minor and patch zero-padded to 20 digits (uint64 fits);
// then "~" for a release, or "-" and the prerelease identifiers joined by
// "," — "-" sorts before "~" (a prerelease precedes its release) and ","
// sorts before every identifier character (a shorter identifier list
// precedes a longer one with the same prefix). A numeric identifier is
// "0", its length in 3 digits and its digits (so 9 < 10 and numbers beyond
// uint64 still order); an alphanumeric one is "1" and itself (numeric
// identifiers precede alphanumeric ones).
func (v Version) SortKey() string {
	if v.IsZero() {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%020d%020d%020d", v.Major(), v.Minor(), v.Patch())
	pre := v.Prerelease()
	if pre == "" {
		b.WriteByte('~')
		return b.String()
	}
	b.WriteByte('-')
	for i, id := range strings.Split(pre, ".") {
		if i > 0 {
			b.WriteByte(',')
		}
		if isNumeric(id) {
			fmt.Fprintf(&b, "0%03d%s", len(id), id)
		} else {
			b.WriteByte('1')
			b.WriteString(id)
		}
	}
	return b.String()
}
