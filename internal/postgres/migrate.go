package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/wfm-dev/wfm/migrations"
)

// ErrPendingMigrations is wrapped by Check when the database lacks a
// migration this binary embeds: the schema is older than the code, so the
// server must not take traffic yet.
var ErrPendingMigrations = errors.New("database schema has pending migrations")

// Migrate applies every embedded migration (migrations.FS) that the database
// lacks. Several processes may call it at once on one database: they
// serialize on a PostgreSQL session advisory lock, the first applies the
// migrations and the others then find nothing to do. A caller waits for the
// lock up to 5 minutes, polling once a second.
//
// Each migration runs in its own transaction under the pool's
// statement_timeout; a migration that needs longer sets its own with
// SET LOCAL statement_timeout.
//
// Returns an error if the lock cannot be had in time or a migration fails;
// the migrations applied before the failing one stay applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) (err error) {
	db := stdlib.OpenDBFromPool(pool) // closing db leaves the pool open
	defer func() {
		if cerr := db.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close migration connection: %w", cerr))
		}
	}()
	p, err := newProvider(db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return migrateRiver(ctx, pool)
}

// riverLockID names the session advisory lock under which River's
// migrations run ("wfm-rivr" in ASCII): rivermigrate takes no lock of its
// own, and replicas starting together must not apply one twice.
const riverLockID int64 = 0x77666d2d72697672

// migrateRiver applies River's migrations (its job tables; the webhook
// deliveries run on it) that the database lacks, under riverLockID.
func migrateRiver(ctx context.Context, pool *pgxpool.Pool) (err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, riverLockID); err != nil {
		return fmt.Errorf("river migrations: lock: %w", err)
	}
	defer func() {
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, riverLockID); uerr != nil {
			err = errors.Join(err, fmt.Errorf("river migrations: unlock: %w", uerr))
		}
	}()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	return nil
}

// RiverSchemaVersion returns the newest River migration this binary
// applies (test templates are named after it, with the embedded
// migrations).
func RiverSchemaVersion() int {
	m, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		return 0
	}
	all := m.AllVersions()
	if len(all) == 0 {
		return 0
	}
	return all[len(all)-1].Version
}

func newProvider(db *sql.DB) (*goose.Provider, error) {
	// goose's default polls every 5 s; one second keeps a replica that lost
	// the race from idling long after the winner is done.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("create migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithSessionLocker(locker),
		// Go migrations registered by some imported package's init must
		// never run against our database.
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return p, nil
}

// sqlAppliedVersions lists what goose recorded. The provider API deletes
// the row of a migration it rolls back, so every row is an applied version.
const sqlAppliedVersions = `SELECT version_id FROM ` + goose.DefaultTablename

// Check reports whether the database is reachable and holds every embedded
// migration; it backs the readiness probe. It costs two small queries and,
// unlike goose's own HasPending, never creates goose's version table.
//
// Returns an error wrapping ErrPendingMigrations if a migration is missing,
// one wrapping ErrEventClockBehind if the event log holds ids the database's
// transaction counter has not reached (a restore into a new cluster, see
// events.go), or the connection error if the database does not answer
// within ctx.
// Versions applied by a newer binary do not make it fail: during a rolling
// update the old replicas stay ready on the newer schema.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	want, err := embeddedVersions()
	if err != nil {
		return err
	}
	rows, _ := pool.Query(ctx, sqlAppliedVersions) // CollectRows reports the error
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == undefinedTable {
		return fmt.Errorf("%w: the database was never migrated (no %s table)", ErrPendingMigrations, goose.DefaultTablename)
	}
	if err != nil {
		return fmt.Errorf("check database: %w", err)
	}
	applied := make(map[int64]bool, len(versions))
	for _, v := range versions {
		applied[v] = true
	}
	var missing []int64
	for _, v := range want {
		if !applied[v] {
			missing = append(missing, v)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %d of %d not applied, versions %v", ErrPendingMigrations, len(missing), len(want), missing)
	}
	return checkEventClock(ctx, pool)
}

// undefinedTable is SQLSTATE 42P01.
const undefinedTable = "42P01"

// embeddedVersions returns the versions of the embedded migrations in
// ascending order.
func embeddedVersions() ([]int64, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list embedded migrations: %w", err)
	}
	versions := make([]int64, 0, len(names))
	for _, name := range names {
		v, err := goose.NumericComponent(name)
		if err != nil {
			return nil, fmt.Errorf("embedded migration %s: %w", name, err)
		}
		versions = append(versions, v)
	}
	slices.Sort(versions)
	return versions, nil
}
