package access

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRoles(t *testing.T) {
	for _, tc := range []struct {
		have, need Role
		want       bool
	}{
		{Viewer, Viewer, true}, {Viewer, Operator, false}, {Viewer, Admin, false},
		{Operator, Viewer, true}, {Operator, Operator, true}, {Operator, Admin, false},
		{Admin, Viewer, true}, {Admin, Operator, true}, {Admin, Admin, true},
		{"", Viewer, false}, {Admin, "", false}, {"root", Viewer, false},
	} {
		if got := tc.have.Allows(tc.need); got != tc.want {
			t.Errorf("%q.Allows(%q) = %v, want %v", tc.have, tc.need, got, tc.want)
		}
	}
}

func TestSecretsAndBearer(t *testing.T) {
	id, secret := NewSecret()
	assert.Len(t, id, 16)
	assert.True(t, strings.HasPrefix(secret, "wfm_"+id+"_"))
	id2, secret2 := NewSecret()
	assert.NotEqual(t, id, id2)
	assert.NotEqual(t, secret, secret2)
	assert.NotEqual(t, Hash(secret), Hash(secret2))

	for _, tc := range []struct {
		header, id string
		ok         bool
	}{
		{"Bearer " + secret, id, true},
		{"bearer  " + secret + " ", id, true},
		{"Bearer some-configured-admin-secret", BootstrapID, true},
		{"Basic abc", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{secret, "", false},
		{"Bearer " + strings.Repeat("x", 600), "", false},
	} {
		gotID, _, ok := parseBearer(tc.header)
		if ok != tc.ok || gotID != tc.id {
			t.Errorf("parseBearer(%q) = %q, %v; want %q, %v", tc.header, gotID, ok, tc.id, tc.ok)
		}
	}
}

func TestCallerNetwork(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"not an address", "not an address"},
	} {
		if got := CallerNetwork(tc.addr); got != tc.want {
			t.Errorf("CallerNetwork(%q) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
