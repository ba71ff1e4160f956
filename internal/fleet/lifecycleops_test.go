package fleet_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// TestRequestedDurationsAreCheckedByTheService: the service, not only the
// HTTP layer, refuses a requested duration outside its range, an explicit
// "0s" included (it used to read as "the default"); an absent one is the
// default. Any caller of fleet.Service gets the same rule.
func TestRequestedDurationsAreCheckedByTheService(t *testing.T) {
	ctx := t.Context()
	s, d := setup(t)
	str := func(v string) *string { return &v }
	ops := map[string]func(ctx context.Context, timeout *string) error{
		"upgrade": func(ctx context.Context, timeout *string) error {
			_, _, err := s.Upgrade(ctx, d.ID, fleet.UpgradeRequest{TargetVersion: "1.0.0", Timeout: timeout}, fleet.Actor{ID: "t"}, true, fleet.Precondition{})
			return err
		},
		"reconfigure": func(ctx context.Context, timeout *string) error {
			_, _, err := s.Reconfigure(ctx, d.ID, fleet.ReconfigureRequest{Timeout: timeout}, fleet.Actor{ID: "t"}, true, fleet.Precondition{})
			return err
		},
		"rollback": func(ctx context.Context, timeout *string) error {
			_, _, err := s.Rollback(ctx, d.ID, fleet.RollbackRequest{Timeout: timeout}, fleet.Actor{ID: "t"}, true, fleet.Precondition{})
			return err
		},
	}
	for name, op := range ops {
		for _, v := range []string{"0s", "0", "-1m", "500ms", "169h", "10", "ten minutes", ""} {
			err := op(ctx, str(v))
			require.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "%s with timeout %q: %v", name, v, err)
			require.Equal(t, []string{"/timeout"}, pointers(err), "%s with timeout %q", name, v)
		}
		for _, v := range []*string{nil, str("1s"), str("10m"), str("168h")} {
			require.NoError(t, op(ctx, v), "%s with timeout %v is accepted (a dry run)", name, v)
		}
	}

	upgrade := func(req fleet.UpgradeRequest) error {
		req.TargetVersion = "1.0.0"
		_, _, err := s.Upgrade(ctx, d.ID, req, fleet.Actor{ID: "t"}, true, fleet.Precondition{})
		return err
	}
	err := upgrade(fleet.UpgradeRequest{Drain: &fleet.DrainOverride{Required: true, Timeout: str("0s")}})
	require.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "%v", err)
	require.Equal(t, []string{"/drain/timeout"}, pointers(err))
	err = upgrade(fleet.UpgradeRequest{Timeout: str("0s"), Drain: &fleet.DrainOverride{Required: true, Timeout: str("0s")}})
	require.Equal(t, []string{"/timeout", "/drain/timeout"}, pointers(err), "both are named at once")
	require.NoError(t, upgrade(fleet.UpgradeRequest{Drain: &fleet.DrainOverride{Required: true}}), "an absent drain timeout is the default")

	after, err := s.Deployment(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, d.Revision, after.Revision, "nothing was started")
}

// pointers lists the members an EINVALID error names.
func pointers(err error) []string {
	var out []string
	if e := (*lifecycle.Error)(nil); errors.As(err, &e) {
		for _, f := range e.Fields {
			out = append(out, f.Pointer)
		}
	}
	return out
}
