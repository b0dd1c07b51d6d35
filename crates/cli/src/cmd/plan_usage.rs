//! `rtslice plan --usage WORKLOAD=FILE`: each measured thread's part of its workload's budget beside
//! what it used (a `rtslice trace --json` report of the running stack), and a warning, with the
//! numbers, for every thread or shared budget below its use. The parts are the planner's
//! (`rtslice_plan::shares`); this file reads the reports and renders.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use rtslice_plan::shares::{thread_shares, Part, Shares, ThreadUse};
use rtslice_plan::Plan;
use rtslice_spec::units::format_duration;
use serde::Serialize;

/// One `--usage` argument, read.
pub struct Usage {
    pub workload: String,
    pub file: PathBuf,
    /// How long the report measured (its `duration_s`).
    pub seconds: f64,
    pub threads: Vec<ThreadUse>,
}

/// `WORKLOAD=FILE`, the file a `rtslice trace --json` report: its threads' names and CPU use (a
/// thread merged by name, `--by name`, counts as that many threads sharing the use equally).
pub fn read(arg: &str) -> Result<Usage, String> {
    let (workload, file) = arg
        .split_once('=')
        .filter(|(w, f)| !w.is_empty() && !f.is_empty())
        .ok_or_else(|| format!("--usage {arg:?}: expected WORKLOAD=FILE, FILE a `rtslice trace --json` report"))?;
    let file = PathBuf::from(file);
    let text = std::fs::read_to_string(&file).map_err(|e| format!("--usage: cannot read {}: {e}", file.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("--usage: {} is not JSON ({e}); write it with `rtslice trace --json … > FILE`", file.display()))?;
    let bad = |what: &str| format!("--usage: {} is not a `rtslice trace --json` report: {what}", file.display());
    let seconds = json.get("duration_s").and_then(|d| d.as_f64()).ok_or_else(|| bad("no duration_s"))?;
    let list = json.get("threads").and_then(|t| t.as_array()).ok_or_else(|| bad("no threads list"))?;
    let mut threads = Vec::new();
    for t in list {
        let name = t.get("name").and_then(|n| n.as_str()).ok_or_else(|| bad("a thread without a name"))?;
        let pct = t.get("cpu_pct").and_then(|c| c.as_f64()).filter(|c| c.is_finite() && *c >= 0.0).ok_or_else(|| bad("a thread without cpu_pct"))?;
        let n = t.get("threads").and_then(|n| n.as_u64()).unwrap_or(1).max(1);
        for _ in 0..n {
            threads.push(ThreadUse { name: name.to_string(), cpu: pct / 100.0 / n as f64 });
        }
    }
    if threads.is_empty() {
        return Err(bad("no threads (was the workload running while it was traced?)"));
    }
    Ok(Usage { workload: workload.to_string(), file, seconds, threads })
}

/// The JSON `thread_shares`: per workload, its measured threads' parts and the shared budgets short.
#[derive(Serialize)]
pub struct WorkloadShares {
    pub usage_file: PathBuf,
    pub measured_s: f64,
    #[serde(flatten)]
    pub shares: Shares,
}

/// Each usage's shares under the plan's kernel parameters. Err (invalid input): the plan has no
/// kernel parameters, a workload is not admitted, or a rule does not compile.
pub fn shares(plan: &Plan, usage: &[Usage]) -> Result<BTreeMap<String, WorkloadShares>, String> {
    let Some(k) = &plan.kernel else {
        return Err("--usage compares each thread's part of its budget, which depends on the mechanism: give --mechanism \
                    (deadline, rt_group, hcbs) or --host"
            .into());
    };
    let mut out = BTreeMap::new();
    for u in usage {
        let (Some(kw), Some(w)) = (k.workloads.iter().find(|w| w.name == u.workload), plan.workload(&u.workload)) else {
            return Err(format!("--usage {}: no admitted workload of that name in this plan", u.workload));
        };
        let shares = thread_shares(kw, k.mechanism, w.cpus.len(), &u.threads).map_err(|e| format!("{}: {e}", u.workload))?;
        out.insert(u.workload.clone(), WorkloadShares { usage_file: u.file.clone(), measured_s: u.seconds, shares });
    }
    Ok(out)
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// A runtime as a reader compares it: 777.7µs, 2.33ms (the spec's units print 777666ns).
fn short_duration(ns: u64) -> String {
    if ns % 1_000_000 == 0 || ns % 1000 == 0 && ns < 1_000_000 {
        format_duration(Duration::from_nanos(ns))
    } else if ns < 1_000_000 {
        format!("{:.1}µs", ns as f64 / 1e3)
    } else {
        format!("{:.2}ms", ns as f64 / 1e6)
    }
}

fn part_text(p: &Part) -> String {
    let every = |runtime_ns: u64, period_ns: u64| format!("{} every {}", short_duration(runtime_ns), short_duration(period_ns));
    match *p {
        Part::Deadline { runtime_ns, period_ns, by_demand } => format!(
            "{} ({}{})",
            every(runtime_ns, period_ns),
            pct(p.share().unwrap_or(0.0)),
            if by_demand { ", its part of the pool split by this use" } else { ", fixed" }
        ),
        Part::Group { runtime_us, period_us, cpus } => format!(
            "at most {} (the group budget, shared on each of {cpus} CPU(s))",
            every(runtime_us * 1000, period_us * 1000)
        ),
        Part::Cfs { quota_us, period_us } => format!("the CFS pool, {} shared", every(quota_us * 1000, period_us * 1000)),
        Part::Unbounded => "no budget bounds it".into(),
    }
}

/// The human view: one table per workload; and the warnings, one per short thread or budget.
pub fn render(all: &BTreeMap<String, WorkloadShares>) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut warnings = Vec::new();
    for (name, w) in all {
        let _ = writeln!(
            out,
            "\nthreads of {name} against their use ({}, {:.1} s; use is an average, its busiest periods need more):",
            w.usage_file.display(),
            w.measured_s
        );
        let width = w.shares.threads.iter().map(|t| t.thread.len()).max().unwrap_or(0);
        for t in &w.shares.threads {
            let rule = t.rule.as_deref().map(|r| format!("/{r}/")).unwrap_or_else(|| "no rule".into());
            let _ = writeln!(
                out,
                "  {:<width$}  {rule}: {}; used {}{}",
                t.thread,
                part_text(&t.part),
                pct(t.used),
                if t.short { "  BELOW ITS USE" } else { "" }
            );
            if t.short {
                let fix = match t.part {
                    Part::Deadline { by_demand: false, .. } => {
                        "the kernel throttles it every period whatever its siblings leave idle; leave `reclaim` unset (the split then follows demand) or give its rule a larger `share`"
                    }
                    Part::Deadline { by_demand: true, .. } => {
                        "beyond its part it runs only on bandwidth its partition leaves unused (GRUB); raise the reservation"
                    }
                    _ => "it will be throttled; raise the reservation",
                };
                warnings.push(format!(
                    "{name}: thread {} ({}) gets {} but used {} on average ({}): {fix}",
                    t.thread,
                    t.rule.as_deref().map(|r| format!("rule /{r}/")).unwrap_or_else(|| "no rule".into()),
                    part_text(&t.part),
                    pct(t.used),
                    w.usage_file.display()
                ));
            }
        }
        for s in &w.shares.shared {
            warnings.push(format!(
                "{name}: its threads under {} used {:.2} CPU(s) together, it holds {:.2}: raise the reservation by at least {:.0}%",
                s.what,
                s.used,
                s.holds,
                (s.used / s.holds.max(1e-9) - 1.0) * 100.0
            ));
        }
    }
    (out, warnings)
}
