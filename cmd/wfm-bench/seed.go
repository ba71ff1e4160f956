package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/margo"
	"github.com/wfm-dev/wfm/internal/postgres"
)

// replica is the harness acting as a second wfm replica on the database of
// the server under test: the server's own fleet service code (this tree's),
// on the same database, as a second server process of a deployment with
// several replicas would run it. It seeds the bulk of the design §11
// scenario in a fraction of the time the public API takes on two cores,
// so that the scenario is complete within the run's budget; what is
// measured is still the server under test (its memory, its plan, its
// rollout start), which sees these changes as another replica's.
//
// What it writes:
//   - clients and their devices with COPY: the rows a device's first
//     capabilities PUT writes (the accepted client with its manifest
//     version 1, the registered device with its capabilities as the parser
//     stores them), without the client.accepted and device.registered
//     events;
//   - deployments through fleet.Service.CreateDeployments, the batch path
//     rollout waves use (one transaction and one manifest version per
//     client per batch), without the audit entries an HTTP creation adds;
//   - the agents' "installed" reports through fleet.Service.ReportStatus,
//     as the device API would.
//
// The seeding code is the harness's tree: measuring another build (-wfm)
// needs that build's schema to be this tree's.
type replica struct {
	pool *pgxpool.Pool
	svc  *fleet.Service
}

// newReplica opens the server's private database (s started at log level
// info, so that its socket is known).
func newReplica(ctx context.Context, s *server) (*replica, error) {
	if s.pgSocket == "" {
		return nil, fmt.Errorf("the server's database is unknown (start it at log level info)")
	}
	url := fmt.Sprintf("postgres://postgres@/wfm?host=%s&port=%s&pool_max_conns=8", s.pgSocket, s.pgPort)
	pool, err := postgres.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.NewService(postgres.NewCatalogStore(pool), time.Now)
	svc := fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, time.Now, log)
	return &replica{pool: pool, svc: svc}, nil
}

func (r *replica) close() {
	r.svc.Close()
	r.pool.Close()
}

// benchCapabilities is the capabilities document the harness's devices
// report (the same as api.register sends).
func benchCapabilities(deviceID string) []byte {
	return fmt.Appendf(nil, `{"properties":{"id":%q,"vendor":"wfm-bench","modelNumber":"b1","serialNumber":"S-%s","cpus":[{"cores":4,"architecture":"amd64"}],"memory":"8Gi","storage":"64Gi","supportedRuntimes":["oci"],"supportedDeploymentTypes":["helm","compose"]}}`, deviceID, deviceID)
}

// registerCopy writes the clients and their devices (pairs of client and
// device ids, one device per client) with COPY, in one transaction.
func (r *replica) registerCopy(ctx context.Context, pairs [][2]string) error {
	now := time.Now().UTC()
	clients := make([][]any, 0, len(pairs))
	versions := make([][]any, 0, len(pairs))
	devices := make([][]any, 0, len(pairs))
	seen := map[string]bool{}
	for _, p := range pairs {
		caps, err := margo.ParseCapabilities(benchCapabilities(p[1]), p[1])
		if err != nil {
			return fmt.Errorf("capabilities of %s: %w", p[1], err)
		}
		labels := caps.Labels
		if labels == nil {
			labels = map[string]any{}
		}
		lj, _ := json.Marshal(labels)
		if !seen[p[0]] {
			seen[p[0]] = true
			clients = append(clients, []any{p[0], "accepted", int64(1), now, now})
			versions = append(versions, []any{p[0], int64(1), now})
		}
		devices = append(devices, []any{p[0], p[1], true, string(caps.JSON), string(lj), "{}", string(lj), now, now})
	}
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		for _, c := range []struct {
			table string
			cols  []string
			rows  [][]any
		}{
			{"clients", []string{"id", "status", "manifest_version", "created_at", "updated_at"}, clients},
			{"manifest_versions", []string{"client_id", "version", "published_at"}, versions},
			{"devices", []string{"client_id", "id", "registered", "capabilities", "reported_labels", "operator_labels", "labels", "created_at", "updated_at"}, devices},
		} {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{c.table}, c.cols, pgx.CopyFromRows(c.rows)); err != nil {
				return fmt.Errorf("copy %s: %w", c.table, err)
			}
		}
		return nil
	})
}

// createBatches creates one deployment of the benchmark application per
// pair through fleet.Service.CreateDeployments, batch pairs at a time,
// on workers goroutines, until limit; it returns which were created.
func (r *replica) createBatches(ctx context.Context, pairs [][2]string, batch, workers int, limit time.Duration) ([]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	created := make([]bool, len(pairs))
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				lo := int(next.Add(int64(batch))) - batch
				if lo >= len(pairs) {
					return
				}
				hi := min(lo+batch, len(pairs))
				reqs := make([]fleet.CreateRequest, 0, hi-lo)
				for _, p := range pairs[lo:hi] {
					reqs = append(reqs, fleet.CreateRequest{ApplicationID: appID, Version: appVersion, ClientID: p[0], DeviceID: p[1]})
				}
				res, err := r.svc.CreateDeployments(ctx, reqs)
				if err == nil {
					for j, x := range res {
						if x.Err != nil && err == nil {
							err = x.Err
						}
						created[lo+j] = x.Err == nil
					}
				}
				if err != nil {
					mu.Lock()
					if first == nil && ctx.Err() == nil {
						first = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	return created, first
}

// reportInstalled reports each deployment installed at its client's
// manifest version through fleet.Service.ReportStatus, on workers
// goroutines, until limit; it returns how many were accepted.
func (r *replica) reportInstalled(ctx context.Context, reports []installedReport, workers int, limit time.Duration) (int, error) {
	p, err := runPhase(ctx, len(reports), workers, limit, func(ctx context.Context, k int) error {
		x := reports[k]
		body := fmt.Appendf(nil, `{"deploymentId":%q,"adoptedManifestVersion":%d,"status":{"state":"installed"},"components":[{"name":"hello-world","state":"installed"}]}`, x.id, x.version)
		_, err := r.svc.ReportStatus(ctx, x.client, x.id, body)
		return err
	})
	return p.done, err
}

// installedReport is one deployment an agent reports installed.
type installedReport struct {
	client, id string
	version    uint64
}
