package telemetry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/telemetry"
)

// TestDomainCollectorCachesSnapshots: scrapes within the TTL reuse the
// snapshot (one query however many scrapers), a failed snapshot keeps the
// previous values and is counted, and the next scrape after the TTL reads
// again.
func TestDomainCollectorCachesSnapshots(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	calls := 0
	var fail error
	c := telemetry.NewDomainCollector(telemetry.DomainConfig{
		Snapshot: func(ctx context.Context) (telemetry.Snapshot, error) {
			calls++
			_, ok := ctx.Deadline()
			require.True(t, ok, "the snapshot runs with a deadline")
			if fail != nil {
				return telemetry.Snapshot{}, fail
			}
			return telemetry.Snapshot{Deployments: map[string]int{"installed": calls}}, nil
		},
		TTL: 5 * time.Second, Timeout: time.Second, Now: func() time.Time { return now },
	})
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	// gather scrapes once and returns the installed gauge and the error counter.
	gather := func() (installed, errs float64) {
		t.Helper()
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			switch mf.GetName() {
			case "wfm_deployments":
				installed = mf.GetMetric()[0].GetGauge().GetValue()
			case "wfm_metrics_snapshot_errors_total":
				errs = mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return installed, errs
	}
	installed := func() float64 { v, _ := gather(); return v }
	assert.Equal(t, 1.0, installed())
	now = now.Add(4 * time.Second)
	assert.Equal(t, 1.0, installed(), "within the TTL: no new query")
	assert.Equal(t, 1, calls)

	now = now.Add(2 * time.Second)
	fail = errors.New("database away")
	assert.Equal(t, 1.0, installed(), "a failed snapshot keeps the previous values")
	assert.Equal(t, 2, calls)
	_, errs := gather()
	assert.Equal(t, 1.0, errs, "the failure is counted")
	assert.Equal(t, 2, calls, "a failed snapshot is not tried again within the TTL")

	now = now.Add(5 * time.Second)

	fail = nil
	assert.Equal(t, 3.0, installed(), "the next scrape reads again")
}

// TestOperationOutcomesFromEvents: the outcome events of operations are
// counted by type and outcome; other events are not, and an unreadable body
// counts as type "unknown".
func TestOperationOutcomesFromEvents(t *testing.T) {
	c := telemetry.NewDomainCollector(telemetry.DomainConfig{
		Snapshot: func(context.Context) (telemetry.Snapshot, error) { return telemetry.Snapshot{}, nil },
	})
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	for _, e := range []lifecycle.Event{
		{Type: lifecycle.EventOperationSucceeded, Body: []byte(`{"operation":"upgrade","version":"2.0.0"}`)},
		{Type: lifecycle.EventOperationSucceeded, Body: []byte(`{"operation":"upgrade","version":"2.0.0"}`)},
		{Type: lifecycle.EventOperationFailed, Body: []byte(`{"operation":"rollback","reason":"StepFailed"}`)},
		{Type: lifecycle.EventOperationCancelled, Body: []byte(`{"operation":"install","reason":"CancelledByOperator"}`)},
		{Type: lifecycle.EventOperationFailed, Body: []byte(`{"operation":"nonsense"}`)},
		{Type: lifecycle.EventOperationStarted, Body: []byte(`{"operation":"upgrade"}`)},
		{Type: lifecycle.EventDeploymentStateChanged, Body: []byte(`{}`)},
	} {
		c.ObserveEvent(e)
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "wfm_operations_finished_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				got[m.GetLabel()[1].GetValue()+" "+m.GetLabel()[0].GetValue()] = v // type outcome
			}
		}
		assert.Len(t, mf.GetMetric(), 5*3+1, "every type and outcome from the start, and the unknown one")
	}
	assert.Equal(t, map[string]float64{"upgrade succeeded": 2, "rollback failed": 1, "install cancelled": 1, "unknown failed": 1}, got)
}
