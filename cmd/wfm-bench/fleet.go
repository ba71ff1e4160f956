package main

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// fleetFigures seeds one server with the scenario of design section 11 and
// measures, on the way (what is seeded how: every device registered with
// COPY; the measured creations through the management API; the rest of the
// deployments by the harness as a second replica, through the fleet
// service's batch path; every manifest polled once through the device API
// of the server under test; the agents' reports through the second
// replica's device API code; see replica):
//   - creations per second, -workers concurrent POST /mgmt/v1/deployments,
//     one new deployment per (already registered) device, for -clients
//     clients × 1 device and then for 1 gateway client × -gateway-devices
//     devices (issue 11: >= 1,000/s each, the gateway shape >= half the
//     other);
//   - the rollout plan over all of its deployments and the start of an
//     upgrade rollout until its first wave of 1% is published
//     (fleetRolloutFigures);
//   - the server's memory in the scenario of design section 11: the same
//     server filled up to -fleet-clients clients × 1 device next to the
//     gateway, one deployment per device, every client having polled its
//     manifest once, after that dry run and first wave.
func fleetFigures(ctx context.Context, b *bench) ([]Figure, error) {
	cfg := b.cfg
	s, err := b.startServer(ctx, "fleet", "info")
	if err != nil {
		return nil, err
	}
	defer s.stop()
	a := newAPI(s, cfg.workers)
	defer a.close()
	if err := a.uploadApp(ctx); err != nil {
		return nil, err
	}
	single := func(i int) (client, device string) { return fmt.Sprintf("c%06d", i), fmt.Sprintf("d%06d", i) }
	const gateway = "gateway"
	gwDevice := func(i int) string { return fmt.Sprintf("gw%06d", i) }
	var figs []Figure

	// Every device of the scenario registered at once, with COPY, by the
	// harness as a second replica (see replica): registration is not a
	// figure, and through the device API it would take minutes of the
	// run's budget.
	rep, err := newReplica(ctx, s)
	if err != nil {
		return figs, err
	}
	defer rep.close()
	singlePairs := make([][2]string, cfg.fleet)
	for i := range singlePairs {
		c, d := single(i)
		singlePairs[i] = [2]string{c, d}
	}
	gwPairs := make([][2]string, cfg.gateway)
	for i := range gwPairs {
		gwPairs[i] = [2]string{gateway, gwDevice(i)}
	}
	start := time.Now()
	if err := rep.registerCopy(ctx, append(slices.Clip(singlePairs), gwPairs...)); err != nil {
		return figs, fmt.Errorf("register the devices: %w", err)
	}
	fmt.Fprintf(cfg.log, "register %d clients × 1 device and 1 client × %d devices (COPY): %s\n", cfg.fleet, cfg.gateway, time.Since(start).Round(time.Millisecond))

	// clients × 1 device
	items1 := seq(cfg.singles)
	cr1, err := b.phase(ctx, fmt.Sprintf("create %d deployments, one per client", len(items1)), len(items1), cfg.createCap, func(ctx context.Context, k int) error {
		c, d := single(items1[k])
		_, err := a.create(ctx, c, d)
		return err
	})
	if err != nil {
		return figs, err
	}
	name1 := fmt.Sprintf("create-%dx1", cfg.singles)
	figs = append(figs, Figure{Name: name1, Value: cr1.rate(), Unit: "deployments/s", Target: ">= 1000/s",
		Notes: nonEmpty(fmt.Sprintf("%d clients × 1 device, %d concurrent POST /mgmt/v1/deployments, one new deployment per device", cfg.singles, cfg.workers),
			cr1.capNote("deployments created"))})

	// 1 client × gateway devices
	itemsG := seq(cfg.gateway)
	crG, err := b.phase(ctx, fmt.Sprintf("create %d deployments of one client", len(itemsG)), len(itemsG), cfg.createCap, func(ctx context.Context, k int) error {
		_, err := a.create(ctx, gateway, gwDevice(itemsG[k]))
		return err
	})
	if err != nil {
		return figs, err
	}
	g := Figure{Name: fmt.Sprintf("create-1x%d", cfg.gateway), Value: crG.rate(), Unit: "deployments/s", Baseline: name1,
		Target: ">= 1000/s, and >= 50% of " + name1,
		Notes: nonEmpty(fmt.Sprintf("1 client × %d devices, %d concurrent POST /mgmt/v1/deployments, one new deployment per device", cfg.gateway, cfg.workers),
			crG.capNote("deployments created"))}
	if cr1.rate() > 0 {
		g.Ratio = crG.rate() / cr1.rate()
	}
	figs = append(figs, g)

	// The rest of the memory scenario, more clients × 1 device: their
	// deployments created by the harness as a second replica, through the
	// fleet service's batch path.
	restN := cfg.fleet - cfg.singles
	restPairs := singlePairs[cfg.singles:]
	start = time.Now()
	restCreated, err := rep.createBatches(ctx, restPairs, 1000, 2, b.phaseCap(cfg.seedCap))
	var restOK [][2]string
	for k, ok := range restCreated {
		if ok {
			restOK = append(restOK, restPairs[k])
		}
	}
	restDone := len(restOK)
	fmt.Fprintf(cfg.log, "create %d deployments of them (fleet service batches of 1,000, a second replica): %d in %s (%.0f/s)\n",
		restN, restDone, time.Since(start).Round(time.Millisecond), float64(restDone)/time.Since(start).Seconds())
	if err != nil {
		return figs, fmt.Errorf("seed deployments: %w", err)
	}
	// Every client with a deployment polls its manifest once, through the
	// server under test (its manifest cache is part of the memory figure).
	var pollers []string
	for _, k := range cr1.okItems() {
		c, _ := single(items1[k])
		pollers = append(pollers, c)
	}
	for _, p := range restOK {
		pollers = append(pollers, p[0])
	}
	if crG.done > 0 {
		pollers = append(pollers, gateway)
	}
	versions := make([]uint64, len(pollers))
	listed := make([][]string, len(pollers))
	polled, err := b.phase(ctx, fmt.Sprintf("poll %d clients once", len(pollers)), len(pollers), cfg.seedCap, func(ctx context.Context, k int) error {
		m, _, err := a.poll(ctx, pollers[k])
		if err == nil && len(m.Deployments) == 0 {
			err = fmt.Errorf("client %s: empty manifest", pollers[k])
		}
		if err == nil {
			versions[k] = m.ManifestVersion
			listed[k], err = m.ids()
		}
		return err
	})
	if err != nil {
		return figs, err
	}
	// The agents report each deployment installed, so that the rollout
	// below finds them done with their install (not busy); through the
	// second replica's device API code.
	var reports []installedReport
	for k, ids := range listed {
		for _, id := range ids {
			reports = append(reports, installedReport{pollers[k], id, versions[k]})
		}
	}
	start = time.Now()
	reported, err := rep.reportInstalled(ctx, reports, cfg.workers, b.phaseCap(cfg.seedCap))
	fmt.Fprintf(cfg.log, "report %d deployments installed (a second replica): %d in %s (%.0f/s)\n",
		len(reports), reported, time.Since(start).Round(time.Millisecond), float64(reported)/time.Since(start).Seconds())
	if err != nil {
		return figs, fmt.Errorf("report installed: %w", err)
	}
	// The fleet dry run and the first rollout wave of 1% (the rest of the
	// scenario), measured on the way.
	rfigs, waveClients, err := fleetRolloutFigures(ctx, b, a, reported)
	if err != nil {
		// The memory figure is still taken; the rollout lines say why not.
		fmt.Fprintf(b.cfg.log, "rollout figures: %v\n", err)
		rfigs = []Figure{{Name: "rollout-plan", Absent: "error: " + err.Error()}, {Name: "rollout-start", Absent: "error: " + err.Error()}}
	}
	figs = append(figs, rfigs...)
	// The wave changed its members' manifests, dropping them from the
	// cache: their clients poll again, so that every client's current
	// manifest is cached when the memory is read (design §11).
	repolled, err := b.phase(ctx, fmt.Sprintf("poll the %d clients of the first wave again", len(waveClients)), len(waveClients), cfg.seedCap, func(ctx context.Context, k int) error {
		_, _, err := a.poll(ctx, waveClients[k])
		return err
	})
	if err != nil {
		// The memory figure is still taken; its note says how many polled.
		fmt.Fprintf(b.cfg.log, "first-wave polls: %v\n", err)
	}
	rss, hwm, err := s.memory()
	if err != nil {
		return figs, err
	}
	singles := cr1.done + restDone
	scenario := fmt.Sprintf("%d clients × 1 + 1 client × %d deployments, %d clients polled once, after a fleet dry run (rollout plan) over all of them and a first rollout wave of 1%% whose %d clients polled again (design §11 scenario)",
		singles, crG.done, polled.done, repolled.done)
	var incomplete string
	if singles < cfg.fleet || crG.done < cfg.gateway || polled.done < len(pollers) || repolled.done < len(waveClients) {
		incomplete = fmt.Sprintf("INCOMPLETE scenario (phases capped): %d of %d deployments", singles+crG.done, cfg.fleet+cfg.gateway)
	}
	const mib = 1 << 20
	figs = append(figs,
		Figure{Name: "rss-fleet", Value: float64(rss) / mib, Unit: "MiB", Ratio: float64(rss) / (300 * mib), Baseline: "the 300 MiB target", Target: "< 300 MiB",
			Notes: nonEmpty("VmRSS of the server process after seeding: "+scenario, incomplete)},
		Figure{Name: "rss-fleet-peak", Value: float64(hwm) / mib, Unit: "MiB", Baseline: "VmHWM, the peak resident set while seeding",
			Notes: nonEmpty(incomplete)},
	)
	return figs, nil
}

// phase runs one load phase with -workers, capped by limit and the run's
// budget, and logs how it went.
func (b *bench) phase(ctx context.Context, what string, n int, limit time.Duration, do func(ctx context.Context, i int) error) (phase, error) {
	p, err := runPhase(ctx, n, b.cfg.workers, b.phaseCap(limit), do)
	capped := ""
	if p.capped {
		capped = fmt.Sprintf(", CAPPED at %s", p.limit.Round(time.Second))
	}
	fmt.Fprintf(b.cfg.log, "%s: %d in %s (%.0f/s)%s\n", what, p.done, p.elapsed.Round(time.Millisecond), p.rate(), capped)
	if err != nil {
		return p, fmt.Errorf("%s: %w", what, err)
	}
	return p, nil
}

func nonEmpty(s ...string) []string {
	var out []string
	for _, x := range s {
		if x != "" {
			out = append(out, x)
		}
	}
	return out
}

// seq is 0, 1, ..., n-1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
