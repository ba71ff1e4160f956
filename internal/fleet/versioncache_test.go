package fleet_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestRememberedVersionIsRechecked: a creation reads its catalog version
// once; afterwards the service remembers it, and what another server
// process does to the version meanwhile (yank, unyank, delete, delete and
// add again with other content) is still what a creation sees: the store
// re-checks the version in the creation's transaction.
func TestRememberedVersionIsRechecked(t *testing.T) {
	ctx := t.Context()
	s, pool := newServiceAndPool(t)
	other := catalog.NewService(postgres.NewCatalogStore(pool), time.Now) // another server process's catalog
	for _, d := range []string{"v1", "v2", "v3", "v4", "v5"} {
		_, err := s.PutCapabilities(ctx, "vc", d, caps(d))
		require.NoError(t, err)
	}
	create := func(device string) (fleet.Deployment, error) {
		return s.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: "vc", DeviceID: device})
	}
	_, err := create("nosuch") // reads and remembers the version, makes nothing
	require.Equal(t, lifecycle.ENOTFOUND, lifecycle.ErrorCode(err))

	_, err = other.Yank(ctx, "app", "1.0.0", "bad")
	require.NoError(t, err)
	_, err = create("v1")
	assert.Equal(t, "version-yanked", lifecycle.ErrorType(err), "yanked after it was remembered")
	assert.ErrorContains(t, err, "(bad)", "the answer of a fresh read: with the yank's reason")
	_, err = other.Unyank(ctx, "app", "1.0.0")
	require.NoError(t, err)
	_, err = create("v1")
	require.NoError(t, err, "unyanked")

	// Delete needs a version no deployment uses: a second one.
	second := strings.ReplaceAll(description, `"1.0.0"`, `"2.0.0"`)
	_, _, err = other.Add(ctx, []byte(second), catalog.MediaYAML)
	require.NoError(t, err)
	create2 := func(device string) ([]fleet.CreateResult, error) {
		return s.CreateDeployments(ctx, []fleet.CreateRequest{{ApplicationID: "app", Version: "2.0.0", ClientID: "vc", DeviceID: device}})
	}
	_, err = s.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "2.0.0", ClientID: "vc", DeviceID: "nosuch"})
	require.Equal(t, lifecycle.ENOTFOUND, lifecycle.ErrorCode(err))
	require.NoError(t, other.Delete(ctx, "app", "2.0.0"))
	rs, err := create2("v2")
	require.NoError(t, err)
	assert.Equal(t, lifecycle.ENOTFOUND, lifecycle.ErrorCode(rs[0].Err), "deleted after it was remembered: %v", rs[0].Err)

	// Added again with other content: a batch answers the item as
	// retryable and forgets the version; the next creation renders the new
	// content. A single creation retries by itself.
	changed := strings.ReplaceAll(second, "oci://example.com/web", "oci://example.com/changed")
	_, _, err = other.Add(ctx, []byte(changed), catalog.MediaYAML)
	require.NoError(t, err)
	rs, err = create2("v3")
	require.NoError(t, err)
	assert.Equal(t, fleet.ProblemVersionChanged, lifecycle.ErrorType(rs[0].Err), "rendered from replaced content: %v", rs[0].Err)
	assert.Equal(t, lifecycle.EUNAVAILABLE, lifecycle.ErrorCode(rs[0].Err))
	rs, err = create2("v3")
	require.NoError(t, err)
	require.NoError(t, rs[0].Err)
	docYAML := func(id string) string {
		var y string
		require.NoError(t, pool.QueryRow(ctx, `SELECT convert_from(yaml, 'UTF8') FROM documents WHERE deployment_id = $1`, id).Scan(&y))
		return y
	}
	assert.Contains(t, docYAML(rs[0].Deployment.ID), "oci://example.com/changed")

	// A single creation retries by itself (a third version: the second is
	// in use now).
	third := strings.ReplaceAll(description, `"1.0.0"`, `"3.0.0"`)
	_, _, err = other.Add(ctx, []byte(third), catalog.MediaYAML)
	require.NoError(t, err)
	_, err = s.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "3.0.0", ClientID: "vc", DeviceID: "nosuch"})
	require.Equal(t, lifecycle.ENOTFOUND, lifecycle.ErrorCode(err))
	require.NoError(t, other.Delete(ctx, "app", "3.0.0"))
	_, _, err = other.Add(ctx, []byte(strings.ReplaceAll(third, "oci://example.com/web", "oci://example.com/changed")), catalog.MediaYAML)
	require.NoError(t, err)
	d, err := s.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: "app", Version: "3.0.0", ClientID: "vc", DeviceID: "v4"})
	require.NoError(t, err)
	assert.Contains(t, docYAML(d.ID), "oci://example.com/changed")
}
