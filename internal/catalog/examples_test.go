package catalog_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestExamplesPublish publishes the sample application of examples/ (the
// README's tour) through the catalog as POST /mgmt/v1/applications does, so
// the examples cannot rot, and checks that each version says what the tour
// relies on: 2.0.0 is reached from 1.0.0 only through 1.5.0, 1.5.0 drains
// and may be rolled back, 2.0.0 may not (with a reason), siteId is
// immutable.
func TestExamplesPublish(t *testing.T) {
	ctx := t.Context()
	cat := catalog.NewService(postgres.NewCatalogStore(pgtest.New(t)), time.Now)
	files, err := filepath.Glob("../../examples/acme-counter/acme-counter-*.yaml")
	require.NoError(t, err)
	require.Len(t, files, 3)
	vs := map[string]catalog.Version{}
	var entries []lifecycle.CatalogEntry
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		v, created, err := cat.Add(ctx, raw, catalog.MediaYAML)
		require.NoError(t, err, f)
		require.True(t, created, f)
		require.Equal(t, "acme-counter", v.ApplicationID, f)
		require.Equal(t, "acme-counter-"+v.Version.String()+".yaml", filepath.Base(f), "file name and metadata.version differ")
		d, err := cat.Description(v)
		require.NoError(t, err)
		require.True(t, d.Immutable("siteId"), "%s: siteId must be immutable", f)
		require.False(t, d.Immutable("interval"), "%s: interval must be reconfigurable", f)
		vs[v.Version.String()] = v
		entries = append(entries, lifecycle.CatalogEntry{Version: v.Version, Upgrade: d.Lifecycle.Upgrade})
	}
	rules := func(version string) lifecycle.Lifecycle {
		d, err := cat.Description(vs[version])
		require.NoError(t, err)
		return d.Lifecycle
	}

	l15 := rules("1.5.0")
	require.NotNil(t, l15.Upgrade.Drain, "1.5.0 drains")
	require.True(t, l15.Upgrade.Drain.Required, "1.5.0 drains")
	require.True(t, l15.Rollback.Allowed, "rollback from 1.5.0 is allowed")

	l20 := rules("2.0.0")
	require.NotNil(t, l20.Upgrade.MinUpgradeFrom)
	require.Equal(t, "1.5.0", l20.Upgrade.MinUpgradeFrom.String())
	require.False(t, l20.Rollback.Allowed, "rollback from 2.0.0 is refused")
	require.NotEmpty(t, l20.Rollback.Reason, "2.0.0 says why it cannot be rolled back")

	_, err = lifecycle.PlanUpgrade(vs["1.0.0"].Version, vs["2.0.0"].Version, entries, lifecycle.PathDirect)
	require.Error(t, err, "the direct upgrade 1.0.0 -> 2.0.0 is refused")
	plan, err := lifecycle.PlanUpgrade(vs["1.0.0"].Version, vs["2.0.0"].Version, entries, lifecycle.PathAuto)
	require.NoError(t, err)
	var hops []string
	for _, h := range plan.Hops {
		hops = append(hops, h.String())
	}
	require.Equal(t, []string{"1.5.0", "2.0.0"}, hops, "path: auto goes through 1.5.0")
}
