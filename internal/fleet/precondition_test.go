package fleet_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestPreconditionOnGeneration: a change that expects a generation the
// deployment does not have is refused with EPRECONDITION and changes
// nothing; one that expects the current generation goes ahead; a dry run
// does not check it.
func TestPreconditionOnGeneration(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.New(t)
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	for _, v := range []string{"1.0.0", "2.0.0"} {
		_, _, err := cat.Add(ctx, []byte(strings.ReplaceAll(description, "1.0.0", v)), catalog.MediaYAML)
		require.NoError(t, err)
	}
	s := fleet.NewService(postgres.NewFleetStore(pool, 5), cat, fleet.Policy{AcceptAll: true}, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	_, err := s.PutCapabilities(ctx, "c", "d", caps("d"))
	require.NoError(t, err)
	d, err := s.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "c", DeviceID: "d"})
	require.NoError(t, err)
	_, err = s.ReportStatus(ctx, "c", d.ID, report(d.ID, d.DesiredSince, "installed"))
	require.NoError(t, err)
	d, err = s.Deployment(ctx, d.ID)
	require.NoError(t, err)
	g := d.Generation
	upgrade := fleet.UpgradeRequest{TargetVersion: "2.0.0"}

	for name, expect := range map[string]fleet.Precondition{
		"an older generation": fleet.ExpectGeneration(g - 1),
		"a newer generation":  fleet.ExpectGeneration(g+1, g+2),
		"no generation":       fleet.ExpectGeneration(),
	} {
		_, _, err := s.Upgrade(ctx, d.ID, upgrade, fleet.Actor{ID: "t"}, false, expect)
		require.Equal(t, lifecycle.EPRECONDITION, lifecycle.ErrorCode(err), "Upgrade expecting %s: %v", name, err)
		_, err = s.RemoveDeployment(ctx, d.ID, expect)
		require.Equal(t, lifecycle.EPRECONDITION, lifecycle.ErrorCode(err), "RemoveDeployment expecting %s: %v", name, err)
		_, _, err = s.Upgrade(ctx, d.ID, upgrade, fleet.Actor{ID: "t"}, true, expect)
		require.NoError(t, err, "a dry run expecting %s", name)
	}
	after, err := s.Deployment(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, g, after.Generation, "refused changes change nothing")
	require.False(t, after.Removing)

	_, op, err := s.Upgrade(ctx, d.ID, upgrade, fleet.Actor{ID: "t"}, false, fleet.ExpectGeneration(g-1, g))
	require.NoError(t, err, "one of the expected generations is the deployment's")
	require.NotEmpty(t, op.ID)
	after, err = s.Deployment(ctx, d.ID)
	require.NoError(t, err)
	_, err = s.RemoveDeployment(ctx, d.ID, fleet.ExpectGeneration(after.Generation))
	require.NoError(t, err)
	after, err = s.Deployment(ctx, d.ID)
	require.NoError(t, err)
	require.True(t, after.Removing)
}

// TestPreconditionRace: of concurrent removals that expect the same
// generation, the store lets exactly one through (it checks the
// precondition on the locked row) and refuses the others.
func TestPreconditionRace(t *testing.T) {
	ctx := t.Context()
	s, d := setup(t)
	const n = 4
	errs := make(chan error, n)
	for range n {
		go func() { _, err := s.RemoveDeployment(ctx, d.ID, fleet.ExpectGeneration(d.Generation)); errs <- err }()
	}
	var ok, refused int
	for range n {
		switch err := <-errs; lifecycle.ErrorCode(err) {
		case "":
			ok++
		case lifecycle.EPRECONDITION:
			refused++
		default:
			t.Fatalf("RemoveDeployment = %v, want success or EPRECONDITION", err)
		}
	}
	require.Equal(t, 1, ok, "one removal goes ahead")
	require.Equal(t, n-1, refused)
}
