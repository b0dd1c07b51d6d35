//! A quick version (seconds per cell) of every shipped experiment, on the real kernel: every cell
//! runs or is refused with its reason, the report has its sections and its numbers are there and
//! well-formed. What the numbers say (miss ratios, percentiles) is the full experiment's finding,
//! with intervals, in docs/results.md — a quick run on a stealing VM cannot judge it. Needs root (CI runs as root);
//! holds the kernel lock because it changes cpusets/IRQ affinity and measures latency.

mod common;

use rtslice_bench::aggregate;
use rtslice_bench::experiment::Role;
use rtslice_bench::matrix::Cell;
use rtslice_bench::results::{Results, RunRecord, RunStatus};
use rtslice_bench::Strategy;
use rtslice_testkit::{root_or_skip, KernelLock};

fn cell<'a>(r: &'a Results, id: &str) -> &'a Cell {
    r.cells.iter().find(|c| c.id == id).unwrap_or_else(|| panic!("no cell {id}"))
}

fn ok_runs<'a>(r: &'a Results, id: &str) -> Vec<&'a RunRecord> {
    let c = cell(r, id);
    let runs = aggregate::usable(&r.runs, c);
    assert!(!runs.is_empty(), "cell {id} has no completed run: {:?}", r.runs.iter().filter(|x| x.cell == id).map(|x| &x.status).collect::<Vec<_>>());
    runs
}

/// Runs that did not complete must say why (a skip reason or an error naming the step).
fn every_problem_explained(r: &Results) {
    for x in &r.runs {
        match &x.status {
            RunStatus::Failed { error } => assert!(error.len() > 10, "run {} failed without a usable message: {error:?}", x.seq),
            RunStatus::Skipped { reason } | RunStatus::Refused { reason } => assert!(reason.len() > 10),
            _ => {}
        }
    }
}

#[test]
fn study_a_tables_quick() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let (r, dir) = common::run_quick("study-a-tables.yaml");
    every_problem_explained(&r);
    // The quick file keeps two of the latency block's three scenarios (idle, kernel) and both of
    // the rtt block's.
    assert_eq!(r.cells.len(), 2 * 7 + 2 * 2);
    // The vBS alone on an idle host ran every TTI and delivered throughput.
    let runs = ok_runs(&r, "latency/idle/none");
    let e = aggregate::emu(&runs, None).expect("emulator summary");
    let expected_ttis = (r.experiment.warmup + r.experiment.duration).as_millis() as u64;
    assert!(e.ttis >= expected_ttis * 9 / 10, "{} TTIs, expected about {expected_ttis}", e.ttis);
    // How many deadlines it meets is this study's finding, measured by the full run with intervals
    // (docs/results.md); the quick run only shows the path works end to end.
    eprintln!("idle vBS: {} of {} TTIs missed", e.misses, e.ttis);
    assert!(e.throughput.iter().all(|t| *t > 1e5), "throughput {:?}", e.throughput);
    // Its threads' wake-up latency is in study A's buckets, with events, for the RT threads.
    let buckets = aggregate::thread_buckets(&runs);
    for t in ["ru-thread", "lte-softmodem", "fep_processing", "feptx_thread"] {
        let b = buckets.get(t).unwrap_or_else(|| panic!("no latency histogram for {t}: {:?}", buckets.keys().collect::<Vec<_>>()));
        let shares = aggregate::shares(b).unwrap_or_else(|| panic!("{t} saw no wake-up"));
        assert!((shares.iter().sum::<f64>() - 100.0).abs() < 1e-6);
    }
    // isolcpus runs only where the host booted with it, and says so otherwise.
    let iso = r.runs.iter().find(|x| x.cell == "latency/idle/isolcpus").unwrap();
    if r.machine.isolated.is_empty() {
        assert!(matches!(&iso.status, RunStatus::Skipped { reason } if reason.contains("isolcpus=")));
    }
    // Every other strategy ran in every scenario.
    for c in r.cells.iter().filter(|c| c.block_name == "latency" && c.strategy != Strategy::Isolcpus) {
        ok_runs(&r, &c.id);
    }
    // Ping RTTs: many samples, sub-50 ms, for every cell.
    for c in r.cells.iter().filter(|c| c.block_name == "rtt") {
        let s = aggregate::latency_samples(&ok_runs(&r, &c.id));
        assert!(s.len() >= 50, "{}: {} RTT samples", c.id, s.len());
        let m = rtslice_bench::stats::median(&s).unwrap();
        assert!(m > 1.0 && m < 50_000.0, "{}: median RTT {m} µs", c.id);
    }
    let html = common::check_report(dir.path(), &["overview", "latency", "rtt", "counters", "problems", "machine"]);
    assert!(html.contains("Scheduling latency, noA"), "study A's table for no affinity");
    assert!(html.contains("Scheduling latency, IA-TA"));
    assert!(html.contains("0–1 µs idle") && html.contains("0–1 µs kernel"));
    assert!(html.contains("ECDF of round-trip"));
}

#[test]
fn study_a_cloudran_quick() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let (r, dir) = common::run_quick("study-a-cloudran.yaml");
    every_problem_explained(&r);
    for id in ["cloudran/idle/none", "cloudran/idle/irq+wide"] {
        let runs = ok_runs(&r, id);
        for w in ["vbbu1", "vbbu2"] {
            let e = aggregate::emu(&runs, Some(w)).unwrap_or_else(|| panic!("{id}: no summary of {w}"));
            assert!(e.ttis > 0 && e.throughput.iter().all(|t| *t >= 0.0));
        }
        assert!(aggregate::neighbour_ops(&runs).is_some_and(|o| o > 0.0), "{id}: container A's bogo-ops");
    }
    let html = common::check_report(dir.path(), &["overview", "cloudran"]);
    assert!(html.contains("Deadlines and throughput of vbbu1") && html.contains("Deadlines and throughput of vbbu2"));
}

#[test]
fn study_b_noise_quick() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let (r, dir) = common::run_quick("study-b-noise.yaml");
    every_problem_explained(&r);
    // The reservation cells depend on the host's mechanisms (SCHED_DEADLINE admission, RT
    // budgets); a failure there must be explained (checked above), the CFS cells must work.
    for c in r.cells.iter().filter(|c| c.strategy == Strategy::None || !aggregate::usable(&r.runs, c).is_empty()) {
        let runs = ok_runs(&r, &c.id);
        let s = aggregate::latency_samples(&runs);
        assert!(s.len() >= 100, "{}: {} response times", c.id, s.len());
        let sum = rtslice_bench::stats::Summary::of(&s).unwrap();
        // A request carries ~500 µs of work on average: responses take at least some of it.
        assert!(sum.median > 50.0 && sum.p99 >= sum.median, "{}: {sum:?}", c.id);
    }
    // Issue 18: the reservation holds next to rt-app's FIFO tasks (the planner counts them as foreign
    // real-time bandwidth): every cell, the reservation under noise included, completes.
    for c in &r.cells {
        ok_runs(&r, &c.id);
    }
    let html = common::check_report(dir.path(), &["overview", "server"]);
    assert!(html.contains("ECDF of round-trip / response time"));
}

#[test]
fn study_c_density_quick() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let (r, dir) = common::run_quick("study-c-density.yaml");
    every_problem_explained(&r);
    let cpu = |id: &str| aggregate::cpu_p95(&ok_runs(&r, id), Role::Measured).unwrap_or_else(|| panic!("{id}: no CPU samples"));
    let (one, three) = (cpu("density/n=1/idle/none"), cpu("density/n=3/idle/none"));
    assert!(one > 0.01 && three > one, "CPU grows with the vBS count: n=1 {one}, n=3 {three}");
    let sw = aggregate::switches_per_ms(&ok_runs(&r, "density/n=1/idle/wide")).unwrap();
    assert!(sw > 0.1, "a vBS switches at least every few ms: {sw}/ms");
    // Study C's container variants run (no skip): CPU per vBS with and without seccomp and netns.
    for v in ["container", "seccomp", "netns"] {
        for n in [1, 3] {
            let id = format!("isolation-overhead/{v} n={n}/idle/none");
            let c = cpu(&id);
            assert!(c > 0.01, "{id}: the containerised vBS ran: {c}");
        }
    }
    let html = common::check_report(dir.path(), &["overview", "density", "isolation-overhead", "counters"]);
    assert!(html.contains("CPU use vs number of vBS") && html.contains("ideal"));
    if !r.runs.iter().any(|x| x.counters.available) {
        assert!(html.contains("IPC and MPKI are unavailable on this host"));
    }
}

#[test]
fn density_quick() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let (r, dir) = common::run_quick("density.yaml");
    every_problem_explained(&r);
    // The floor (one vBS alone, idle) runs long enough to claim 1e-3 if it misses nothing.
    let floor = r.cells.iter().find(|c| c.block_name == "floor").expect("floor cell");
    let runs = ok_runs(&r, &floor.id);
    assert!(runs[0].measured().all(|i| i.emu.as_ref().is_some_and(|e| e.ttis >= 2995)), "floor TTIs");
    // Every run of the density block completed or was refused, with the reason, by admission:
    // the planner (dedicated cores run out on small hosts; a peak-sized reservation may not fit
    // next to the rt-app noise) or the host's mechanism (cgroup v1 RT groups sum every group's
    // share against one ratio): such a run "did not fit" (its own status, not a failure), with the
    // reason. Nothing may fail.
    for x in r.runs.iter().filter(|x| x.block == "density") {
        match &x.status {
            RunStatus::Failed { error } => panic!("run {} ({}) failed: {error}", x.seq, x.cell),
            RunStatus::Refused { reason } => {
                assert!(reason.contains("planner rejected") || reason.contains("rejected before touching anything"), "{reason}")
            }
            _ => {}
        }
    }
    // One vBS under no isolation is always admitted: its run has the numbers the tables need.
    for c in r.cells.iter().filter(|c| c.block_name == "density" && c.variant_name == "n=1" && c.strategy == Strategy::None) {
        let runs = ok_runs(&r, &c.id);
        assert!(aggregate::neighbour_ops(&runs).is_some_and(|o| o > 0.0), "{}: neighbour bogo-ops", c.id);
        let e = runs[0].measured().next().and_then(|i| i.emu.as_ref()).expect("vBS summary");
        assert!(e.raw["offered_load_mean_percent"].as_f64().unwrap() < e.raw["offered_load_peak_percent"].as_f64().unwrap(), "busy-hour traffic varies");
    }
    let html = common::check_report(dir.path(), &["overview", "density"]);
    assert!(html.contains("Density at an SLO"));
    for s in ["Dedicated", "noA", "Peak-sized", "SLO-sized"] {
        assert!(html.contains(&format!("<td>{s}</td>")), "density row for {s}");
    }
}

#[test]
fn frontier_quick() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let (r, dir) = common::run_quick("frontier.yaml");
    every_problem_explained(&r);
    // `reservation` shares CPUs with the neighbour through RT-group throttling, which a host may
    // lack (cgroup v2): there a failure with its reason is acceptable, the others must run.
    for c in r.cells.iter().filter(|c| c.strategy != Strategy::Reservation || !aggregate::usable(&r.runs, c).is_empty()) {
        let runs = ok_runs(&r, &c.id);
        assert!(aggregate::neighbour_ops(&runs).is_some_and(|o| o > 0.0), "{}: neighbour bogo-ops", c.id);
        let m = aggregate::emu(&runs, None).and_then(|e| e.miss_ratio()).unwrap();
        assert!((0.0..=1.0).contains(&m));
    }
    let html = common::check_report(dir.path(), &["overview", "frontier"]);
    assert!(html.contains("Efficiency frontier"));
    for s in ["Dedicated", "Shield", "Reservation", "noA"] {
        assert!(html.contains(&format!("<td>{s}</td>")), "frontier row for {s}");
    }
}
