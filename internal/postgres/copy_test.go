package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/pgtest"
	"github.com/wfm-dev/wfm/internal/postgres"
)

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// TestCreationsCopyRows: creations whose rows are written with COPY (every
// table, documents and manifest entries included, whatever the count) and
// with the pipeline's statements give the same rows: two clients of the same devices, created at the same time,
// one by each path, differ only in their ids.
func TestCreationsCopyRows(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t)
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return at }
	cat := catalog.NewService(postgres.NewCatalogStore(pool), now)
	_, _, err := cat.Add(ctx, []byte(pubDescription), catalog.MediaYAML)
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	services := map[string]*fleet.Service{
		"statements": fleet.NewService(postgres.NewFleetStore(pool, 0), cat, fleet.Policy{AcceptAll: true}, now, log),
		"copy":       fleet.NewService(postgres.CopyAllRows(postgres.NewFleetStore(pool, 0)), cat, fleet.Policy{AcceptAll: true}, now, log),
	}
	for client, s := range services {
		var reqs []fleet.CreateRequest
		for i := range 3 {
			d := fmt.Sprint("d", i)
			caps, _ := json.Marshal(map[string]any{"properties": map[string]any{"id": d, "vendor": "v", "modelNumber": "m", "serialNumber": "s",
				"cpus": []any{map[string]any{"cores": 2, "architecture": "amd64"}}, "memory": "1Gi", "storage": "1Gi",
				"supportedRuntimes": []string{"oci"}, "supportedDeploymentTypes": []string{"compose"}}})
			_, err := s.PutCapabilities(ctx, client, d, caps)
			require.NoError(t, err)
			reqs = append(reqs, fleet.CreateRequest{ApplicationID: "app", Version: "1.0.0", ClientID: client, DeviceID: d,
				Parameters: map[string]any{}})
		}
		rs, err := s.CreateDeployments(ctx, reqs)
		require.NoError(t, err)
		for _, r := range rs {
			require.NoError(t, r.Err)
		}
	}
	// Each table's rows of a client, by device, without the columns that
	// hold ids (and the digest of a document that names its deployment);
	// ids in text (a history reason names its operation) replaced.
	queries := map[string]string{
		"deployments": `SELECT to_jsonb(d) - 'id' - 'client_id' FROM deployments d WHERE d.client_id = $1 ORDER BY d.device_id`,
		"operations": `SELECT to_jsonb(o) - 'id' - 'deployment_id' FROM operations o JOIN deployments d ON d.id = o.deployment_id
WHERE d.client_id = $1 ORDER BY d.device_id`,
		"operation_steps": `SELECT to_jsonb(s) - 'operation_id' FROM operation_steps s JOIN operations o ON o.id = s.operation_id
JOIN deployments d ON d.id = o.deployment_id WHERE d.client_id = $1 ORDER BY d.device_id, s.n`,
		"revisions": `SELECT to_jsonb(r) - 'deployment_id' - 'digest' - 'operation_id' FROM revisions r JOIN deployments d ON d.id = r.deployment_id
WHERE d.client_id = $1 ORDER BY d.device_id, r.n`,
		"deployment_history": `SELECT to_jsonb(h) - 'id' - 'deployment_id' FROM deployment_history h JOIN deployments d ON d.id = h.deployment_id
WHERE d.client_id = $1 ORDER BY d.device_id, h.id`,
		// A document's YAML and piece name its deployment: the YAML is
		// compared as text (its name, derived from the id, replaced), the
		// piece by its CRC's presence and its size.
		"documents": `SELECT jsonb_build_object('yaml', regexp_replace(convert_from(doc.yaml, 'UTF8'), 'name: app-[0-9a-f]{8}', 'name: NAME'), 'piece', doc.piece IS NOT NULL AND octet_length(doc.piece) > 0,
    'piece_crc', doc.piece_crc IS NOT NULL, 'piece_size', doc.piece_size, 'created_at', doc.created_at, 'revisions', array_agg(r.n ORDER BY r.n))
FROM documents doc JOIN deployments d ON d.id = doc.deployment_id JOIN revisions r ON r.deployment_id = doc.deployment_id AND r.digest = doc.digest
WHERE d.client_id = $1 GROUP BY d.device_id, doc.deployment_id, doc.digest ORDER BY d.device_id`,
		// An entry's digest is compared as the revision it names.
		"manifest_entries": `SELECT to_jsonb(e) - 'client_id' - 'deployment_id' - 'digest' || jsonb_build_object('revision', r.n,
    'size_is_document', e.size_bytes = octet_length(doc.yaml))
FROM manifest_entries e JOIN deployments d ON d.id = e.deployment_id
LEFT JOIN revisions r ON r.deployment_id = e.deployment_id AND r.digest = e.digest
LEFT JOIN documents doc ON doc.deployment_id = e.deployment_id AND doc.digest = e.digest
WHERE e.client_id = $1 ORDER BY d.device_id, e.from_version`,
	}
	for table, q := range queries {
		rows := map[string][]string{}
		for client := range services {
			r, err := pool.Query(ctx, q, client)
			require.NoError(t, err)
			for r.Next() {
				var js string
				require.NoError(t, r.Scan(&js))
				rows[client] = append(rows[client], uuidRE.ReplaceAllString(js, "ID"))
			}
			require.NoError(t, r.Err())
		}
		require.NotEmpty(t, rows["statements"], table)
		assert.Equal(t, rows["statements"], rows["copy"], "%s: rows written with COPY and with statements", table)
	}
}
