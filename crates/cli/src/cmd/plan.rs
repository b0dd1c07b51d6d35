//! `rtslice plan SPEC [--json] [--host | --online CPULIST] [--isolcpus CPULIST] [--mechanism M]`:
//! admission control and placement, touching nothing.
//!
//! The plan is made for the node the spec declares (`node.cpus`, cap, housekeeping, topology, L3):
//! the same answer on any machine. What `rtslice apply` would do on this host is reported beside
//! it (`this host: …`, JSON `this_host`). `--host` plans for this host instead (what apply does);
//! so does a spec that declares no CPUs (`cpus: discovered`), and the plan says so.
//! Exit codes follow the plan printed: 0 all admitted, 1 something rejected, 2 invalid spec or
//! argument (errors on stderr). Whether this host could apply it does not change the exit code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use rtslice_plan::{Allocation, Mechanism, NodeFacts, Plan, ThreadCpus, ThreadSched};
use rtslice_spec::{format_cpu_list, parse_cpu_list, units::format_duration, Launch, NodeCpus};
use serde::Serialize;

use super::{EXIT_INVALID, EXIT_REJECTED};

#[derive(clap::Args)]
pub struct Args {
    /// The spec file (YAML, `apiVersion: rtslice/v1`); `-` reads standard input
    pub spec: PathBuf,
    // JSON schema of the plan: docs/plan.md
    #[command(flatten)]
    pub json: super::Json,
    /// Plan for this host instead of the node the spec declares: its online and isolated CPUs, its
    /// topology and L3 where the spec declares none, its kernel's mechanisms and limits — what
    /// `rtslice apply` would do here
    #[arg(long, conflicts_with_all = ["online", "isolcpus"])]
    pub host: bool,
    /// Plan for a node with these online CPUs, e.g. `0-7`: a spec's `cpus: discovered` become
    /// these, declared CPUs outside them are warned about
    #[arg(long, value_name = "CPULIST")]
    pub online: Option<String>,
    /// Plan with these CPUs isolated at boot (isolcpus=), e.g. `4-7`; default: none on the node
    /// the spec declares, this host's (/sys/devices/system/cpu/isolated) with --host
    #[arg(long, value_name = "CPULIST")]
    pub isolcpus: Option<String>,
    /// Plan for this reservation mechanism (hcbs, deadline, rt_group, none) and print the kernel
    /// parameters apply will write; default: when planning for this host (--host, or a spec without
    /// node.cpus), the one apply would choose here (with this host's kernel limits)
    #[arg(long, value_name = "MECHANISM")]
    pub mechanism: Option<super::MechanismArg>,
    /// A workload's measured threads (`rtslice trace --json` of the running stack), to set each
    /// thread's part of the budget beside its use and warn where it is below (repeatable); needs
    /// the kernel parameters (--mechanism or --host)
    #[arg(long, value_name = "WORKLOAD=FILE")]
    pub usage: Vec<String>,
}

/// Which node a plan is made for.
#[derive(Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Target {
    /// The node the spec declares (`node.cpus` listed), nothing taken from this host.
    Declared,
    /// A node described by `--online`/`--isolcpus`.
    Given,
    /// This host, as `rtslice apply` plans it (`--host`, or a spec with `cpus: discovered`).
    ThisHost,
}

/// The JSON `planned_for`: the node planned and why.
#[derive(Serialize)]
struct PlannedFor {
    node: Target,
    why: String,
}

/// `plan --json`: the plan's own fields (docs/plan.md), then which node it is for and this host's verdict.
#[derive(Serialize)]
struct PlanOutput<'a> {
    #[serde(flatten)]
    plan: &'a Plan,
    planned_for: PlannedFor,
    this_host: &'a ThisHost,
    /// `--usage`: per workload, each measured thread's part against its use.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    thread_shares: &'a BTreeMap<String, super::plan_usage::WorkloadShares>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // A spec that cannot be read is invalid input (exit 2), like one that cannot be parsed.
    let (text, name) = match read_spec(&args.spec) {
        Ok(t) => t,
        Err(e) => return super::invalid(super::chain(&e)),
    };
    let spec = match parse_spec(&args.spec, &text, &name) {
        Ok(s) => s,
        Err(errors) => {
            eprintln!("{errors}");
            super::error(format_args!("{} error(s) in {name}; nothing planned (see docs/spec.md)", errors.len()));
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let online = match args.online.as_deref().map(parse_cpu_list).transpose() {
        Ok(o) => o,
        Err(e) => return super::invalid(format_args!("--online: {e}")),
    };
    let isolcpus = match args.isolcpus.as_deref().map(parse_cpu_list).transpose() {
        Ok(i) => i,
        Err(e) => return super::invalid(format_args!("--isolcpus: {e}")),
    };
    let usage = match args.usage.iter().map(|a| super::plan_usage::read(a)).collect::<Result<Vec<_>, _>>() {
        Ok(u) => u,
        Err(e) => return super::invalid(e),
    };
    let mechanism = args.mechanism.map(Mechanism::from);
    let (target, why) = match (&spec.node.cpus, args.host, &online, &isolcpus) {
        (_, true, _, _) => (Target::ThisHost, "this host (--host): what `rtslice apply` would do here".to_string()),
        (_, false, Some(o), _) => (Target::Given, format!("a node with CPUs {} online (--online)", format_cpu_list(o))),
        (NodeCpus::List(cpus), false, None, _) => (Target::Declared, format!("the node the spec declares (CPUs {})", format_cpu_list(cpus))),
        (NodeCpus::Discovered, false, None, Some(_)) => {
            (Target::Given, "this host's online CPUs with the isolcpus given (--isolcpus)".to_string())
        }
        (NodeCpus::Discovered, false, None, None) => (
            Target::ThisHost,
            "this host: the spec declares no CPUs (node.cpus: discovered), so this host's online CPUs, isolcpus, topology and kernel".to_string(),
        ),
    };
    // This host as apply sees it: the plan itself for this host, beside it otherwise. Facts of this
    // host that cannot be read fail only a plan made of them.
    let needs_host = target == Target::ThisHost || (online.is_none() && spec.node.cpus == NodeCpus::Discovered);
    let here = match this_host(&spec, mechanism) {
        Ok(h) => Ok(h),
        Err(e) if needs_host => return super::invalid(super::chain(&e)),
        Err(e) => Err(format!("cannot read this host's facts: {}", super::chain(&e))),
    };
    let plan = match (target, &here) {
        (Target::ThisHost, Ok(h)) => h.plan.clone(),
        _ => {
            let online = match (online, &spec.node.cpus, &here) {
                (Some(o), _, _) => o,
                (None, NodeCpus::List(cpus), _) => cpus.clone(),
                (None, NodeCpus::Discovered, Ok(h)) => h.facts.online.clone(),
                (None, NodeCpus::Discovered, Err(_)) => Vec::new(),
            };
            // Nothing else comes from this host: boot isolation only as --isolcpus says, topology
            // and L3 only as the spec declares them, and the kernel's limits only under --mechanism
            // (with no limits: another kernel's are unknown).
            let facts = NodeFacts { online, isolcpus: isolcpus.unwrap_or_default(), ..Default::default() };
            match mechanism {
                Some(m) => rtslice_plan::plan_for_kernel(&spec, &facts, &Default::default(), Some(m)),
                None => rtslice_plan::plan(&spec, &facts),
            }
        }
    };
    let verdict = match &here {
        Ok(h) => h.judge(&plan, target),
        Err(e) => ThisHost::unknown(e.clone()),
    };
    let shares = if usage.is_empty() {
        BTreeMap::new()
    } else {
        match super::plan_usage::shares(&plan, &usage) {
            Ok(s) => s,
            Err(e) => return super::invalid(e),
        }
    };
    let (usage_text, usage_warnings) = super::plan_usage::render(&shares);
    if args.json.json {
        let out = PlanOutput { plan: &plan, planned_for: PlannedFor { node: target, why }, this_host: &verdict, thread_shares: &shares };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}{usage_text}", render_with(&plan, &why, &verdict));
    }
    for w in plan.warnings.iter().chain(&usage_warnings) {
        super::warning(w);
    }
    Ok(if plan.rejected.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_REJECTED) })
}

/// This host as `rtslice apply` sees it: its facts and the plan apply would make from them.
struct Here {
    facts: NodeFacts,
    /// The mechanisms this kernel offers, best first; `Err`: why they could not be read.
    mechanisms: Result<Vec<Mechanism>, String>,
    plan: Plan,
    /// The mechanism asked for (`--mechanism`), if any.
    requested: Option<Mechanism>,
}

/// Plans `spec` exactly as a one-shot `rtslice apply` would on this host (apply.rs does the same).
fn this_host(spec: &rtslice_spec::Spec, mechanism: Option<Mechanism>) -> anyhow::Result<Here> {
    let facts = rtslice_host::facts::planning_facts()?;
    let (mechanisms, plan) = match rtslice_host::HostFacts::detect() {
        Ok(host) => (Ok(host.available.clone()), rtslice_plan::plan_for_kernel(spec, &facts, &host.kernel_facts(), mechanism)),
        // Apply plans without a kernel then, and cannot apply: the verdict says why.
        Err(e) => (Err(e.to_string()), rtslice_plan::plan(spec, &facts)),
    };
    Ok(Here { facts, mechanisms, plan, requested: mechanism })
}

/// Whether `rtslice apply` on this host would apply the plan printed (JSON `this_host`).
#[derive(Serialize)]
struct ThisHost {
    /// `rtslice apply SPEC` here would apply exactly the plan printed.
    applies: bool,
    /// One sentence: this host's facts that matter and the verdict.
    verdict: String,
    /// This host's online CPUs and boot-isolated CPUs.
    online: Vec<u32>,
    isolcpus: Vec<u32>,
    /// The planned node's CPUs that are not online here.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    offline: Vec<u32>,
    /// Everything the plan for this host was made from (`rtslice_host::facts::planning_facts`): the
    /// same facts the node service plans from, which its `GET /v1/node` gives as `planningFacts`.
    #[serde(skip_serializing_if = "Option::is_none")]
    facts: Option<NodeFacts>,
    /// The reservation mechanisms this kernel offers, best first (`rtslice doctor`); absent when
    /// they could not be read (`error` says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    mechanisms: Option<Vec<Mechanism>>,
    /// The mechanism apply would use here for this spec (absent: none, e.g. nothing reserved).
    #[serde(skip_serializing_if = "Option::is_none")]
    mechanism: Option<Mechanism>,
    /// The mechanism the node service (`rtslice daemon`, `apply --declarative`) would use here by
    /// default, when it is not apply's (cgroup v1 with RT groups: docs/host.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    daemon_mechanism: Option<Mechanism>,
    /// The per-CPU cap this host's kernel allows (under that mechanism), when below the plan's.
    #[serde(skip_serializing_if = "Option::is_none")]
    cap: Option<f64>,
    /// Why apply could not run here at all (exit 3): this host's cgroups or kernel unreadable.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The verdict's two halves, for the human view.
    #[serde(skip)]
    facts_line: String,
    #[serde(skip)]
    conclusion: String,
    /// Workloads apply would treat otherwise here, in spec order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    differences: Vec<Difference>,
}

/// One workload that this host's plan places or refuses unlike the plan printed.
#[derive(Serialize)]
struct Difference {
    workload: String,
    /// Its CPUs in the plan printed; absent: refused there.
    #[serde(skip_serializing_if = "Option::is_none")]
    planned_cpus: Option<Vec<u32>>,
    /// Its CPUs on this host; absent: refused here (`reason`).
    #[serde(skip_serializing_if = "Option::is_none")]
    here_cpus: Option<Vec<u32>>,
    /// Why this host refuses it.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

impl ThisHost {
    /// The verdict when this host's facts could not be read: apply could not run here either.
    fn unknown(error: String) -> ThisHost {
        let conclusion = "`rtslice apply` could not run here either".to_string();
        ThisHost {
            applies: false,
            verdict: format!("{error} — {conclusion}"),
            facts_line: error.clone(),
            conclusion,
            online: Vec::new(),
            isolcpus: Vec::new(),
            offline: Vec::new(),
            facts: None,
            mechanisms: None,
            mechanism: None,
            daemon_mechanism: None,
            cap: None,
            error: Some(error),
            differences: Vec::new(),
        }
    }
}

impl Here {
    fn judge(&self, plan: &Plan, target: Target) -> ThisHost {
        let online = &self.facts.online;
        let offline: Vec<u32> = plan.node.cpus.iter().copied().filter(|c| !online.contains(c)).collect();
        let here = &self.plan;
        let mechanism = here.kernel.as_ref().map(|k| k.mechanism).filter(|m| *m != Mechanism::None);
        // Only when nothing was requested: a daemon given --mechanism uses that one too.
        let daemon_mechanism = match (&self.mechanisms, mechanism, self.requested) {
            (Ok(available), Some(m), None) => Some(rtslice_plan::kernel::node_default_mechanism(available)).filter(|d| *d != m),
            _ => None,
        };
        let cap = (here.node.cap < plan.node.cap - 1e-12).then_some(here.node.cap);
        let mut differences = Vec::new();
        if target != Target::ThisHost {
            for w in &plan.workloads {
                match (here.workload(&w.name), here.rejected.iter().find(|r| r.name == w.name)) {
                    (Some(h), _) if h.cpus == w.cpus && h.allocation == w.allocation => {}
                    (Some(h), _) => differences.push(Difference {
                        workload: w.name.clone(),
                        planned_cpus: Some(w.cpus.clone()),
                        here_cpus: Some(h.cpus.clone()),
                        reason: None,
                    }),
                    (None, r) => differences.push(Difference {
                        workload: w.name.clone(),
                        planned_cpus: Some(w.cpus.clone()),
                        here_cpus: None,
                        reason: r.map(|r| r.reason.clone()),
                    }),
                }
            }
            for r in &plan.rejected {
                if let Some(h) = here.workload(&r.name) {
                    differences.push(Difference { workload: r.name.clone(), planned_cpus: None, here_cpus: Some(h.cpus.clone()), reason: None });
                }
            }
        }
        let error = self.mechanisms.as_ref().err().cloned();
        let applies = error.is_none() && differences.is_empty() && plan.rejected.is_empty() && here.rejected.is_empty();

        let mut facts = vec![format!("CPUs {} online", format_cpu_list(online))];
        if !offline.is_empty() {
            facts.push(format!("the planned CPUs {} are not", format_cpu_list(&offline)));
        }
        if self.facts.isolcpus != plan.node.isolcpus {
            facts.push(format!("isolcpus {} (planned: {})", dash(&self.facts.isolcpus), dash(&plan.node.isolcpus)));
        }
        match &self.mechanisms {
            Ok(m) if m.is_empty() => facts.push("no reservation mechanism (`rtslice doctor`)".into()),
            Ok(m) => facts.push(format!(
                "mechanisms {}{}",
                m.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", "),
                match (mechanism, daemon_mechanism) {
                    (Some(m), Some(d)) => format!(" (apply would use {m}; the daemon, {d}, taking workloads one at a time)"),
                    (Some(m), None) => format!(" (apply would use {m})"),
                    _ => String::new(),
                }
            )),
            Err(_) => {}
        }
        if let Some(c) = cap {
            facts.push(format!("the kernel's cap {:.0}% (planned: {:.0}%)", c * 100.0, plan.node.cap * 100.0));
        }
        let refused_here: Vec<&str> = differences.iter().filter(|d| d.here_cpus.is_none()).map(|d| d.workload.as_str()).collect();
        let conclusion = if let Some(e) = &error {
            format!("`rtslice apply` could not run here: {e}")
        } else if applies {
            "`rtslice apply` here would apply this plan as printed".to_string()
        } else if target == Target::ThisHost {
            format!("`rtslice apply` here would refuse it: {} refused (it applies all or nothing)", here.rejected.len())
        } else if differences.is_empty() {
            "this host would plan it the same, and `rtslice apply` refuses a plan with a rejection (all or nothing)".to_string()
        } else if !refused_here.is_empty() {
            format!(
                "`rtslice apply` here would refuse this spec: {} refused here (it applies all or nothing); `rtslice plan --host` plans for this host",
                refused_here.join(", ")
            )
        } else {
            format!(
                "`rtslice apply` here would place {} differently (below); `rtslice plan --host` shows how",
                differences.iter().map(|d| d.workload.as_str()).collect::<Vec<_>>().join(", ")
            )
        };
        ThisHost {
            applies,
            verdict: format!("{} — {conclusion}", facts.join("; ")),
            facts_line: facts.join("; "),
            conclusion,
            online: online.clone(),
            isolcpus: self.facts.isolcpus.clone(),
            offline,
            facts: Some(self.facts.clone()),
            mechanisms: self.mechanisms.as_ref().ok().cloned(),
            mechanism,
            daemon_mechanism,
            cap,
            error,
            differences,
        }
    }
}

/// Reads a spec file (or stdin for `-`); the name is what error messages show.
pub fn read_spec(path: &Path) -> anyhow::Result<(String, String)> {
    // Bytes first: a binary file is then reported as not UTF-8 text, not as unreadable.
    let (bytes, name) = if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes).context("reading the spec from standard input")?;
        (bytes, "<stdin>".to_string())
    } else {
        let bytes = std::fs::read(path)
            .with_context(|| format!("cannot read spec {}: check the path and permissions", path.display()))?;
        (bytes, path.display().to_string())
    };
    let text = rtslice_spec::utf8_text(&bytes, &name).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((text.to_string(), name))
}

/// The files a spec file names (`profile: vbs1.profile.json`), read relative to the spec's
/// directory (the current directory for a spec on standard input), as a user expects of a path
/// written in a file.
pub struct SpecDir(pub PathBuf);

impl SpecDir {
    pub fn of(spec: &Path) -> SpecDir {
        let dir = if spec.as_os_str() == "-" { None } else { spec.parent() };
        SpecDir(dir.map(Path::to_path_buf).unwrap_or_default())
    }
}

impl rtslice_spec::SpecFiles for SpecDir {
    fn read(&self, path: &str) -> Result<rtslice_spec::SpecFile, String> {
        let full = self.0.join(path);
        let name = full.display().to_string();
        let bytes = std::fs::read(&full).map_err(|e| format!("{name}: {e}; check the path (relative to the spec's directory)"))?;
        let text = rtslice_spec::utf8_text(&bytes, &name).map_err(|e| e.to_string())?;
        Ok(rtslice_spec::SpecFile { name, text: text.to_string() })
    }
}

/// Parses a spec read from `path`, with the files it names read relative to it.
pub fn parse_spec(path: &Path, text: &str, name: &str) -> Result<rtslice_spec::Spec, rtslice_spec::SpecErrors> {
    rtslice_spec::parse_with_files(text, name, &SpecDir::of(path))
}

/// One line on how a reservation meets its SLO: target, prediction, margin, the model's limits.
fn render_sizing(s: &rtslice_plan::Sizing) -> String {
    use rtslice_plan::{SizingBasis, SloTarget};
    let how = match s.basis {
        SizingBasis::Sized => "sized for",
        SizingBasis::Checked => "checked against",
    };
    let p99 = s.predicted_p99_ns.map(|n| format_duration(std::time::Duration::from_nanos(n))).unwrap_or_else(|| "beyond the model's range".into());
    let (target, margin) = match s.target {
        SloTarget::DeadlineMissRatio { max } => (format!("deadline miss ratio ≤ {max:e}"), format!("{:.2e}", s.margin)),
        SloTarget::P99Response { max_ns } => (
            format!("p99 response ≤ {}", format_duration(std::time::Duration::from_nanos(max_ns))),
            format!("{:.0} µs", s.margin / 1e3),
        ),
    };
    let below = s.miss_ratio_one_step_below.map(|b| format!("; one 10 µs step less: miss {b:.2e}")).unwrap_or_default();
    let enforcement = s.tick_ns.map(|t| format!("budget enforced at {} ticks", format_duration(std::time::Duration::from_nanos(t)))).unwrap_or_else(|| "exact budget enforcement".into());
    format!(
        "{how} {target}: predicted miss {:.2e}, p99 {p99}, margin {margin}, budget use {:.0}%, truncation ≤ {:.0e}{below} ({enforcement})",
        s.predicted_miss_ratio,
        s.utilization * 100.0,
        s.truncation_error
    )
}

/// The human view: the node planned, per-CPU map, then per-workload resources and rules, then
/// rejections, then whether this host could apply it.
fn render_with(plan: &Plan, planned_for: &str, here: &ThisHost) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "planned for {planned_for}");
    let n = &plan.node;
    let _ = writeln!(
        out,
        "node {}: CPUs {}, housekeeping {}, isolcpus {}, cap {:.0}%, policy {}",
        n.name.as_deref().unwrap_or("(unnamed)"),
        format_cpu_list(&n.cpus),
        dash(&n.housekeeping),
        dash(&n.isolcpus),
        n.cap * 100.0,
        n.policy.name()
    );
    let _ = writeln!(out, "topology: {}", describe_topology(n.topology.as_ref()));
    let _ = writeln!(out, "\n{:>4}  {:>9}  {:>6}  by", "CPU", "reserved", "free");
    for c in &n.per_cpu {
        let by = if c.housekeeping {
            "(housekeeping)".to_string()
        } else if let Some(owner) = &c.held_for {
            format!("(held idle for {owner}: SMT sibling)")
        } else if let Some(owner) = &c.exclusive_to {
            let dedicated = plan.workload(owner).is_some_and(|w| matches!(w.allocation, Allocation::Dedicated { .. }));
            if dedicated {
                format!("{owner} (dedicated)")
            } else {
                format!("{owner} (shielded)")
            }
        } else if c.by.is_empty() {
            "-".to_string()
        } else {
            c.by.iter().map(|s| format!("{} {:.0}%", s.workload, s.bandwidth * 100.0)).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(out, "{:>4}  {:>8.1}%  {:>5.1}%  {by}", c.cpu, c.reserved * 100.0, c.free * 100.0);
    }
    if !plan.workloads.is_empty() {
        let _ = writeln!(out, "\nadmitted:");
    }
    for w in &plan.workloads {
        let alloc = match &w.allocation {
            Allocation::Reservation { reservation, per_cpu } => format!(
                "reservation {} / {} ({:.1}%) on CPUs {}{}",
                format_duration(reservation.runtime),
                format_duration(reservation.period),
                w.bandwidth() * 100.0,
                per_cpu.iter().map(|r| r.cpu.to_string()).collect::<Vec<_>>().join(","),
                w.pool
                    .map(|p| format!(
                        " ({:.0}% of it CFS bandwidth: {} every {})",
                        p.share * 100.0,
                        format_duration(p.quota),
                        format_duration(p.period)
                    ))
                    .unwrap_or_default()
            ),
            Allocation::Dedicated { cpus } => format!("dedicated CPUs {}", format_cpu_list(cpus)),
            Allocation::BestEffort { weight, cap } => format!(
                "best-effort weight {weight}{}",
                cap.map(|c| format!(", cap {c} CPU(s)")).unwrap_or_default()
            ),
        };
        let mut iso = Vec::new();
        if w.isolation.shield {
            iso.push("shield".to_string());
        }
        if w.isolation.isolcpus {
            iso.push("isolcpus".to_string());
        }
        if w.isolation.wide_affinity {
            iso.push("wide affinity".to_string());
        }
        if !w.isolation.smt.is_shared() {
            iso.push(format!("smt {}", w.isolation.smt.name()));
        }
        if !w.isolation.locality.is_any() {
            iso.push(format!("within one {}", if w.isolation.locality == rtslice_spec::Locality::Llc { "LLC" } else { "NUMA node" }));
        }
        let _ = writeln!(
            out,
            "  {}: cpuset {}; {alloc}{}",
            w.name,
            format_cpu_list(&w.cpus),
            if iso.is_empty() { String::new() } else { format!("; {}", iso.join(", ")) }
        );
        if let Some(s) = &w.sizing {
            let _ = writeln!(out, "      slo: {}", render_sizing(s));
        }
        if let Some(l) = &w.launch {
            let how = match l {
                Launch::Command { command, .. } => format!("run {}", command.join(" ")),
                Launch::Oci { bundle } => format!("runc bundle {bundle}"),
                Launch::Podman { image, .. } => format!("podman image {image}"),
                Launch::Pid { pid } => format!("attach pid {pid}"),
                Launch::Cgroup { path } => format!("attach cgroup {path}"),
            };
            let _ = writeln!(out, "      launch: {how}");
        }
        for t in &w.threads {
            let sched = match &t.sched {
                ThreadSched::Other { nice } => format!("other nice {nice}"),
                ThreadSched::Batch { nice } => format!("batch nice {nice}"),
                ThreadSched::Idle => "idle".into(),
                ThreadSched::Fifo { priority, period } => format!("fifo {priority}{}", at_period(*period)),
                ThreadSched::Rr { priority, period } => format!("rr {priority}{}", at_period(*period)),
                ThreadSched::Deadline { runtime, deadline, period } => format!(
                    "deadline {}/{}/{}",
                    format_duration(*runtime),
                    format_duration(*deadline),
                    format_duration(*period)
                ),
            };
            let cpus = match &t.cpus {
                ThreadCpus::Anywhere => format!("anywhere in {}", format_cpu_list(&w.cpus)),
                ThreadCpus::Cpus(c) => format!("CPU {}", format_cpu_list(c)),
            };
            let _ = writeln!(out, "      thread /{}/ -> {sched}, {cpus}", t.pattern);
        }
        for i in &w.irqs {
            let _ = writeln!(out, "      irq /{}/ -> CPU {}", i.pattern, format_cpu_list(&i.cpus));
        }
        for d in &w.devices {
            let irqs = match &d.irq_cpus {
                Some(c) => format!("its IRQs -> CPU {}", format_cpu_list(c)),
                None => "its IRQs left alone".to_string(),
            };
            let _ = writeln!(out, "      device {} -> passed to the workload, {irqs}", d.pci);
        }
        for q in &w.net {
            let rps = q.rps_cpus.as_ref().map(|c| format!(" rps {}", format_cpu_list(c))).unwrap_or_default();
            let xps = q.xps_cpus.as_ref().map(|c| format!(" xps {}", format_cpu_list(c))).unwrap_or_default();
            let _ = writeln!(out, "      net /{}/ ->{rps}{xps}", q.interface);
        }
        if let Some(c) = &w.cache {
            let ways = if c.shared { "the default group's ways".to_string() } else { format!("{} exclusive way(s)", c.ways) };
            let mb = c.memory_bandwidth_percent.map(|p| format!(", memory bandwidth ≤ {p}%")).unwrap_or_default();
            let _ = writeln!(out, "      cache: {ways}{mb}; resctrl group rtslice-{}: {}", w.name, c.schemata().replace('\n', " "));
        }
    }
    if let Some(c) = plan.cache.as_ref().filter(|c| c.closids_used > 1) {
        let _ = writeln!(
            out,
            "\ncache (resctrl L3: {} ways, mask {:x}, min {} way(s){}; classes of service {} of {} used):",
            c.ways,
            c.cbm_mask,
            c.min_ways,
            if c.shareable_mask != 0 { format!(", shareable {:x} never granted", c.shareable_mask) } else { String::new() },
            c.closids_used,
            c.closids
        );
        for d in &c.domains {
            let by: Vec<String> = d.by.iter().map(|s| format!("{} {:x}", s.workload, s.mask)).collect();
            let _ = writeln!(
                out,
                "  L3 {} (CPUs {}): {} way(s) reserved{}; default group {:x}{}; {} way(s) free",
                d.id,
                format_cpu_list(&d.cpus),
                d.reserved_ways,
                if by.is_empty() { String::new() } else { format!(" ({})", by.join(", ")) },
                d.default_mask,
                if d.default_mask != c.cbm_mask { " (narrowed: best effort keeps only these ways)" } else { "" },
                d.free_ways
            );
        }
    }
    if let Some(k) = &plan.kernel {
        let _ = writeln!(out, "\nkernel parameters apply will write (mechanism {}: {}):", k.mechanism, k.mechanism.describe());
        for line in k.parent_lines() {
            let _ = writeln!(out, "  {line}");
        }
        for w in &k.workloads {
            let _ = writeln!(out, "  {}:{}", w.name, if w.partition { " exclusive cpuset partition" } else { "" });
            if !w.budget.is_empty() {
                let _ = writeln!(out, "      budget: {}", w.budget);
            }
            if let Some(line) = w.group_line(k.mechanism) {
                let _ = writeln!(out, "      group: {line}");
            }
            if let Some(q) = w.cfs_quota {
                let _ = writeln!(
                    out,
                    "      group CFS bandwidth: quota {} µs every {} µs (cgroup v2 cpu.max; v1 cpu.cfs_quota_us, cpu.cfs_period_us)",
                    q.runtime_us, q.period_us
                );
            }
            for t in &w.threads {
                let sched = match &t.sched {
                    ThreadSched::Deadline { runtime, deadline, period } => format!(
                        "SCHED_DEADLINE runtime {} ns, deadline {} ns, period {} ns",
                        runtime.as_nanos(),
                        deadline.as_nanos(),
                        period.as_nanos()
                    ),
                    ThreadSched::Fifo { priority, .. } => format!("SCHED_FIFO priority {priority}"),
                    ThreadSched::Rr { priority, .. } => format!("SCHED_RR priority {priority}"),
                    ThreadSched::Other { nice } => format!("SCHED_OTHER nice {nice}"),
                    ThreadSched::Batch { nice } => format!("SCHED_BATCH nice {nice}"),
                    ThreadSched::Idle => "SCHED_IDLE".into(),
                };
                let flags = if t.flags.is_empty() { String::new() } else { format!(", flags {}", t.flags.join("|")) };
                let shared = if t.shared { " (shared by the threads it matches: each gets runtime / n)" } else { "" };
                let _ = writeln!(out, "      thread /{}/: {sched}{flags}{shared}", t.pattern);
            }
        }
    }
    if !plan.rejected.is_empty() {
        let _ = writeln!(out, "\nrejected:");
    }
    for r in &plan.rejected {
        let _ = writeln!(out, "  {}: {}", r.name, r.reason);
        if let Some(d) = &r.defrag {
            let _ = writeln!(
                out,
                "      defragmentation would fit it on CPU {} after {} move(s) (not applied):",
                format_cpu_list(&d.then_cpus),
                d.moves.len()
            );
            for m in &d.moves {
                let _ = writeln!(
                    out,
                    "        move {}'s {:.0}% share from CPU {} to CPU {}",
                    m.workload,
                    m.bandwidth * 100.0,
                    m.from_cpu,
                    m.to_cpu
                );
            }
        }
    }
    let _ = writeln!(out, "\nthis host: {}\n  → {}", here.facts_line, here.conclusion);
    for d in &here.differences {
        let planned = d.planned_cpus.as_ref().map(|c| format!("planned on CPUs {}", format_cpu_list(c))).unwrap_or_else(|| "refused in the plan".into());
        let there = match (&d.here_cpus, &d.reason) {
            (Some(c), _) => format!("here on CPUs {}", format_cpu_list(c)),
            (None, Some(r)) => format!("refused here: {r}"),
            (None, None) => "refused here".into(),
        };
        let _ = writeln!(out, "  {}: {planned}; {there}", d.workload);
    }
    let _ = writeln!(out, "\n{} admitted, {} rejected", plan.workloads.len(), plan.rejected.len());
    out
}

fn dash(cpus: &[u32]) -> String {
    if cpus.is_empty() {
        "-".into()
    } else {
        format_cpu_list(cpus)
    }
}

/// One line: where the plan's topology came from and what it holds.
fn describe_topology(t: Option<&rtslice_plan::TopologyUse>) -> String {
    let Some(t) = t else {
        return "none known (every CPU a core of its own; declare node.topology, or plan for this host with --host)".into();
    };
    let mut parts = Vec::new();
    if t.cores.is_empty() {
        parts.push("no SMT".to_string());
    } else {
        let threads = t.cores.iter().map(Vec::len).max().unwrap_or(1);
        parts.push(format!("{} SMT cores of up to {threads} threads", t.cores.len()));
    }
    let groups = |g: &[Vec<u32>]| g.iter().map(|c| format_cpu_list(c)).collect::<Vec<_>>().join(" | ");
    if !t.llc.is_empty() {
        parts.push(format!("{} LLC group(s) [{}]", t.llc.len(), groups(&t.llc)));
    }
    if !t.numa.is_empty() {
        parts.push(format!("{} NUMA node(s) [{}]", t.numa.len(), groups(&t.numa)));
    }
    if !t.nics.is_empty() {
        parts.push(format!("NICs {}", t.nics.iter().map(|(n, node)| format!("{n}→node {node}")).collect::<Vec<_>>().join(", ")));
    }
    if !t.devices.is_empty() {
        parts.push(format!("{} PCI device(s) with a NUMA node", t.devices.len()));
    }
    let source = match t.source {
        rtslice_plan::TopologySource::Declared => "declared in the spec",
        rtslice_plan::TopologySource::Discovered => "discovered on this host",
        rtslice_plan::TopologySource::None => "none",
    };
    format!("{source}: {}", parts.join(", "))
}

/// A real-time rule's own SCHED_DEADLINE period, as `plan` prints it next to its priority.
fn at_period(period: Option<std::time::Duration>) -> String {
    period.map(|p| format!(" (every {} under SCHED_DEADLINE)", format_duration(p))).unwrap_or_default()
}
