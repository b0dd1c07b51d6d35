//! Reports: `report.md` (tables, plots linked as SVG files) and a self-contained `report.html`
//! (the same tables, plots inlined as SVG, no scripts, no network). Sections appear when the
//! results hold the data they need, so one renderer serves every experiment file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::aggregate::{self as agg, BUCKETS};
use crate::experiment::Role;
use crate::matrix::Cell;
use crate::plots::{self, Bar};
use crate::results::{Results, RunRecord, RunStatus};
use crate::stats::{self, Summary};
use crate::strategy::Strategy;

#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub caption: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Para(String),
    Table(Table),
    /// (file stem, svg)
    Plot(String, String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// Anchor id, also the screenshot name.
    pub id: String,
    pub title: String,
    pub items: Vec<Item>,
}

fn f(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.digits$}"),
        _ => "–".into(),
    }
}

fn mbps(bps: f64) -> f64 {
    bps / 1e6
}

fn cells_of<'a>(r: &'a Results, block: usize) -> Vec<&'a Cell> {
    r.cells.iter().filter(|c| c.block == block).collect()
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

/// Builds every section the data supports.
pub fn sections(r: &Results) -> Vec<Section> {
    let mut out = vec![overview(r)];
    for (bi, block) in r.experiment.blocks.iter().enumerate() {
        let cells = cells_of(r, bi);
        let mut s = Section { id: format!("{}", block.name), title: block.title.clone(), items: vec![] };
        latency_tables(r, &cells, &mut s);
        emulator(r, &cells, &mut s);
        latency_samples(r, &cells, &mut s);
        density(r, bi, &cells, &mut s);
        switches(r, &cells, &mut s);
        frontier(r, &cells, &mut s);
        if s.items.is_empty() {
            s.items.push(Item::Para("No run of this block produced data; see the list of failed runs below.".into()));
        }
        out.push(s);
    }
    out.push(counters(r));
    out.push(problems(r));
    out.push(machine(r));
    out
}

fn overview(r: &Results) -> Section {
    let e = &r.experiment;
    let ok = r.runs.iter().filter(|x| x.status == RunStatus::Ok).count();
    let failed = r.runs.iter().filter(|x| matches!(x.status, RunStatus::Failed { .. })).count();
    let skipped = r.runs.iter().filter(|x| matches!(x.status, RunStatus::Skipped { .. })).count();
    let planned = r.cells.len() * e.repetitions as usize;
    let mut items = vec![];
    if !e.description.is_empty() {
        items.push(Item::Para(e.description.trim().to_string()));
    }
    items.push(Item::Para(format!(
        "{} cells × {} repetition(s), {} s measured after {} s warm-up per run{}; runs interleaved (every cell once per round). \
         {ok} run(s) ok, {failed} failed, {skipped} skipped{}.",
        r.cells.len(),
        e.repetitions,
        e.duration.as_secs_f64(),
        e.warmup.as_secs_f64(),
        if e.quick { " (--quick)" } else { "" },
        if r.interrupted { format!(", stopped by Ctrl-C after {} of {planned} runs", r.runs.len()) } else { String::new() }
    )));
    // Headline: one row per cell, the few numbers an operator reads first.
    let mut t = Table {
        caption: "Headline: one row per cell (medians over runs)".into(),
        headers: vec![
            "cell".into(),
            "runs ok".into(),
            "deadline-miss ratio".into(),
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
            t.rows.push(vec![c.id.clone(), format!("skipped: {short}…"), "".into(), "".into(), "".into(), "".into(), "".into(), "".into()]);
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
        t.rows.push(vec![
            c.id.clone(),
            format!("{}/{}", runs.len(), total),
            emu.as_ref().and_then(|e| e.miss_ratio()).map(|m| format!("{m:.2e}")).unwrap_or("–".into()),
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

/// Study A tables 2–5: per thread, share of wake-up events per bucket, one column per scenario,
/// one table per strategy.
fn latency_tables(r: &Results, cells: &[&Cell], s: &mut Section) {
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

fn emulator(r: &Results, cells: &[&Cell], s: &mut Section) {
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
fn latency_samples(r: &Results, cells: &[&Cell], s: &mut Section) {
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
fn density(r: &Results, bi: usize, cells: &[&Cell], s: &mut Section) {
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

fn switches(r: &Results, cells: &[&Cell], s: &mut Section) {
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
fn frontier(r: &Results, cells: &[&Cell], s: &mut Section) {
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

fn counters(r: &Results) -> Section {
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

fn problems(r: &Results) -> Section {
    let mut t = Table { caption: "Runs that did not complete".into(), headers: vec!["run".into(), "cell".into(), "status".into(), "error / reason".into()], rows: vec![] };
    for x in &r.runs {
        match &x.status {
            RunStatus::Failed { error } => t.rows.push(vec![x.seq.to_string(), x.cell.clone(), "failed".into(), error.clone()]),
            RunStatus::Skipped { reason } => t.rows.push(vec![x.seq.to_string(), x.cell.clone(), "skipped".into(), reason.clone()]),
            RunStatus::Interrupted => t.rows.push(vec![x.seq.to_string(), x.cell.clone(), "interrupted".into(), "Ctrl-C".into()]),
            RunStatus::Ok => {}
        }
    }
    let items = if t.rows.is_empty() { vec![Item::Para("Every run completed.".into())] } else { vec![Item::Table(t)] };
    Section { id: "problems".into(), title: "Failed and skipped runs".into(), items }
}

fn machine(r: &Results) -> Section {
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

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

pub fn markdown(r: &Results, sections: &[Section]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# {}\n", r.experiment.title);
    for s in sections {
        let _ = writeln!(md, "## {}\n", s.title);
        for it in &s.items {
            match it {
                Item::Para(p) => {
                    let _ = writeln!(md, "{p}\n");
                }
                Item::Table(t) => {
                    let _ = writeln!(md, "**{}**\n", t.caption);
                    let _ = writeln!(md, "| {} |", t.headers.iter().map(|h| md_escape(h)).collect::<Vec<_>>().join(" | "));
                    let _ = writeln!(md, "|{}", "---|".repeat(t.headers.len()));
                    for row in &t.rows {
                        let _ = writeln!(md, "| {} |", row.iter().map(|c| md_escape(c)).collect::<Vec<_>>().join(" | "));
                    }
                    md.push('\n');
                }
                Item::Plot(stem, _) => {
                    let _ = writeln!(md, "![{stem}](plots/{stem}.svg)\n");
                }
            }
        }
    }
    md
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const CSS: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}\
main{max-width:1100px;margin:0 auto;padding:24px}\
h1{font-size:1.6em;margin:0 0 8px}h2{font-size:1.25em;border-bottom:2px solid #0072b2;padding-bottom:4px;margin-top:0}\
section{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:16px 20px;margin:18px 0}\
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px;font-variant-numeric:tabular-nums}\
caption{text-align:left;font-weight:600;padding:4px 0}\
th,td{border:1px solid #dde1e6;padding:3px 8px;text-align:right}th{background:#eef2f6}\
td:first-child,th:first-child{text-align:left}tr:nth-child(even) td{background:#fafbfc}\
.plot svg{max-width:100%;height:auto}nav a{margin-right:12px}.meta{color:#57606a}";

pub fn html(r: &Results, sections: &[Section]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{CSS}</style></head><body><main>",
        html_escape(&r.experiment.title)
    );
    let _ = write!(h, "<h1>{}</h1><p class=\"meta\">rtslice bench · {} · {}</p><nav>", html_escape(&r.experiment.title), html_escape(&r.experiment.name), html_escape(&r.machine.kernel));
    for s in sections {
        let _ = write!(h, "<a href=\"#{}\">{}</a>", html_escape(&s.id), html_escape(&s.title));
    }
    h.push_str("</nav>");
    for s in sections {
        let _ = write!(h, "<section id=\"{}\"><h2>{}</h2>", html_escape(&s.id), html_escape(&s.title));
        for it in &s.items {
            match it {
                Item::Para(p) => {
                    let _ = write!(h, "<p>{}</p>", html_escape(p));
                }
                Item::Table(t) => {
                    let _ = write!(h, "<table><caption>{}</caption><thead><tr>", html_escape(&t.caption));
                    for c in &t.headers {
                        let _ = write!(h, "<th>{}</th>", html_escape(c));
                    }
                    h.push_str("</tr></thead><tbody>");
                    for row in &t.rows {
                        h.push_str("<tr>");
                        for c in row {
                            let _ = write!(h, "<td>{}</td>", html_escape(c));
                        }
                        h.push_str("</tr>");
                    }
                    h.push_str("</tbody></table>");
                }
                Item::Plot(_, svg) => {
                    let _ = write!(h, "<div class=\"plot\">{svg}</div>");
                }
            }
        }
        h.push_str("</section>");
    }
    h.push_str("</main></body></html>\n");
    h
}

/// Writes report.md, report.html and plots/*.svg into `dir`.
pub fn write(r: &Results, dir: &Path) -> std::io::Result<Vec<Section>> {
    let secs = sections(r);
    std::fs::create_dir_all(dir.join("plots"))?;
    for s in &secs {
        for it in &s.items {
            if let Item::Plot(stem, svg) = it {
                std::fs::write(dir.join("plots").join(format!("{stem}.svg")), svg)?;
            }
        }
    }
    std::fs::write(dir.join("report.md"), markdown(r, &secs))?;
    std::fs::write(dir.join("report.html"), html(r, &secs))?;
    Ok(secs)
}

/// The headline table as plain text for the terminal.
pub fn terminal_table(t: &Table) -> String {
    let widths: Vec<usize> = (0..t.headers.len())
        .map(|k| t.rows.iter().map(|r| r[k].chars().count()).chain([t.headers[k].chars().count()]).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    let line = |cells: &[String], out: &mut String| {
        for (k, c) in cells.iter().enumerate() {
            let pad = widths[k] - c.chars().count();
            if k == 0 {
                let _ = write!(out, "{c}{}", " ".repeat(pad));
            } else {
                let _ = write!(out, "  {}{c}", " ".repeat(pad));
            }
        }
        out.push('\n');
    };
    let _ = writeln!(out, "{}", t.caption);
    line(&t.headers, &mut out);
    let _ = writeln!(out, "{}", "-".repeat(widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1)));
    for r in &t.rows {
        line(r, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::Experiment;
    use crate::matrix;
    use crate::results::{EmuSummary, InstanceResult, Machine, ThreadLatency};

    const EXP: &str = r#"
apiVersion: rtslice/v1
kind: Experiment
name: synth
duration: 1s
repetitions: 2
blocks:
  - name: lat
    workloads:
      - {name: vbs, emulate: {profile: oai-lte}}
      - {name: nb, command: [stress-ng], output: stress-ng, role: neighbour}
    scenarios: [idle, user]
    strategies: [none, dedicated]
  - name: dens
    workloads: [{name: vbs, emulate: {profile: srsenb}}]
    strategies: [none]
    variants: [{name: "n=1"}, {name: "n=2", replicas: {vbs: 2}}]
"#;

    fn synth() -> Results {
        let exp = Experiment::parse(EXP, "synth.yaml").unwrap();
        let cells = matrix::cells(&exp);
        let mut runs = vec![];
        for slot in matrix::schedule(cells.len(), exp.repetitions) {
            let c = &cells[slot.cell];
            let mut rec = RunRecord::new(slot.seq, c, slot.repetition);
            let n = if c.variant_name == "n=2" { 2 } else { 1 };
            let bad = c.strategy == Strategy::None && c.scenario_name == "user";
            for k in 0..n {
                let mut i = InstanceResult::new(&format!("vbs{k}"), "vbs", Role::Measured);
                i.emu = Some(EmuSummary {
                    ttis: 1000,
                    deadline_misses: if bad { 50 } else { 0 },
                    nacks: if bad { 40 } else { 1 },
                    throughput_bps: 8e6 + slot.repetition as f64 * 1e6,
                    proc_p99_us: 700.0,
                    ..Default::default()
                });
                i.threads = vec![ThreadLatency { name: "ru-thread".into(), tid: 1, events: 100, log2_us: vec![90, 5, 3, 1, 1], p99_us: Some(9.0), switches: Some(10) }];
                i.cpu_samples = vec![0.3, 0.32, 0.31];
                i.switches_per_ms = Some(2.0);
                i.latency_samples_us = (1..=100).map(f64::from).collect();
                rec.instances.push(i);
            }
            if c.block_name == "lat" {
                let mut nb = InstanceResult::new("nb", "nb", Role::Neighbour);
                nb.bogo_ops_per_s = Some(if c.strategy == Strategy::Dedicated { 500.0 } else { 900.0 });
                rec.instances.push(nb);
            }
            if c.id == "lat/user/dedicated" && slot.repetition == 1 {
                rec.status = RunStatus::Failed { error: "apply: <cpuset> refused & rolled back".into() };
                rec.instances.clear();
            }
            runs.push(rec);
        }
        Results {
            experiment: exp,
            machine: Machine { kernel: "6.18".into(), cpus: vec![0, 1], ..Default::default() },
            cells,
            runs,
            interrupted: false,
            started_unix: 0.0,
            finished_unix: 1.0,
            rtslice_version: "test".into(),
        }
    }

    fn table<'a>(secs: &'a [Section], caption_start: &str) -> &'a Table {
        secs.iter()
            .flat_map(|s| s.items.iter())
            .find_map(|it| match it {
                Item::Table(t) if t.caption.starts_with(caption_start) => Some(t),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no table `{caption_start}`"))
    }

    #[test]
    fn sections_follow_the_data() {
        let r = synth();
        let secs = sections(&r);
        let ids: Vec<&str> = secs.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, vec!["overview", "lat", "dens", "counters", "problems", "machine"]);
        // Headline: one row per cell; the miss ratio of the disturbed cell.
        let head = table(&secs, "Headline");
        assert_eq!(head.rows.len(), r.cells.len());
        let row = head.rows.iter().find(|x| x[0] == "lat/user/none").unwrap();
        assert!(row.contains(&"5.00e-2".to_string()), "{row:?}");
        assert_eq!(head.rows.iter().find(|x| x[0] == "lat/user/dedicated").unwrap()[1], "1/2");
        // Study A's table: rows = threads, bucket × scenario columns.
        let lat = table(&secs, "Scheduling latency, noA");
        assert_eq!(lat.headers[1], "0–1 µs idle");
        assert_eq!(lat.headers[2], "0–1 µs user");
        assert_eq!(lat.rows[0][0], "ru-thread");
        assert_eq!(lat.rows[0][1], "90.0");
        // Frontier: none meets the target only when idle; dedicated meets it in both.
        let fr = table(&secs, "Efficiency frontier");
        assert_eq!(fr.rows.len(), 2);
        assert!(fr.rows.iter().any(|x| x[0] == "noA" && x[1] == "900"));
        assert!(fr.rows.iter().any(|x| x[0] == "Dedicated" && x[1] == "500"));
        // Density: the ideal line is n × the single-vBS CPU.
        let d = table(&secs, "CPU use");
        let two = d.rows.iter().find(|x| x[2] == "2").unwrap();
        let one = d.rows.iter().find(|x| x[2] == "1").unwrap();
        let (c1, c2, ideal2): (f64, f64, f64) = (one[3].parse().unwrap(), two[3].parse().unwrap(), two[4].parse().unwrap());
        assert!((ideal2 - 2.0 * c1).abs() < 1e-3 && (c2 - ideal2).abs() < 1e-3);
        // Counters: unavailable, said so.
        assert!(matches!(&secs[3].items[0], Item::Para(p) if p.contains("unavailable")));
        // Problems: the failed run with its error.
        let p = table(&secs, "Runs that did not complete");
        assert_eq!(p.rows.len(), 1);
        assert!(p.rows[0][3].contains("rolled back"));
    }

    #[test]
    fn html_is_self_contained_and_escaped() {
        let r = synth();
        let secs = sections(&r);
        let h = html(&r, &secs);
        assert!(h.contains("&lt;cpuset&gt; refused &amp; rolled back"));
        assert!(!h.contains("<cpuset>"));
        assert!(!h.contains("<script") && !h.contains("https://"));
        assert_eq!(h.matches("<section id=").count(), secs.len());
        assert!(h.contains("<svg"), "plots are inline");
        let md = markdown(&r, &secs);
        assert!(md.contains("![lat-frontier](plots/lat-frontier.svg)"));
        assert!(md.contains("| ru-thread | 90.0 |"));
        let term = terminal_table(table(&secs, "Headline"));
        assert!(term.lines().count() >= r.cells.len() + 3);
    }
}
