// Command wfm is the Workload Fleet Manager server.
//
// With no DATABASE_URL it starts its own PostgreSQL from the machine's
// installed server binaries, keeps the data in a local folder and stops it on
// shutdown; see README.md for every setting.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/internal/pglaunch"
	"github.com/wfm-dev/wfm/internal/postgres"
	"github.com/wfm-dev/wfm/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "wfm:", err)
		os.Exit(1)
	}
}

// config is every setting of the server; flags win over environment variables.
type config struct {
	listen          string
	databaseURL     string
	dataDir         string
	logLevel        slog.Level
	logFormat       string
	shutdownTimeout time.Duration
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	env := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("wfm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var level string
	fs.StringVar(&c.listen, "listen", env("WFM_LISTEN", "127.0.0.1:8080"), "address of the HTTP listener (env WFM_LISTEN)")
	fs.StringVar(&c.databaseURL, "database-url", getenv("DATABASE_URL"), "PostgreSQL URL; empty: start a private PostgreSQL (env DATABASE_URL)")
	fs.StringVar(&c.dataDir, "data-dir", env("WFM_DATA_DIR", ".data"), "folder for the private PostgreSQL's data and other local state (env WFM_DATA_DIR)")
	fs.StringVar(&level, "log-level", env("WFM_LOG_LEVEL", "info"), "debug, info, warn or error (env WFM_LOG_LEVEL)")
	fs.StringVar(&c.logFormat, "log-format", env("WFM_LOG_FORMAT", "text"), "text or json (env WFM_LOG_FORMAT)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 20*time.Second, "how long to let requests finish on shutdown")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if err := c.logLevel.UnmarshalText([]byte(level)); err != nil {
		return c, fmt.Errorf("-log-level %q: want debug, info, warn or error", level)
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return c, fmt.Errorf("-log-format %q: want text or json", c.logFormat)
	}
	return c, nil
}

func newLogger(c config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.logLevel}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.logFormat == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(telemetry.NewContextHandler(h))
}

// run is the whole server: it returns when ctx is cancelled (after a graceful
// shutdown) or when something it depends on fails.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	log := newLogger(c, stderr)

	dbURL := c.databaseURL
	var pgDied <-chan struct{}
	if dbURL == "" {
		pg, url, err := startPrivatePostgres(ctx, c, getenv, log)
		if err != nil {
			return err
		}
		defer func() {
			if err := pg.Stop(); err != nil {
				log.Error("stop PostgreSQL", "error", err)
			} else {
				log.Info("PostgreSQL stopped")
			}
		}()
		dbURL, pgDied = url, pg.Done()
	}

	pool, err := postgres.Open(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("migrate database: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		telemetry.NewPoolCollector(pool))
	handler, err := httpapi.NewHandler(httpapi.Config{
		Logger:   log,
		Ready:    func(ctx context.Context) error { return postgres.Check(ctx, pool) },
		Registry: reg,
		Catalog:  catalog.NewService(postgres.NewCatalogStore(pool), time.Now),
	})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.listen, err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	base := "http://" + displayAddr(ln.Addr())
	fmt.Fprintf(stdout, "wfm listening on %s (Swagger UI %s/docs/, contract %s/openapi.yaml)\n", base, base, base)
	log.Info("listening", "addr", ln.Addr().String())

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		return fmt.Errorf("http server: %w", err)
	case <-pgDied:
		_ = srv.Close()
		return errors.New("the private PostgreSQL stopped unexpectedly; see its log in the data folder")
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("graceful shutdown incomplete", "error", err)
		_ = srv.Close()
	}
	<-serveErr
	return nil
}

// startPrivatePostgres starts the server's own PostgreSQL in c.dataDir and
// makes sure its "wfm" database exists.
func startPrivatePostgres(ctx context.Context, c config, getenv func(string) string, log *slog.Logger) (*pglaunch.Server, string, error) {
	bin, err := pglaunch.FindBinaries(getenv)
	if err != nil {
		return nil, "", err
	}
	dir, err := filepath.Abs(filepath.Join(c.dataDir, "postgres"))
	if err != nil {
		return nil, "", err
	}
	log.Info("starting private PostgreSQL (DATABASE_URL is not set)", "bin", bin, "data", dir)
	pg, err := pglaunch.Start(ctx, pglaunch.Options{BinDir: bin, DataDir: dir})
	if err != nil {
		return nil, "", fmt.Errorf("start private PostgreSQL: %w", err)
	}
	if err := ensureDatabase(ctx, pg.URL("postgres"), "wfm"); err != nil {
		_ = pg.Stop()
		return nil, "", err
	}
	log.Info("private PostgreSQL ready", "port", pg.Port())
	return pg, pg.URL("wfm"), nil
}

func ensureDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to private PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return nil
}

// displayAddr turns a listener address into something a browser can open.
func displayAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
