package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// CatalogStore is the PostgreSQL implementation of catalog.Store.
type CatalogStore struct {
	pool *pgxpool.Pool
}

var _ catalog.Store = (*CatalogStore)(nil)

// NewCatalogStore returns a catalog store over pool.
func NewCatalogStore(pool *pgxpool.Pool) *CatalogStore { return &CatalogStore{pool: pool} }

const versionColumns = `application_id, version, name, digest, media_type, raw, document::text, created_at, yanked, yanked_at, yanked_reason`

const (
	sqlInsertApplication = `INSERT INTO applications (id, created_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`
	sqlInsertVersion     = `
INSERT INTO application_versions (application_id, version, sort_key, name, digest, media_type, raw, document, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9)
ON CONFLICT (application_id, version) DO NOTHING
RETURNING ` + versionColumns
	sqlSelectVersion = `SELECT ` + versionColumns + ` FROM application_versions WHERE application_id = $1 AND version = $2`
	sqlListVersions  = `SELECT ` + versionColumns + ` FROM application_versions
WHERE application_id = $1 AND sort_key > $2 ORDER BY sort_key LIMIT $3`
	sqlApplicationExists = `SELECT EXISTS (SELECT 1 FROM applications WHERE id = $1)`
	// The latest version is the highest one not yanked, or the highest of all
	// when every one is yanked.
	sqlApplicationColumns = `
SELECT a.id, a.created_at, l.name, l.version, c.n
FROM applications a
CROSS JOIN LATERAL (
    SELECT v.name, v.version FROM application_versions v
    WHERE v.application_id = a.id ORDER BY v.yanked, v.sort_key DESC LIMIT 1
) l
CROSS JOIN LATERAL (SELECT count(*) AS n FROM application_versions v WHERE v.application_id = a.id) c`
	sqlApplications = sqlApplicationColumns + ` WHERE a.id > $1 ORDER BY a.id LIMIT $2`
	sqlApplication  = sqlApplicationColumns + ` WHERE a.id = $1`
	sqlSetYanked    = `
UPDATE application_versions SET yanked = $3, yanked_reason = $4, yanked_at = $5
WHERE application_id = $1 AND version = $2
RETURNING ` + versionColumns
	sqlDeleteVersion        = `DELETE FROM application_versions WHERE application_id = $1 AND version = $2`
	sqlDeleteEmptyApp       = `DELETE FROM applications a WHERE a.id = $1 AND NOT EXISTS (SELECT 1 FROM application_versions v WHERE v.application_id = a.id)`
	sqlLockApplicationShare = `SELECT id FROM applications WHERE id = $1 FOR SHARE`
	// sqlRolloutsDue makes the application's active rollouts due and wakes
	// the schedulers: a version yanked or deleted may be a rollout's target,
	// which then fails at once rather than at its next planned visit.
	sqlRolloutsDue = `WITH due AS (UPDATE rollouts SET recheck_at = now() WHERE application_id = $1 AND state IN ('running', 'paused') RETURNING 1)
SELECT pg_notify('` + SchedulerChannel + `', 'catalog') FROM (SELECT count(*) AS n FROM due) d WHERE d.n > 0`
)

// InsertVersion implements catalog.Store.
func (s *CatalogStore) InsertVersion(ctx context.Context, v catalog.Version) (catalog.Version, bool, error) {
	var out catalog.Version
	inserted := false
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlInsertApplication, v.ApplicationID, v.CreatedAt); err != nil {
			return fmt.Errorf("insert application: %w", err)
		}
		// Lock the application row against a concurrent delete of its last version.
		if _, err := tx.Exec(ctx, sqlLockApplicationShare, v.ApplicationID); err != nil {
			return fmt.Errorf("lock application: %w", err)
		}
		row := tx.QueryRow(ctx, sqlInsertVersion, v.ApplicationID, v.Version.String(), v.Version.SortKey(), v.Name,
			v.Digest, v.MediaType, v.Raw, string(v.Document), v.CreatedAt)
		got, err := scanVersion(row)
		if err == nil {
			out, inserted = got, true
			if err := appendEvent(ctx, tx, v.CreatedAt, lifecycle.Ref{Kind: lifecycle.SubjectApplication, ID: v.ApplicationID},
				lifecycle.ApplicationVersionAddedBody{Version: v.Version.String()}); err != nil {
				return err
			}
			return auditChange(ctx, tx, v.CreatedAt, true)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("insert version: %w", err)
		}
		got, err = scanVersion(tx.QueryRow(ctx, sqlSelectVersion, v.ApplicationID, v.Version.String()))
		if err != nil {
			return fmt.Errorf("read existing version: %w", err)
		}
		out = got
		return nil
	})
	if err != nil {
		return catalog.Version{}, false, translate(err)
	}
	return out, inserted, nil
}

// Version implements catalog.Store.
func (s *CatalogStore) Version(ctx context.Context, appID string, v lifecycle.Version) (catalog.Version, error) {
	got, err := scanVersion(s.pool.QueryRow(ctx, sqlSelectVersion, appID, v.String()))
	if errors.Is(err, pgx.ErrNoRows) {
		return catalog.Version{}, versionNotFound(appID, v)
	}
	if err != nil {
		return catalog.Version{}, translate(err)
	}
	return got, nil
}

// Versions implements catalog.Store.
func (s *CatalogStore) Versions(ctx context.Context, appID string, after string, limit int) ([]catalog.Version, error) {
	rows, err := s.pool.Query(ctx, sqlListVersions, appID, after, limit)
	if err != nil {
		return nil, translate(err)
	}
	vs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (catalog.Version, error) { return scanVersion(r) })
	if err != nil {
		return nil, translate(err)
	}
	if len(vs) == 0 {
		var exists bool
		if err := s.pool.QueryRow(ctx, sqlApplicationExists, appID).Scan(&exists); err != nil {
			return nil, translate(err)
		}
		if !exists {
			return nil, applicationNotFound(appID)
		}
	}
	return vs, nil
}

// Application implements catalog.Store.
func (s *CatalogStore) Application(ctx context.Context, appID string) (catalog.Application, error) {
	as, err := s.applications(ctx, sqlApplication, appID)
	if err != nil {
		return catalog.Application{}, err
	}
	if len(as) == 0 {
		return catalog.Application{}, applicationNotFound(appID)
	}
	return as[0], nil
}

// Applications implements catalog.Store.
func (s *CatalogStore) Applications(ctx context.Context, after string, limit int) ([]catalog.Application, error) {
	return s.applications(ctx, sqlApplications, after, limit)
}

func (s *CatalogStore) applications(ctx context.Context, query string, args ...any) ([]catalog.Application, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, translate(err)
	}
	as, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (catalog.Application, error) {
		var a catalog.Application
		var latest string
		if err := r.Scan(&a.ID, &a.CreatedAt, &a.Name, &latest, &a.VersionCount); err != nil {
			return a, err
		}
		v, err := lifecycle.ParseVersion(latest)
		if err != nil {
			return a, fmt.Errorf("stored version %q: %w", latest, err)
		}
		a.LatestVersion = v
		return a, nil
	})
	if err != nil {
		return nil, translate(err)
	}
	return as, nil
}

// SetYanked implements catalog.Store.
func (s *CatalogStore) SetYanked(ctx context.Context, appID string, v lifecycle.Version, yanked bool, reason string, at time.Time) (catalog.Version, error) {
	var yankedAt *time.Time
	if yanked {
		yankedAt = &at
	}
	var got catalog.Version
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		got, err = scanVersion(tx.QueryRow(ctx, sqlSetYanked, appID, v.String(), yanked, reason, yankedAt))
		if errors.Is(err, pgx.ErrNoRows) {
			return versionNotFound(appID, v)
		}
		if err != nil {
			return err
		}
		app := lifecycle.Ref{Kind: lifecycle.SubjectApplication, ID: appID}
		if yanked {
			if _, err := tx.Exec(ctx, sqlRolloutsDue, appID); err != nil {
				return err
			}
			err = appendEvent(ctx, tx, at, app, lifecycle.ApplicationVersionYankedBody{Version: v.String(), Reason: reason})
		} else {
			err = appendEvent(ctx, tx, at, app, lifecycle.ApplicationVersionUnyankedBody{Version: v.String()})
		}
		if err != nil {
			return err
		}
		return auditChange(ctx, tx, at, false)
	})
	if err != nil {
		return catalog.Version{}, translate(err)
	}
	return got, nil
}

// DeleteVersion implements catalog.Store.
func (s *CatalogStore) DeleteVersion(ctx context.Context, appID string, v lifecycle.Version, at time.Time) error {
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sqlDeleteVersion, appID, v.String())
		if err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "23503" { // foreign_key_violation: a deployment refers to it
				return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "version-in-use",
					Message: fmt.Sprintf("Version %s of %s is used by a deployment or its history; yank it instead.", v, appID)}
			}
			return err
		}
		if tag.RowsAffected() == 0 {
			return versionNotFound(appID, v)
		}
		if _, err := tx.Exec(ctx, sqlRolloutsDue, appID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlDeleteEmptyApp, appID); err != nil {
			return err
		}
		if err := appendEvent(ctx, tx, at, lifecycle.Ref{Kind: lifecycle.SubjectApplication, ID: appID},
			lifecycle.ApplicationVersionDeletedBody{Version: v.String()}); err != nil {
			return err
		}
		return auditChange(ctx, tx, at, false)
	})
	return translate(err)
}

func scanVersion(r pgx.Row) (catalog.Version, error) {
	var v catalog.Version
	var version, doc string
	var yankedAt *time.Time
	if err := r.Scan(&v.ApplicationID, &version, &v.Name, &v.Digest, &v.MediaType, &v.Raw, &doc, &v.CreatedAt, &v.Yanked, &yankedAt, &v.YankedReason); err != nil {
		return v, err
	}
	pv, err := lifecycle.ParseVersion(version)
	if err != nil {
		return v, fmt.Errorf("stored version %q: %w", version, err)
	}
	v.Version, v.Document = pv, []byte(doc)
	if yankedAt != nil {
		v.YankedAt = *yankedAt
	}
	return v, nil
}

func versionNotFound(appID string, v lifecycle.Version) error {
	return notFound("Application %s has no version %s.", appID, v)
}

func applicationNotFound(appID string) error { return notFound("There is no application %s.", appID) }

// translate keeps domain errors as they are, turns a commit of unknown
// outcome (atCommit) into EUNAVAILABLE "outcome-unknown", an unreachable
// database into EUNAVAILABLE (see unreachable) and a collision into
// EUNAVAILABLE "retry", and wraps everything else as an internal error (the HTTP adapter
// logs it and shows no internals). Every store method's error passes here.
func translate(err error) error {
	if err == nil {
		return nil
	}
	var de *lifecycle.Error
	if errors.As(err, &de) {
		return de
	}
	if maybeCommitted(err) {
		return fmt.Errorf("%w (%w)", lifecycle.OutcomeUnknown(UnavailableRetryAfter), err)
	}
	if unreachable(err) {
		// The cause stays in the chain (and in the log); the answer shows none.
		return fmt.Errorf("%w (%w)", errUnavailable(), err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001") { // deadlock, serialization failure
		return lifecycle.Retryable("retry", 1, "The change collided with a concurrent one and was not made; retry it.")
	}
	return fmt.Errorf("postgres: %w", err)
}
