package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/ratelimit"
)

// TestRateLimiterUnderLoad floods the device API from one client for three
// seconds while another client polls at a normal pace: the flooder gets 429
// with Retry-After and Margo's retry members, the other is always served.
func TestRateLimiterUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	e := newFleetEnvWith(t, fleet.Policy{AcceptAll: true}, ratelimit.New(20, 20, 1000, time.Now))
	flooder, polite := e.client(t, "flooder"), e.client(t, "polite")
	const duration = 3 * time.Second
	start := time.Now()
	deadline := start.Add(duration)

	var flood200, flood429 atomic.Int64
	var retryAfterSeen, membersSeen atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				req, _ := http.NewRequest("GET", e.deviceURL+"/api/v1/deployments", nil)
				res, err := flooder.http.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				switch res.StatusCode {
				case http.StatusOK:
					flood200.Add(1)
				case http.StatusTooManyRequests:
					flood429.Add(1)
					if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s >= 1 {
						retryAfterSeen.Store(true)
					}
					var p struct {
						Retryable         bool   `json:"retryable"`
						RetryAfterSeconds int    `json:"retryAfterSeconds"`
						BackoffStrategy   string `json:"backoffStrategy"`
					}
					if json.Unmarshal(body, &p) == nil && p.Retryable && p.RetryAfterSeconds >= 1 && p.BackoffStrategy != "" {
						membersSeen.Store(true)
					}
				default:
					t.Errorf("flooder got %d: %s", res.StatusCode, body)
					return
				}
			}
		}()
	}
	var politeOK, politeRefused int
	tick := time.NewTicker(100 * time.Millisecond) // 10 requests a second, under the 20/s limit
	defer tick.Stop()
	for time.Now().Before(deadline) {
		<-tick.C
		req, _ := http.NewRequest("GET", e.deviceURL+"/api/v1/deployments", nil)
		res, err := polite.http.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			politeOK++
		} else {
			politeRefused++
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("flooder: %d served, %d refused; polite: %d served, %d refused", flood200.Load(), flood429.Load(), politeOK, politeRefused)
	assert.Positive(t, flood429.Load(), "the flooder was limited")
	assert.Positive(t, flood200.Load(), "the flooder still gets its rate")
	assert.LessOrEqual(t, float64(flood200.Load()), 20+20*elapsed.Seconds()+1, "the flooder got at most burst + rate x time")
	assert.True(t, retryAfterSeen.Load(), "429 carries Retry-After")
	assert.True(t, membersSeen.Load(), "429 carries retryable, retryAfterSeconds and backoffStrategy")
	assert.Zero(t, politeRefused, "the other client is always served")
	assert.GreaterOrEqual(t, politeOK, 10, "the other client kept being served")
}
