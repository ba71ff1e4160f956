package postgres_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/pgtest"
)

// TestCheaperChecksAcceptWhatTheRegexpsDid: migration 00022 rewrote the
// checks whose regular expressions repeated a class a bounded number of
// times (slow in PostgreSQL's engine) as a length check and a '+'. Each
// check as the schema now holds it must accept exactly the strings its
// former pattern accepted: compared on strings around the boundaries
// (lengths, prefixes, upper case, multibyte characters, a final newline)
// and on random ones.
func TestCheaperChecksAcceptWhatTheRegexpsDid(t *testing.T) {
	pool := pgtest.New(t)
	ctx := t.Context()
	type check struct {
		table, name, column, pattern string
		// valid draws a string the check accepts; for an id (max > 0), one
		// of 1 to max characters of alphabet (the lengths 1, max-1, max and
		// max+1 are always tried too).
		valid    func(r *rand.Rand) string
		alphabet string
		max      int
	}
	hex := func(n int) func(r *rand.Rand) string {
		return func(r *rand.Rand) string { return randomOf(r, "0123456789abcdef", n) }
	}
	digest := func(r *rand.Rand) string { return "sha256:" + hex(64)(r) }
	const (
		clientChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"
		appChars    = "abcdefghijklmnopqrstuvwxyz0123456789-"
		tokenChars  = "abcdefghijklmnopqrstuvwxyz0123456789"
	)
	checks := []check{
		{"applications", "applications_id_check", "id", `^[a-z0-9-]{1,200}$`, nil, appChars, 200},
		{"application_versions", "application_versions_digest_check", "digest", `^sha256:[0-9a-f]{64}$`, digest, "", 0},
		{"clients", "clients_id_check", "id", `^[A-Za-z0-9._-]{1,128}$`, nil, clientChars, 128},
		{"clients", "clients_bundle_digest_check", "bundle_digest", `^sha256:[0-9a-f]{64}$`, digest, "", 0},
		{"bundles", "bundles_digest_check", "digest", `^sha256:[0-9a-f]{64}$`, digest, "", 0},
		{"revisions", "revisions_digest_check", "digest", `^sha256:[0-9a-f]{64}$`, digest, "", 0},
		{"documents", "documents_digest_check", "digest", `^sha256:[0-9a-f]{64}$`, digest, "", 0},
		{"manifest_versions", "manifest_versions_bundle_digest_check", "bundle_digest", `^sha256:[0-9a-f]{64}$`, digest, "", 0},
		{"api_tokens", "api_tokens_id_check", "id", `^[a-z0-9]{1,32}$`, nil, tokenChars, 32},
		{"api_tokens", "api_tokens_secret_hash_check", "secret_hash", `^[0-9a-f]{64}$`, hex(64), "", 0},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			var def string
			require.NoError(t, pool.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = $1::regclass AND conname = $2`, c.table, c.name).Scan(&def))
			require.NotContains(t, def, "{", "the check still repeats a class a bounded number of times: %s", def)
			expr, ok := strings.CutPrefix(def, "CHECK ")
			require.True(t, ok, def)
			valid := c.valid
			if c.max > 0 {
				valid = func(r *rand.Rand) string { return randomOf(r, c.alphabet, 1+r.IntN(c.max)) }
			}
			var inputs []string
			for range 300 {
				v := valid(r)
				inputs = append(inputs, v, v+"a", v+"0", v[:len(v)-1], strings.ToUpper(v), v+"\n", "\n"+v, " "+v, v+"é", "é"+v[min(2, len(v)):])
				b := []byte(v)
				const odd = "gG/ :_.\x7f"
				b[r.IntN(len(b))] = odd[r.IntN(len(odd))]
				inputs = append(inputs, string(b))
				// Same length in characters, one of them multibyte.
				rs := []rune(v)
				rs[r.IntN(len(rs))] = 'é'
				inputs = append(inputs, string(rs))
			}
			for n := range 260 {
				inputs = append(inputs, randomOf(r, "0123456789abcdefABCDEF-._sha:é", n))
			}
			inputs = append(inputs, "", "sha256:", "sha256")
			if c.max > 0 {
				for _, n := range []int{1, c.max - 1, c.max, c.max + 1} {
					v := randomOf(r, c.alphabet, n)
					inputs = append(inputs, v, v[:len(v)-1]+"é")
				}
			}
			rows, err := pool.Query(ctx, `SELECT x.v FROM unnest($1::text[]) AS x (v)
CROSS JOIN LATERAL (SELECT `+expr+` IS NOT FALSE AS now FROM (SELECT x.v AS `+c.column+`) AS col) AS n
WHERE n.now <> (x.v ~ $2)`, inputs, c.pattern)
			require.NoError(t, err)
			mismatches, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.Empty(t, mismatches, "%s accepts differently from %s", expr, c.pattern)
		})
	}
}

// randomOf returns n characters drawn from alphabet.
func randomOf(r *rand.Rand, alphabet string, n int) string {
	rs := []rune(alphabet)
	var b strings.Builder
	for range n {
		b.WriteRune(rs[r.IntN(len(rs))])
	}
	return b.String()
}
