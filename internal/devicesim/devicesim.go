// Package devicesim simulates Margo device agents (WFM clients) against the
// device API: each device registers its capabilities, polls its client's
// state manifest with If-None-Match, fetches the ApplicationDeployment YAML of
// what changed (verifying its digest), and reports status as a real agent
// would: installing, then installed (or failed), with the drain phases of
// wfm's extension when a revision asks for a drain, and removed for what left
// the manifest. It is for demos, end-to-end tests and load.
package devicesim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is what every simulated device of one client shares.
type Config struct {
	// BaseURL of the device API (https://host:8443, or http:// in the
	// development header mode).
	BaseURL string
	// HTTP is the client: with the client certificate for mTLS.
	HTTP *http.Client
	// ClientID, when not empty, is sent in the X-WFM-Client-ID header (the
	// server's development header mode).
	ClientID string
	// Poll is how often a device polls its manifest.
	Poll time.Duration
	// InstallTime is how long a device takes to apply a revision.
	InstallTime time.Duration
	// DrainTime is how long in-flight work takes to finish when a revision
	// asks for a drain; NeverDrain makes devices never finish draining.
	DrainTime  time.Duration
	NeverDrain bool
	// FailRate is the probability that applying a revision fails.
	FailRate float64
	// Log receives what devices do.
	Log *slog.Logger
	// Rand decides failures (nil: a fixed seed); shared by the devices.
	Rand *rand.Rand

	mu sync.Mutex // guards Rand
}

// Device is one simulated device.
type Device struct {
	ID  string
	cfg *Config

	etag    string
	version uint64
	running map[string]string // deployment id -> digest the device runs
}

// NewDevice returns a simulated device with the given id.
func NewDevice(cfg *Config, id string) *Device {
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(1, 2))
	}
	return &Device{ID: id, cfg: cfg, running: map[string]string{}}
}

func (d *Device) do(ctx context.Context, method, path string, body any, header ...string) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(d.cfg.BaseURL, "/")+path, rd)
	if err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if d.cfg.ClientID != "" {
		req.Header.Set("X-WFM-Client-ID", d.cfg.ClientID)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := d.cfg.HTTP.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	return res, b, err
}

// Register reports the device's capabilities.
func (d *Device) Register(ctx context.Context) error {
	caps := map[string]any{"properties": map[string]any{
		"id": d.ID, "vendor": "wfm-devicesim", "modelNumber": "sim-1", "serialNumber": "SIM-" + d.ID,
		"cpus": []any{map[string]any{"cores": 4, "architecture": "amd64"}}, "memory": "16Gi", "storage": "128Gi",
		"supportedRuntimes": []string{"oci"}, "supportedDeploymentTypes": []string{"helm", "compose"},
	}, "labels": map[string]any{"simulated": "true"}}
	res, b, err := d.do(ctx, http.MethodPut, "/api/v1/capabilities/"+d.ID, caps)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusCreated {
		return fmt.Errorf("register %s: %d %s", d.ID, res.StatusCode, b)
	}
	return nil
}

type manifest struct {
	ManifestVersion uint64 `json:"manifestVersion"`
	Deployments     []struct {
		DeploymentID string `json:"deploymentId"`
		Digest       string `json:"digest"`
		URL          string `json:"url"`
	} `json:"deployments"`
}

// extension is what wfm tells agents in spec.x-wfm-extensions.
type extension struct {
	Revision  int    `yaml:"revision"`
	Operation string `yaml:"operation"`
	Strategy  string `yaml:"strategy"`
	Drain     *struct {
		Required  bool   `yaml:"required"`
		Timeout   string `yaml:"timeout"`
		OnTimeout string `yaml:"onTimeout"`
	} `yaml:"drain"`
}

type deploymentDoc struct {
	ID       string `yaml:"id"`
	Metadata struct {
		DeviceID string `yaml:"deviceId"`
	} `yaml:"metadata"`
	Spec struct {
		DeploymentProfile struct {
			Components []struct {
				Name string `yaml:"name"`
			} `yaml:"components"`
		} `yaml:"deploymentProfile"`
		Ext *extension `yaml:"x-wfm-extensions"`
	} `yaml:"spec"`
}

// Sync polls the manifest once and applies what changed for this device.
// It returns whether the manifest changed.
func (d *Device) Sync(ctx context.Context) (bool, error) {
	var hdr []string
	if d.etag != "" {
		hdr = []string{"If-None-Match", d.etag}
	}
	res, body, err := d.do(ctx, http.MethodGet, "/api/v1/deployments", nil, hdr...)
	if err != nil {
		return false, err
	}
	switch res.StatusCode {
	case http.StatusNotModified:
		return false, nil
	case http.StatusOK:
	default:
		return false, fmt.Errorf("manifest: %d %s", res.StatusCode, body)
	}
	var m manifest
	if err := json.Unmarshal(body, &m); err != nil {
		return false, fmt.Errorf("manifest: %w", err)
	}
	if m.ManifestVersion <= d.version {
		return false, fmt.Errorf("manifest version %d is not newer than %d: refused", m.ManifestVersion, d.version)
	}
	d.etag, d.version = res.Header.Get("ETag"), m.ManifestVersion
	present := map[string]bool{}
	for _, ref := range m.Deployments {
		res, yml, err := d.do(ctx, http.MethodGet, ref.URL, nil)
		if err != nil {
			return true, err
		}
		if res.StatusCode != http.StatusOK {
			return true, fmt.Errorf("fetch %s: %d", ref.URL, res.StatusCode)
		}
		sum := sha256.Sum256(yml)
		if "sha256:"+hex.EncodeToString(sum[:]) != ref.Digest {
			return true, fmt.Errorf("deployment %s: digest mismatch", ref.DeploymentID)
		}
		var doc deploymentDoc
		if err := yaml.Unmarshal(yml, &doc); err != nil {
			return true, fmt.Errorf("deployment %s: %w", ref.DeploymentID, err)
		}
		if doc.Metadata.DeviceID != d.ID {
			continue // another device of this client
		}
		present[ref.DeploymentID] = true
		if d.running[ref.DeploymentID] == ref.Digest {
			continue
		}
		if err := d.apply(ctx, doc, ref.DeploymentID); err != nil {
			return true, err
		}
		d.running[ref.DeploymentID] = ref.Digest
	}
	for id := range d.running {
		if !present[id] {
			if err := d.report(ctx, id, "removed", nil, nil); err != nil {
				return true, err
			}
			delete(d.running, id)
		}
	}
	return true, nil
}

// apply simulates applying a revision: drain (when asked), install, report.
func (d *Device) apply(ctx context.Context, doc deploymentDoc, id string) error {
	var comps []string
	for _, c := range doc.Spec.DeploymentProfile.Components {
		comps = append(comps, c.Name)
	}
	if ext := doc.Spec.Ext; ext != nil && ext.Drain != nil && ext.Drain.Required && d.running[id] != "" {
		inFlight := 3
		if err := d.report(ctx, id, "installing", comps, map[string]any{"phase": "draining", "inFlight": inFlight}); err != nil {
			return err
		}
		if d.cfg.NeverDrain {
			d.cfg.Log.Info("draining forever", "device", d.ID, "deployment", id)
			return nil
		}
		if err := sleep(ctx, d.cfg.DrainTime); err != nil {
			return err
		}
		if err := d.report(ctx, id, "installing", comps, map[string]any{"phase": "drained", "inFlight": 0}); err != nil {
			return err
		}
	} else if err := d.report(ctx, id, "installing", comps, nil); err != nil {
		return err
	}
	if err := sleep(ctx, d.cfg.InstallTime); err != nil {
		return err
	}
	d.cfg.mu.Lock()
	fail := d.cfg.Rand.Float64() < d.cfg.FailRate
	d.cfg.mu.Unlock()
	state := "installed"
	if fail {
		state = "failed"
	}
	d.cfg.Log.Info("applied", "device", d.ID, "deployment", id, "state", state, "manifestVersion", d.version)
	return d.report(ctx, id, state, comps, nil)
}

func (d *Device) report(ctx context.Context, id, state string, comps []string, ext map[string]any) error {
	cs := make([]map[string]any, 0, len(comps))
	for _, c := range comps {
		cs = append(cs, map[string]any{"name": c, "state": state})
	}
	body := map[string]any{"deploymentId": id, "deviceId": d.ID, "adoptedManifestVersion": d.version,
		"status": map[string]any{"state": state}, "components": cs}
	if ext != nil {
		body["x-wfm-extensions"] = ext
	}
	res, b, err := d.do(ctx, http.MethodPost, "/api/v1/deployments/"+id+"/status", body)
	if err != nil {
		return err
	}
	if res.StatusCode >= 300 {
		return fmt.Errorf("report %s %s: %d %s", id, state, res.StatusCode, b)
	}
	return nil
}

// Run registers the device and syncs it every Poll until ctx ends.
func (d *Device) Run(ctx context.Context) error {
	if err := d.Register(ctx); err != nil {
		return err
	}
	t := time.NewTicker(d.cfg.Poll)
	defer t.Stop()
	for {
		if _, err := d.Sync(ctx); err != nil && ctx.Err() == nil {
			d.cfg.Log.Warn("sync failed", "device", d.ID, "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
