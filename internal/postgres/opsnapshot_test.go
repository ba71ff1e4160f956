package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// TestOperationIsReadInOneSnapshot: an operation and its steps are read as
// of one instant, alone, in a list or by ids. A scheduler settles an
// install (its step installed and the operation succeeded, one
// transaction) just after the operation's row was read; the read shows the
// operation as it was before, running with its step published, never
// running with its step installed (that torn view made an upgrade right
// after the install's report answer 409).
func TestOperationIsReadInOneSnapshot(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t)
	seedClient(t, pool, "c", 3)
	readers := []struct {
		name string
		read func(s *postgres.FleetStore, deployment, op string) (fleet.Operation, error)
	}{
		{"Operation", func(s *postgres.FleetStore, _, op string) (fleet.Operation, error) { return s.Operation(ctx, op) }},
		{"Operations", func(s *postgres.FleetStore, deployment, _ string) (fleet.Operation, error) {
			ops, err := s.Operations(ctx, fleet.OperationFilter{DeploymentID: deployment}, "", 10)
			if err != nil || len(ops) != 1 {
				return fleet.Operation{}, fmt.Errorf("%d operations, %v", len(ops), err)
			}
			return ops[0], nil
		}},
		{"OperationsByID", func(s *postgres.FleetStore, _, op string) (fleet.Operation, error) {
			ops, err := s.OperationsByID(ctx, []string{op})
			return ops[op], err
		}},
	}
	for i, r := range readers {
		t.Run(r.name, func(t *testing.T) {
			deployment := fmt.Sprintf("%08x-0000-4000-8000-000000000000", i+1)
			op := fmt.Sprintf("%08x-0000-4000-8000-00000000000a", i+1)
			_, err := pool.Exec(ctx, `
INSERT INTO operations (id, deployment_id, type, state, from_version, to_version, parameters, profile_id, strategy, on_failure,
    step_timeout, requested_by, base_revision, deadline, created_at, updated_at)
VALUES ($1, $2, 'install', 'running', '1.0.0', '1.0.0', '{}', 'p', 'recreate', 'halt', '1 hour', 'test', 0, now() + interval '1 hour', now(), now())`,
				op, deployment)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, `INSERT INTO operation_steps (operation_id, n, version, state, revision, published_at) VALUES ($1, 1, '1.0.0', 'published', 1, now())`, op)
			require.NoError(t, err)

			settled := false
			traced := tracedPool(t, pool, func(sql string) {
				if settled || !strings.Contains(sql, "FROM operations WHERE") {
					return
				}
				settled = true
				require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `UPDATE operation_steps SET state = 'installed', finished_at = now() WHERE operation_id = $1`, op); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, `UPDATE operations SET state = 'succeeded', finished_at = now(), updated_at = now() WHERE id = $1`, op)
					return err
				}))
			})
			got, err := r.read(postgres.NewFleetStore(traced, 10), deployment, op)
			require.NoError(t, err)
			require.True(t, settled, "the settlement ran after the operation's row was read")
			require.Len(t, got.Steps, 1)
			assert.Equal(t, lifecycle.OperationRunning, got.State)
			assert.Equal(t, lifecycle.StepPublished, got.Steps[0].State, "the steps as of the operation's row")

			after, err := r.read(postgres.NewFleetStore(pool, 10), deployment, op)
			require.NoError(t, err)
			assert.Equal(t, lifecycle.OperationSucceeded, after.State)
			assert.Equal(t, lifecycle.StepInstalled, after.Steps[0].State)
		})
	}
}
