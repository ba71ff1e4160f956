package devicesim_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/access"
	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/devicesim"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func describe(version, lc string) []byte {
	return []byte(`apiVersion: v1
id: sim
metadata:
  name: Sim
  version: "` + version + `"
deploymentProfiles:
  - type: compose
    id: sim-compose
    components:
      - name: app
        properties:
          repository: oci://example.com/sim
          revision: "` + version + `"
` + lc)
}

// TestSimulatedDevicesFollowTheirDeployments runs simulated devices against
// the real device API: they install what is deployed to them (and only
// that), follow an upgrade that asks for a drain, and report removals.
func TestSimulatedDevicesFollowTheirDeployments(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	fl := fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log)
	acc := access.NewService(postgres.NewAccessStore(pool), time.Now)
	h, err := httpapi.NewHandler(httpapi.Config{Logger: log, Ready: func(context.Context) error { return nil }, Registry: prometheus.NewRegistry(),
		Catalog: cat, Fleet: fl, Access: acc, DeviceIdentity: identity.HeaderIdentity{}.ClientIDFromRequest})
	require.NoError(t, err)
	_, device := httpapi.Split(h)
	srv := httptest.NewServer(device)
	t.Cleanup(srv.Close)
	for _, v := range []struct{ version, lc string }{{"1.0.0", ""}, {"2.0.0", "lifecycle:\n  upgrade:\n    drain:\n      required: true\n      timeout: 1m\n"}} {
		_, _, err := cat.Add(ctx, describe(v.version, v.lc), catalog.MediaYAML)
		require.NoError(t, err)
	}

	cfg := &devicesim.Config{BaseURL: srv.URL, HTTP: http.DefaultClient, ClientID: "plant", Poll: time.Hour, Log: log}
	devs := []*devicesim.Device{devicesim.NewDevice(cfg, "edge-1"), devicesim.NewDevice(cfg, "edge-2")}
	for _, d := range devs {
		require.NoError(t, d.Register(ctx))
	}
	dep, err := fl.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "sim", Version: "1.0.0", ClientID: "plant", DeviceID: "edge-1"})
	require.NoError(t, err)
	sync := func() {
		for _, d := range devs {
			_, err := d.Sync(ctx)
			require.NoError(t, err)
		}
	}
	sync()
	got, err := fl.Deployment(ctx, dep.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StateInstalled, got.State)

	_, op, err := fl.Upgrade(ctx, dep.ID, fleet.UpgradeRequest{TargetVersion: "2.0.0"}, fleet.Actor{ID: "test"}, false, fleet.Precondition{})
	require.NoError(t, err)
	sched := fleet.NewScheduler(fl, time.Hour)
	_, err = sched.RunOnce(ctx)
	require.NoError(t, err)
	sync() // drains, then installs 2.0.0
	_, err = sched.RunOnce(ctx)
	require.NoError(t, err)
	done, err := fl.Operation(ctx, op.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.OperationSucceeded, done.State)
	hist, _, err := fl.History(ctx, dep.ID, 0, "")
	require.NoError(t, err)
	var states []lifecycle.State
	for _, h := range hist {
		states = append(states, h.To)
	}
	require.Contains(t, states, lifecycle.StateDraining, "the drain was reported")

	_, err = fl.RemoveDeployment(ctx, dep.ID, fleet.Precondition{})
	require.NoError(t, err)
	sync()
	got, err = fl.Deployment(ctx, dep.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StateRemoved, got.State)
}

// TestSimulatedFailureReachesTheDeployment: a device that fails to apply a
// revision says why in its report, and the deployment's stateReason shows
// it; Run announces the device once registered.
func TestSimulatedFailureReachesTheDeployment(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	fl := fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log)
	acc := access.NewService(postgres.NewAccessStore(pool), time.Now)
	h, err := httpapi.NewHandler(httpapi.Config{Logger: log, Ready: func(context.Context) error { return nil }, Registry: prometheus.NewRegistry(),
		Catalog: cat, Fleet: fl, Access: acc, DeviceIdentity: identity.HeaderIdentity{}.ClientIDFromRequest})
	require.NoError(t, err)
	_, device := httpapi.Split(h)
	srv := httptest.NewServer(device)
	t.Cleanup(srv.Close)
	_, _, err = cat.Add(ctx, describe("1.0.0", ""), catalog.MediaYAML)
	require.NoError(t, err)

	registered := make(chan string, 1)
	cfg := &devicesim.Config{BaseURL: srv.URL, HTTP: http.DefaultClient, ClientID: "plant", Poll: time.Hour, Log: log, FailRate: 1,
		Registered: func(id string) { registered <- id }}
	d := devicesim.NewDevice(cfg, "edge-1")
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- d.Run(runCtx) }()
	select {
	case id := <-registered:
		require.Equal(t, "edge-1", id)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not announce the registration within 10s")
	}
	stop()
	require.NoError(t, <-ran)

	dep, err := fl.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "sim", Version: "1.0.0", ClientID: "plant", DeviceID: "edge-1"})
	require.NoError(t, err)
	_, err = d.Sync(ctx)
	require.NoError(t, err)
	got, err := fl.Deployment(ctx, dep.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StateFailed, got.State)
	require.Equal(t, "the device reported failure: simulated failure applying revision 1 (SIMULATED, wfm-devicesim)", got.StateReason)
}
