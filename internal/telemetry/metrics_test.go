package telemetry_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wfm-dev/wfm/internal/telemetry"
)

// TestHTTPMetricsObserve: each (route, method, status) is its own series,
// counted and timed on every call, and a series seen before is observed
// without allocating (the device poll's hot path).
func TestHTTPMetricsObserve(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := telemetry.NewHTTPMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Observe("/api/v1/deployments", "GET", 304, time.Millisecond)
	m.Observe("/api/v1/deployments", "GET", 304, 2*time.Millisecond)
	m.Observe("/api/v1/deployments", "GET", 200, time.Millisecond)
	m.Observe("/mgmt/v1/deployments", "GET", 304, time.Millisecond)

	// count is the requests counter of a series and the number of
	// observations of its latency histogram.
	count := func(route, method, status string) (requests, timed float64) {
		t.Helper()
		c, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range c {
			for _, s := range f.GetMetric() {
				l := map[string]string{}
				for _, p := range s.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				if l["route"] != route || l["method"] != method || l["status"] != status {
					continue
				}
				switch f.GetName() {
				case "wfm_http_requests_total":
					requests = s.GetCounter().GetValue()
				case "wfm_http_request_duration_seconds":
					timed = float64(s.GetHistogram().GetSampleCount())
				}
			}
		}
		return requests, timed
	}
	for _, c := range []struct {
		route, method, status string
		want                  float64
	}{
		{"/api/v1/deployments", "GET", "304", 2},
		{"/api/v1/deployments", "GET", "200", 1},
		{"/mgmt/v1/deployments", "GET", "304", 1},
	} {
		if got, timed := count(c.route, c.method, c.status); got != c.want || timed != c.want {
			t.Errorf("series {route=%q,method=%q,status=%q}: %v requests, %v timed; want %v", c.route, c.method, c.status, got, timed, c.want)
		}
	}

	if n := testing.AllocsPerRun(100, func() { m.Observe("/api/v1/deployments", "GET", 304, time.Millisecond) }); n != 0 {
		t.Errorf("Observe of a known series allocates %v times per call, want 0", n)
	}
	if got, timed := count("/api/v1/deployments", "GET", "304"); got != 2+101 || timed != 2+101 {
		t.Errorf("after AllocsPerRun: %v requests counted, %v timed, want %d", got, timed, 2+101)
	}
}
