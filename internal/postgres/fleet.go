package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/page"
)

// NotifyChannel is the LISTEN/NOTIFY channel on which every change of a
// client's manifest or status is announced (payload: the client id), so that
// every server process drops its cached copy.
const NotifyChannel = "wfm_client_changed"

// ReportRetention is how many status reports are kept per deployment.
const ReportRetention = 100

// FleetStore is the PostgreSQL implementation of fleet.Store.
type FleetStore struct {
	pool      *pgxpool.Pool
	retention int
	reports   reportCache
	// copyMin, when not 0, replaces copyRowsMin in creations (tests).
	copyMin int
	// creating holds a token per rollout creation writing (maxCreating),
	// resolving per candidate read (maxResolving).
	creating, resolving chan struct{}
}

var _ fleet.Store = (*FleetStore)(nil)

// NewFleetStore returns a fleet store over pool that keeps the newest
// retention status reports per deployment (ReportRetention when 0).
func NewFleetStore(pool *pgxpool.Pool, retention int) *FleetStore {
	if retention <= 0 {
		retention = ReportRetention
	}
	return &FleetStore{pool: pool, retention: retention, creating: make(chan struct{}, maxCreating),
		resolving: make(chan struct{}, maxResolving)}
}

func notFound(format string, args ...any) error {
	return &lifecycle.Error{Code: lifecycle.ENOTFOUND, Type: "not-found", Message: fmt.Sprintf(format, args...)}
}

// ---- clients and manifests ----

const (
	// sqlInsertClient inserts an accepted client whose first manifest
	// (version 1) has no deployments; it is rendered when read. Its
	// publication is stamped with the database's clock (see
	// sqlBumpManifests).
	sqlInsertClient = `
WITH c AS (INSERT INTO clients (id, status, manifest_version, created_at, updated_at) VALUES ($1, 'accepted', 1, $2, $2)
    ON CONFLICT (id) DO NOTHING RETURNING id)
INSERT INTO manifest_versions (client_id, version, published_at) SELECT id, 1, now() FROM c`
	sqlClientColumns = `c.id, c.status, c.manifest_version, c.created_at, c.updated_at, c.retired_at,
(SELECT count(*) FROM devices d WHERE d.client_id = c.id AND d.registered)`
	sqlClient      = `SELECT ` + sqlClientColumns + ` FROM clients c WHERE c.id = $1`
	sqlClients     = `SELECT ` + sqlClientColumns + ` FROM clients c WHERE c.id > $1 ORDER BY c.id LIMIT $2`
	sqlRetire      = `UPDATE clients SET status = 'retired', retired_at = $2, updated_at = $2 WHERE id = $1 AND status = 'accepted'`
	sqlAcceptAgain = `UPDATE clients SET status = 'accepted', retired_at = NULL, updated_at = $2 WHERE id = $1 AND status = 'retired'`
	sqlNotify      = `SELECT pg_notify('` + NotifyChannel + `', $1)`
	// sqlClientVersions reads the clients $1: a manifest cache's entries,
	// all in one statement. A join of the unnested ids rather than
	// id = ANY($1): for the latter the planner estimates the selectivity of
	// each element, which at 100,000 ids costs more than the query.
	sqlClientVersions = `SELECT c.id, c.status, c.manifest_version FROM unnest($1::text[]) AS u(id) JOIN clients c ON c.id = u.id`
)

// ClientManifest implements fleet.Store.
func (s *FleetStore) ClientManifest(ctx context.Context, clientID string, create bool, now time.Time) (fleet.Manifest, error) {
	m, err := s.readManifest(ctx, clientID)
	if err == nil || !create || lifecycle.ErrorCode(err) != lifecycle.ENOTFOUND {
		return m, err
	}
	// Accepted at its first contact (the server's policy let it in): the
	// client itself is the actor of its client.accepted.
	err = inTx(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sqlInsertClient, clientID, now)
		if err != nil || tag.RowsAffected() == 0 { // another request created it meanwhile
			return err
		}
		e, err := lifecycle.NewEvent(now, clientID, lifecycle.Ref{Kind: lifecycle.SubjectClient, ID: clientID}, lifecycle.ClientAcceptedBody{})
		if err != nil {
			return err
		}
		return AppendEvents(ctx, tx, []lifecycle.Event{e})
	})
	if err != nil {
		return fleet.Manifest{}, translate(err)
	}
	return s.readManifest(ctx, clientID)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// AcceptClient implements fleet.Store.
func (s *FleetStore) AcceptClient(ctx context.Context, clientID string, now time.Time) (fleet.Client, bool, error) {
	created := false
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sqlInsertClient, clientID, now)
		if err != nil {
			return err
		}
		created = tag.RowsAffected() == 1
		changed := created
		if !created {
			if tag, err = tx.Exec(ctx, sqlAcceptAgain, clientID, now); err != nil {
				return err
			}
			changed = tag.RowsAffected() == 1 // a retired client accepted again; an accepted one is left as it is
		}
		if _, err = tx.Exec(ctx, sqlNotify, clientID); err != nil || !changed {
			return err
		}
		if err := appendEvent(ctx, tx, now, lifecycle.Ref{Kind: lifecycle.SubjectClient, ID: clientID}, lifecycle.ClientAcceptedBody{}); err != nil {
			return err
		}
		return auditChange(ctx, tx, now, created)
	})
	if err != nil {
		return fleet.Client{}, false, translate(err)
	}
	c, err := s.Client(ctx, clientID)
	return c, created, err
}

// RetireClient implements fleet.Store.
func (s *FleetStore) RetireClient(ctx context.Context, clientID string, now time.Time) (fleet.Client, error) {
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sqlRetire, clientID, now)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlNotify, clientID); err != nil || tag.RowsAffected() == 0 { // none, or retired already: no change
			return err
		}
		if err := appendEvent(ctx, tx, now, lifecycle.Ref{Kind: lifecycle.SubjectClient, ID: clientID}, lifecycle.ClientRetiredBody{}); err != nil {
			return err
		}
		return auditChange(ctx, tx, now, false)
	})
	if err != nil {
		return fleet.Client{}, translate(err)
	}
	return s.Client(ctx, clientID)
}

func scanClient(r pgx.Row) (fleet.Client, error) {
	var c fleet.Client
	var status string
	var version int64
	var retired *time.Time
	if err := r.Scan(&c.ID, &status, &version, &c.CreatedAt, &c.UpdatedAt, &retired, &c.DeviceCount); err != nil {
		return c, err
	}
	c.Status, c.ManifestVersion = fleet.ClientStatus(status), uint64(version)
	if retired != nil {
		c.RetiredAt = *retired
	}
	return c, nil
}

// Client implements fleet.Store.
func (s *FleetStore) Client(ctx context.Context, clientID string) (fleet.Client, error) {
	c, err := scanClient(s.pool.QueryRow(ctx, sqlClient, clientID))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, notFound("There is no client %s.", clientID)
	}
	return c, translate(err)
}

// Clients implements fleet.Store.
func (s *FleetStore) Clients(ctx context.Context, after string, limit int) ([]fleet.Client, error) {
	rows, err := s.pool.Query(ctx, sqlClients, after, limit)
	if err != nil {
		return nil, translate(err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fleet.Client, error) { return scanClient(r) })
	return cs, translate(err)
}

// ClientVersions implements fleet.Store.
func (s *FleetStore) ClientVersions(ctx context.Context, clientIDs []string) (map[string]fleet.ClientVersion, error) {
	rows, err := s.pool.Query(ctx, sqlClientVersions, clientIDs)
	if err != nil {
		return nil, translate(err)
	}
	out := make(map[string]fleet.ClientVersion, len(clientIDs))
	var id, status string
	var version int64
	_, err = pgx.ForEachRow(rows, []any{&id, &status, &version}, func() error {
		out[id] = fleet.ClientVersion{Status: fleet.ClientStatus(status), ManifestVersion: uint64(version)}
		return nil
	})
	if err != nil {
		return nil, translate(err)
	}
	return out, nil
}

// ---- devices ----

const sqlDeviceColumns = `client_id, id, registered, capabilities::text, reported_labels::text, operator_labels::text, labels::text, created_at, updated_at, last_seen_at`

func scanDevice(r pgx.Row) (fleet.Device, error) {
	var d fleet.Device
	var caps, reported, operator, labels string
	var seen *time.Time
	if err := r.Scan(&d.ClientID, &d.ID, &d.Registered, &caps, &reported, &operator, &labels, &d.CreatedAt, &d.UpdatedAt, &seen); err != nil {
		return d, err
	}
	if seen != nil {
		d.LastSeenAt = seen.UTC()
	}
	d.Capabilities = json.RawMessage(caps)
	if err := json.Unmarshal([]byte(reported), &d.ReportedLabels); err != nil {
		return d, err
	}
	if err := json.Unmarshal([]byte(operator), &d.OperatorLabels); err != nil {
		return d, err
	}
	return d, json.Unmarshal([]byte(labels), &d.Labels)
}

func effectiveLabels(reported map[string]any, operator map[string]string) map[string]any {
	out := make(map[string]any, len(reported)+len(operator))
	for k, v := range reported {
		out[k] = v
	}
	for k, v := range operator {
		out[k] = v
	}
	return out
}

// PutDevice implements fleet.Store.
func (s *FleetStore) PutDevice(ctx context.Context, clientID, deviceID string, capabilities []byte, reported map[string]any, now time.Time) (bool, error) {
	created := false
	err := beginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if reported == nil {
			reported = map[string]any{}
		}
		var wasRegistered *bool
		var operatorJSON string
		err := tx.QueryRow(ctx, `SELECT registered, operator_labels::text FROM devices WHERE client_id = $1 AND id = $2 FOR UPDATE`, clientID, deviceID).
			Scan(&wasRegistered, &operatorJSON)
		if errors.Is(err, pgx.ErrNoRows) {
			operatorJSON = "{}"
		} else if err != nil {
			return err
		}
		var operator map[string]string
		if err := json.Unmarshal([]byte(operatorJSON), &operator); err != nil {
			return err
		}
		rep, _ := json.Marshal(reported)
		eff, _ := json.Marshal(effectiveLabels(reported, operator))
		var inserted bool
		// xmax = 0 tells a fresh insert from the update of a row a
		// concurrent first registration inserted meanwhile.
		err = tx.QueryRow(ctx, `
INSERT INTO devices (client_id, id, registered, capabilities, reported_labels, operator_labels, labels, created_at, updated_at)
VALUES ($1, $2, true, $3::jsonb, $4::jsonb, '{}', $5::jsonb, $6, $6)
ON CONFLICT (client_id, id) DO UPDATE SET registered = true, capabilities = EXCLUDED.capabilities,
    reported_labels = EXCLUDED.reported_labels, labels = EXCLUDED.labels, updated_at = EXCLUDED.updated_at
RETURNING (xmax = 0)`,
			clientID, deviceID, string(capabilities), string(rep), string(eff), now).Scan(&inserted)
		if err != nil {
			return err
		}
		created = inserted || (wasRegistered != nil && !*wasRegistered)
		if !created {
			return nil // capabilities updated: not a registration
		}
		// The device's own client is the actor, as for its reports.
		e, err := lifecycle.NewEvent(now, clientID, lifecycle.DeviceRef(clientID, deviceID),
			lifecycle.DeviceRegisteredBody{Reregistered: wasRegistered != nil}, lifecycle.Ref{Kind: lifecycle.SubjectClient, ID: clientID})
		if err != nil {
			return err
		}
		return AppendEvents(ctx, tx, []lifecycle.Event{e})
	})
	return created, translate(err)
}

// UnregisterDevice implements fleet.Store.
func (s *FleetStore) UnregisterDevice(ctx context.Context, clientID, deviceID string, now time.Time) error {
	return translate(beginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE devices SET registered = false, updated_at = $3 WHERE client_id = $1 AND id = $2 AND registered`, clientID, deviceID, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return notFound("Client %s has no registered device %s.", clientID, deviceID)
		}
		// Lock order everywhere: device, deployments, client row.
		rows, err := tx.Query(ctx, `SELECT id::text FROM deployments WHERE client_id = $1 AND device_id = $2 AND state <> $3 ORDER BY id FOR UPDATE`,
			clientID, deviceID, string(lifecycle.StateRemoved))
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		ds := make([]lifecycle.Deployment, 0, len(ids))
		for _, id := range ids {
			d, last, err := lockDeployment(ctx, tx, id, clientID)
			if err != nil {
				return err
			}
			ds = append(ds, aggregate(d, last))
		}
		changes, err := lifecycle.DecideUnregister(clientID, deviceID, ds, now, clientID)
		if err != nil {
			return err
		}
		return apply(ctx, tx, batch{changes: changes})
	}))
}

// Device implements fleet.Store.
func (s *FleetStore) Device(ctx context.Context, clientID, deviceID string) (fleet.Device, error) {
	d, err := scanDevice(s.pool.QueryRow(ctx, `SELECT `+sqlDeviceColumns+` FROM devices WHERE client_id = $1 AND id = $2`, clientID, deviceID))
	if errors.Is(err, pgx.ErrNoRows) {
		return d, notFound("Client %s has no device %s.", clientID, deviceID)
	}
	return d, translate(err)
}

// DevicesByID implements fleet.Store.
func (s *FleetStore) DevicesByID(ctx context.Context, keys [][2]string) (map[[2]string]fleet.Device, error) {
	clients, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		clients[i], ids[i] = k[0], k[1]
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sqlDeviceColumns+` FROM devices WHERE (client_id, id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, clients, ids)
	if err != nil {
		return nil, translate(err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fleet.Device, error) { return scanDevice(r) })
	if err != nil {
		return nil, translate(err)
	}
	out := make(map[[2]string]fleet.Device, len(ds))
	for _, d := range ds {
		out[[2]string{d.ClientID, d.ID}] = d
	}
	return out, nil
}

// selectorSQL adds the label selector's conditions on column col.
func selectorSQL(sel fleet.Selector, col string, w *where) {
	for _, r := range sel {
		// Non-string values compare in their JSON text form (JSON text).
		text := "(CASE jsonb_typeof(" + col + "->$?) WHEN 'string' THEN " + col + "->>$? ELSE (" + col + "->$?)::text END)"
		switch r.Op {
		case fleet.OpExists:
			w.add(col+" ? $?", r.Key)
		case fleet.OpNotExists:
			w.add("NOT ("+col+" ? $?)", r.Key)
		case fleet.OpEquals:
			w.add(text+" = $?", r.Key, r.Key, r.Key, r.Value)
		case fleet.OpNotEquals:
			w.add(text+" IS DISTINCT FROM $?", r.Key, r.Key, r.Key, r.Value)
		}
	}
}

// Devices implements fleet.Store.
func (s *FleetStore) Devices(ctx context.Context, f fleet.DeviceFilter, after string, limit int) ([]fleet.Device, error) {
	var w where
	if f.ClientID != "" {
		w.add("client_id = $?", f.ClientID)
	}
	if after != "" {
		c, d, ok := strings.Cut(after, "\x00")
		if !ok {
			return nil, page.BadCursor()
		}
		w.add("(client_id, id) > ($?, $?)", c, d)
	}
	selectorSQL(f.Selector, "labels", &w)
	q := `SELECT ` + sqlDeviceColumns + ` FROM devices WHERE ` + w.sql() + ` ORDER BY client_id, id LIMIT ` + w.limit(limit)
	rows, err := s.pool.Query(ctx, q, w.args...)
	if err != nil {
		return nil, translate(err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fleet.Device, error) { return scanDevice(r) })
	return ds, translate(err)
}

// SetOperatorLabels implements fleet.Store.
func (s *FleetStore) SetOperatorLabels(ctx context.Context, clientID, deviceID string, labels map[string]string, now time.Time) (fleet.Device, error) {
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var reportedJSON string
		err := tx.QueryRow(ctx, `SELECT reported_labels::text FROM devices WHERE client_id = $1 AND id = $2 FOR UPDATE`, clientID, deviceID).Scan(&reportedJSON)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("Client %s has no device %s.", clientID, deviceID)
		}
		if err != nil {
			return err
		}
		var reported map[string]any
		if err := json.Unmarshal([]byte(reportedJSON), &reported); err != nil {
			return err
		}
		if labels == nil {
			labels = map[string]string{}
		}
		op, _ := json.Marshal(labels)
		eff, _ := json.Marshal(effectiveLabels(reported, labels))
		if _, err = tx.Exec(ctx, `UPDATE devices SET operator_labels = $3::jsonb, labels = $4::jsonb, updated_at = $5 WHERE client_id = $1 AND id = $2`,
			clientID, deviceID, string(op), string(eff), now); err != nil {
			return err
		}
		return auditChange(ctx, tx, now, false)
	})
	if err != nil {
		return fleet.Device{}, translate(err)
	}
	return s.Device(ctx, clientID, deviceID)
}
