package httpapi

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/wfm-dev/wfm/internal/fleet"
)

func TestETagMatches(t *testing.T) {
	for _, tc := range []struct {
		header, etag string
		c            comparison
		want         bool
	}{
		{`*`, `"a"`, strong, true},
		{` * `, `"a"`, weak, true},
		{`"a"`, `"a"`, strong, true},
		{`"b", "a"`, `"a"`, strong, true},
		{`"b","c"`, `"a"`, strong, false},
		{`W/"a"`, `"a"`, strong, false},
		{`W/"a"`, `"a"`, weak, true},
		{`"b", W/"a"`, `W/"a"`, weak, true},
		{`"a"`, `W/"a"`, weak, true},
		{`"a"`, `W/"a"`, strong, false},
		{`*, "b"`, `"a"`, strong, false},
	} {
		if got := etagMatches(tc.header, tc.etag, tc.c); got != tc.want {
			t.Errorf("etagMatches(%q, %q, weak=%v) = %v, want %v", tc.header, tc.etag, tc.c, got, tc.want)
		}
	}
}

// TestIfMatch: the If-Match header of a change to a deployment becomes the
// generations the change expects, exactly those whose tag (the one GET
// answers) the header matches under the strong comparison.
func TestIfMatch(t *testing.T) {
	const id = "0b6e4a1c-93d2-4f7e-8a55-3c1d2e4f5a6b"
	// The tag as it was formatted before it moved here: clients see no change.
	old := func(g int64) string {
		return `"d-` + strings.ReplaceAll(id, "-", "")[:12] + "-" + strconv.FormatInt(g, 10) + `"`
	}
	assert.Equal(t, old(7), deploymentETag(id, 7))
	assert.Equal(t, `"d-0b6e4a1c93d2-7"`, deploymentETag(id, 7))

	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name   string
		header *string
		id     string
		want   fleet.Precondition
	}{
		{"no header", nil, id, fleet.Precondition{}},
		{"any", str(" * "), id, fleet.Precondition{}},
		{"the tag", str(old(7)), id, fleet.ExpectGeneration(7)},
		{"a list", str(`"x", ` + old(7) + " ," + old(9)), id, fleet.ExpectGeneration(7, 9)},
		{"a weak tag", str("W/" + old(7)), id, fleet.ExpectGeneration()},
		{"a stale tag of another form", str(`"d-stale-1"`), id, fleet.ExpectGeneration()},
		{"another deployment's tag", str(`"d-0b6e4a1c93d3-7"`), id, fleet.ExpectGeneration()},
		{"a generation spelled otherwise", str(`"d-0b6e4a1c93d2-07"`), id, fleet.ExpectGeneration()},
		{"unquoted", str(`d-0b6e4a1c93d2-7`), id, fleet.ExpectGeneration()},
		{"an ID in upper case", str(old(7)), strings.ToUpper(id), fleet.ExpectGeneration(7)},
		{"a short ID", str(`"d-ab-1"`), "ab", fleet.ExpectGeneration(1)},
		{"empty", str(""), id, fleet.Precondition{}},
	} {
		assert.Equal(t, tc.want, ifMatch(tc.header, tc.id), "ifMatch(%v) for %s", tc.name, tc.id)
	}
}

func TestRolloutIfMatch(t *testing.T) {
	const id = "0b6e4a1c-93d2-4f7e-8a55-3c1d2e4f5a6b"
	assert.Equal(t, `"r-0b6e4a1c93d2-3"`, rolloutETag(id, 3))
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name   string
		header *string
		want   fleet.Precondition
	}{
		{"no header", nil, fleet.Precondition{}},
		{"the tag", str(`"r-0b6e4a1c93d2-3"`), fleet.ExpectGeneration(3)},
		{"a list", str(`"r-0b6e4a1c93d2-3", "r-0b6e4a1c93d2-4"`), fleet.ExpectGeneration(3, 4)},
		// A deployment's tag with the same ID prefix names no rollout.
		{"a deployment's tag", str(`"d-0b6e4a1c93d2-3"`), fleet.ExpectGeneration()},
		{"a weak tag", str(`W/"r-0b6e4a1c93d2-3"`), fleet.ExpectGeneration()},
	} {
		assert.Equal(t, tc.want, rolloutIfMatch(tc.header, id), "rolloutIfMatch(%v)", tc.name)
	}
	assert.Equal(t, fleet.ExpectGeneration(), ifMatch(str(`"r-0b6e4a1c93d2-3"`), id), "a rollout's tag names no deployment")
}
