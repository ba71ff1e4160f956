package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestMarkClientsSeen writes clients' contacts to their devices: every
// registered device of a named client moves forward, never backwards; an
// unregistered device and the devices of other clients stay as they are;
// LastSeen reads the values back, leaving out devices never seen and
// devices that do not exist.
func TestMarkClientsSeen(t *testing.T) {
	ctx := t.Context()
	store := postgres.NewFleetStore(pgtest.New(t), 100)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []string{"gw", "other"} {
		_, _, err := store.AcceptClient(ctx, c, t0)
		require.NoError(t, err)
	}
	for _, k := range [][2]string{{"gw", "a"}, {"gw", "b"}, {"gw", "gone"}, {"other", "x"}} {
		_, err := store.PutDevice(ctx, k[0], k[1], []byte(`{}`), nil, t0)
		require.NoError(t, err)
	}
	require.NoError(t, store.UnregisterDevice(ctx, "gw", "gone", t0))
	keys := [][2]string{{"gw", "a"}, {"gw", "b"}, {"gw", "gone"}, {"other", "x"}, {"gw", "nosuch"}}
	read := func() map[[2]string]time.Time {
		t.Helper()
		m, err := store.LastSeen(ctx, keys)
		require.NoError(t, err)
		return m
	}
	require.Empty(t, read(), "before any contact")

	t1 := t0.Add(time.Minute)
	require.NoError(t, store.MarkClientsSeen(ctx, []fleet.ClientSeen{{ClientID: "gw", At: t1}, {ClientID: "nosuch-client", At: t1}}))
	require.Equal(t, map[[2]string]time.Time{{"gw", "a"}: t1, {"gw", "b"}: t1}, read(), "after gw's contact")

	// An older contact (another process's, written late) changes nothing.
	require.NoError(t, store.MarkClientsSeen(ctx, []fleet.ClientSeen{{ClientID: "gw", At: t0}, {ClientID: "other", At: t0}}))
	require.Equal(t, map[[2]string]time.Time{{"gw", "a"}: t1, {"gw", "b"}: t1, {"other", "x"}: t0}, read(), "after older contacts")

	t2 := t1.Add(time.Minute)
	require.NoError(t, store.MarkClientsSeen(ctx, []fleet.ClientSeen{{ClientID: "gw", At: t2}}))
	require.Equal(t, map[[2]string]time.Time{{"gw", "a"}: t2, {"gw", "b"}: t2, {"other", "x"}: t0}, read(), "after a newer contact")

	d, err := store.Device(ctx, "gw", "a")
	require.NoError(t, err)
	require.Equal(t, t2, d.LastSeenAt, "Device reads last_seen_at")
	require.True(t, t0.Equal(d.UpdatedAt), "a contact is not an update of the device: updatedAt %v", d.UpdatedAt)
	d, err = store.Device(ctx, "gw", "gone")
	require.NoError(t, err)
	require.True(t, d.LastSeenAt.IsZero(), "an unregistered device is not seen: %v", d.LastSeenAt)
}
