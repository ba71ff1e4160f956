// Package buildinfo says which build of wfm runs: its version, the source
// revision it was built from and the Go release that compiled it, for
// `wfm version`, the wfm_build_info metric and /healthz.
//
// The values come from the build information the Go toolchain embeds
// (debug.ReadBuildInfo: the main module's version, vcs.revision and
// vcs.modified), which a build from a Git checkout or `go install
// …@version` carries. A build without them (a source tree copied into a
// container without .git) or a release that wants its own spelling sets them
// at link time:
//
//	go build -ldflags "-X github.com/wfm-dev/wfm/internal/buildinfo.version=1.4.0 -X github.com/wfm-dev/wfm/internal/buildinfo.revision=$(git rev-parse HEAD)" ./cmd/wfm
//
// A value set with -X wins over the embedded one.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// version and revision are set at link time with -X (see the package
// comment); empty: read from the embedded build information.
var (
	version  string
	revision string
)

// Unknown is the version or revision of a build that carries none.
const Unknown = "unknown"

// Info is what a build says about itself.
type Info struct {
	// Version is the release ("1.4.0"), the Go module version of the main
	// module (a pseudo-version such as "v0.0.0-20261208003950-697724b2d4f1+dirty"
	// for a build from a checkout), or Unknown.
	Version string
	// Revision is the source revision (a Git commit), with "-modified" when
	// the working tree had uncommitted changes, as Prometheus exporters
	// spell it; Unknown when the build does not say.
	Revision string
	// GoVersion is the Go release that compiled the binary ("go1.26.0").
	GoVersion string
}

// Read returns this binary's Info (computed once).
var Read = sync.OnceValue(func() Info {
	bi, ok := debug.ReadBuildInfo()
	return fromBuild(bi, ok, version, revision)
})

// fromBuild computes Info from the embedded build information (ok false:
// none) and the values set at link time (empty: not set).
func fromBuild(bi *debug.BuildInfo, ok bool, ldVersion, ldRevision string) Info {
	info := Info{Version: Unknown, Revision: Unknown, GoVersion: runtime.Version()}
	if ok {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		// "(devel)" is what a build without module or VCS version says.
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			info.Version = v
		}
		var rev string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" {
			info.Revision = rev
			if modified {
				info.Revision += "-modified"
			}
		}
	}
	if ldVersion != "" {
		info.Version = ldVersion
	}
	if ldRevision != "" {
		info.Revision = ldRevision
	}
	return info
}
