package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const description = `apiVersion: v1
id: app
metadata:
  name: App
  version: "1.0.0"
deploymentProfiles:
  - type: compose
    id: app-compose
    components:
      - name: web
        properties:
          repository: oci://example.com/web
          revision: "1.0.0"
`

func newService(t *testing.T) *fleet.Service {
	t.Helper()
	s, _ := newServiceAndPool(t)
	return s
}

func newServiceAndPool(t testing.TB) (*fleet.Service, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.New(t)
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	_, _, err := cat.Add(t.Context(), []byte(description), catalog.MediaYAML)
	require.NoError(t, err)
	return fleet.NewService(postgres.NewFleetStore(pool, 5), cat, fleet.Policy{AcceptAll: true}, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil))), pool
}

func caps(id string) []byte {
	b, _ := json.Marshal(map[string]any{"properties": map[string]any{"id": id, "vendor": "v", "modelNumber": "m", "serialNumber": "s",
		"cpus": []any{map[string]any{"cores": 2, "architecture": "amd64"}}, "memory": "1Gi", "storage": "1Gi",
		"supportedRuntimes": []string{"oci"}, "supportedDeploymentTypes": []string{"compose"}}})
	return b
}

func report(id string, adopted uint64, state string) []byte {
	b, _ := json.Marshal(map[string]any{"deploymentId": id, "adoptedManifestVersion": adopted, "status": map[string]any{"state": state},
		"components": []any{map[string]any{"name": "web", "state": state}}})
	return b
}

// rank orders states along one deployment's life; a deployment must never
// move to a lower rank. While it is being removed, failed means the removal
// failed: that comes after removing.
func rank(d fleet.Deployment) int {
	s := d.State
	if d.Removing && s == lifecycle.StateFailed {
		return 4
	}
	switch s {
	case lifecycle.StatePending:
		return 0
	case lifecycle.StateInstalling:
		return 1
	case lifecycle.StateInstalled, lifecycle.StateFailed:
		return 2
	case lifecycle.StateRemoving:
		return 3
	case lifecycle.StateRemoved:
		return 5
	}
	return -1
}

// TestReportsNeverMoveBackwards sends random interleavings of reports —
// duplicated, reordered, stale, some for the removal — and checks that the
// deployment never moves to an earlier state, that stale reports change
// nothing, and that the client's manifestVersion strictly increases with
// every publication.
func TestReportsNeverMoveBackwards(t *testing.T) {
	states := []string{"pending", "installing", "installed", "failed", "removing", "removed"}
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			ctx := context.Background()
			s := newService(t)
			r := rand.New(rand.NewPCG(seed, seed*7))
			_, err := s.PutCapabilities(ctx, "c", "d", caps("d"))
			require.NoError(t, err)
			m0, err := s.Manifest(ctx, "c")
			require.NoError(t, err)
			d, err := s.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: "d"})
			require.NoError(t, err)
			m1, err := s.Manifest(ctx, "c")
			require.NoError(t, err)
			require.Greater(t, m1.Version, m0.Version)

			var sent [][]byte
			removed := false
			lastRank, lastVersion := rank(d), m1.Version
			for step := range 40 {
				var body []byte
				switch k := r.IntN(10); {
				case k < 2 && len(sent) > 0: // duplicate or reorder an earlier report
					body = sent[r.IntN(len(sent))]
				case k == 2 && !removed && step > 10:
					_, err := s.RemoveDeployment(ctx, d.ID, fleet.Precondition{})
					require.NoError(t, err)
					removed = true
					m, err := s.Manifest(ctx, "c")
					require.NoError(t, err)
					require.Greater(t, m.Version, lastVersion, "manifestVersion strictly increases with each publication")
					lastVersion = m.Version
					continue
				default:
					cur, err := s.Deployment(ctx, d.ID)
					require.NoError(t, err)
					adopted := cur.DesiredSince
					if r.IntN(4) == 0 && adopted > 1 {
						adopted -= uint64(1 + r.IntN(int(adopted-1))) // stale or about an older revision
					}
					body = report(d.ID, adopted, states[r.IntN(len(states))])
				}
				sent = append(sent, body)
				before, err := s.Deployment(ctx, d.ID)
				require.NoError(t, err)
				_, err = s.ReportStatus(ctx, "c", d.ID, body)
				require.NoError(t, err)
				after, err := s.Deployment(ctx, d.ID)
				require.NoError(t, err)
				var rep struct {
					Adopted uint64 `json:"adoptedManifestVersion"`
				}
				require.NoError(t, json.Unmarshal(body, &rep))
				if rep.Adopted < before.NewestAdopted {
					require.Equal(t, before.State, after.State, "a stale report changed the state")
				}
				require.GreaterOrEqual(t, rank(after), lastRank, "state moved backwards: %s after %s (report %s)", after.State, before.State, body)
				require.True(t, after.State == before.State || lifecycle.CanTransition(before.State, after.State))
				lastRank = rank(after)
				m, err := s.Manifest(ctx, "c")
				require.NoError(t, err)
				require.Equal(t, lastVersion, m.Version, "a report never publishes")
			}
		})
	}
}

// TestReplicasInvalidateEachOther runs two service instances (two server
// processes) on one database, each with its own manifest cache and change
// listener: a publication through one must reach the other's next poll.
func TestReplicasInvalidateEachOther(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	_, _, err := cat.Add(ctx, []byte(description), catalog.MediaYAML)
	require.NoError(t, err)
	replica := func() (*fleet.Service, chan string) {
		s := fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log)
		notified := make(chan string, 16)
		ready := make(chan struct{}, 1)
		l := &postgres.Listener{Pool: pool, Channel: postgres.NotifyChannel, Log: log, Ready: ready,
			Notify: func(id string) { s.Invalidate(id); notified <- id },
			Lost:   s.ManifestCacheLost, Listening: func(ctx context.Context) error { _, _, err := s.ResyncManifestCache(ctx); return err }}
		done := make(chan struct{})
		go func() { defer close(done); _ = l.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		select {
		case <-ready:
		case <-time.After(10 * time.Second):
			t.Fatal("listener did not start")
		}
		return s, notified
	}
	a, notifiedA := replica()
	b, _ := replica()

	_, err = a.PutCapabilities(ctx, "c", "d", caps("d"))
	require.NoError(t, err)
	before, err := a.Manifest(ctx, "c") // now cached in a
	require.NoError(t, err)
	drain(notifiedA)

	_, err = b.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: "d"})
	require.NoError(t, err)
	select {
	case id := <-notifiedA:
		require.Equal(t, "c", id)
	case <-time.After(10 * time.Second):
		t.Fatal("replica a was not notified of b's publication")
	}
	after, err := a.Manifest(ctx, "c")
	require.NoError(t, err)
	require.Greater(t, after.Version, before.Version, "a serves b's publication")

	_, err = b.RetireClient(ctx, "c")
	require.NoError(t, err)
	select {
	case <-notifiedA:
	case <-time.After(10 * time.Second):
		t.Fatal("replica a was not notified of the retirement")
	}
	_, err = a.Manifest(ctx, "c")
	require.Equal(t, lifecycle.EFORBIDDEN, lifecycle.ErrorCode(err), "a refuses a client b retired")
}

func drain(c chan string) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// setup registers device d of client c and deploys app 1.0.0 to it.
func setup(t *testing.T) (*fleet.Service, fleet.Deployment) {
	t.Helper()
	s := newService(t)
	_, err := s.PutCapabilities(t.Context(), "c", "d", caps("d"))
	require.NoError(t, err)
	d, err := s.CreateDeployment(t.Context(), fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: "d"})
	require.NoError(t, err)
	return s, d
}

func TestRefusedReportsChangeNothing(t *testing.T) {
	ctx := t.Context()
	s, d := setup(t)
	for name, tc := range map[string]struct {
		body []byte
		typ  string
	}{
		"other device": {mustJSON(map[string]any{"deploymentId": d.ID, "deviceId": "elsewhere", "adoptedManifestVersion": 1 << 40,
			"status": map[string]any{"state": "failed"}, "components": []any{}}), "device-id-mismatch"},
		"never published": {report(d.ID, 1<<40, "failed"), "invalid-status"},
		"unknown component": {mustJSON(map[string]any{"deploymentId": d.ID, "adoptedManifestVersion": d.DesiredSince,
			"status": map[string]any{"state": "installed"}, "components": []any{map[string]any{"name": "db", "state": "installed"}}}), "component-mismatch"},
	} {
		t.Run(name, func(t *testing.T) {
			before, err := s.Deployment(ctx, d.ID)
			require.NoError(t, err)
			_, err = s.ReportStatus(ctx, "c", d.ID, tc.body)
			require.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "%v", err)
			require.Equal(t, tc.typ, lifecycle.ErrorType(err))
			after, err := s.Deployment(ctx, d.ID)
			require.NoError(t, err)
			require.Equal(t, before, after, "a refused report changed the deployment")
		})
	}
	// A real report still works afterwards.
	_, err := s.ReportStatus(ctx, "c", d.ID, report(d.ID, d.DesiredSince, "installed"))
	require.NoError(t, err)
	got, err := s.Deployment(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StateInstalled, got.State)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// TestConcurrentRemovalAndUnregistration runs the operator's delete and the
// device's unregistration of the same deployment at once: both must succeed
// (no deadlock) and the deployment ends removed.
func TestConcurrentRemovalAndUnregistration(t *testing.T) {
	for i := range 10 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			ctx := t.Context()
			s, d := setup(t)
			errs := make(chan error, 2)
			go func() { _, err := s.RemoveDeployment(ctx, d.ID, fleet.Precondition{}); errs <- err }()
			go func() { errs <- s.Unregister(ctx, "c", "d") }()
			require.NoError(t, <-errs)
			require.NoError(t, <-errs)
			got, err := s.Deployment(ctx, d.ID)
			require.NoError(t, err)
			require.True(t, got.Removing)
		})
	}
}

func TestConcurrentFirstRegistrationIsCreatedOnce(t *testing.T) {
	ctx := t.Context()
	s := newService(t)
	require.NoError(t, s.Authorize(ctx, "c"))
	created := make(chan bool, 4)
	for range 4 {
		go func() {
			ok, err := s.PutCapabilities(ctx, "c", "d", caps("d"))
			if err != nil {
				t.Error(err)
			}
			created <- ok
		}()
	}
	n := 0
	for range 4 {
		if <-created {
			n++
		}
	}
	require.Equal(t, 1, n, "exactly one first registration answers 201")
}

func TestUnregisterRemovesDeploymentsFromTheManifest(t *testing.T) {
	ctx := t.Context()
	s, d := setup(t)
	before, err := s.Manifest(ctx, "c")
	require.NoError(t, err)
	require.Contains(t, string(before.JSON), d.ID)

	require.NoError(t, s.Unregister(ctx, "c", "d"))
	after, err := s.Manifest(ctx, "c")
	require.NoError(t, err)
	require.Greater(t, after.Version, before.Version)
	require.NotContains(t, string(after.JSON), d.ID)
	got, err := s.Deployment(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StateRemoved, got.State)
	hist, _, err := s.History(ctx, d.ID, 0, "")
	require.NoError(t, err)
	last := hist[len(hist)-1]
	require.Equal(t, fleet.CauseDeviceUnregistered, last.Cause)
	require.Equal(t, lifecycle.StateRemoved, last.To)

	require.Equal(t, lifecycle.ENOTFOUND, lifecycle.ErrorCode(s.Unregister(ctx, "c", "d")), "unregistering twice: 404")
	dev, err := s.Device(ctx, "c", "d")
	require.NoError(t, err)
	require.False(t, dev.Registered)
	created, err := s.PutCapabilities(ctx, "c", "d", caps("d"))
	require.NoError(t, err)
	require.True(t, created, "reporting again registers the device again (201)")
}

func TestReportRetentionKeepsTheNewest(t *testing.T) {
	ctx := t.Context()
	s, pool := newServiceAndPool(t) // retention 5
	_, err := s.PutCapabilities(ctx, "c", "d", caps("d"))
	require.NoError(t, err)
	d, err := s.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: "d"})
	require.NoError(t, err)
	// Old reports are deleted in batches (every 16th report once more than
	// the retention are stored): the newest are always kept, and at most
	// retention+15 exist.
	var stored, maxStored int
	for i := range 80 {
		state := "installing"
		if i == 79 {
			state = "installed"
		}
		_, err := s.ReportStatus(ctx, "c", d.ID, report(d.ID, d.DesiredSince, state))
		require.NoError(t, err)
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM status_reports WHERE deployment_id = $1`, d.ID).Scan(&stored))
		maxStored = max(maxStored, stored)
		require.GreaterOrEqual(t, stored, min(i+1, 5), "the newest reports are kept")
	}
	require.LessOrEqual(t, maxStored, 5+15, "retention bounds the stored reports")
	latest, err := s.LatestReport(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, "installed", latest.State)
	got, err := s.Deployment(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, int64(80), got.Reports)
}

// TestDevicePollNeedsNoDatabase: once a client's manifest is cached, the
// poll is answered with the database gone.
func TestDevicePollNeedsNoDatabase(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	s := fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m1, err := s.Manifest(ctx, "c")
	require.NoError(t, err)
	pool.Close()
	m2, err := s.Manifest(ctx, "c")
	require.NoError(t, err, "served from memory")
	require.Equal(t, m1.ETag, m2.ETag)
	s.Invalidate("c")
	_, err = s.Manifest(ctx, "c")
	require.Error(t, err, "after invalidation it needs the database again (which is gone)")
}

// BenchmarkReportStatus: status ingestion in the service and store (parse,
// decide, one locking read, one pipelined batch) over 64 deployments, on the
// test database (fsync off: CPU and round trips, not disk).
func BenchmarkReportStatus(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.New(b)
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	_, _, err := cat.Add(ctx, []byte(description), catalog.MediaYAML)
	require.NoError(b, err)
	s := fleet.NewService(postgres.NewFleetStore(pool, 100), cat, fleet.Policy{AcceptAll: true}, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var bodies [][]byte
	var ids []string
	for i := range 64 {
		dev := fmt.Sprint("d", i)
		_, err := s.PutCapabilities(ctx, "c", dev, caps(dev))
		require.NoError(b, err)
		d, err := s.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: dev})
		require.NoError(b, err)
		ids = append(ids, d.ID)
	}
	m, err := s.Manifest(ctx, "c")
	require.NoError(b, err)
	for _, id := range ids {
		bodies = append(bodies, report(id, m.Version, "installed"))
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(n.Add(1)) % len(ids)
			if _, err := s.ReportStatus(ctx, "c", ids[i], bodies[i]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestReportsThroughTwoReplicas: reports of one deployment arrive at two
// server processes alternately and at once; each remembers what it last
// wrote, and the generation guard makes them re-read what the other changed:
// every report is counted once and the state is the device's.
func TestReportsThroughTwoReplicas(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	_, _, err := cat.Add(ctx, []byte(description), catalog.MediaYAML)
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log)
	b := fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log)
	_, err = a.PutCapabilities(ctx, "c", "d", caps("d"))
	require.NoError(t, err)
	d, err := a.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: "d"})
	require.NoError(t, err)
	errs := make(chan error, 40)
	for i := range 40 {
		s := a
		if i%2 == 1 {
			s = b
		}
		go func() {
			state := "installing"
			if i >= 20 {
				state = "installed"
			}
			_, err := s.ReportStatus(ctx, "c", d.ID, report(d.ID, d.DesiredSince, state))
			errs <- err
		}()
	}
	for range 40 {
		require.NoError(t, <-errs)
	}
	got, err := a.Deployment(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, int64(40), got.Reports, "every report counted once")
	_, err = b.ReportStatus(ctx, "c", d.ID, report(d.ID, d.DesiredSince, "installed"))
	require.NoError(t, err)
	got, err = a.Deployment(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StateInstalled, got.State)
	require.Equal(t, int64(41), got.Reports)
}

func TestLabelSelectorsInTheDatabase(t *testing.T) {
	ctx := t.Context()
	s := newService(t)
	for i, labels := range []map[string]any{{"site": "alfa", "cores": 4}, {"site": "bravo"}, {}} {
		id := fmt.Sprint("d", i)
		b, _ := json.Marshal(map[string]any{"properties": map[string]any{"id": id, "vendor": "v", "modelNumber": "m", "serialNumber": "s",
			"cpus": []any{map[string]any{"cores": 2, "architecture": "amd64"}}, "memory": "1Gi", "storage": "1Gi",
			"supportedRuntimes": []string{"oci"}, "supportedDeploymentTypes": []string{"compose"}}, "labels": labels})
		_, err := s.PutCapabilities(ctx, "c", id, b)
		require.NoError(t, err)
	}
	_, err := s.SetDeviceLabels(ctx, "c", "d2", map[string]string{"site": "charlie", "tier": "edge"})
	require.NoError(t, err)
	for sel, want := range map[string][]string{
		"":                  {"d0", "d1", "d2"},
		"site=alfa":         {"d0"},
		"site!=alfa":        {"d1", "d2"},
		"tier":              {"d2"},
		"!tier":             {"d0", "d1"},
		"cores=4":           {"d0"},
		"site,!tier":        {"d0", "d1"},
		"site=charlie,tier": {"d2"},
	} {
		ds, _, err := s.Devices(ctx, "c", sel, 0, "")
		require.NoError(t, err, sel)
		var got []string
		for _, d := range ds {
			got = append(got, d.ID)
		}
		require.Equal(t, want, got, "Devices(%q)", sel)
	}
	// Pages of one device each walk all three without repeats.
	var seen []string
	cursor := ""
	for range 5 {
		ds, next, err := s.Devices(ctx, "c", "", 1, cursor)
		require.NoError(t, err)
		for _, d := range ds {
			seen = append(seen, d.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, []string{"d0", "d1", "d2"}, seen)
}

// TestFailureMessageReachesStateReason: what an agent reports in Margo's
// error members of a failed report becomes part of the deployment's
// stateReason, on one line and bounded (lifecycle.MaxAgentMessage).
func TestFailureMessageReachesStateReason(t *testing.T) {
	long := strings.Repeat("x", 3000)
	cases := map[string]struct {
		status, component map[string]any
		want              string
	}{
		"no error":  {want: "the device reported failure"},
		"all empty": {status: map[string]any{"code": "", "source": "", "message": ""}, want: "the device reported failure"},
		"deployment and component": {
			status:    map[string]any{"code": "E42", "source": "runtime", "message": "disk full\non /var"},
			component: map[string]any{"message": "image pull failed"},
			want:      "the device reported failure: disk full on /var (E42, runtime); web: image pull failed"},
		"code only": {component: map[string]any{"code": "OOMKilled"}, want: "the device reported failure: web: OOMKilled"},
		"bounded": {status: map[string]any{"message": long},
			want: "the device reported failure: " + long[:lifecycle.MaxAgentMessage-1] + "…"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s := newService(t)
			_, err := s.PutCapabilities(ctx, "c", "d", caps("d"))
			require.NoError(t, err)
			d, err := s.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: "d"})
			require.NoError(t, err)
			status := map[string]any{"state": "failed"}
			if tc.status != nil {
				status["error"] = tc.status
			}
			comp := map[string]any{"name": "web", "state": "failed"}
			if tc.component != nil {
				comp["error"] = tc.component
			}
			body, err := json.Marshal(map[string]any{"deploymentId": d.ID, "adoptedManifestVersion": d.DesiredSince,
				"status": status, "components": []any{comp}})
			require.NoError(t, err)
			_, err = s.ReportStatus(ctx, "c", d.ID, body)
			require.NoError(t, err)
			got, err := s.Deployment(ctx, d.ID)
			require.NoError(t, err)
			require.Equal(t, lifecycle.StateFailed, got.State)
			require.Equal(t, tc.want, got.StateReason)
		})
	}
}
