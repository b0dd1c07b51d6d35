//! Reports: `report.md` (tables, plots linked as SVG files) and a self-contained `report.html`
//! (the same tables, plots inlined as SVG, no scripts, no network). Sections appear when the
//! results hold the data they need, so one renderer serves every experiment file.
//!
//! Table of contents:
//! - this file: what a report is made of ([`Section`], [`Table`], [`Item`]), which sections an
//!   experiment's results give ([`sections`]) and writing them ([`write`]);
//! - `sections`: each section from the results (overview, latency tables, emulator, samples,
//!   density, context switches, frontier, the host's steal time per run, counters, failed runs,
//!   machine);
//! - `render`: Markdown, HTML and the terminal's plain-text table.

mod render;
mod sections;

use std::path::Path;

use crate::matrix::Cell;
use crate::results::Results;

use self::sections::{counters, density, emulator, frontier, host_steal, latency_samples, latency_tables, machine, overview, problems, slo_density, switches};
pub use self::render::{html, markdown, terminal_table};

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

fn cells_of<'a>(r: &'a Results, block: usize) -> Vec<&'a Cell> {
    r.cells.iter().filter(|c| c.block == block).collect()
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
        slo_density(r, bi, &cells, &mut s);
        if s.items.is_empty() {
            s.items.push(Item::Para("No run of this block produced data; see the list of failed runs below.".into()));
        }
        out.push(s);
    }
    out.extend(host_steal(r));
    out.push(counters(r));
    out.push(problems(r));
    out.push(machine(r));
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{Experiment, Role};
    use crate::results::{RunRecord, RunStatus};
    use crate::strategy::Strategy;
    use crate::matrix;
    use crate::results::{EmuSummary, InstanceResult, Machine, Stolen, ThreadLatency};

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
        // Each miss ratio with its interval; a strategy against no isolation in the same scenario
        // only where the intervals do not overlap: 0 of 1,000 TTIs against 100 of 2,000 is lower,
        // 0 of 2,000 against 0 of 2,000 is noise.
        let col = |name: &str| head.headers.iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name}: {:?}", head.headers));
        let (ci, vs) = (col("95 % interval"), col("vs noA"));
        let cell = |id: &str| head.rows.iter().find(|x| x[0] == id).unwrap();
        assert_eq!(cell("lat/user/none")[ci], "[4.1e-2, 6.0e-2]");
        assert_eq!(cell("lat/user/none")[vs], "");
        assert_eq!(cell("lat/user/dedicated")[vs], "lower");
        assert_eq!(cell("lat/idle/dedicated")[vs], "within noise");
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
    fn steal_per_run_and_cells_over_the_runs_the_host_left_alone() {
        let mut r = synth();
        // Older results (no steal recorded): no section.
        assert!(!sections(&r).iter().any(|s| s.id == "host-steal"));
        // The host takes 20 ms from CPU 1 in the first repetition of `lat/user/none`, whose misses
        // and throughput then differ from its second.
        for x in &mut r.runs {
            let hit = x.cell == "lat/user/none" && x.repetition == 0;
            x.stolen = vec![Stolen { cpu: 0, ms: 0.0 }, Stolen { cpu: 1, ms: if hit { 20.0 } else { 0.0 } }];
            if hit {
                x.instances[0].emu.as_mut().unwrap().deadline_misses = 300;
            }
        }
        let secs = sections(&r);
        let ids: Vec<&str> = secs.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, vec!["overview", "lat", "dens", "host-steal", "counters", "problems", "machine"]);
        // Every completed run is listed, the failed one is not.
        let per_run = table(&secs, "What the hypervisor took");
        assert_eq!(per_run.rows.len(), r.runs.iter().filter(|x| x.status == RunStatus::Ok).count());
        let hit = per_run.rows.iter().find(|row| row[2] == "0: 0, 1: 20").unwrap();
        assert_eq!((hit[1].as_str(), hit[3].as_str()), ("lat/user/none", "3.00e-1"));
        let steal = secs.iter().find(|s| s.id == "host-steal").unwrap();
        let ok = r.runs.iter().filter(|x| x.status == RunStatus::Ok).count();
        assert!(matches!(&steal.items[0], Item::Para(p) if p.contains(&format!("{} of {ok} completed runs", ok - 1))), "{:?}", steal.items[0]);
        // The cell: 350 misses in 2,000 TTIs over both runs, 50 in 1,000 over the one left alone;
        // throughput 8 and 9 Mbit/s, 9 left alone.
        let by_cell = table(&secs, "Each cell over all its runs");
        let row = by_cell.rows.iter().find(|row| row[0] == "lat/user/none").unwrap();
        assert_eq!(row[1..], ["1 of 2", "1.75e-1", "5.00e-2", "8.50", "9.00"].map(String::from));
        // A failed run counts in neither view.
        let dedicated = by_cell.rows.iter().find(|row| row[0] == "lat/user/dedicated").unwrap();
        assert_eq!(dedicated[1], "1 of 1");
    }

    #[test]
    fn a_layout_that_did_not_fit_is_reported_as_such_not_as_a_failure() {
        let mut r = synth();
        let x = r.runs.iter_mut().find(|x| x.cell == "lat/user/dedicated" && x.repetition == 0).unwrap();
        x.status = RunStatus::Refused { reason: "the planner rejected the dedicated layout: vbs: no CPU left".into() };
        x.instances.clear();
        let secs = sections(&r);
        let overview = secs.iter().find(|s| s.id == "overview").unwrap();
        assert!(
            overview.items.iter().any(|it| matches!(it, Item::Para(p) if p.contains("1 failed") && p.contains("1 did not fit (refused by admission"))),
            "{:?}",
            overview.items
        );
        let p = table(&secs, "Runs that did not complete");
        let row = p.rows.iter().find(|row| row[2] == "did not fit").expect("the refusal is listed");
        assert!(row[3].contains("no CPU left"), "{row:?}");
        assert_eq!(p.rows.iter().filter(|row| row[2] == "failed").count(), 1, "{:?}", p.rows);
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
