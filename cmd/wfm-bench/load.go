package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// appDescription is the application every benchmark deployment runs: the
// Margo hello-world example (internal/margo/testdata), copied so that the
// harness does not depend on the layout of the tree it measures.
//
//go:embed app.yaml
var appDescription []byte

const (
	appID      = "com-northstartida-hello-world"
	appVersion = "1.0"
)

// phase is the outcome of one load phase.
type phase struct {
	n       int           // items asked for
	done    int           // items that succeeded
	ok      []bool        // ok[i]: item i succeeded
	elapsed time.Duration // wall time of the phase
	capped  bool          // the time cap ended it before every item was done
	limit   time.Duration // the cap
}

// rate is the items done per second.
func (p phase) rate() float64 {
	if p.elapsed <= 0 {
		return 0
	}
	return float64(p.done) / p.elapsed.Seconds()
}

// capNote says that and where the cap ended the phase ("" when it did not).
func (p phase) capNote(what string) string {
	if !p.capped {
		return ""
	}
	return fmt.Sprintf("capped at %s: %d of %d %s", p.limit.Round(time.Second), p.done, p.n, what)
}

// runPhase calls do for items 0..n-1 from `workers` goroutines until every
// item is done or limit has passed. A request cut short by the cap is not
// counted and is no error; any other failure ends the phase with an error.
func runPhase(ctx context.Context, n, workers int, limit time.Duration, do func(ctx context.Context, i int) error) (phase, error) {
	p := phase{n: n, ok: make([]bool, n), limit: limit}
	if n == 0 {
		return p, nil
	}
	if limit <= 0 {
		p.capped = true
		return p, nil
	}
	pctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var next atomic.Int64
	var done atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || pctx.Err() != nil {
					return
				}
				if err := do(pctx, i); err != nil {
					if pctx.Err() == nil {
						errOnce.Do(func() { firstErr = err; cancel() })
					}
					return
				}
				p.ok[i] = true
				done.Add(1)
			}
		})
	}
	wg.Wait()
	p.elapsed = time.Since(start)
	p.done = int(done.Load())
	if firstErr != nil {
		return p, firstErr
	}
	if err := ctx.Err(); err != nil {
		return p, err
	}
	p.capped = p.done < n
	return p, nil
}

// okItems are the items a phase did.
func (p phase) okItems() []int {
	items := make([]int, 0, p.done)
	for i, ok := range p.ok {
		if ok {
			items = append(items, i)
		}
	}
	return items
}

// api calls the server's two faces.
type api struct {
	hc *http.Client
	s  *server
}

func newAPI(s *server, conns int) *api {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxIdleConns: 2 * conns, DisableCompression: true, IdleConnTimeout: time.Minute}
	return &api{hc: &http.Client{Transport: tr, Timeout: time.Minute}, s: s}
}

func (a *api) close() { a.hc.CloseIdleConnections() }

// do sends one request and returns the response body; a status other than
// one of want is an error.
func (a *api) do(ctx context.Context, method, url string, header http.Header, body []byte, want ...int) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header = header
	res, err := a.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, nil, err
	}
	for _, w := range want {
		if res.StatusCode == w {
			return res, b, nil
		}
	}
	return res, b, fmt.Errorf("%s %s: %s: %.300s", method, url, res.Status, b)
}

func (a *api) mgmtHeader(contentType string) http.Header {
	return http.Header{"Authorization": {"Bearer " + a.s.token}, "Content-Type": {contentType}}
}

func deviceHeader(clientID string) http.Header {
	return http.Header{"X-WFM-Client-ID": {clientID}, "Content-Type": {"application/json"}}
}

// uploadApp adds the benchmark application to the catalog.
func (a *api) uploadApp(ctx context.Context) error {
	_, _, err := a.do(ctx, http.MethodPost, a.s.mgmt+"/mgmt/v1/applications", a.mgmtHeader("application/yaml"), appDescription, http.StatusCreated, http.StatusOK)
	return err
}

// register reports a device's capabilities (a Margo capabilities document).
func (a *api) register(ctx context.Context, clientID, deviceID string) error {
	body := fmt.Appendf(nil, `{"properties":{"id":%q,"vendor":"wfm-bench","modelNumber":"b1","serialNumber":"S-%s","cpus":[{"cores":4,"architecture":"amd64"}],"memory":"8Gi","storage":"64Gi","supportedRuntimes":["oci"],"supportedDeploymentTypes":["helm","compose"]}}`, deviceID, deviceID)
	_, _, err := a.do(ctx, http.MethodPut, a.s.device+"/api/v1/capabilities/"+deviceID, deviceHeader(clientID), body, http.StatusOK, http.StatusCreated)
	return err
}

// create deploys the benchmark application to a device and returns the
// deployment's id.
func (a *api) create(ctx context.Context, clientID, deviceID string) (string, error) {
	body := fmt.Appendf(nil, `{"applicationId":%q,"version":%q,"clientId":%q,"deviceId":%q}`, appID, appVersion, clientID, deviceID)
	_, b, err := a.do(ctx, http.MethodPost, a.s.mgmt+"/mgmt/v1/deployments", a.mgmtHeader("application/json"), body, http.StatusCreated)
	if err != nil {
		return "", err
	}
	var d struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &d); err != nil || d.ID == "" {
		return "", fmt.Errorf("create deployment: no id in %.200s", b)
	}
	return d.ID, nil
}

// manifest is what the bench reads of a state manifest.
type manifest struct {
	ManifestVersion uint64            `json:"manifestVersion"`
	Deployments     []json.RawMessage `json:"deployments"`
}

// ids returns the ids of the manifest's deployments.
func (m manifest) ids() ([]string, error) {
	ids := make([]string, len(m.Deployments))
	for i, raw := range m.Deployments {
		var d struct {
			ID string `json:"deploymentId"`
		}
		if err := json.Unmarshal(raw, &d); err != nil || d.ID == "" {
			return nil, fmt.Errorf("state manifest entry %.100s: no deploymentId", raw)
		}
		ids[i] = d.ID
	}
	return ids, nil
}

// seedPollClient gives client one device with one deployment of the
// benchmark application (uploaded first) and polls its manifest once, so
// that the server caches it; it returns the manifest's ETag.
func (a *api) seedPollClient(ctx context.Context, client, device string) (string, error) {
	if err := a.uploadApp(ctx); err != nil {
		return "", err
	}
	if err := a.register(ctx, client, device); err != nil {
		return "", err
	}
	if _, err := a.create(ctx, client, device); err != nil {
		return "", err
	}
	_, etag, err := a.poll(ctx, client)
	return etag, err
}

// poll fetches a client's state manifest and returns it with its ETag.
func (a *api) poll(ctx context.Context, clientID string) (manifest, string, error) {
	res, b, err := a.do(ctx, http.MethodGet, a.s.device+"/api/v1/deployments", deviceHeader(clientID), nil, http.StatusOK)
	if err != nil {
		return manifest{}, "", err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return manifest{}, "", fmt.Errorf("state manifest of %s: %w", clientID, err)
	}
	etag := res.Header.Get("ETag")
	if etag == "" {
		return m, "", errors.New("state manifest without ETag")
	}
	return m, etag, nil
}
