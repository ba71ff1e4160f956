package telemetry

import (
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// HTTPMetrics counts and times HTTP requests by route pattern (never the raw
// path, which would make the label set unbounded), method and status.
type HTTPMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// series caches the children of both vectors by label values
	// (seriesKey → *series): WithLabelValues hashes and checks its labels
	// on every call, a cost on the hot paths (the device poll). The label
	// sets are bounded (route patterns, known methods, status codes), and
	// no child is ever deleted.
	series sync.Map
}

type seriesKey struct {
	route, method string
	status        int
}

type series struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

// NewHTTPMetrics registers the HTTP collectors with reg. Returns an error if
// they are already registered there.
func NewHTTPMetrics(reg prometheus.Registerer) (*HTTPMetrics, error) {
	m := &HTTPMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "wfm", Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "wfm", Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time to answer HTTP requests, by route pattern, method and status code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method", "status"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Observe records one answered request.
func (m *HTTPMetrics) Observe(route, method string, status int, d time.Duration) {
	k := seriesKey{route: route, method: method, status: status}
	v, ok := m.series.Load(k)
	if !ok {
		s := strconv.Itoa(status)
		v, _ = m.series.LoadOrStore(k, &series{requests: m.requests.WithLabelValues(route, method, s), latency: m.latency.WithLabelValues(route, method, s)})
	}
	ser := v.(*series)
	ser.requests.Inc()
	ser.latency.Observe(d.Seconds())
}

// PoolCollector exports the statistics of a pgx connection pool.
type PoolCollector struct {
	pool                                        *pgxpool.Pool
	acquired, idle, total, max                  *prometheus.Desc
	acquireCount, acquireWait, emptyAcquire     *prometheus.Desc
	canceledAcquire, newConns, lifetimeDestroys *prometheus.Desc
}

// NewPoolCollector returns a collector for pool; register it with a registry.
func NewPoolCollector(pool *pgxpool.Pool) *PoolCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("wfm_db_pool_"+name, help, nil, nil)
	}
	return &PoolCollector{
		pool:             pool,
		acquired:         d("acquired_connections", "Connections currently in use."),
		idle:             d("idle_connections", "Idle connections."),
		total:            d("total_connections", "Open connections."),
		max:              d("max_connections", "Largest size the pool may reach."),
		acquireCount:     d("acquires_total", "Successful acquires from the pool."),
		acquireWait:      d("acquire_wait_seconds_total", "Total time spent waiting for a connection."),
		emptyAcquire:     d("empty_acquires_total", "Acquires that had to wait because the pool was empty."),
		canceledAcquire:  d("canceled_acquires_total", "Acquires canceled by their context."),
		newConns:         d("new_connections_total", "Connections opened."),
		lifetimeDestroys: d("max_lifetime_destroys_total", "Connections closed for reaching their maximum lifetime."),
	}
}

// Describe implements prometheus.Collector.
func (c *PoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.acquired, c.idle, c.total, c.max, c.acquireCount, c.acquireWait, c.emptyAcquire, c.canceledAcquire, c.newConns, c.lifetimeDestroys} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *PoolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	k := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	g(c.acquired, float64(s.AcquiredConns()))
	g(c.idle, float64(s.IdleConns()))
	g(c.total, float64(s.TotalConns()))
	g(c.max, float64(s.MaxConns()))
	k(c.acquireCount, float64(s.AcquireCount()))
	k(c.acquireWait, s.AcquireDuration().Seconds())
	k(c.emptyAcquire, float64(s.EmptyAcquireCount()))
	k(c.canceledAcquire, float64(s.CanceledAcquireCount()))
	k(c.newConns, float64(s.NewConnsCount()))
	k(c.lifetimeDestroys, float64(s.MaxLifetimeDestroyCount()))
}
