package lifecycle

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxVersionLength bounds the spelling of a version. SemVer sets no limit;
// ours keeps hostile input cheap and every stored version printable.
const MaxVersionLength = 128

// Version is an application version: a SemVer 2.0 version without build
// metadata. Versions are values: two Versions are == exactly when they have the
// same precedence, so a Version can be a map key and "1.0" and "1.0.0" (two
// spellings of one version) yield equal Versions.
//
// The zero Version is "no version": IsZero reports true, String returns "",
// and it sorts before every real version (including 0.0.0).
type Version struct {
	major, minor, patch uint64
	pre                 string // canonical prerelease, "" for a release
	ok                  bool   // false for the zero Version
}

// ParseVersion reads a SemVer 2.0 version. A missing minor or patch number is
// read as 0 ("1" and "1.0" are "1.0.0"; "1.0-beta" is "1.0.0-beta"), so two
// spellings of one version give equal Versions.
//
// Refused spellings, each because it would give one version two names or hide
// a mistake: a leading "v" ("v1.2.3"), build metadata ("1.2.3+build.5": SemVer
// ignores it for precedence, so 1.2.3+a and 1.2.3+b would be different
// versions that compare equal), leading zeros ("01.2.3", "1.2.3-rc.01"),
// surrounding spaces, more than three numbers ("1.0.0.0"), and anything else
// that is not SemVer ("latest", "").
//
// Returns EINVALID (type "invalid-version") if s is not such a version; the
// message says what is wrong and how to write it.
func ParseVersion(s string) (Version, error) {
	v, msg := parseVersion(s)
	if msg != "" {
		return Version{}, &Error{Code: EINVALID, Type: "invalid-version", Message: msg}
	}
	return v, nil
}

// MustParseVersion is ParseVersion for constants and tests. It panics if s is
// not a valid version; never call it on input.
func MustParseVersion(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

// parseVersion returns the version s spells, or a message explaining why s
// is not a version.
func parseVersion(s string) (Version, string) {
	q := strconv.Quote(s)
	if len(s) > MaxVersionLength {
		return Version{}, fmt.Sprintf("version is longer than %d characters", MaxVersionLength)
	}
	var msg string
	switch {
	case s == "":
		msg = "version is empty; want a SemVer version such as 1.2.3"
	case strings.TrimSpace(s) != s:
		msg = fmt.Sprintf("version %s has leading or trailing spaces", q)
	case (s[0] == 'v' || s[0] == 'V') && validCore(s[1:]):
		msg = fmt.Sprintf("version %s has a leading %q, which is not allowed (one version, one spelling); write %s", q, s[:1], s[1:])
	case strings.Contains(s, "+") && validCore(s[:strings.Index(s, "+")]):
		msg = fmt.Sprintf("version %s has build metadata (+%s), which is not allowed: SemVer ignores build metadata when ordering versions, so two different packages would be the same version; drop it or move it into the prerelease (-…)", q, s[strings.Index(s, "+")+1:])
	}
	if msg != "" {
		return Version{}, msg
	}
	v, why := scanVersion(s)
	if why != "" {
		return Version{}, fmt.Sprintf("version %s is not SemVer (%s); want MAJOR[.MINOR[.PATCH]][-PRERELEASE], such as 1.2.3 or 2.0.0-rc.1", q, why)
	}
	return v, ""
}

// validCore reports whether s is a version apart from a leading "v" or build
// metadata, so the message can name the one thing that is wrong.
func validCore(s string) bool {
	_, why := scanVersion(s)
	return why == ""
}

// scanVersion parses s and returns the version or a short reason why it is
// not one.
func scanVersion(s string) (Version, string) {
	core, pre, hasPre := strings.Cut(s, "-")
	parts := strings.Split(core, ".")
	if len(parts) > 3 {
		return Version{}, "more than three numbers"
	}
	var nums [3]uint64
	for i, p := range parts {
		n, msg := parseNumeric(p)
		if msg != "" {
			return Version{}, fmt.Sprintf("%s number %s", [3]string{"major", "minor", "patch"}[i], msg)
		}
		nums[i] = n
	}
	if hasPre {
		if pre == "" {
			return Version{}, "empty prerelease after -"
		}
		for _, id := range strings.Split(pre, ".") {
			if id == "" {
				return Version{}, "empty prerelease identifier"
			}
			for _, r := range id {
				if !isIdentChar(r) {
					return Version{}, fmt.Sprintf("prerelease identifier %q may only hold letters, digits and -", id)
				}
			}
			if isNumeric(id) && len(id) > 1 && id[0] == '0' {
				return Version{}, fmt.Sprintf("numeric prerelease identifier %q has a leading zero", id)
			}
		}
	}
	return Version{major: nums[0], minor: nums[1], patch: nums[2], pre: pre, ok: true}, ""
}

func parseNumeric(p string) (uint64, string) {
	switch {
	case p == "":
		return 0, "is empty"
	case !isNumeric(p):
		return 0, fmt.Sprintf("%q is not a number", p)
	case len(p) > 1 && p[0] == '0':
		return 0, fmt.Sprintf("%q has a leading zero", p)
	}
	n, err := strconv.ParseUint(p, 10, 64)
	if err != nil {
		return 0, fmt.Sprintf("%q is too large", p)
	}
	return n, ""
}

func isIdentChar(r rune) bool {
	return r == '-' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')
}

func isNumeric(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String returns the canonical spelling MAJOR.MINOR.PATCH[-PRERELEASE], or ""
// for the zero Version. ParseVersion(v.String()) == v for every non-zero v.
func (v Version) String() string {
	if !v.ok {
		return ""
	}
	s := strconv.FormatUint(v.major, 10) + "." + strconv.FormatUint(v.minor, 10) + "." + strconv.FormatUint(v.patch, 10)
	if v.pre != "" {
		s += "-" + v.pre
	}
	return s
}

// MarshalText encodes v as its canonical spelling ("" for the zero Version).
// It never returns an error.
func (v Version) MarshalText() ([]byte, error) {
	return []byte(v.String()), nil
}

// UnmarshalText parses text with ParseVersion; empty text gives the zero
// Version. Returns EINVALID (type "invalid-version") if text is not a version.
func (v *Version) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*v = Version{}
		return nil
	}
	p, err := ParseVersion(string(text))
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// Major returns the major number.
func (v Version) Major() uint64 { return v.major }

// Minor returns the minor number.
func (v Version) Minor() uint64 { return v.minor }

// Patch returns the patch number.
func (v Version) Patch() uint64 { return v.patch }

// Prerelease returns the prerelease identifiers without the leading "-", ""
// for a release.
func (v Version) Prerelease() string { return v.pre }

// IsZero reports whether v is the zero Version ("no version").
func (v Version) IsZero() bool { return !v.ok }

// Compare returns -1 if a precedes b, 0 if they are the same version and +1
// if a follows b, by SemVer 2.0 precedence. The zero Version precedes every
// other version. Compare has the signature slices.SortFunc expects.
func Compare(a, b Version) int {
	if a.ok != b.ok {
		if !a.ok {
			return -1
		}
		return 1
	}
	if c := cmpUint(a.major, b.major); c != 0 {
		return c
	}
	if c := cmpUint(a.minor, b.minor); c != 0 {
		return c
	}
	if c := cmpUint(a.patch, b.patch); c != 0 {
		return c
	}
	return comparePre(a.pre, b.pre)
}

// Less reports whether v precedes o.
func (v Version) Less(o Version) bool { return Compare(v, o) < 0 }

// Equal reports whether v and o are the same version (the same as v == o).
func (v Version) Equal(o Version) bool { return v == o }

// SortVersions sorts vs in ascending precedence, in place.
func SortVersions(vs []Version) {
	slices.SortFunc(vs, Compare)
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// comparePre orders prerelease strings by SemVer 2.0 rule 11: a release (no
// prerelease) follows every prerelease; identifiers compare left to right,
// numeric ones numerically and below alphanumeric ones, which compare in ASCII
// order; a longer list follows its own prefix.
func comparePre(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == "":
		return 1
	case b == "":
		return -1
	}
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		if c := compareIdent(as[i], bs[i]); c != 0 {
			return c
		}
	}
	return cmpUint(uint64(len(as)), uint64(len(bs)))
}

func compareIdent(a, b string) int {
	an, bn := isNumeric(a), isNumeric(b)
	switch {
	case an && bn:
		// Without leading zeros, a longer number is larger; this also
		// orders numbers beyond uint64 correctly.
		if c := cmpUint(uint64(len(a)), uint64(len(b))); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	case an:
		return -1
	case bn:
		return 1
	}
	return strings.Compare(a, b)
}
