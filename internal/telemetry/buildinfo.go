package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wfm-dev/wfm/internal/buildinfo"
)

// NewBuildInfo returns the wfm_build_info gauge: always 1, labelled with
// the build's version, revision and Go release, as Prometheus exporters
// name theirs (<name>_build_info). A query joins it to tell replicas apart
// during a rolling upgrade: count by (version) (wfm_build_info).
func NewBuildInfo(b buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "wfm_build_info",
		Help:        "The build of wfm this process runs: version, revision (a Git commit, -modified for a tree with uncommitted changes) and goversion; the value is always 1.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion}})
	g.Set(1)
	return g
}
