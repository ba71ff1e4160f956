package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// quoted is a PromQL string (a label value), dropped before names are read.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)

// metricName is a name of a metric wfm serves: its own (wfm_), the Go
// runtime's (go_) and the process's (process_). Label names, functions and
// keywords of PromQL have none of these prefixes.
var metricName = regexp.MustCompile(`\b(?:wfm|go|process)_[A-Za-z0-9_:]*`)

// dashboardMetrics returns every metric name the Grafana dashboard's
// queries use (panel targets and template variables), each with a query
// that uses it.
func dashboardMetrics(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/grafana/wfm-dashboard.json")
	require.NoError(t, err)
	var doc any
	require.NoError(t, json.Unmarshal(b, &doc))
	names := map[string]string{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					for _, n := range metricName.FindAllString(quoted.ReplaceAllString(s, ""), -1) {
						names[n] = s
					}
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	require.Greater(t, len(names), 20, "the dashboard's queries were read")
	return names
}

// checkDashboard fails for every metric of the dashboard that the server
// does not serve (fams: a scrape of /metrics after some activity).
func checkDashboard(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	for name, expr := range dashboardMetrics(t) {
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && fams[base] != nil && fams[base].GetType() == dto.MetricType_HISTOGRAM {
				family = base
			}
		}
		if fams[family] == nil {
			t.Errorf("docs/grafana/wfm-dashboard.json: %s (in %q) is not served by /metrics", name, expr)
		}
	}
}

// TestDashboardSelectsJobAndInstance: the dashboard has a job and an
// instance variable, and every metric every query reads is selected by
// both, so that one dashboard serves several wfm installations (jobs) and
// can show one replica.
func TestDashboardSelectsJobAndInstance(t *testing.T) {
	b, err := os.ReadFile("../../docs/grafana/wfm-dashboard.json")
	require.NoError(t, err)
	var doc struct {
		Templating struct {
			List []struct {
				Name, Type string
				Definition string
				IncludeAll bool `json:"includeAll"`
			}
		}
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	vars := map[string]string{}
	for _, v := range doc.Templating.List {
		vars[v.Name] = v.Type + " " + v.Definition
	}
	require.Contains(t, vars, "job")
	require.Contains(t, vars, "instance")
	require.Contains(t, vars["instance"], `job=~"$job"`, "the instances are those of the chosen job")
	selector := regexp.MustCompile(`\b((?:wfm|go|process)_[A-Za-z0-9_:]*)(\{[^}]*\})?`)
	queries := 0
	for _, p := range doc.Panels {
		for _, tg := range p.Targets {
			queries++
			for _, m := range selector.FindAllStringSubmatch(tg.Expr, -1) {
				if !strings.Contains(m[2], `job=~"$job"`) || !strings.Contains(m[2], `instance=~"$instance"`) {
					t.Errorf("panel %q: %s is not selected by job and instance in %q", p.Title, m[1], tg.Expr)
				}
			}
		}
	}
	require.Greater(t, queries, 20, "the panels' queries were read")
}
