package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wfm-dev/wfm/internal/devicesim"
)

// targetVersion is the version rollouts upgrade the benchmark application
// to: appDescription with another version, published next to it.
const targetVersion = "2.0"

// uploadTarget adds targetVersion of the benchmark application.
func (a *api) uploadTarget(ctx context.Context) error {
	desc := bytes.Replace(appDescription, []byte(`version: "`+appVersion+`"`), []byte(`version: "`+targetVersion+`"`), 1)
	if bytes.Equal(desc, appDescription) {
		return errors.New("app.yaml: no version line to replace")
	}
	_, _, err := a.do(ctx, http.MethodPost, a.s.mgmt+"/mgmt/v1/applications", a.mgmtHeader("application/yaml"), desc, http.StatusCreated, http.StatusOK)
	return err
}

// upgradeRollout is the body of a rollout that upgrades every deployment of
// the benchmark application to targetVersion in the given waves.
func upgradeRollout(waves []map[string]any, maxInFlight int) []byte {
	b, _ := json.Marshal(map[string]any{
		"applicationId": appID, "action": "upgrade", "upgrade": map[string]any{"targetVersion": targetVersion},
		"target": map[string]any{}, "waves": waves, "maxInFlight": maxInFlight,
	})
	return b
}

// rolloutView is what the bench reads of a rollout.
type rolloutView struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Waves []struct {
		ResolvedSize int            `json:"resolvedSize"`
		Counts       map[string]int `json:"counts"`
	} `json:"waves"`
}

// published is how many members of wave i were started (their operation
// created): every member not pending.
func (r rolloutView) published(i int) int {
	if i >= len(r.Waves) {
		return 0
	}
	n := 0
	for status, c := range r.Waves[i].Counts {
		if status != "pending" && status != "excluded" {
			n += c
		}
	}
	return n
}

// planRollout asks for the plan of body and returns its eligible count.
func (a *api) planRollout(ctx context.Context, body []byte) (int, error) {
	_, b, err := a.do(ctx, http.MethodPost, a.s.mgmt+"/mgmt/v1/rollouts/plan", a.mgmtHeader("application/json"), body, http.StatusOK)
	if err != nil {
		return 0, err
	}
	var p struct {
		Eligible int `json:"eligible"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return 0, fmt.Errorf("rollout plan: %w", err)
	}
	return p.Eligible, nil
}

// activeOperations reports whether any operation is still queued or
// running (one page of one item each).
func (a *api) activeOperations(ctx context.Context) (bool, error) {
	for _, state := range []string{"running", "queued"} {
		_, b, err := a.do(ctx, http.MethodGet, a.s.mgmt+"/mgmt/v1/operations?limit=1&state="+state, a.mgmtHeader("application/json"), nil, http.StatusOK)
		if err != nil {
			return false, err
		}
		var page struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return false, fmt.Errorf("operations: %w", err)
		}
		if len(page.Items) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// waitSettled waits, polling, until no operation is queued or running (the
// scheduler settled the installs the agents reported), at most limit, and
// returns how long it waited and whether it got there.
func (a *api) waitSettled(ctx context.Context, limit time.Duration) (time.Duration, bool, error) {
	start := time.Now()
	for time.Since(start) < limit {
		busy, err := a.activeOperations(ctx)
		if err != nil {
			return time.Since(start), false, err
		}
		if !busy {
			return time.Since(start), true, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(start), false, nil
}

// createRollout starts the rollout of body.
func (a *api) createRollout(ctx context.Context, body []byte) (rolloutView, error) {
	_, b, err := a.do(ctx, http.MethodPost, a.s.mgmt+"/mgmt/v1/rollouts", a.mgmtHeader("application/json"), body, http.StatusCreated)
	if err != nil {
		return rolloutView{}, err
	}
	var r rolloutView
	if err := json.Unmarshal(b, &r); err != nil || r.ID == "" {
		return r, fmt.Errorf("create rollout: no id in %.200s", b)
	}
	return r, nil
}

// rollout reads a rollout.
func (a *api) rollout(ctx context.Context, id string) (rolloutView, error) {
	_, b, err := a.do(ctx, http.MethodGet, a.s.mgmt+"/mgmt/v1/rollouts/"+id, a.mgmtHeader("application/json"), nil, http.StatusOK)
	if err != nil {
		return rolloutView{}, err
	}
	var r rolloutView
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("rollout %s: %w", id, err)
	}
	return r, nil
}

// waitRollout reads the rollout every 20 ms until done says so, limit
// passes or ctx ends; it returns the last view read.
func (a *api) waitRollout(ctx context.Context, id string, limit time.Duration, done func(rolloutView) bool) (rolloutView, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last rolloutView // the last view read: what a cut wait reports
	for {
		r, err := a.rollout(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return last, false, nil
			}
			return last, false, err
		}
		last = r
		if done(r) {
			return r, true, nil
		}
		select {
		case <-ctx.Done():
			return last, false, nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// fleetRolloutFigures measures, on the seeded fleet of fleetFigures
// (deployments of every client, all at appVersion), the rollout figures of
// design section 11 and issue 12: the plan of an upgrade of all of them to
// targetVersion (a fleet dry run; < 2 s at 100,000) and the start of that
// rollout until its membership is resolved and its first wave of 1% is
// published (< 5 s). The rollout's first wave is what the memory scenario
// includes; the second wave waits for an approval that never comes.
//
// It also returns the clients of the first wave's members: the wave
// changed their manifests, which the memory scenario has polled again.
func fleetRolloutFigures(ctx context.Context, b *bench, a *api, deployments int) ([]Figure, []string, error) {
	if err := a.uploadTarget(ctx); err != nil {
		return nil, nil, err
	}
	body := upgradeRollout([]map[string]any{
		{"size": map[string]any{"percent": 1}},
		{"size": map[string]any{"percent": 100}, "approval": "manual"},
	}, 10000)
	var figs []Figure
	// The dry run is of a fleet at rest: the installs its agents reported
	// are settled by the scheduler first (bounded; said in the figures'
	// notes when cut).
	settled, atRest, err := a.waitSettled(ctx, b.phaseCap(2*time.Minute))
	if err != nil {
		return figs, nil, err
	}
	fmt.Fprintf(b.cfg.log, "installs settled by the scheduler in %s (at rest: %v)\n", settled.Round(time.Millisecond), atRest)
	rest := fmt.Sprintf("the fleet at rest: the installs its agents reported settled by the scheduler (waited %s)", settled.Round(time.Second))
	if !atRest {
		rest = fmt.Sprintf("NOT at rest: installs still being settled by the scheduler after %s", settled.Round(time.Second))
	}
	start := time.Now()
	eligible, err := a.planRollout(ctx, body)
	planned := time.Since(start)
	if err != nil {
		return figs, nil, err
	}
	fmt.Fprintf(b.cfg.log, "rollout plan over %d deployments: %d eligible in %s\n", deployments, eligible, planned.Round(time.Millisecond))
	figs = append(figs, Figure{Name: "rollout-plan", Value: planned.Seconds(), Unit: "s", Ratio: planned.Seconds() / 2, Baseline: "the 2 s target",
		Target: "< 2 s", Notes: []string{fmt.Sprintf("POST /mgmt/v1/rollouts/plan, upgrade of %d deployments (%d eligible)", deployments, eligible), rest}})

	start = time.Now()
	r, err := a.createRollout(ctx, body)
	if err != nil {
		return figs, nil, err
	}
	created := time.Since(start)
	want := 0
	if len(r.Waves) > 0 {
		want = r.Waves[0].ResolvedSize
	}
	r, ok, err := a.waitRollout(ctx, r.ID, b.phaseCap(time.Minute), func(r rolloutView) bool { return want > 0 && r.published(0) >= want })
	started := time.Since(start)
	if err != nil {
		return figs, nil, err
	}
	note := fmt.Sprintf("POST /mgmt/v1/rollouts (membership resolved in %s) until the first wave (1%%, %d members) is published, over %d deployments",
		created.Round(time.Millisecond), want, deployments)
	if !ok {
		note += fmt.Sprintf("; NOT COMPLETE: %d of %d published when the wait ended", r.published(0), want)
	}
	fmt.Fprintf(b.cfg.log, "rollout start: %d of %d first-wave members published in %s\n", r.published(0), want, started.Round(time.Millisecond))
	figs = append(figs, Figure{Name: "rollout-start", Value: started.Seconds(), Unit: "s", Ratio: started.Seconds() / 5, Baseline: "the 5 s target",
		Target: "< 5 s", Notes: []string{note, rest}})
	// The figures stand whatever the listing gives: without it, the memory
	// figure's note says no client polled again.
	clients, err := a.waveClients(ctx, r.ID, 1)
	if err != nil {
		fmt.Fprintf(b.cfg.log, "first-wave clients: %v\n", err)
	}
	return figs, clients, nil
}

// waveClients lists the distinct clients of a rollout's members in wave
// (from 1), paging through GET /mgmt/v1/rollouts/{id}/members.
func (a *api) waveClients(ctx context.Context, id string, wave int) ([]string, error) {
	var clients []string
	seen := map[string]bool{}
	cursor := ""
	for {
		u := fmt.Sprintf("%s/mgmt/v1/rollouts/%s/members?wave=%d&limit=500", a.s.mgmt, id, wave)
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		_, b, err := a.do(ctx, http.MethodGet, u, a.mgmtHeader("application/json"), nil, http.StatusOK)
		if err != nil {
			return nil, err
		}
		var page struct {
			Items []struct {
				ClientID string `json:"clientId"`
			} `json:"items"`
			NextCursor string `json:"nextCursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, fmt.Errorf("rollout members: %w", err)
		}
		for _, m := range page.Items {
			if !seen[m.ClientID] {
				seen[m.ClientID] = true
				clients = append(clients, m.ClientID)
			}
		}
		if page.NextCursor == "" {
			return clients, nil
		}
		cursor = page.NextCursor
	}
}

// rolloutFigures measures how fast the scheduler drives a rollout whose
// members are all in flight at once: -rollout-members clients × 1 device
// with a deployment each, simulated agents (internal/devicesim, answering
// at once: no install time) that installed revision 1, then one rollout
// upgrading all of them to targetVersion in one wave with maxInFlight equal
// to the member count, the agents syncing in a loop until it succeeds.
func rolloutFigures(ctx context.Context, b *bench) ([]Figure, error) {
	cfg := b.cfg
	n := cfg.rolloutMembers
	s, err := b.startServer(ctx, "rollout", "info")
	if err != nil {
		return nil, err
	}
	defer s.stop()
	a := newAPI(s, cfg.workers)
	defer a.close()
	if err := a.uploadApp(ctx); err != nil {
		return nil, err
	}
	devices := make([]*devicesim.Device, n)
	for i := range devices {
		c := &devicesim.Config{BaseURL: s.device, HTTP: a.hc, ClientID: fmt.Sprintf("r%06d", i), Retry: devicesim.Retry{Attempts: 20, Base: 50 * time.Millisecond, Max: time.Second}}
		devices[i] = devicesim.NewDevice(c, fmt.Sprintf("d%06d", i))
	}
	// The agents register through the device API; their deployments are
	// created by the harness as a second replica (see replica), in batches.
	seed, err := b.phase(ctx, fmt.Sprintf("register %d clients × 1 device", n), n, cfg.seedCap, func(ctx context.Context, i int) error {
		return devices[i].Register(ctx)
	})
	if err != nil {
		return nil, err
	}
	registered := seed.okItems()
	rep, err := newReplica(ctx, s)
	if err != nil {
		return nil, err
	}
	defer rep.close()
	pairs := make([][2]string, len(registered))
	for k, i := range registered {
		pairs[k] = [2]string{fmt.Sprintf("r%06d", i), devices[i].ID}
	}
	start := time.Now()
	created, err := rep.createBatches(ctx, pairs, 1000, 2, b.phaseCap(cfg.seedCap))
	var members []int
	for k, ok := range created {
		if ok {
			members = append(members, registered[k])
		}
	}
	fmt.Fprintf(cfg.log, "create %d deployments (fleet service batches of 1,000, a second replica): %d in %s\n", len(pairs), len(members), time.Since(start).Round(time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("seed deployments: %w", err)
	}
	inst, err := b.phase(ctx, fmt.Sprintf("agents install revision 1 (%d)", len(members)), len(members), cfg.seedCap, func(ctx context.Context, k int) error {
		// The server cached the client's empty manifest at its
		// registration and hears of the second replica's creation by a
		// notification: the agent syncs once the server serves it.
		client := fmt.Sprintf("r%06d", members[k])
		for try := 0; ; try++ {
			m, _, err := a.poll(ctx, client)
			if err != nil {
				return err
			}
			if len(m.Deployments) > 0 {
				break
			}
			if try == 300 {
				return fmt.Errorf("client %s: the server still serves a manifest without its deployment after 30 s", client)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		_, err := devices[members[k]].Sync(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := a.uploadTarget(ctx); err != nil {
		return nil, err
	}
	body := upgradeRollout([]map[string]any{{"size": map[string]any{"percent": 100}}}, max(1, min(inst.done, 10000)))
	// An install ends when the scheduler has seen its report; a member whose
	// install is still active would be excluded as busy: plan until every
	// installed member is eligible (bounded).
	for wait := time.Now(); ; {
		eligible, err := a.planRollout(ctx, body)
		if err != nil {
			return nil, err
		}
		if eligible >= inst.done || time.Since(wait) > 30*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The scheduler settles the installs the agents reported (one visit
	// each) before the drive is measured: the figure is the drive of the
	// rollout's members, not of a backlog of seeding (bounded).
	settled, _, err := a.waitSettled(ctx, b.phaseCap(cfg.seedCap))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(b.cfg.log, "installs settled by the scheduler in %s\n", settled.Round(time.Millisecond))
	start = time.Now()
	r, err := a.createRollout(ctx, body)
	if err != nil {
		return nil, err
	}
	want := 0
	if len(r.Waves) > 0 {
		want = r.Waves[0].ResolvedSize
	}
	// The agents sync in a loop until the rollout ends.
	// Worker w syncs the members w, w+workers, ... (a simulated device is
	// one agent: never synced by two workers at once).
	stop := make(chan struct{})
	var syncs atomic.Int64
	var wg sync.WaitGroup
	for w := range min(cfg.workers, len(members)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; ; k += cfg.workers {
				if k >= len(members) {
					k = w
				}
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				if _, err := devices[members[k]].Sync(ctx); err == nil {
					syncs.Add(1)
				}
			}
		}()
	}
	r, ok, err := a.waitRollout(ctx, r.ID, b.phaseCap(cfg.createCap), func(r rolloutView) bool { return r.State != "running" })
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	done := 0
	if len(r.Waves) > 0 {
		done = r.Waves[0].Counts["succeeded"] + r.Waves[0].Counts["failed"]
	}
	rate := float64(done) / elapsed.Seconds()
	fmt.Fprintf(b.cfg.log, "rollout of %d members in flight: %d ended in %s (%.0f/s), state %s, %d agent syncs\n", want, done, elapsed.Round(time.Millisecond), rate, r.State, syncs.Load())
	note := fmt.Sprintf("one wave of %d members, maxInFlight %d, %d simulated agents syncing in a loop (%d workers) with no install time; from POST /mgmt/v1/rollouts to the rollout's end (state %s)",
		want, min(inst.done, 10000), len(members), cfg.workers, r.State)
	if !ok {
		note += fmt.Sprintf("; NOT COMPLETE: %d of %d ended when the wait was cut", done, want)
	}
	return []Figure{{Name: fmt.Sprintf("rollout-drive-%d", n), Value: rate, Unit: "operations/s", Notes: nonEmpty(note, seed.capNote("deployments created"), inst.capNote("agents installed"))}}, nil
}
