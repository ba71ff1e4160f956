package main

import (
	"context"
	"fmt"
	"time"
)

// fleetFigures seeds one server through the public APIs and measures, on
// the way:
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
	s, err := b.startServer(ctx, "fleet", "error")
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

	// clients × 1 device
	reg1, err := b.phase(ctx, fmt.Sprintf("register %d clients × 1 device", cfg.singles), cfg.singles, cfg.seedCap, func(ctx context.Context, i int) error {
		c, d := single(i)
		return a.register(ctx, c, d)
	})
	if err != nil {
		return figs, err
	}
	items1 := reg1.okItems()
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
			reg1.capNote("devices registered"), cr1.capNote("deployments created"))})

	// 1 client × gateway devices
	regG, err := b.phase(ctx, fmt.Sprintf("register 1 client × %d devices", cfg.gateway), cfg.gateway, cfg.seedCap, func(ctx context.Context, i int) error {
		return a.register(ctx, gateway, gwDevice(i))
	})
	if err != nil {
		return figs, err
	}
	itemsG := regG.okItems()
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
			regG.capNote("devices registered"), crG.capNote("deployments created"))}
	if cr1.rate() > 0 {
		g.Ratio = crG.rate() / cr1.rate()
	}
	figs = append(figs, g)

	// The rest of the memory scenario: more clients × 1 device.
	restN := cfg.fleet - cfg.singles
	rest, err := b.phase(ctx, fmt.Sprintf("seed %d more clients × 1 device (register, create)", restN), restN, cfg.seedCap, func(ctx context.Context, k int) error {
		c, d := single(cfg.singles + k)
		if err := a.register(ctx, c, d); err != nil {
			return err
		}
		_, err := a.create(ctx, c, d)
		return err
	})
	if err != nil {
		return figs, err
	}
	// Every client with a deployment polls its manifest once.
	var pollers []string
	for _, k := range cr1.okItems() {
		c, _ := single(items1[k])
		pollers = append(pollers, c)
	}
	for _, k := range rest.okItems() {
		c, _ := single(cfg.singles + k)
		pollers = append(pollers, c)
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
	// below finds them done with their install (not busy).
	type installed struct {
		client, id string
		version    uint64
	}
	var reports []installed
	for k, ids := range listed {
		for _, id := range ids {
			reports = append(reports, installed{pollers[k], id, versions[k]})
		}
	}
	reported, err := b.phase(ctx, fmt.Sprintf("report %d deployments installed", len(reports)), len(reports), cfg.seedCap, func(ctx context.Context, k int) error {
		r := reports[k]
		return a.reportInstalled(ctx, r.client, r.id, r.version)
	})
	if err != nil {
		return figs, err
	}
	// The fleet dry run and the first rollout wave of 1% (the rest of the
	// scenario), measured on the way.
	rfigs, err := fleetRolloutFigures(ctx, b, a, reported.done)
	if err != nil {
		// The memory figure is still taken; the rollout lines say why not.
		fmt.Fprintf(b.cfg.log, "rollout figures: %v\n", err)
		rfigs = []Figure{{Name: "rollout-plan", Absent: "error: " + err.Error()}, {Name: "rollout-start", Absent: "error: " + err.Error()}}
	}
	figs = append(figs, rfigs...)
	rss, hwm, err := s.memory()
	if err != nil {
		return figs, err
	}
	singles := cr1.done + rest.done
	scenario := fmt.Sprintf("%d clients × 1 + 1 client × %d deployments, %d clients polled once, after a fleet dry run (rollout plan) over all of them and a first rollout wave of 1%% (design §11 scenario)",
		singles, crG.done, polled.done)
	var incomplete string
	if singles < cfg.fleet || crG.done < cfg.gateway || polled.done < len(pollers) {
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
