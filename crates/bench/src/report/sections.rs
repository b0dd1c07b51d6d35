//! The sections of a report, each built from the results when they hold its data.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::aggregate::{self as agg, BUCKETS};
use crate::experiment::Role;
use crate::matrix::Cell;
use crate::plots::{self, Bar};
use crate::results::{most_stolen_ms, Results, RunRecord, RunStatus};
use crate::stats::{self, Summary};
use crate::strategy::Strategy;

use super::{Item, Section, Table};

fn f(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.digits$}"),
        _ => "–".into(),
    }
}

fn mbps(bps: f64) -> f64 {
    bps / 1e6
}

fn label(c: &Cell) -> String {
    let mut s = String::new();
    if !c.variant_name.is_empty() {
        s.push_str(&c.variant_name);
        s.push(' ');
    }
    let _ = write!(s, "{} / {}", c.scenario_name, c.strategy.study_label());
    s
}

pub(super) fn overview(r: &Results) -> Section {
    let e = &r.experiment;
    let ok = r.runs.iter().filter(|x| x.status == RunStatus::Ok).count();
    let failed = r.runs.iter().filter(|x| matches!(x.status, RunStatus::Failed { .. })).count();
    let skipped = r.runs.iter().filter(|x| matches!(x.status, RunStatus::Skipped { .. })).count();
    let refused = r.runs.iter().filter(|x| matches!(x.status, RunStatus::Refused { .. })).count();
    let planned = r.cells.len() * e.repetitions as usize;
    let mut items = vec![];
    if !e.description.is_empty() {
        items.push(Item::Para(e.description.trim().to_string()));
    }
    items.push(Item::Para(format!(
        "{} cells × {} repetition(s), {} s measured after {} s warm-up per run{}; runs interleaved (every cell once per round). \
         {ok} run(s) ok, {failed} failed, {skipped} skipped{}{}.",
        r.cells.len(),
        e.repetitions,
        e.duration.as_secs_f64(),
        e.warmup.as_secs_f64(),
        if e.quick { " (--quick)" } else { "" },
        if refused > 0 { format!(", {refused} did not fit (refused by admission: this host's capacity, not a failure)") } else { String::new() },
        if r.interrupted { format!(", stopped by Ctrl-C after {} of {planned} runs", r.runs.len()) } else { String::new() }
    )));
    // Headline: one row per cell, the few numbers an operator reads first.
    let mut t = Table {
        caption: "Headline: one row per cell (medians over runs; a miss ratio's 95 % Clopper-Pearson interval over all its runs' TTIs; \
                  `vs noA`: lower or higher only where the two intervals do not overlap)"
            .into(),
        headers: vec![
            "cell".into(),
            "runs ok".into(),
            "deadline-miss ratio".into(),
            "95 % interval".into(),
            "vs noA".into(),
            "NACKs".into(),
            "throughput median [IQR] Mbit/s".into(),
            "latency p99 µs".into(),
            "CPU p95 (cores)".into(),
            "neighbour ops/s".into(),
        ],
        rows: vec![],
    };
    for c in &r.cells {
        let runs = agg::usable(&r.runs, c);
        if let Some(reason) = agg::skip_reason(&r.runs, c) {
            let short: String = reason.chars().take(60).collect();
            t.rows.push(vec![c.id.clone(), format!("skipped: {short}…"), "".into(), "".into(), "".into(), "".into(), "".into(), "".into(), "".into(), "".into()]);
            continue;
        }
        let total = r.runs.iter().filter(|x| x.cell == c.id).count();
        let emu = agg::emu(&runs, None);
        let thr = emu.as_ref().and_then(|e| Summary::of(&e.throughput));
        let lat = agg::latency_samples(&runs);
        let lat_p99 = if lat.is_empty() {
            emu.as_ref().and_then(|e| stats::median(&e.proc_p99_us))
        } else {
            stats::percentile(&lat, 99.0)
        };
        let ci = emu.as_ref().filter(|e| e.ttis > 0).map(|e| crate::slo_density::interval(e.misses, e.ttis, 0.95));
        t.rows.push(vec![
            c.id.clone(),
            format!("{}/{}", runs.len(), total),
            emu.as_ref().and_then(|e| e.miss_ratio()).map(|m| format!("{m:.2e}")).unwrap_or("–".into()),
            ci.map(|(lo, hi)| format!("[{lo:.1e}, {hi:.1e}]")).unwrap_or("–".into()),
            versus_no_affinity(r, c, ci),
            emu.as_ref().map(|e| e.nacks.to_string()).unwrap_or("–".into()),
            thr.map(|s| format!("{:.2} [{:.2}]", mbps(s.median), mbps(s.iqr()))).unwrap_or("–".into()),
            f(lat_p99, 0),
            f(agg::cpu_p95(&runs, Role::Measured), 2),
            f(agg::neighbour_ops(&runs), 0),
        ]);
    }
    // Drop columns no cell has a value in: a table of dashes tells nothing.
    let keep: Vec<usize> = (0..t.headers.len()).filter(|&k| k < 2 || t.rows.iter().any(|row| !row[k].is_empty() && row[k] != "–")).collect();
    t.headers = keep.iter().map(|&k| t.headers[k].clone()).collect();
    t.rows = t.rows.iter().map(|row| keep.iter().map(|&k| row[k].clone()).collect()).collect();
    items.push(Item::Table(t));
    Section { id: "overview".into(), title: format!("{} — overview", e.title), items }
}

/// How a cell's miss ratio compares with the same block, variant and scenario without isolation
/// (`none`, study A's noA): "lower" or "higher" only when the two 95 % Clopper-Pearson intervals do
/// not overlap, "within noise" when they do — a single short run's difference on a stealing VM is
/// mostly the host's (the demo once headlined a shield "raising" misses 14× on such a difference).
/// The intervals count TTIs as independent trials; a host's stalls make misses come in bursts, so
/// the real uncertainty is wider still, never narrower.
fn versus_no_affinity(r: &Results, c: &Cell, ci: Option<(f64, f64)>) -> String {
    if c.strategy == Strategy::None {
        return "".into();
    }
    let Some((lo, hi)) = ci else { return "".into() };
    let Some(base) = r.cells.iter().find(|b| b.block == c.block && b.variant == c.variant && b.scenario == c.scenario && b.strategy == Strategy::None)
    else {
        return "".into();
    };
    let Some(b) = agg::emu(&agg::usable(&r.runs, base), None).filter(|e| e.ttis > 0) else { return "".into() };
    let (blo, bhi) = crate::slo_density::interval(b.misses, b.ttis, 0.95);
    if hi < blo {
        "lower".into()
    } else if lo > bhi {
        "higher".into()
    } else {
        "within noise".into()
    }
}

/// Study A tables 2–5: per thread, share of wake-up events per bucket, one column per scenario,
/// one table per strategy.
pub(super) fn latency_tables(r: &Results, cells: &[&Cell], s: &mut Section) {
    let block = &r.experiment.blocks[cells.first().map(|c| c.block).unwrap_or(0)];
    let mut any = false;
    let mut stacked: Vec<(String, Vec<f64>)> = vec![];
    for (vi, v) in block.variants.iter().enumerate() {
        for st in &block.strategies {
            let per_scenario: Vec<(String, BTreeMap<String, [u64; 5]>)> = block
                .scenarios
                .iter()
                .enumerate()
                .map(|(si, sc)| {
                    let cell = cells.iter().find(|c| c.variant == vi && c.scenario == si && c.strategy == *st);
                    let runs = cell.map(|c| agg::usable(&r.runs, c)).unwrap_or_default();
                    (sc.name.clone(), agg::thread_buckets(&runs))
                })
                .collect();
            let threads: Vec<String> = {
                let mut t: Vec<String> = per_scenario.iter().flat_map(|(_, m)| m.keys().cloned()).collect();
                t.sort();
                t.dedup();
                t
            };
            if threads.is_empty() {
                continue;
            }
            any = true;
            let mut headers = vec!["thread".to_string()];
            for b in BUCKETS {
                for (sc, _) in &per_scenario {
                    headers.push(format!("{b} µs {sc}"));
                }
            }
            headers.push("events".into());
            let mut rows = vec![];
            for th in &threads {
                let mut row = vec![th.clone()];
                let sh: Vec<Option<[f64; 5]>> = per_scenario.iter().map(|(_, m)| m.get(th).and_then(agg::shares)).collect();
                for k in 0..5 {
                    for x in &sh {
                        row.push(x.map(|a| format!("{:.1}", a[k])).unwrap_or("–".into()));
                    }
                }
                let events: u64 = per_scenario.iter().filter_map(|(_, m)| m.get(th)).map(|b| b.iter().sum::<u64>()).sum();
                row.push(events.to_string());
                rows.push(row);
                for (sc, m) in &per_scenario {
                    if let Some(a) = m.get(th).and_then(agg::shares) {
                        stacked.push((format!("{th} · {sc} · {}", st.study_label()), a.to_vec()));
                    }
                }
            }
            let vname = if v.name.is_empty() { String::new() } else { format!(" ({})", v.name) };
            s.items.push(Item::Table(Table {
                caption: format!(
                    "Scheduling latency, {}{vname}: share of wake-up events (%) per bucket and scenario",
                    st.study_label()
                ),
                headers,
                rows,
            }));
        }
    }
    if any {
        s.items.insert(
            0,
            Item::Para(
                "Wake-up → on-CPU latency per thread (eBPF, all runs of a cell merged; threads with the same name merged), \
                 in study A's log2 µs buckets. Rows are threads; for each bucket one column per interference scenario."
                    .into(),
            ),
        );
        // Keep the plot readable: the vBS's own threads, not the emulator's helper threads (main
        // thread, signal handler) nor, when there are many rows, the non-RT TASK_* threads.
        let helper = |l: &str| l.starts_with("rtslice ·") || l.starts_with("ctrl-c ·");
        let mut rows: Vec<(String, Vec<f64>)> = stacked.iter().filter(|(l, _)| !helper(l)).cloned().collect();
        if rows.len() > 36 {
            rows.retain(|(l, _)| !l.starts_with("TASK_"));
        }
        rows.truncate(60);
        if rows.is_empty() {
            rows = stacked;
        }
        // plotters puts segment 0 at the bottom: reverse so the table's order reads top-down.
        rows.reverse();
        if let Ok(svg) = plots::stacked_shares("Wake-up latency buckets per thread · scenario · strategy", &rows, BUCKETS) {
            s.items.push(Item::Plot(format!("{}-latency-buckets", s.id), svg));
        }
    }
}

pub(super) fn emulator(r: &Results, cells: &[&Cell], s: &mut Section) {
    let block = &r.experiment.blocks[cells.first().map(|c| c.block).unwrap_or(0)];
    // One table per measured emulator workload when there are several (Cloud-RAN: per vBS).
    let emu_workloads: Vec<&str> =
        block.workloads.iter().filter(|w| w.emulate.is_some() && w.role == Role::Measured).map(|w| w.name.as_str()).collect();
    if emu_workloads.is_empty() {
        return;
    }
    let per_workload = emu_workloads.len() > 1;
    let targets: Vec<Option<&str>> = if per_workload { emu_workloads.iter().map(|w| Some(*w)).collect() } else { vec![None] };
    for target in targets {
        let mut t = Table {
            caption: format!(
                "Deadlines and throughput{} (all runs of a cell)",
                target.map(|w| format!(" of {w}")).unwrap_or_default()
            ),
            headers: vec![
                "cell".into(),
                "runs".into(),
                "TTIs".into(),
                "deadline misses".into(),
                "miss ratio".into(),
                "NACKs".into(),
                "throughput median Mbit/s".into(),
                "IQR Mbit/s".into(),
                "processing p99 µs (median over runs)".into(),
            ],
            rows: vec![],
        };
        let mut bars = vec![];
        for c in cells {
            let runs = agg::usable(&r.runs, c);
            let Some(e) = agg::emu(&runs, target) else { continue };
            let thr = Summary::of(&e.throughput);
            t.rows.push(vec![
                label(c),
                runs.len().to_string(),
                e.ttis.to_string(),
                e.misses.to_string(),
                e.miss_ratio().map(|m| format!("{m:.2e}")).unwrap_or("–".into()),
                e.nacks.to_string(),
                f(thr.map(|s| mbps(s.median)), 2),
                f(thr.map(|s| mbps(s.iqr())), 2),
                f(stats::median(&e.proc_p99_us), 0),
            ]);
            if let Some(sm) = thr {
                bars.push(Bar {
                    label: label(c),
                    median: mbps(sm.median),
                    q1: mbps(sm.q1),
                    q3: mbps(sm.q3),
                    group: block.strategies.iter().position(|x| *x == c.strategy).unwrap_or(0),
                });
            }
        }
        if t.rows.is_empty() {
            continue;
        }
        s.items.push(Item::Table(t));
        let name = target.unwrap_or("vbs");
        if let Ok(svg) = plots::bars_iqr(&format!("Throughput of {name}: median with IQR"), "Mbit/s", &bars) {
            s.items.push(Item::Plot(format!("{}-throughput-{name}", s.id), svg));
        }
    }
}

/// RTT / response-time samples (ping, load generator): table with median, IQR, outliers, p99,
/// and an ECDF per scenario group.
pub(super) fn latency_samples(r: &Results, cells: &[&Cell], s: &mut Section) {
    let mut t = Table {
        caption: "Round-trip / response time (µs): all samples of all runs of a cell".into(),
        headers: vec![
            "cell".into(),
            "samples".into(),
            "median".into(),
            "IQR".into(),
            "p99".into(),
            "max".into(),
            "outliers (>1.5 IQR)".into(),
        ],
        rows: vec![],
    };
    let mut series = vec![];
    for c in cells {
        let runs = agg::usable(&r.runs, c);
        let v = agg::latency_samples(&runs);
        let Some(sm) = Summary::of(&v) else { continue };
        t.rows.push(vec![
            label(c),
            sm.n.to_string(),
            format!("{:.0}", sm.median),
            format!("{:.0}", sm.iqr()),
            format!("{:.0}", sm.p99),
            format!("{:.0}", sm.max),
            format!("{:.1}%", sm.outlier_share * 100.0),
        ]);
        series.push((label(c), stats::ecdf_thinned(&v, 400)));
    }
    if t.rows.is_empty() {
        return;
    }
    s.items.push(Item::Table(t));
    if let Ok(svg) = plots::ecdf("ECDF of round-trip / response time", "µs", &series) {
        s.items.push(Item::Plot(format!("{}-ecdf", s.id), svg));
    }
}

/// Study C: CPU (p95) of the measured workloads against their count, with the ideal linear line.
pub(super) fn density(r: &Results, bi: usize, cells: &[&Cell], s: &mut Section) {
    let block = &r.experiment.blocks[bi];
    if block.variants.len() < 2 {
        return;
    }
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut t = Table {
        caption: "CPU use (p95 of 250 ms samples, cores) against the number of measured workloads".into(),
        headers: vec!["variant".into(), "scenario / strategy".into(), "count".into(), "CPU p95 (cores)".into(), "ideal (count × one alone)".into(), "overhead".into(), "host CPU p95".into()],
        rows: vec![],
    };
    let mut base: BTreeMap<String, f64> = BTreeMap::new();
    let mut points: Vec<(String, &Cell, usize, f64, Option<f64>)> = vec![];
    for c in cells {
        let runs = agg::usable(&r.runs, c);
        let (Some(n), Some(cpu)) = (agg::measured_count(&runs), agg::cpu_p95(&runs, Role::Measured)) else { continue };
        let key = format!("{} / {}", c.scenario_name, c.strategy.study_label());
        if n == 1 {
            base.entry(key.clone()).or_insert(cpu);
        }
        points.push((key, c, n, cpu, agg::host_cpu_p95(&runs)));
    }
    if points.iter().map(|p| p.2).collect::<std::collections::BTreeSet<_>>().len() < 2 {
        return;
    }
    for (key, c, n, cpu, host) in &points {
        series.entry(key.clone()).or_default().push((*n as f64, *cpu));
        let ideal = base.get(key).map(|b| b * *n as f64);
        t.rows.push(vec![
            c.variant_name.clone(),
            key.clone(),
            n.to_string(),
            format!("{cpu:.3}"),
            f(ideal, 3),
            ideal.map(|i| format!("{:+.1}%", (cpu / i - 1.0) * 100.0)).unwrap_or("–".into()),
            f(*host, 2),
        ]);
    }
    let ideal_line = base.iter().next().map(|(k, b)| {
        let maxn = points.iter().map(|p| p.2).max().unwrap_or(1);
        (format!("ideal: n × one alone ({k})"), (1..=maxn).map(|n| (n as f64, b * n as f64)).collect())
    });
    let mut series: Vec<(String, Vec<(f64, f64)>)> = series.into_iter().collect();
    for (_, v) in &mut series {
        v.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    }
    s.items.push(Item::Table(t));
    if let Ok(svg) = plots::lines("CPU use vs number of vBS", "measured workloads running", "CPU p95 (cores)", &series, ideal_line) {
        s.items.push(Item::Plot(format!("{}-density", s.id), svg));
    }
}

pub(super) fn switches(r: &Results, cells: &[&Cell], s: &mut Section) {
    let mut t = Table {
        caption: "Context switches per ms of the measured workloads (all threads, voluntary + involuntary; mean over runs)".into(),
        headers: vec!["cell".into(), "switches/ms".into(), "CPU p95 (cores)".into()],
        rows: vec![],
    };
    for c in cells {
        let runs = agg::usable(&r.runs, c);
        let Some(sw) = agg::switches_per_ms(&runs) else { continue };
        t.rows.push(vec![label(c), format!("{sw:.2}"), f(agg::cpu_p95(&runs, Role::Measured), 3)]);
    }
    if !t.rows.is_empty() {
        s.items.push(Item::Table(t));
    }
}

/// The operator's question: how much best-effort work fits next to the vBS while it keeps its
/// deadline-miss ratio under the target, per strategy.
pub(super) fn frontier(r: &Results, cells: &[&Cell], s: &mut Section) {
    let target = r.experiment.target_miss_ratio;
    let mut t = Table {
        caption: format!("Neighbour throughput and vBS deadline-miss ratio (target ≤ {target:.0e})"),
        headers: vec!["cell".into(), "neighbour bogo-ops/s".into(), "vBS miss ratio".into(), "meets target".into()],
        rows: vec![],
    };
    let mut best: BTreeMap<Strategy, (f64, String)> = BTreeMap::new();
    let mut strategies: Vec<Strategy> = vec![];
    for c in cells {
        let runs = agg::usable(&r.runs, c);
        let Some(ops) = agg::neighbour_ops(&runs) else { continue };
        let miss = agg::emu(&runs, None).and_then(|e| e.miss_ratio());
        let ok = miss.is_some_and(|m| m <= target);
        t.rows.push(vec![label(c), format!("{ops:.0}"), miss.map(|m| format!("{m:.2e}")).unwrap_or("–".into()), if ok { "yes".into() } else { "no".into() }]);
        if !strategies.contains(&c.strategy) {
            strategies.push(c.strategy);
        }
        if ok && best.get(&c.strategy).is_none_or(|b| ops > b.0) {
            best.insert(c.strategy, (ops, label(c)));
        }
    }
    if t.rows.is_empty() {
        return;
    }
    s.items.push(Item::Table(t));
    let mut ft = Table {
        caption: format!("Efficiency frontier: best neighbour throughput with the vBS under {target:.0e} misses"),
        headers: vec!["strategy".into(), "best neighbour bogo-ops/s".into(), "at".into()],
        rows: vec![],
    };
    let mut bars = vec![];
    for (i, st) in strategies.iter().enumerate() {
        match best.get(st) {
            Some((ops, at)) => {
                ft.rows.push(vec![st.study_label().into(), format!("{ops:.0}"), at.clone()]);
                bars.push(Bar { label: st.study_label().into(), median: *ops, q1: *ops, q3: *ops, group: i });
            }
            None => {
                ft.rows.push(vec![st.study_label().into(), "0 (target never met)".into(), "–".into()]);
                bars.push(Bar { label: st.study_label().into(), median: 0.0, q1: 0.0, q3: 0.0, group: i });
            }
        }
    }
    s.items.push(Item::Table(ft));
    if let Ok(svg) = plots::bars_iqr("Efficiency frontier: neighbour work while the vBS meets its deadlines", "bogo-ops/s", &bars) {
        s.items.push(Item::Plot(format!("{}-frontier", s.id), svg));
    }
}

/// The run points of a block for the density-at-an-SLO tables: per run, the vBS count its cell
/// asked for (from the variant's replicas, so a run the planner refused still counts as a try at
/// that count), each vBS's TTIs and misses, and the CPU the vBS and the neighbour used.
fn density_runs(r: &Results, bi: usize, cells: &[&Cell]) -> Vec<crate::slo_density::RunPoint> {
    use crate::slo_density::{RunPoint, VbsRun};
    let block = &r.experiment.blocks[bi];
    let capacity = r.machine.cpus.len() as f64;
    let mean = |v: &[f64]| rtslice_stats::mean(v);
    let mut out = vec![];
    for c in cells {
        let variant = &block.variants[c.variant];
        let n: usize = block
            .workloads
            .iter()
            .filter(|w| w.role == Role::Measured && w.emulate.is_some())
            .map(|w| variant.replicas.get(&w.name).copied().unwrap_or(w.replicas) as usize)
            .sum();
        for run in r.runs.iter().filter(|x| x.cell == c.id && !matches!(x.status, RunStatus::Skipped { .. })) {
            let vbs: Vec<VbsRun> = run
                .measured()
                .filter_map(|i| i.emu.as_ref().map(|e| VbsRun { name: i.name.clone(), ttis: e.ttis, misses: e.deadline_misses, cpu: mean(&i.cpu_samples) }))
                .collect();
            let nbs: Vec<&crate::results::InstanceResult> = run.instances.iter().filter(|i| i.role == Role::Neighbour).collect();
            let ops: Vec<f64> = nbs.iter().filter_map(|i| i.bogo_ops_per_s).collect();
            let nb_cpu: Option<f64> = nbs.iter().map(|i| mean(&i.cpu_samples)).sum();
            out.push(RunPoint {
                strategy: c.strategy,
                n,
                ok: run.status == RunStatus::Ok,
                vbs,
                neighbour_ops: (!ops.is_empty()).then(|| ops.iter().sum()),
                neighbour_cpu: if nbs.is_empty() { None } else { nb_cpu },
                capacity,
            });
        }
    }
    out
}

/// Density at an SLO (issue 16): per strategy and vBS count, the vBS meeting each target with a
/// 95 % Clopper-Pearson bound, the neighbour's throughput and the share of the idle CPU lent to it,
/// then the largest count each strategy hosts at each target.
pub(super) fn slo_density(r: &Results, bi: usize, cells: &[&Cell], s: &mut Section) {
    use crate::slo_density::{largest_hosted, points, ttis_needed, CONFIDENCE};
    let targets = &r.experiment.density_targets;
    if targets.is_empty() {
        return;
    }
    let pts = points(&density_runs(r, bi, cells));
    if pts.is_empty() {
        return;
    }
    let needed: Vec<String> = targets.iter().map(|t| format!("{} TTIs without a miss for {t:.0e}", ttis_needed(*t, CONFIDENCE))).collect();
    s.items.push(Item::Para(format!(
        "A vBS meets a target when the one-sided {:.0} % Clopper-Pearson upper bound on its miss ratio (TTIs with any miss over \
         TTIs, pooled over repetitions) is at or below it; the shortest claim is {}. Lent share = the neighbour's CPU time / \
         (the host's {} CPUs − the vBS's CPU time), from schedstat in the window.",
        CONFIDENCE * 100.0,
        needed.join(", "),
        r.machine.cpus.len()
    )));
    let mut headers: Vec<String> = vec!["strategy".into(), "vBS".into(), "runs ok".into(), "TTIs per vBS".into(), "worst miss ratio (upper bound)".into()];
    headers.extend(targets.iter().map(|t| format!("vBS meeting {t:.0e}")));
    headers.extend(["vBS CPU".into(), "neighbour bogo-ops/s".into(), "lent share of idle CPU".into()]);
    let mut t = Table { caption: "Every strategy and vBS count: misses, the neighbour, the idle CPU lent".into(), headers, rows: vec![] };
    for p in &pts {
        let ttis = p.vbs.iter().map(|v| v.ttis).min();
        let mut row = vec![
            p.strategy.study_label().to_string(),
            p.n.to_string(),
            format!("{}/{}", p.runs_ok, p.runs),
            ttis.map(|x| x.to_string()).unwrap_or("–".into()),
            p.worst().map(|(m, u)| format!("{m:.2e} ({u:.2e})")).unwrap_or("–".into()),
        ];
        row.extend(targets.iter().map(|tg| format!("{}/{}", p.meeting(*tg), p.n)));
        row.extend([f(p.vbs_cpu, 2), f(p.neighbour_ops, 0), p.lent_share.map(|x| format!("{:.0}%", x * 100.0)).unwrap_or("–".into())]);
        t.rows.push(row);
    }
    s.items.push(Item::Table(t));
    // "The largest N" needs a sweep of N (a floor block has one count: its table says it all).
    if pts.iter().map(|p| p.n).collect::<std::collections::BTreeSet<_>>().len() < 2 {
        return;
    }
    let strategies: Vec<Strategy> = {
        let mut v: Vec<Strategy> = pts.iter().map(|p| p.strategy).collect();
        v.dedup();
        v
    };
    let mut headers: Vec<String> = vec!["strategy".into()];
    for tg in targets {
        headers.extend([format!("largest N at {tg:.0e}"), "neighbour bogo-ops/s there".into(), "lent share there".into()]);
    }
    let mut lt = Table { caption: "Density at an SLO: the most vBS each strategy hosts with every one meeting the target".into(), headers, rows: vec![] };
    for st in &strategies {
        let mut row = vec![st.study_label().to_string()];
        for tg in targets {
            match largest_hosted(&pts, *st, *tg) {
                Some(p) => row.extend([p.n.to_string(), f(p.neighbour_ops, 0), p.lent_share.map(|x| format!("{:.0}%", x * 100.0)).unwrap_or("–".into())]),
                None => row.extend(["0".into(), "–".into(), "–".into()]),
            }
        }
        lt.rows.push(row);
    }
    s.items.push(Item::Table(lt));
    let bars: Vec<Bar> = strategies
        .iter()
        .enumerate()
        .flat_map(|(i, st)| targets.iter().map(move |tg| (i, st, tg)))
        .map(|(i, st, tg)| {
            let n = largest_hosted(&pts, *st, *tg).map(|p| p.n).unwrap_or(0) as f64;
            Bar { label: format!("{} @ {tg:.0e}", st.study_label()), median: n, q1: n, q3: n, group: i }
        })
        .collect();
    if let Ok(svg) = plots::bars_iqr("Density at an SLO: vBS hosted with every one meeting the target", "vBS", &bars) {
        s.items.push(Item::Plot(format!("{}-slo-density", s.id), svg));
    }
}

/// Per run, what the hypervisor took from each CPU (steal time), beside what the measured vBS got;
/// then each cell over the runs it took nothing from. A stolen millisecond is lost to every
/// mechanism alike, so runs the host disturbed compare the host, not the mechanisms: the report
/// keeps every run and shows both views rather than dropping any. None when no run recorded it.
pub(super) fn host_steal(r: &Results) -> Option<Section> {
    let runs: Vec<&RunRecord> = r.runs.iter().filter(|x| x.status == RunStatus::Ok && !x.stolen.is_empty()).collect();
    if runs.is_empty() {
        return None;
    }
    let left_alone = |x: &RunRecord| most_stolen_ms(x).is_some_and(|ms| ms == 0.0);
    let alone = runs.iter().filter(|x| left_alone(x)).count();
    let mut items = vec![Item::Para(format!(
        "Steal time: how long the hypervisor ran something else while a CPU of this guest had work, \
         from each run's start to the end of its window, to within one tick (/proc/stat, 10 ms). \
         Stolen time is lost to a vBS under every strategy alike (and is not charged to a \
         SCHED_DEADLINE budget), so runs with it measure the host as much as the strategy. \
         The host took nothing from any CPU in {alone} of {} completed runs.",
        runs.len()
    ))];
    let mut per_run = Table {
        caption: "What the hypervisor took from each CPU, per run, and what the measured vBS got".into(),
        headers: vec!["run".into(), "cell".into(), "stolen ms per CPU".into(), "miss ratio".into(), "Mbit/s".into(), "worst RT thread p99 µs".into()],
        rows: vec![],
    };
    let ratio = |e: Option<&agg::EmuAgg>| e.and_then(|e| e.miss_ratio()).map(|m| format!("{m:.2e}")).unwrap_or("–".into());
    // The measured emulators' throughput together in one run, Mbit/s (None without an emulator).
    let run_mbps = |x: &RunRecord| {
        let mut emus = x.measured().filter_map(|i| i.emu.as_ref()).peekable();
        emus.peek().is_some().then(|| mbps(emus.map(|e| e.throughput_bps).sum()))
    };
    for x in &runs {
        let worst_p99 = x.measured().flat_map(|i| i.threads.iter().filter_map(|t| t.p99_us)).reduce(f64::max);
        per_run.rows.push(vec![
            x.seq.to_string(),
            x.cell.clone(),
            x.stolen.iter().map(|st| format!("{}: {:.0}", st.cpu, st.ms)).collect::<Vec<_>>().join(", "),
            ratio(agg::emu(&[*x], None).as_ref()),
            f(run_mbps(x), 2),
            f(worst_p99, 0),
        ]);
    }
    let mut by_cell = Table {
        caption: "Each cell over all its runs and over the runs the host took nothing from".into(),
        headers: vec![
            "cell".into(),
            "runs left alone".into(),
            "miss ratio, all runs".into(),
            "left alone".into(),
            "Mbit/s median, all runs".into(),
            "left alone".into(),
        ],
        rows: vec![],
    };
    for c in &r.cells {
        let all: Vec<&RunRecord> = runs.iter().copied().filter(|x| x.cell == c.id).collect();
        let quiet: Vec<&RunRecord> = all.iter().copied().filter(|x| left_alone(x)).collect();
        let (Some(e_all), e_quiet) = (agg::emu(&all, None), agg::emu(&quiet, None)) else { continue };
        let per_run_mbps = |rs: &[&RunRecord]| -> Vec<f64> { rs.iter().filter_map(|x| run_mbps(x)).collect() };
        by_cell.rows.push(vec![
            c.id.clone(),
            format!("{} of {}", quiet.len(), all.len()),
            ratio(Some(&e_all)),
            ratio(e_quiet.as_ref()),
            f(stats::median(&per_run_mbps(&all)), 2),
            f(stats::median(&per_run_mbps(&quiet)), 2),
        ]);
    }
    items.push(Item::Table(per_run));
    if !by_cell.rows.is_empty() {
        items.push(Item::Table(by_cell));
    }
    Some(Section { id: "host-steal".into(), title: "What the host took (steal time)".into(), items })
}

pub(super) fn counters(r: &Results) -> Section {
    let mut items = vec![];
    let with: Vec<&RunRecord> = r.runs.iter().filter(|x| x.counters.available).collect();
    if with.is_empty() {
        let reason = r.runs.iter().map(|x| x.counters.reason.clone()).find(|x| !x.is_empty()).unwrap_or_else(|| "no run measured counters".into());
        items.push(Item::Para(format!("IPC and MPKI are unavailable on this host: {reason}. Nothing is estimated in their place.")));
    } else {
        let mut t = Table { caption: "Hardware counters of the measured workloads".into(), headers: vec!["cell".into(), "IPC".into(), "MPKI".into()], rows: vec![] };
        for c in &r.cells {
            let runs: Vec<&&RunRecord> = with.iter().filter(|x| x.cell == c.id).collect();
            let ipc: Vec<f64> = runs.iter().filter_map(|x| x.counters.ipc).collect();
            let mpki: Vec<f64> = runs.iter().filter_map(|x| x.counters.mpki).collect();
            if !runs.is_empty() {
                t.rows.push(vec![c.id.clone(), f(stats::median(&ipc), 2), f(stats::median(&mpki), 2)]);
            }
        }
        items.push(Item::Table(t));
    }
    Section { id: "counters".into(), title: "Cache behaviour (IPC, MPKI)".into(), items }
}

pub(super) fn problems(r: &Results) -> Section {
    let mut t = Table { caption: "Runs that did not complete".into(), headers: vec!["run".into(), "cell".into(), "status".into(), "error / reason".into()], rows: vec![] };
    for x in &r.runs {
        match &x.status {
            RunStatus::Failed { error } => t.rows.push(vec![x.seq.to_string(), x.cell.clone(), "failed".into(), error.clone()]),
            RunStatus::Skipped { reason } => t.rows.push(vec![x.seq.to_string(), x.cell.clone(), "skipped".into(), reason.clone()]),
            RunStatus::Refused { reason } => t.rows.push(vec![x.seq.to_string(), x.cell.clone(), "did not fit".into(), reason.clone()]),
            RunStatus::Interrupted => t.rows.push(vec![x.seq.to_string(), x.cell.clone(), "interrupted".into(), "Ctrl-C".into()]),
            RunStatus::Ok => {}
        }
    }
    let items = if t.rows.is_empty() { vec![Item::Para("Every run completed.".into())] } else { vec![Item::Table(t)] };
    Section { id: "problems".into(), title: "Failed and skipped runs".into(), items }
}

pub(super) fn machine(r: &Results) -> Section {
    let m = &r.machine;
    let t = Table {
        caption: "Where this was measured".into(),
        headers: vec!["".into(), "".into()],
        rows: vec![
            vec!["host".into(), m.hostname.clone()],
            vec!["kernel".into(), m.kernel.clone()],
            vec!["CPU".into(), format!("{} × {}", m.cpus.len(), m.cpu_model)],
            vec!["isolated CPUs".into(), if m.isolated.is_empty() { "none".into() } else { format!("{:?}", m.isolated) }],
            vec!["memory".into(), format!("{:.1} GiB", m.memory_gib)],
            vec!["preemption".into(), m.preemption.clone()],
            vec!["cgroups".into(), m.cgroup.clone()],
            vec!["rtslice".into(), r.rtslice_version.clone()],
            vec!["experiment file".into(), r.experiment.source.clone()],
        ],
    };
    Section { id: "machine".into(), title: "Machine".into(), items: vec![Item::Table(t)] }
}

// ---------- rendering ----------
