// Package pgtest gives each test a PostgreSQL database of its own, cloned
// from a template that holds the migrated schema (a clone takes 10 to 20 ms,
// far less than migrating), so tests run in parallel against real
// PostgreSQL without seeing each other's rows.
//
// A package whose tests use it hands its TestMain over:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// With DATABASE_URL set, the databases are made on that server, whose role
// needs CREATEDB; the template (wfm_tmpl_<hash of the migrations>) is kept
// there for the next run, and each migration set adds one. Without it, the
// first test that asks for a database starts a private server (see
// pglaunch) with durability off, reachable only through its Unix socket and
// only by the OS user running the tests, in a temporary folder (in memory under
// /dev/shm when that is roomy), and Main stops it and removes the folder
// after the tests; a folder left by a killed run is removed by a later one.
// Packages whose tests never ask for a database pay nothing.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wfm-dev/wfm/internal/pglaunch"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/migrations"
)

// current is the harness of the running test binary. It is package state
// because TestMain is the only hook around all of a package's tests and the
// tests reach it through plain function calls.
var current atomic.Pointer[harness]

// templateLockID names the advisory lock that serializes building the
// template among test binaries sharing one server (go test runs packages in
// parallel). Any constant works; this one is "wfm-pgte" in ASCII.
const templateLockID int64 = 0x77666d2d70677465

type harness struct {
	getenv func(string) string

	startOnce sync.Once
	startErr  error
	adminURL  string        // a database of the server to run CREATE DATABASE from
	admin     *pgxpool.Pool // on adminURL
	server    *pglaunch.Server
	dir       string   // the private server's folder
	dirLock   *os.File // held while the folder is in use, see sweepStale

	templateOnce sync.Once
	template     string
	templateErr  error
}

// Main runs the tests of m with a database server available to New, URL
// and EmptyURL, and returns the exit code for os.Exit. It stops the private
// server, if one was started, after the last test.
func Main(m *testing.M) int {
	h := &harness{getenv: os.Getenv}
	current.Store(h)
	code := m.Run()
	current.Store(nil)
	if err := h.close(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// New returns a pool on a fresh database holding the migrated schema and no
// rows. The pool is closed and the database dropped when t ends.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dbURL := URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := postgres.Open(ctx, dbURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close) // registered after the drop, so it runs before it
	return pool
}

// URL returns the connection URL of a fresh database holding the migrated
// schema, for tests that run a whole server or open their own connections.
// The database is dropped, connections and all, when t ends.
func URL(t testing.TB) string {
	t.Helper()
	h := use(t)
	h.templateOnce.Do(func() { h.template, h.templateErr = h.buildTemplate() })
	if h.templateErr != nil {
		t.Fatalf("pgtest: %v", h.templateErr)
	}
	return h.createDatabase(t, h.template)
}

// EmptyURL returns the connection URL of a fresh, empty database (not
// migrated), for tests of the migrations themselves. The database is
// dropped when t ends.
func EmptyURL(t testing.TB) string {
	t.Helper()
	return use(t).createDatabase(t, "template0")
}

// use returns the running harness with its server started.
func use(t testing.TB) *harness {
	t.Helper()
	h := current.Load()
	if h == nil {
		t.Fatal("pgtest: no harness; add func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) } to the package's tests")
	}
	h.startOnce.Do(func() { h.startErr = h.start() })
	if h.startErr != nil {
		t.Fatalf("pgtest: %v", h.startErr)
	}
	return h
}

func (h *harness) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h.adminURL = h.getenv("DATABASE_URL")
	if h.adminURL == "" {
		bin, err := pglaunch.FindBinaries(h.getenv)
		if err != nil {
			return fmt.Errorf("DATABASE_URL is not set and no private server can be started: %w", err)
		}
		if h.dir, h.dirLock, err = makeServerDir(); err != nil {
			return err
		}
		h.server, err = pglaunch.Start(ctx, pglaunch.Options{
			BinDir:  bin,
			DataDir: filepath.Join(h.dir, "data"),
			Settings: map[string]string{
				// Crash safety is worth nothing for a throwaway cluster.
				"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
				// Dynamic shared memory as files in the data dir rather
				// than in /dev/shm, so that a killed run leaves nothing
				// behind that sweepStale does not remove.
				"dynamic_shared_memory_type": "mmap",
			},
		})
		if err != nil {
			return err
		}
		h.adminURL = h.server.URL("postgres")
	}
	var err error
	if h.admin, err = postgres.Open(ctx, h.adminURL); err != nil {
		return fmt.Errorf("admin connection: %w", err)
	}
	return nil
}

func (h *harness) close() error {
	// Once a Do has returned, later ones return at once: this orders the
	// reads below after a start that a test may still be running.
	h.startOnce.Do(func() {})
	var errs []error
	if h.admin != nil {
		h.admin.Close()
	}
	if h.server != nil {
		if err := h.server.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if h.dir != "" {
		if err := os.RemoveAll(h.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove server folder: %w", err))
		}
	}
	if h.dirLock != nil {
		_ = h.dirLock.Close()
	}
	return errors.Join(errs...)
}

// buildTemplate makes sure the template for the embedded migrations exists
// and returns its name. It is built under another name and renamed when
// complete, so that a run killed halfway leaves nothing that looks usable.
func (h *harness) buildTemplate() (string, error) {
	name, err := templateName()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A connection of its own: closing it releases the lock whatever happens.
	conn, err := pgx.Connect(ctx, h.adminURL)
	if err != nil {
		return "", fmt.Errorf("template: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockID); err != nil {
		return "", fmt.Errorf("template: lock: %w", err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("template: look up %s: %w", name, err)
	}
	if exists {
		return name, nil
	}

	building := name + "_build"
	for _, sql := range []string{
		"DROP DATABASE IF EXISTS " + ident(building) + " WITH (FORCE)",
		"CREATE DATABASE " + ident(building) + " TEMPLATE template0",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return "", fmt.Errorf("template: %w", err)
		}
	}
	buildURL, err := withDatabase(h.adminURL, building)
	if err != nil {
		return "", err
	}
	pool, err := postgres.Open(ctx, buildURL)
	if err != nil {
		return "", fmt.Errorf("template: %w", err)
	}
	err = postgres.Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		return "", fmt.Errorf("template: %w", err)
	}
	for _, sql := range []string{
		"ALTER DATABASE " + ident(building) + " RENAME TO " + ident(name),
		// No connections: CREATE DATABASE … TEMPLATE fails while anyone
		// is connected to the template.
		"ALTER DATABASE " + ident(name) + " WITH IS_TEMPLATE true ALLOW_CONNECTIONS false",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return "", fmt.Errorf("template: %w", err)
		}
	}
	return name, nil
}

// templateName derives the template's name from the embedded migrations,
// so that a changed migration gets a new template instead of a stale one.
func templateName() (string, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return "", fmt.Errorf("list migrations: %w", err)
	}
	sum := sha256.New()
	for _, name := range names { // Glob sorts
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return "", fmt.Errorf("read migration: %w", err)
		}
		fmt.Fprintf(sum, "%s\x00%d\x00", name, len(b))
		sum.Write(b)
	}
	fmt.Fprintf(sum, "river\x00%d\x00", postgres.RiverSchemaVersion()) // River's tables come with Migrate
	return "wfm_tmpl_" + hex.EncodeToString(sum.Sum(nil))[:16], nil
}

// createDatabase creates a database from template, drops it when t ends and
// returns its URL.
func (h *harness) createDatabase(t testing.TB, template string) string {
	t.Helper()
	name := databaseName(t.Name())
	dbURL, err := withDatabase(h.adminURL, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(template)); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// FORCE ends sessions the test left open instead of failing.
		if _, err := h.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return dbURL
}

// databaseName makes a database name that shows which test made it (handy
// when one is left behind) and cannot collide: at most 40 characters of the
// test name, then 10 random hex digits, well under PostgreSQL's 63 bytes.
func databaseName(testName string) string {
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 40 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case !strings.HasSuffix(b.String(), "_"):
			b.WriteByte('_')
		}
	}
	var suffix [5]byte
	_, _ = rand.Read(suffix[:]) // never fails
	return b.String() + "_" + hex.EncodeToString(suffix[:])
}

// withDatabase returns connString with its database replaced by name; it
// accepts both the URL and the keyword/value form (DATABASE_URL may be
// either).
func withDatabase(connString, name string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if uerr, ok := errors.AsType[*url.Error](err); ok {
			err = uerr.Err // url.Error quotes the whole URL, password included
		}
		if err != nil {
			return "", fmt.Errorf("parse database URL: %w", err)
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	return connString + " dbname=" + name, nil // the last dbname wins
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }
