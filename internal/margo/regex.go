package margo

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// maxRE2Repeat is the largest repeat count RE2 accepts ({n,m}).
const maxRE2Repeat = 1000

// checkRegex returns "" if pattern is acceptable as a regexMatch, and
// otherwise why it is not.
//
// Margo does not name a regular expression dialect, and UIs that present
// settings will often run patterns in ECMAScript or PCRE. So a pattern is
// accepted if Go's RE2 compiles it (then the server enforces it), or if it
// compiles once the constructs that only backtracking engines have are
// neutralised: lookaround ((?=…) (?!…) (?<=…) (?<!…)), atomic groups
// ((?>…)), backreferences (\1, \k<name>), possessive quantifiers (a*+) and
// repeat counts above 1000. Such a pattern is kept for clients and not
// enforced by the server (see Schema.Regexp). Anything else that does not
// compile (unbalanced parentheses, a dangling escape, …) is a mistake and is
// refused with RE2's explanation.
func checkRegex(pattern string) string {
	_, err := regexp.Compile(`^(?:` + pattern + `)$`)
	if err == nil {
		return ""
	}
	// Report RE2's own error on the pattern as written, not the wrapper.
	_, plainErr := regexp.Compile(pattern)
	if _, relaxedErr := regexp.Compile(relaxRegex(pattern)); relaxedErr == nil && plainErr != nil {
		return ""
	}
	if plainErr == nil {
		plainErr = err
	}
	return fmt.Sprintf("is not a valid regular expression: %s", strings.TrimPrefix(plainErr.Error(), "error parsing regexp: "))
}

// relaxRegex rewrites the backtracking-only constructs of pattern into RE2
// syntax that keeps the pattern's shape (not its meaning), so that the
// remaining syntax can be checked by RE2.
func relaxRegex(p string) string {
	var b strings.Builder
	inClass := false
	afterQuantifier := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		quant := false
		switch {
		case c == '\\' && i+1 < len(p):
			n := p[i+1]
			switch {
			case !inClass && n >= '1' && n <= '9': // backreference
				j := i + 1
				for j < len(p) && p[j] >= '0' && p[j] <= '9' {
					j++
				}
				b.WriteString("(?:)")
				i = j - 1
			case !inClass && n == 'k' && i+2 < len(p) && p[i+2] == '<' && strings.IndexByte(p[i:], '>') > 0:
				b.WriteString("(?:)")
				i += strings.IndexByte(p[i:], '>')
			default:
				b.WriteByte(c)
				b.WriteByte(n)
				i++
			}
		case inClass:
			if c == ']' {
				inClass = false
			}
			b.WriteByte(c)
		case c == '[':
			inClass = true
			b.WriteByte(c)
			// A leading ^ and then a leading ] are part of the class.
			if i+1 < len(p) && p[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' {
				b.WriteByte(']')
				i++
			}
		case strings.HasPrefix(p[i:], "(?<=") || strings.HasPrefix(p[i:], "(?<!"):
			b.WriteString("(?:")
			i += 3
		case strings.HasPrefix(p[i:], "(?=") || strings.HasPrefix(p[i:], "(?!") || strings.HasPrefix(p[i:], "(?>"):
			b.WriteString("(?:")
			i += 2
		case c == '{':
			if rep, n, ok := clampRepeat(p[i:]); ok {
				b.WriteString(rep)
				i += n - 1
				quant = true
			} else {
				b.WriteByte(c)
			}
		case c == '+' && afterQuantifier: // possessive
		case c == '*' || c == '+' || c == '?':
			b.WriteByte(c)
			quant = true
		default:
			b.WriteByte(c)
		}
		afterQuantifier = quant
	}
	return b.String()
}

// clampRepeat reads a repeat {n}, {n,} or {n,m} at the start of s and returns
// it with counts above maxRE2Repeat lowered, and its length in s.
func clampRepeat(s string) (string, int, bool) {
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return "", 0, false
	}
	body := s[1:end]
	lo, hi, comma := strings.Cut(body, ",")
	clamp := func(d string) (string, bool) {
		if d == "" || len(d) > 18 {
			return "", false
		}
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return "", false
		}
		return strconv.Itoa(min(n, maxRE2Repeat)), true
	}
	l, ok := clamp(lo)
	if !ok {
		return "", 0, false
	}
	out := "{" + l
	if comma {
		out += ","
		if hi != "" {
			h, ok := clamp(hi)
			if !ok {
				return "", 0, false
			}
			out += h
		}
	}
	return out + "}", end + 1, true
}
