//! `doctor`: what this host offers for latency-critical work, each problem with a fix.
//! Read-only: it never mounts, writes or changes anything.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::cgroup::{self, Backend, CgroupLayout, CgroupMode};
use crate::cpus::CpuList;
use crate::facts::{kernel_config, mechanisms, online_cpus, SCHED_FEATURES};
use crate::fsio;
use crate::record::Mechanism;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Info,
    Warn,
    Missing,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub topic: String,
    pub level: Level,
    pub detail: String,
    /// What to do about it (empty when nothing needs doing).
    pub fix: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuTopo {
    pub cpu: u32,
    pub core: Option<u32>,
    pub package: Option<u32>,
    pub smt_siblings: String,
    /// CPUs sharing this CPU's last-level cache.
    pub llc_shared: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    pub kernel: String,
    pub cpus_online: CpuList,
    pub cgroup: CgroupLayout,
    pub backend: Option<Backend>,
    /// Reservation mechanisms this host can enforce, best first.
    pub mechanisms: Vec<Mechanism>,
    /// The one `apply` uses by default.
    pub default_mechanism: Mechanism,
    pub rt_runtime_us: Option<i64>,
    pub rt_period_us: Option<u64>,
    pub isolated: CpuList,
    pub nohz_full: CpuList,
    pub preemption: String,
    pub topology: Vec<CpuTopo>,
    pub fair_server: FairServers,
    pub irqbalance_pids: Vec<i32>,
    /// CPUs irqbalance leaves alone (IRQBALANCE_BANNED_CPULIST / IRQBALANCE_BANNED_CPUS from its
    /// environment or /etc/default/irqbalance); `None` when none is configured.
    #[serde(default)]
    pub irqbalance_banned: Option<CpuList>,
    /// The kernel is PREEMPT_RT.
    #[serde(default)]
    pub preempt_rt: bool,
    /// CPUs doctor treats as reserved for real-time work: boot-isolated ones and those of the
    /// workloads applied in the default state directory.
    #[serde(default)]
    pub reserved: CpuList,
    /// NUMA nodes with their CPUs.
    #[serde(default)]
    pub numa_nodes: Vec<(u32, CpuList)>,
    /// Network interfaces with the NUMA node of their device (`None`: virtual, or one node).
    #[serde(default)]
    pub nics: Vec<(String, Option<u32>)>,
    pub runc: Option<(PathBuf, String)>,
    pub crun: Option<(PathBuf, String)>,
    /// Real-time bandwidth held by threads and RT groups rtslice did not place (`foreign` module).
    #[serde(default)]
    pub foreign_rt: Vec<rtslice_plan::ForeignRt>,
    pub findings: Vec<Finding>,
}

impl HostReport {
    pub fn problems(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| matches!(f.level, Level::Warn | Level::Missing))
    }
}

fn finding(topic: &str, level: Level, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding { topic: topic.into(), level, detail: detail.into(), fix: fix.into() }
}

/// HCBS: present, the root group's budget (it boots at 0, when no group may have one) and the
/// group budgets it holds, and what it takes to reserve: apply raises the root's budget as far as
/// the workloads need (journaled; reset restores it), within the kernel's deadline admission.
fn hcbs_finding(layout: &CgroupLayout) -> Finding {
    let Some(root) = layout.v2.as_deref() else {
        return finding("rt-groups", Level::Ok, "HCBS present: cgroup v2 cpu.rt.max reservations", "");
    };
    let Some(r) = cgroup::hcbs_root(root) else {
        return finding(
            "rt-groups",
            Level::Warn,
            format!("HCBS present, but {} is unreadable", root.join("cpu.rt.max").display()),
            "run as root",
        );
    };
    let held: f64 = r.others.iter().map(|b| b.runtime_us as f64 / b.period_us.max(1) as f64).sum();
    let pct = |x: f64| format!("{:.1}%", x * 100.0);
    let root_bw = r.runtime_us as f64 / r.period_us.max(1) as f64;
    let groups = if r.others.is_empty() {
        "no group has a budget".to_string()
    } else {
        format!("{} group(s) hold {} of it", r.others.len(), pct(held))
    };
    let cap = crate::facts::HostFacts::detect().ok().and_then(|f| f.hcbs_cap());
    let admits = cap.map(|c| format!(" (the kernel admits at most {}: its deadline cap less the fair servers')", pct(c))).unwrap_or_default();
    let detail = format!(
        "HCBS present (cgroup v2 cpu.rt.max: a deadline server per CPU per group, its FIFO/RR threads inside); the root \
         group's budget \"{} {}\" ({} of every CPU, held from SCHED_DEADLINE admission), {groups}",
        r.runtime_us,
        r.period_us,
        pct(root_bw)
    );
    let how = if r.runtime_us == 0 {
        format!(
            "the kernel boots the root at 0, when no group may have a budget: apply and the node service raise it to what the \
             workloads need{admits}, journaled, and reset gives back \"0 {}\"",
            r.period_us
        )
    } else {
        format!(
            "apply raises it when the workloads and the other groups need more{admits}; reset gives back \"{} {}\"",
            r.runtime_us, r.period_us
        )
    };
    finding("rt-groups", Level::Ok, format!("{detail}; {how}"), "")
}

fn config_has(config: &Option<String>, key: &str) -> Option<bool> {
    config.as_ref().map(|c| c.lines().any(|l| l == format!("{key}=y")))
}

fn preemption(config: &Option<String>) -> String {
    // The live dynamic mode is in debugfs (often locked down); else the build-time choice.
    let dynamic = fsio::read_trim("/sys/kernel/debug/sched/preempt").ok().and_then(|s| {
        let start = s.find('(')?;
        let end = s[start..].find(')').map(|e| start + e).unwrap_or(s.len());
        Some(s[start + 1..end].to_string())
    });
    // PREEMPT_RT first: /sys/kernel/realtime (1 on RT kernels since 2.6.x-rt, mainline 6.12) is
    // authoritative; the dynamic mode of an RT kernel ("lazy" on 6.12-rt) only concerns SCHED_OTHER.
    let version = fsio::read_trim("/proc/sys/kernel/version").unwrap_or_default();
    if fsio::read_trim("/sys/kernel/realtime").is_ok_and(|s| s == "1")
        || version.contains("PREEMPT_RT")
        || config_has(config, "CONFIG_PREEMPT_RT") == Some(true)
    {
        return match dynamic {
            Some(d) => format!("full real-time (PREEMPT_RT; dynamic mode for normal tasks: {d})"),
            None => "full real-time (PREEMPT_RT)".into(),
        };
    }
    if let Some(d) = dynamic {
        return format!("{d} (dynamic, from debugfs)");
    }
    for (key, name) in [
        ("CONFIG_PREEMPT_NONE", "none"),
        ("CONFIG_PREEMPT_VOLUNTARY", "voluntary"),
        ("CONFIG_PREEMPT_LAZY", "lazy"),
        ("CONFIG_PREEMPT", "full"),
    ] {
        if config_has(config, key) == Some(true) {
            let dynamic = if config_has(config, "CONFIG_PREEMPT_DYNAMIC") == Some(true) {
                " (build default; PREEMPT_DYNAMIC: boot with preempt=full to change)"
            } else {
                ""
            };
            return format!("{name}{dynamic}");
        }
    }
    if version.contains("PREEMPT") {
        "full or dynamic (from uname)".into()
    } else {
        "unknown".into()
    }
}

/// doctor's view of each CPU's place, from `rtslice_sys::topology` (the one sysfs reader the
/// planner's discovered topology uses too), with the sibling and LLC lists in the kernel's text form.
fn cpu_topo(topo: &[rtslice_sys::topology::CpuTopology]) -> Vec<CpuTopo> {
    topo.iter()
        .map(|t| CpuTopo {
            cpu: t.cpu,
            core: t.core_id,
            package: t.package,
            smt_siblings: rtslice_sys::cpulist::format_cpu_list(&t.smt_siblings),
            llc_shared: rtslice_sys::cpulist::format_cpu_list(&t.llc),
        })
        .collect()
}

/// Per CPU: (cpu, runtime ns, period ns).
pub type FairServers = Vec<(u32, Option<u64>, Option<u64>)>;

fn fair_servers(cpus: &CpuList) -> (FairServers, Option<String>) {
    let base = Path::new("/sys/kernel/debug/sched/fair_server");
    if !Path::new("/sys/kernel/debug/sched").exists() {
        return (Vec::new(), Some("debugfs is not mounted".into()));
    }
    if !base.exists() {
        return (Vec::new(), Some("this kernel has no fair_server (before 6.12)".into()));
    }
    let mut err = None;
    let v = cpus
        .iter()
        .map(|c| {
            let mut read = |f: &str| match std::fs::read_to_string(base.join(format!("cpu{c}/{f}"))) {
                Ok(s) => s.trim().parse().ok(),
                Err(e) => {
                    err.get_or_insert_with(|| format!("reading fair_server: {e} (kernel lockdown restricts debugfs?)"));
                    None
                }
            };
            (c, read("runtime"), read("period"))
        })
        .collect();
    (v, err)
}

fn perf_hw_counters() -> Result<(), std::io::Error> {
    rtslice_sys::perf::hardware_counters().map_err(std::io::Error::from)
}

fn tool_version(name: &str) -> Option<(PathBuf, String)> {
    let path = crate::oci::find_in_path(name)?;
    let out = Command::new(&path).arg("--version").output().ok()?;
    let first = String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").to_string();
    Some((path, first))
}

/// Builds the report. Never fails: what cannot be read becomes a finding.
pub fn doctor() -> HostReport {
    doctor_for(None)
}

/// The report with the SMT, irqbalance, NUMA and tuning checks judged against `reserved` CPUs
/// (`None`: the boot-isolated CPUs and those of the applied workloads).
pub fn doctor_for(reserved: Option<&CpuList>) -> HostReport {
    let mut f = Vec::new();
    let kernel = fsio::read_trim("/proc/sys/kernel/osrelease").unwrap_or_default();
    let config = kernel_config();
    let cpus = online_cpus();
    let layout = CgroupLayout::detect().unwrap_or(CgroupLayout {
        mode: CgroupMode::V2,
        v1: Default::default(),
        v2: None,
        v2_controllers: vec![],
    });
    let backend = layout.backend();
    let where_ = |c: &str| -> String {
        if let Some(p) = layout.v1.get(c) {
            format!("{c}: v1 {}", p.display())
        } else if layout.v2_controllers.iter().any(|x| x == c) {
            format!("{c}: v2 {}", layout.v2.as_ref().map(|p| p.display().to_string()).unwrap_or_default())
        } else {
            format!("{c}: not mounted")
        }
    };
    let placement = ["cpuset", "cpu", "cpuacct", "memory"].iter().map(|c| where_(c)).collect::<Vec<_>>().join("; ");
    let mode = match layout.mode {
        CgroupMode::V1 => "v1",
        CgroupMode::Hybrid => "hybrid (v1 controllers + a cgroup2 mount)",
        CgroupMode::V2 => "v2 (unified)",
    };
    let v2_note = match (&layout.v2, layout.mode) {
        (Some(p), CgroupMode::Hybrid) => {
            format!("; cgroup2 at {} holds [{}]", p.display(), layout.v2_controllers.join(" "))
        }
        _ => String::new(),
    };
    match &backend {
        Ok(b) => f.push(finding(
            "cgroups",
            Level::Ok,
            format!("{mode}; {placement}{v2_note}; rtslice drives {}", if b.is_v1() { "v1" } else { "v2" }),
            "",
        )),
        Err(e) => f.push(finding("cgroups", Level::Missing, format!("{mode}; {placement}"), e.clone())),
    }

    // RT group scheduling and HCBS.
    let rt_group = layout.v1.get("cpu").map(|p| p.join("cpu.rt_runtime_us")).filter(|p| p.exists());
    let hcbs = cgroup::hcbs_available(&layout);
    match (&rt_group, hcbs) {
        (_, true) => f.push(hcbs_finding(&layout)),
        (Some(p), false) => f.push(finding(
            "rt-groups",
            Level::Info,
            format!(
                "legacy RT group scheduling (CONFIG_RT_GROUP_SCHED) at {}: root budget {} µs; new groups start at 0 and \
                 parents need budget before children",
                p.display(),
                fsio::read_trim(p).unwrap_or_default()
            ),
            "",
        )),
        (None, false) => f.push(finding(
            "rt-groups",
            Level::Info,
            "no RT group scheduling (normal on cgroup v2); reservations use SCHED_DEADLINE per thread",
            "",
        )),
    }

    // SCHED_DEADLINE / RT bandwidth.
    let rt_runtime_us = fsio::read_trim("/proc/sys/kernel/sched_rt_runtime_us").ok().and_then(|s| s.parse().ok());
    let rt_period_us = fsio::read_trim("/proc/sys/kernel/sched_rt_period_us").ok().and_then(|s| s.parse().ok());
    match (rt_runtime_us, rt_period_us) {
        (Some(r), Some(p)) if r < 0 => f.push(finding(
            "rt-bandwidth",
            Level::Warn,
            format!("sched_rt_runtime_us = -1 (no RT throttling; SCHED_DEADLINE admission disabled) over {p} µs"),
            "echo 950000 > /proc/sys/kernel/sched_rt_runtime_us to restore admission control",
        )),
        (Some(r), Some(p)) => f.push(finding(
            "rt-bandwidth",
            Level::Ok,
            format!(
                "RT/DEADLINE bandwidth cap {r}/{p} µs = {:.0}% per CPU (SCHED_DEADLINE admission uses it)",
                r as f64 * 100.0 / p as f64
            ),
            "",
        )),
        _ => f.push(finding("rt-bandwidth", Level::Missing, "cannot read /proc/sys/kernel/sched_rt_*", "")),
    }
    let mechanisms = mechanisms(&layout);
    let default_mechanism = mechanisms.first().copied().unwrap_or(Mechanism::None);
    f.push(finding(
        "reservations",
        if mechanisms.is_empty() { Level::Missing } else { Level::Ok },
        format!(
            "available: [{}]; apply uses {} by default ({})",
            mechanisms.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", "),
            default_mechanism,
            default_mechanism.describe()
        ),
        if mechanisms.is_empty() { "mount the cpuset and cpu controllers" } else { "" },
    ));

    // Isolation.
    let cmdline = fsio::read_trim("/proc/cmdline").unwrap_or_default();
    let isolated = fsio::read_trim("/sys/devices/system/cpu/isolated").ok().and_then(|s| CpuList::parse(&s).ok()).unwrap_or_default();
    let nohz_full = fsio::read_trim("/sys/devices/system/cpu/nohz_full")
        .ok()
        .and_then(|s| CpuList::parse(s.trim_matches(|c: char| c == '(' || c == ')' || c.is_alphabetic())).ok())
        .unwrap_or_default();
    let rcu_nocbs = cmdline.split_whitespace().find(|w| w.starts_with("rcu_nocbs=")).unwrap_or("");
    f.push(finding(
        "isolation",
        if isolated.is_empty() && nohz_full.is_empty() { Level::Info } else { Level::Ok },
        format!(
            "isolcpus: [{isolated}], nohz_full: [{nohz_full}], {}",
            if rcu_nocbs.is_empty() { "no rcu_nocbs".to_string() } else { rcu_nocbs.to_string() }
        ),
        if isolated.is_empty() && nohz_full.is_empty() {
            "optional hard isolation: boot with isolcpus=managed_irq,domain,<cpus> nohz_full=<cpus> rcu_nocbs=<cpus>; \
             rtslice shields (cpusets) need no reboot"
        } else {
            ""
        },
    ));
    if config_has(&config, "CONFIG_NO_HZ_FULL") == Some(false) {
        f.push(finding("nohz_full", Level::Info, "kernel built without CONFIG_NO_HZ_FULL: ticks continue on busy CPUs", ""));
    }

    // Topology, read once: the summary here and the reserved CPUs' siblings below.
    let root = Path::new("/");
    let cpu_ids: Vec<u32> = cpus.iter().collect();
    let topo_sys = rtslice_sys::topology::topology(root, &cpu_ids);
    let topo = cpu_topo(&topo_sys);
    let smt = topo.iter().any(|t| CpuList::parse(&t.smt_siblings).map(|s| s.len() > 1).unwrap_or(false));
    f.push(finding(
        "topology",
        if smt { Level::Warn } else { Level::Ok },
        format!(
            "{} online CPUs [{}]; SMT {}; LLC groups: {}",
            cpus.len(),
            cpus,
            if smt { "on" } else { "off" },
            {
                let mut g: Vec<String> = topo.iter().map(|t| t.llc_shared.clone()).collect();
                g.sort();
                g.dedup();
                g.join(" | ")
            }
        ),
        if smt { "give latency-critical threads whole cores (both SMT siblings) or disable SMT" } else { "" },
    ));

    let preemption = preemption(&config);
    let preempt_rt = preemption.starts_with("full real-time");
    let weak = preemption.starts_with("none") || preemption.starts_with("voluntary");
    f.push(finding(
        "preemption",
        if weak { Level::Warn } else { Level::Ok },
        format!("preemption model: {preemption}"),
        if weak {
            "kernel code is not preempted by RT threads: expect ms-scale latencies; boot with preempt=full (PREEMPT_DYNAMIC) or use a PREEMPT_RT kernel"
        } else {
            ""
        },
    ));

    f.push(finding(
        "preempt_rt",
        if preempt_rt { Level::Ok } else { Level::Info },
        if preempt_rt { "PREEMPT_RT kernel: interrupt handlers and most kernel code are preemptible" } else { "not a PREEMPT_RT kernel" },
        if preempt_rt { "" } else { "for µs-scale worst cases install a PREEMPT_RT kernel (Debian: linux-image-rt-amd64)" },
    ));

    // HRTICK / HRTICK_DL: high-resolution enforcement of CFS slices and deadline runtimes.
    match std::fs::read_to_string(SCHED_FEATURES) {
        Ok(list) => {
            let state = |f: &str| {
                let flags: Vec<&str> = list.split_whitespace().collect();
                if flags.contains(&f) {
                    "on"
                } else if flags.contains(&format!("NO_{f}").as_str()) {
                    "off"
                } else {
                    "absent"
                }
            };
            let (hr, hr_dl) = (state("HRTICK"), state("HRTICK_DL"));
            f.push(finding(
                "hrtick",
                if hr_dl == "off" { Level::Info } else { Level::Ok },
                format!("scheduler features: HRTICK {hr}, HRTICK_DL {hr_dl}"),
                if hr_dl == "off" {
                    "SCHED_DEADLINE runtimes are enforced at the tick; `rtslice apply --hrtick` turns HRTICK/HRTICK_DL on (reset restores)"
                } else {
                    ""
                },
            ));
        }
        Err(e) => f.push(finding(
            "hrtick",
            Level::Info,
            format!("scheduler features unreadable ({}: {e}; debugfs not mounted or locked down)", SCHED_FEATURES),
            "",
        )),
    }
    let (fair_server, fs_err) = fair_servers(&cpus);
    match fs_err {
        None => f.push(finding(
            "fair_server",
            Level::Info,
            format!(
                "fair_server per CPU (runtime/period ns): {}; it lets CFS preempt RT tasks",
                fair_server.iter().map(|(c, r, p)| format!("cpu{c} {}/{}", r.unwrap_or(0), p.unwrap_or(0))).collect::<Vec<_>>().join(", ")
            ),
            "on CPUs holding only reserved RT work, apply can set its runtime to 0 (fair_server_off)",
        )),
        Some(e) => f.push(finding(
            "fair_server",
            if e.contains("before 6.12") { Level::Info } else { Level::Warn },
            e.clone(),
            if e.contains("not mounted") {
                "mount -t debugfs none /sys/kernel/debug (apply mounts it when it needs it)"
            } else if e.contains("lockdown") {
                "debugfs is locked down: fair_server cannot be tuned on this host (boot without lockdown to tune it)"
            } else {
                ""
            },
        )),
    }

    // Real-time threads and groups rtslice did not place share the RT/DEADLINE cap with its
    // reservations; `rtslice plan` and the bench planner take them as facts (NodeFacts::foreign_rt).
    let foreign_rt = crate::foreign::foreign_rt(DOCTOR_FOREIGN_WINDOW, &applied_pids());
    if foreign_rt.is_empty() {
        f.push(finding("foreign-rt", Level::Ok, "no real-time threads or RT groups outside rtslice's workloads", ""));
    } else {
        for fr in &foreign_rt {
            f.push(finding(
                "foreign-rt",
                Level::Info,
                format!(
                    "{} holds {:.1}% of CPU(s) {} ({}); reservations get the cap less this",
                    fr.source,
                    fr.per_cpu * 100.0,
                    CpuList::from_cpus(fr.cpus.iter().copied()),
                    match fr.basis {
                        rtslice_plan::ForeignBasis::Declared => "declared budget",
                        rtslice_plan::ForeignBasis::Measured => "measured over 300 ms",
                    }
                ),
                "",
            ));
        }
    }

    let irqbalance_pids = crate::irq::pids_named("irqbalance");
    let irqbalance_banned = irqbalance_banned(&irqbalance_pids);
    let reserved = reserved.cloned().unwrap_or_else(|| reserved_cpus(&isolated));
    f.push(irqbalance_finding(&irqbalance_pids, irqbalance_banned.as_ref(), &reserved));

    // Locality: SMT siblings of reserved CPUs, NUMA nodes of CPUs and NICs.
    f.push(smt_finding(&topo_sys, &reserved));
    let numa_nodes: Vec<(u32, CpuList)> =
        rtslice_sys::topology::numa_nodes(root).into_iter().map(|(n, c)| (n, CpuList::from_cpus(c))).collect();
    let nics: Vec<(String, Option<u32>)> = rtslice_sys::topology::nic_locality(root)
        .into_iter()
        .filter(|n| n.device.is_some())
        .map(|n| (n.name, n.node))
        .collect();
    f.push(numa_finding(&numa_nodes, &nics, &reserved));

    // Run-time tuning (what `rtslice tune` sets), judged against the reserved CPUs.
    f.extend(tuning_findings(&cpus, &reserved));

    // Observability.
    let tracefs = std::fs::read_to_string("/proc/mounts").map(|m| m.contains(" tracefs ")).unwrap_or(false);
    f.push(finding(
        "tracefs",
        if tracefs { Level::Ok } else { Level::Warn },
        if tracefs { "mounted" } else { "not mounted" },
        if tracefs { "" } else { "mount -t tracefs nodev /sys/kernel/tracing" },
    ));
    let btf = Path::new("/sys/kernel/btf/vmlinux").exists();
    f.push(finding(
        "bpf",
        if btf { Level::Ok } else { Level::Missing },
        if btf { "BTF at /sys/kernel/btf/vmlinux: CO-RE BPF programs load" } else { "no kernel BTF" },
        if btf { "" } else { "use a kernel built with CONFIG_DEBUG_INFO_BTF=y" },
    ));
    match perf_hw_counters() {
        Ok(()) => f.push(finding("perf", Level::Ok, "hardware counters available (cycles)", "")),
        Err(e) => f.push(finding(
            "perf",
            Level::Info,
            format!("hardware counters unsupported ({e})"),
            "counters need bare metal or a VM with a virtual PMU",
        )),
    }
    f.push(resctrl_finding(Path::new(crate::resctrl::DEFAULT_ROOT)));
    let proc_events = config_has(&config, "CONFIG_PROC_EVENTS");
    f.push(finding(
        "proc-connector",
        if proc_events == Some(false) { Level::Warn } else { Level::Ok },
        match proc_events {
            Some(true) => "CONFIG_PROC_EVENTS=y: the agent reacts to new threads by netlink events",
            Some(false) => "no process connector: the agent falls back to polling",
            None => "kernel config not readable; the agent tries the process connector and falls back to polling",
        },
        "",
    ));

    let runc = tool_version("runc");
    let crun = tool_version("crun");
    match &runc {
        Some((p, v)) => {
            let ver = crate::oci::parse_runc_version(v);
            let sched = ver.is_some_and(|v| v >= (1, 2, 0));
            f.push(finding(
                "runc",
                Level::Ok,
                format!(
                    "{} at {}: {}",
                    v,
                    p.display(),
                    if sched {
                        "process.scheduler supported"
                    } else {
                        "no process.scheduler (< 1.2): rtslice sets container threads' policies itself"
                    }
                ),
                "",
            ))
        }
        None => f.push(finding("runc", Level::Missing, "runc not found: OCI launches unavailable", "apt-get install runc")),
    }
    if let Some((p, v)) = &crun {
        f.push(finding(
            "crun",
            Level::Info,
            format!("{v} at {}{}", p.display(), if layout.mode == CgroupMode::Hybrid { " (does not work on hybrid layouts)" } else { "" }),
            "",
        ));
    }

    HostReport {
        kernel,
        cpus_online: cpus,
        cgroup: layout.clone(),
        backend: backend.ok(),
        mechanisms,
        default_mechanism,
        rt_runtime_us,
        rt_period_us,
        isolated,
        nohz_full,
        preemption,
        topology: topo,
        fair_server,
        irqbalance_pids,
        irqbalance_banned,
        preempt_rt,
        reserved,
        numa_nodes,
        nics,
        runc,
        crun,
        foreign_rt,
        findings: f,
    }
}

/// How long doctor watches FIFO/RR threads to measure their CPU time.
const DOCTOR_FOREIGN_WINDOW: std::time::Duration = std::time::Duration::from_millis(300);

/// Processes of the workloads applied in the default state directory: rtslice's own, not foreign.
fn applied_pids() -> Vec<u32> {
    crate::journal::StateDir::default()
        .load()
        .ok()
        .flatten()
        .and_then(|s| s.record)
        .map(|r| r.workloads.iter().flat_map(|w| w.pids.iter().map(|p| p.pid as u32)).collect())
        .unwrap_or_default()
}

/// Reserved CPUs as far as doctor can know them without a spec: boot-isolated CPUs plus the CPUs of
/// the workloads applied in the default state directory (housekeeping CPUs excluded).
fn reserved_cpus(isolated: &CpuList) -> CpuList {
    let applied = crate::journal::StateDir::default()
        .load()
        .ok()
        .flatten()
        .and_then(|s| s.record)
        .map(|r| {
            let all = r.workloads.iter().fold(CpuList::new(), |a, w| a.union(&w.cpus));
            all.difference(&r.setup.housekeeping)
        })
        .unwrap_or_default();
    isolated.union(&applied)
}

/// irqbalance's banned CPUs: the running daemon's environment first (what it actually uses), then
/// /etc/default/irqbalance (what it will use when restarted). IRQBALANCE_BANNED_CPULIST (1.8+) wins
/// over the older hex mask IRQBALANCE_BANNED_CPUS, as in irqbalance itself.
fn irqbalance_banned(pids: &[i32]) -> Option<CpuList> {
    let from_vars = |vars: Vec<(String, String)>| -> Option<CpuList> {
        let get = |k: &str| vars.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.trim_matches('"').to_string());
        if let Some(l) = get("IRQBALANCE_BANNED_CPULIST").filter(|v| !v.is_empty()) {
            return CpuList::parse(&l).ok();
        }
        get("IRQBALANCE_BANNED_CPUS").filter(|v| !v.is_empty()).and_then(|m| CpuList::parse_mask(&m).ok())
    };
    for pid in pids {
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            let vars = env
                .split(|b| *b == 0)
                .filter_map(|kv| std::str::from_utf8(kv).ok()?.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
                .collect();
            if let Some(b) = from_vars(vars) {
                return Some(b);
            }
        }
    }
    let text = std::fs::read_to_string("/etc/default/irqbalance").ok()?;
    from_vars(parse_env_file(&text))
}

/// `KEY=value` lines of a shell-style defaults file (comments and blank lines skipped).
fn parse_env_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("export ").unwrap_or(l).split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches(['"', '\'']).to_string()))
        .collect()
}

fn irqbalance_finding(pids: &[i32], banned: Option<&CpuList>, reserved: &CpuList) -> Finding {
    let banned_text = banned.map(|b| format!("banned CPUs [{b}]")).unwrap_or_else(|| "no banned CPUs configured".into());
    if pids.is_empty() {
        return finding("irqbalance", Level::Ok, format!("not running ({banned_text})"), "");
    }
    let exposed = banned.map(|b| reserved.difference(b)).unwrap_or_else(|| reserved.clone());
    if reserved.is_empty() {
        return finding(
            "irqbalance",
            Level::Warn,
            format!("running (pid {pids:?}), {banned_text}"),
            "irqbalance moves IRQs back: set IRQBALANCE_BANNED_CPULIST=<reserved cpus> in /etc/default/irqbalance and restart it",
        );
    }
    if exposed.is_empty() {
        return finding("irqbalance", Level::Ok, format!("running (pid {pids:?}), {banned_text}: every reserved CPU is banned"), "");
    }
    finding(
        "irqbalance",
        Level::Warn,
        format!("running (pid {pids:?}), {banned_text}: it may move IRQs onto reserved CPUs [{exposed}]"),
        format!(
            "set IRQBALANCE_BANNED_CPULIST={} in /etc/default/irqbalance and restart irqbalance",
            banned.map(|b| b.union(reserved)).unwrap_or_else(|| reserved.clone())
        ),
    )
}

fn smt_finding(topo: &[rtslice_sys::topology::CpuTopology], reserved: &CpuList) -> Finding {
    let shared: Vec<String> = topo
        .iter()
        .filter(|t| reserved.contains(t.cpu))
        .flat_map(|t| t.smt_siblings.iter().filter(|s| **s != t.cpu && !reserved.contains(**s)).map(move |s| format!("{}~{s}", t.cpu)))
        .collect();
    if reserved.is_empty() {
        return finding("smt-siblings", Level::Info, "no reserved CPUs known (no isolcpus, nothing applied)", "");
    }
    if shared.is_empty() {
        return finding("smt-siblings", Level::Ok, format!("reserved CPUs [{reserved}] hold whole cores (no sibling outside them)"), "");
    }
    finding(
        "smt-siblings",
        Level::Warn,
        format!("reserved CPU~sibling pairs whose sibling is not reserved: {}", shared.join(", ")),
        "a sibling's work slows the reserved thread through the shared core: give reserved work whole cores (both siblings in the node's CPUs minus housekeeping) or keep the siblings idle",
    )
}

fn numa_finding(nodes: &[(u32, CpuList)], nics: &[(String, Option<u32>)], reserved: &CpuList) -> Finding {
    let node_text = nodes.iter().map(|(n, c)| format!("node{n} [{c}]")).collect::<Vec<_>>().join(", ");
    let nic_text = if nics.is_empty() {
        "no NIC with a device".to_string()
    } else {
        nics.iter()
            .map(|(name, node)| format!("{name}: {}", node.map(|n| format!("node{n}")).unwrap_or_else(|| "no node".into())))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let spans: Vec<u32> = nodes.iter().filter(|(_, c)| !c.intersection(reserved).is_empty()).map(|(n, _)| *n).collect();
    let level = if spans.len() > 1 { Level::Info } else { Level::Ok };
    finding(
        "numa",
        level,
        format!("{} NUMA node(s): {node_text}; NICs: {nic_text}", nodes.len()),
        if spans.len() > 1 {
            "reserved CPUs span several NUMA nodes: keep each latency-critical workload's CPUs on the node of its NIC"
        } else {
            ""
        },
    )
}

/// What `rtslice tune` would change, judged against the reserved CPUs (or the raw values when none
/// is known).
fn tuning_findings(online: &CpuList, reserved: &CpuList) -> Vec<Finding> {
    let housekeeping = online.difference(reserved);
    if reserved.is_empty() || housekeeping.is_empty() {
        let read = |p: &str| fsio::read_trim(p).unwrap_or_else(|_| "absent".into());
        return vec![finding(
            "tuning",
            Level::Info,
            format!(
                "no reserved CPUs known; timer_migration {}, default IRQ affinity {}, workqueue cpumask {}, watchdog CPUs {}, THP {}",
                read("/proc/sys/kernel/timer_migration"),
                read("/proc/irq/default_smp_affinity"),
                read("/sys/devices/virtual/workqueue/cpumask"),
                read("/proc/sys/kernel/watchdog_cpumask"),
                read("/sys/kernel/mm/transparent_hugepage/enabled"),
            ),
            "",
        )];
    }
    let req = crate::tune::TuneRequest::new(reserved.clone(), housekeeping.clone());
    let plan = match crate::tune::plan_tuning(&req) {
        Ok(p) => p,
        Err(e) => return vec![finding("tuning", Level::Info, format!("cannot judge the tuning: {e}"), "")],
    };
    let fix = format!("rtslice tune --reserved {reserved} --housekeeping {housekeeping} --apply (reset undoes it)");
    let mut out = Vec::new();
    for knob in crate::tune::Knob::ALL {
        let writes: Vec<&crate::tune::KnobWrite> = plan.writes.iter().filter(|w| w.knob == knob).collect();
        let absent: Vec<&str> = plan.absent.iter().filter(|a| a.knob == knob).map(|a| a.reason.as_str()).collect();
        if writes.is_empty() && absent.is_empty() {
            continue;
        }
        let off: Vec<String> = writes.iter().filter(|w| w.needed()).map(|w| format!("{} is {:?} (tune: {:?})", w.path.display(), w.current, w.wanted)).collect();
        let mut detail = if off.is_empty() && !writes.is_empty() { "as tune sets it".to_string() } else { off.join("; ") };
        if !absent.is_empty() {
            if !detail.is_empty() {
                detail.push_str("; ");
            }
            detail.push_str(&absent.join("; "));
        }
        // IRQs and unbound work landing on reserved CPUs interfere now; the rest is a missed gain.
        let level = match knob {
            crate::tune::Knob::IrqDefaultAffinity | crate::tune::Knob::WorkqueueCpumask if !off.is_empty() => Level::Warn,
            _ if !off.is_empty() || !absent.is_empty() => Level::Info,
            _ => Level::Ok,
        };
        out.push(finding(&format!("tune:{knob}"), level, detail, if off.is_empty() { String::new() } else { fix.clone() }));
    }
    let add = plan.cmdline_to_add();
    out.push(finding(
        "boot-params",
        if add.is_empty() { Level::Ok } else { Level::Info },
        if add.is_empty() { "booted with isolcpus/nohz_full/rcu_nocbs for the reserved CPUs".to_string() } else { format!("not booted with: {add}") },
        if add.is_empty() { String::new() } else { format!("add to the kernel command line (a reboot applies it): {add}") },
    ));
    out
}

/// Cache allocation: whether resctrl is mounted with an L3 to allocate, its ways, CLOSIDs and MBA,
/// and what to do when it is not (the CPU flags say whether mounting would help).
fn resctrl_finding(root: &Path) -> Finding {
    let flags = rtslice_sys::resctrl::cpu_flags();
    let cat = flags.iter().any(|f| f == "cat_l3" || f == "rdt_a");
    match rtslice_sys::resctrl::read_info(root) {
        Ok(Some(i)) => {
            let groups = std::fs::read_dir(root)
                .map(|rd| rd.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(crate::resctrl::GROUP_PREFIX)).count())
                .unwrap_or(0);
            finding(
                "resctrl",
                if i.cdp { Level::Warn } else { Level::Ok },
                format!(
                    "L3 cache allocation at {}: {} ways (cbm_mask {:x}, min {}, shareable {:x}), {} CLOSIDs, L3 ids {:?}{}{}; {groups} rtslice group(s)",
                    root.display(),
                    i.cbm_mask.count_ones(),
                    i.cbm_mask,
                    i.min_cbm_bits,
                    i.shareable_bits,
                    i.num_closids,
                    i.domains,
                    i.mba.map(|(min, g)| format!(", MBA {min}%..100% in steps of {g}%")).unwrap_or_else(|| ", no MBA".into()),
                    if i.monitoring { ", occupancy/MBM monitoring" } else { ", no monitoring" },
                ),
                if i.cdp { "code/data prioritization is on: rtslice writes L3 lines only; remount without -o cdp" } else { "" },
            )
        }
        Ok(None) if cat => finding(
            "resctrl",
            Level::Warn,
            format!("the CPU offers cache allocation ({}) but resctrl is not mounted at {}", flags.join(" "), root.display()),
            format!("mount -t resctrl resctrl {}", root.display()),
        ),
        Ok(None) => finding(
            "resctrl",
            Level::Info,
            format!(
                "no cache allocation: {} (workloads asking for `cache`/`memoryBandwidth` are refused)",
                if rtslice_sys::resctrl::kernel_supports() { "the CPU has no CAT/MBA (no cat_l3/rdt_a flag)" } else { "the kernel has no resctrl file system" }
            ),
            "cache allocation needs Intel RDT or AMD PQoS hardware (bare metal or a VM passing it through)",
        ),
        Err(e) => finding("resctrl", Level::Warn, format!("resctrl at {} unreadable: {e}", root.display()), "check the mount; run as root"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doctor_reports_this_host() {
        let r = doctor();
        assert!(!r.cpus_online.is_empty());
        assert!(r.findings.iter().any(|f| f.topic == "cgroups"));
        assert_eq!(r.topology.len(), r.cpus_online.len());
        // Every problem carries a fix.
        for p in r.problems() {
            assert!(!p.fix.is_empty() || p.topic == "rt-bandwidth", "{p:?}");
        }
        serde_json::to_string(&r).unwrap();
    }

    #[test]
    fn irqbalance_defaults_file_and_banned_cpus() {
        let vars = parse_env_file("# comment\nIRQBALANCE_ONESHOT=\nexport IRQBALANCE_BANNED_CPULIST=\"2-5\"\n IRQBALANCE_BANNED_CPUS=f0\n");
        assert!(vars.contains(&("IRQBALANCE_BANNED_CPULIST".into(), "2-5".into())));
        assert!(vars.contains(&("IRQBALANCE_BANNED_CPUS".into(), "f0".into())));
        let reserved = CpuList::parse("2-3").unwrap();
        let banned = CpuList::parse("3").unwrap();
        let f = irqbalance_finding(&[42], Some(&banned), &reserved);
        assert_eq!(f.level, Level::Warn);
        assert!(f.detail.contains("reserved CPUs [2]"), "{f:?}");
        assert!(f.fix.contains("IRQBALANCE_BANNED_CPULIST=2-3"), "{f:?}");
        assert_eq!(irqbalance_finding(&[42], Some(&CpuList::parse("2-7").unwrap()), &reserved).level, Level::Ok);
        assert_eq!(irqbalance_finding(&[], None, &reserved).level, Level::Ok);
    }

    #[test]
    fn smt_siblings_outside_the_reserved_cpus_are_named() {
        let t = |cpu, sib: Vec<u32>| rtslice_sys::topology::CpuTopology { cpu, core_id: None, package: None, node: None, smt_siblings: sib, llc: vec![] };
        let topo = vec![t(0, vec![0, 2]), t(1, vec![1, 3]), t(2, vec![0, 2]), t(3, vec![1, 3])];
        let f = smt_finding(&topo, &CpuList::parse("2-3").unwrap());
        assert_eq!(f.level, Level::Warn);
        assert!(f.detail.contains("2~0") && f.detail.contains("3~1"), "{f:?}");
        assert_eq!(smt_finding(&topo, &CpuList::parse("1,3").unwrap()).level, Level::Ok);
    }

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        // doctor's topology comes from rtslice_sys::topology; its text is the kernel's own format.
        let cpus: Vec<u32> = online_cpus().iter().collect();
        for t in cpu_topo(&rtslice_sys::topology::topology(Path::new("/"), &cpus)) {
            let base = PathBuf::from(format!("/sys/devices/system/cpu/cpu{}", t.cpu));
            if let Ok(raw) = fsio::read_trim(base.join("topology/thread_siblings_list")) {
                assert_eq!(t.smt_siblings, raw, "CPU {}", t.cpu);
            }
            assert_eq!(t.core, fsio::read_trim(base.join("topology/core_id")).ok().and_then(|s| s.parse().ok()), "CPU {}", t.cpu);
        }
        let t = |cpu, sib: Vec<u32>, llc: Vec<u32>| rtslice_sys::topology::CpuTopology { cpu, core_id: Some(3), package: Some(1), node: None, smt_siblings: sib, llc };
        let v = cpu_topo(&[t(4, vec![4, 36], (0..8).chain(32..40).collect()), t(5, vec![5, 6], vec![])]);
        assert_eq!((v[0].smt_siblings.as_str(), v[0].llc_shared.as_str(), v[0].core, v[0].package), ("4,36", "0-7,32-39", Some(3), Some(1)));
        assert_eq!((v[1].smt_siblings.as_str(), v[1].llc_shared.as_str()), ("5-6", ""));
    }
}
