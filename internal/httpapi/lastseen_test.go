package httpapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/sdk"
)

// TestDeviceLastSeenAt: the device list and get show lastSeenAt once the
// contacts of the device API are written: absent before, then the instant
// of the client's last request (a gateway's request marks all its
// devices; a status report is a contact too), and unchanged for a client
// that made none.
func TestDeviceLastSeenAt(t *testing.T) {
	ctx := t.Context()
	e := newFleetEnv(t, fleet.Policy{AcceptAll: true})
	var clock atomic.Int64
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock.Store(t0.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	ls := fleet.NewLastSeen(postgres.NewFleetStore(e.pool, 0), time.Minute, now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.fleet.RecordLastSeen(ls)
	require.Equal(t, http.StatusCreated, postYAML(t, e.mgmt, minimal("hello", "1.0.0", "")).StatusCode())

	gw, solo := e.client(t, "gw"), e.client(t, "solo")
	for _, d := range []string{"a", "b"} {
		res, body := gw.do("PUT", "/api/v1/capabilities/"+d, capabilities(d, "compose"))
		require.Equal(t, http.StatusCreated, res.StatusCode, string(body))
	}
	res, body := solo.do("PUT", "/api/v1/capabilities/s", capabilities("s", "compose"))
	require.Equal(t, http.StatusCreated, res.StatusCode, string(body))

	seen := func() map[string]*time.Time {
		t.Helper()
		res, err := e.mgmt.ListDevicesWithResponse(ctx, &sdk.ListDevicesParams{})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		out := map[string]*time.Time{}
		for _, d := range res.JSON200.Items {
			out[d.ClientId+"/"+d.Id] = d.LastSeenAt
		}
		return out
	}
	at := func(t time.Time) *time.Time { return &t }
	require.Equal(t, map[string]*time.Time{"gw/a": nil, "gw/b": nil, "solo/s": nil}, seen(), "before any write")
	_, err := ls.Flush(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]*time.Time{"gw/a": at(t0), "gw/b": at(t0), "solo/s": at(t0)}, seen(), "after the first write")

	// gw polls, then reports later; solo makes no request.
	clock.Add(int64(20 * time.Second))
	gw.manifest()
	e.deploy(t, "gw", "a", "hello", "1.0.0")
	m, _ := gw.manifest()
	clock.Add(int64(30 * time.Second))
	gw.report(m.Deployments[0].DeploymentID, m.ManifestVersion, "installing", "app")
	clock.Add(int64(10 * time.Second))
	_, err = ls.Flush(ctx)
	require.NoError(t, err)
	t1 := t0.Add(50 * time.Second)
	require.Equal(t, map[string]*time.Time{"gw/a": at(t1), "gw/b": at(t1), "solo/s": at(t0)}, seen(), "after gw's report")

	res2, err := e.mgmt.GetDeviceWithResponse(ctx, "gw", "b")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res2.StatusCode(), string(res2.Body))
	require.NotNil(t, res2.JSON200.LastSeenAt)
	require.Equal(t, t1, res2.JSON200.LastSeenAt.UTC(), "device get")
}

// BenchmarkDevicePoll304LastSeen is BenchmarkDevicePoll304 with the poll
// noted as a contact (fleet.LastSeen), as the server runs it: the
// difference between the two is what recording lastSeenAt costs a poll.
func BenchmarkDevicePoll304LastSeen(b *testing.B) { benchPoll304(b, true) }
