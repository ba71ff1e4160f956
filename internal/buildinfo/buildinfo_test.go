package buildinfo

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFromBuild: the version and revision come from the embedded build
// information, "-modified" marks a dirty tree, values set with -X win, and a
// build that says nothing is "unknown".
func TestFromBuild(t *testing.T) {
	checkout := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/wfm-dev/wfm", Version: "v0.0.0-20261208003950-697724b2d4f1+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "697724b2d4f1"}, {Key: "vcs.modified", Value: "true"}}}
	clean := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}}
	bare := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}
	tests := []struct {
		name       string
		bi         *debug.BuildInfo
		ok         bool
		ldV, ldRev string
		want       Info
	}{
		{"a checkout with changes", checkout, true, "", "", Info{"v0.0.0-20261208003950-697724b2d4f1+dirty", "697724b2d4f1-modified", "go1.26.0"}},
		{"a clean checkout without a module version", clean, true, "", "", Info{Unknown, "abc", "go1.26.0"}},
		{"nothing embedded", bare, true, "", "", Info{Unknown, Unknown, "go1.26.0"}},
		{"-X wins", checkout, true, "1.4.0", "0123abc", Info{"1.4.0", "0123abc", "go1.26.0"}},
		{"-X version only", bare, true, "1.4.0", "", Info{"1.4.0", Unknown, "go1.26.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, fromBuild(tt.bi, tt.ok, tt.ldV, tt.ldRev), "fromBuild")
		})
	}
	got := fromBuild(nil, false, "", "")
	assert.Equal(t, Unknown, got.Version, "no build information")
	assert.NotEmpty(t, got.GoVersion, "the runtime's Go version")
}
