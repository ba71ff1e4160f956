package lifecycle

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// MaxVersionLength bounds the spelling of a version. SemVer sets no limit;
// ours keeps hostile input cheap and every stored version printable.
const MaxVersionLength = 128

// Version is an application version: a SemVer 2.0 version without build
// metadata. Parsing and precedence are github.com/Masterminds/semver/v3's;
// this type is the thin layer of wfm's stricter rules over it (one spelling
// per version, no build metadata, "1.0" read as "1.0.0", numbers that fit in
// 64 bits). Versions are values: two Versions are == exactly when they have
// the same precedence, so a Version can be a map key and "1.0" and "1.0.0"
// (two spellings of one version) yield equal Versions.
//
// The zero Version is "no version": IsZero reports true, String returns "",
// and it sorts before every real version (including 0.0.0).
type Version struct {
	// sv is always parsed from the canonical spelling, so that every field
	// of it (the library keeps the original text too) is equal for equal
	// versions and == stays precedence equality.
	sv semver.Version
	ok bool // false for the zero Version
}

// ParseVersion reads a SemVer 2.0 version. A missing minor or patch number is
// read as 0 ("1" and "1.0" are "1.0.0"; "1.0-beta" is "1.0.0-beta"), so two
// spellings of one version give equal Versions.
//
// Refused spellings, each because it would give one version two names or hide
// a mistake: a leading "v" ("v1.2.3"), build metadata ("1.2.3+build.5": SemVer
// ignores it for precedence, so 1.2.3+a and 1.2.3+b would be different
// versions that compare equal), leading zeros ("01.2.3", "1.2.3-rc.01"),
// surrounding spaces, more than three numbers ("1.0.0.0"), a number beyond
// 64 bits (also in the prerelease, which the library would order as text),
// and anything else that is not SemVer ("latest", "").
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

// scanVersion completes s to MAJOR.MINOR.PATCH[-PRERELEASE], has the library
// parse that canonical spelling, and returns the version or a short reason
// why it is not one.
func scanVersion(s string) (Version, string) {
	core, pre, hasPre := strings.Cut(s, "-")
	parts := strings.Split(core, ".")
	if len(parts) > 3 {
		return Version{}, "more than three numbers"
	}
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	canonical := strings.Join(parts, ".")
	if hasPre {
		canonical += "-" + pre
	}
	sv, err := semver.StrictNewVersion(canonical)
	if err != nil {
		return Version{}, explain(parts, pre, hasPre, err)
	}
	for _, id := range strings.Split(sv.Prerelease(), ".") {
		if isNumeric(id) {
			if _, err := strconv.ParseUint(id, 10, 64); err != nil {
				return Version{}, fmt.Sprintf("numeric prerelease identifier %q is too large (at most 64 bits)", id)
			}
		}
	}
	return Version{sv: *sv, ok: true}, ""
}

// explain names what the library refused in a completed version, in the
// words of the SemVer rules; the library's own error is the fallback.
func explain(parts []string, pre string, hasPre bool, err error) string {
	for i, p := range parts {
		name := [3]string{"major", "minor", "patch"}[i]
		switch {
		case p == "":
			return name + " number is empty"
		case !isNumeric(p):
			return fmt.Sprintf("%s number %q is not a number", name, p)
		case len(p) > 1 && p[0] == '0':
			return fmt.Sprintf("%s number %q has a leading zero", name, p)
		}
		if _, perr := strconv.ParseUint(p, 10, 64); perr != nil {
			return fmt.Sprintf("%s number %q is too large", name, p)
		}
	}
	if hasPre {
		if pre == "" {
			return "empty prerelease after -"
		}
		for _, id := range strings.Split(pre, ".") {
			if id == "" {
				return "empty prerelease identifier"
			}
			for _, r := range id {
				if !isIdentChar(r) {
					return fmt.Sprintf("prerelease identifier %q may only hold letters, digits and -", id)
				}
			}
			if isNumeric(id) && len(id) > 1 && id[0] == '0' {
				return fmt.Sprintf("numeric prerelease identifier %q has a leading zero", id)
			}
		}
	}
	return err.Error()
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
	return v.sv.Original() // parsed from the canonical spelling
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
func (v Version) Major() uint64 { return v.sv.Major() }

// Minor returns the minor number.
func (v Version) Minor() uint64 { return v.sv.Minor() }

// Patch returns the patch number.
func (v Version) Patch() uint64 { return v.sv.Patch() }

// Prerelease returns the prerelease identifiers without the leading "-", ""
// for a release.
func (v Version) Prerelease() string { return v.sv.Prerelease() }

// IsZero reports whether v is the zero Version ("no version").
func (v Version) IsZero() bool { return !v.ok }

// Compare returns -1 if a precedes b, 0 if they are the same version and +1
// if a follows b, by SemVer 2.0 precedence (the library's). The zero Version
// precedes every other version. Compare has the signature slices.SortFunc
// expects.
func Compare(a, b Version) int {
	if a.ok != b.ok {
		if !a.ok {
			return -1
		}
		return 1
	}
	if !a.ok {
		return 0
	}
	return a.sv.Compare(&b.sv)
}

// Less reports whether v precedes o.
func (v Version) Less(o Version) bool { return Compare(v, o) < 0 }

// Equal reports whether v and o are the same version (the same as v == o).
func (v Version) Equal(o Version) bool { return v == o }
