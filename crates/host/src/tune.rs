//! `tune`: the run-time host tuning that tuned's realtime profile and OpenShift's PerformanceProfile
//! do, made reversible: every write goes through the journal (`Change::Wrote`, in a journal of its own
//! under `<state-dir>/tune`, so workloads can be applied and reset while the host stays tuned) and
//! `reset` (or `reset_tuning`) writes every old value back.
//!
//! Knobs, each skipped with a plain reason when this kernel or machine lacks it:
//! - cpufreq governor `performance` on reserved CPUs (`cpuN/cpufreq/scaling_governor`);
//! - C-state limits on reserved CPUs: the per-CPU PM QoS resume latency
//!   (`cpuN/power/pm_qos_resume_latency_us`, which every cpuidle governor honours) and the cpuidle
//!   states whose exit latency exceeds the limit disabled (`cpuN/cpuidle/stateK/disable`). The global
//!   PM QoS file /dev/cpu_dma_latency is not used: its request lives only while a process holds it
//!   open, and rtslice has no daemon that outlives `tune` for the tuning (the agent runs only with
//!   applied workloads); the per-CPU sysfs file is persistent, limited to the reserved CPUs, and
//!   journaled like any other file;
//! - `kernel.timer_migration = 0`;
//! - the default IRQ affinity (`/proc/irq/default_smp_affinity`), the unbound workqueues' cpumask
//!   (`/sys/devices/virtual/workqueue/cpumask`) and the soft/hard lockup watchdog's CPUs
//!   (`kernel.watchdog_cpumask`) to the housekeeping CPUs;
//! - RT throttling (`kernel.sched_rt_runtime_us`), only when asked: rtslice's admission relies on the
//!   throttle (SCHED_DEADLINE admission and RT groups are off at -1, which tuned's realtime sets);
//! - transparent hugepages (`/sys/kernel/mm/transparent_hugepage/enabled`);
//! - hugepages per NUMA node (`nodeN/hugepages/hugepages-<size>kB/nr_hugepages`), read back: the
//!   kernel may reserve fewer than asked when memory is fragmented, which fails the transaction.
//!
//! What only a reboot changes (isolcpus, nohz_full, rcu_nocbs, irqaffinity, intel_pstate) is returned
//! as the kernel command-line words to add, never written to a boot loader.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cpus::CpuList;
use crate::error::{HostError, Result};
use crate::fsio;
use crate::journal::{Change, State, StateDir};
use crate::txn::{Fault, Txn};

/// One host setting `tune` manages (its name on the command line and in reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
    Governor,
    PmQos,
    Cstates,
    TimerMigration,
    IrqDefaultAffinity,
    WorkqueueCpumask,
    WatchdogCpumask,
    RtRuntime,
    Thp,
    Hugepages,
}

impl Knob {
    pub const ALL: [Knob; 10] = [
        Knob::Governor,
        Knob::PmQos,
        Knob::Cstates,
        Knob::TimerMigration,
        Knob::IrqDefaultAffinity,
        Knob::WorkqueueCpumask,
        Knob::WatchdogCpumask,
        Knob::RtRuntime,
        Knob::Thp,
        Knob::Hugepages,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Knob::Governor => "governor",
            Knob::PmQos => "pm_qos",
            Knob::Cstates => "cstates",
            Knob::TimerMigration => "timer_migration",
            Knob::IrqDefaultAffinity => "irq_default_affinity",
            Knob::WorkqueueCpumask => "workqueue_cpumask",
            Knob::WatchdogCpumask => "watchdog_cpumask",
            Knob::RtRuntime => "rt_runtime",
            Knob::Thp => "thp",
            Knob::Hugepages => "hugepages",
        }
    }

    pub fn parse(name: &str) -> Option<Knob> {
        let n = name.replace('-', "_");
        Knob::ALL.into_iter().find(|k| k.name() == n)
    }
}

impl std::fmt::Display for Knob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Transparent hugepage mode (`enabled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Thp {
    Always,
    Madvise,
    Never,
}

impl Thp {
    pub fn as_str(self) -> &'static str {
        match self {
            Thp::Always => "always",
            Thp::Madvise => "madvise",
            Thp::Never => "never",
        }
    }
}

/// Hugepages to hold reserved on one NUMA node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugepageRequest {
    pub node: u32,
    pub size_kb: u64,
    pub count: u64,
}

impl HugepageRequest {
    /// Parses `NODE:SIZE:COUNT`, SIZE as `2M`, `1G` or kB (`2048`): `0:2M:512`.
    pub fn parse(text: &str) -> std::result::Result<HugepageRequest, String> {
        let bad = || format!("hugepages {text:?}: write NODE:SIZE:COUNT, e.g. 0:2M:512 or 1:1G:4");
        let mut parts = text.split(':');
        let (Some(node), Some(size), Some(count), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let node = node.trim().parse().map_err(|_| bad())?;
        let size = size.trim();
        let size_kb = if let Some(m) = size.strip_suffix(['M', 'm']) {
            m.parse::<u64>().map_err(|_| bad())? * 1024
        } else if let Some(g) = size.strip_suffix(['G', 'g']) {
            g.parse::<u64>().map_err(|_| bad())? * 1024 * 1024
        } else {
            size.strip_suffix("kB").unwrap_or(size).parse().map_err(|_| bad())?
        };
        let count = count.trim().parse().map_err(|_| bad())?;
        Ok(HugepageRequest { node, size_kb, count })
    }
}

/// What to tune. `reserved` are the CPUs of real-time work, `housekeeping` those of everything else.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneRequest {
    pub reserved: CpuList,
    pub housekeeping: CpuList,
    /// Knobs left alone.
    pub skip: Vec<Knob>,
    /// Longest C-state exit latency allowed on reserved CPUs, µs (0: no idle state, the CPU polls).
    pub max_idle_latency_us: u32,
    /// `kernel.sched_rt_runtime_us` to set (`None`: left alone).
    pub rt_runtime_us: Option<i64>,
    /// Transparent hugepages mode (`None`: left alone).
    pub thp: Option<Thp>,
    pub hugepages: Vec<HugepageRequest>,
    /// Where /sys and /proc are found ("/" on a host; a copy of the tree in tests of absent knobs).
    pub root: PathBuf,
}

impl TuneRequest {
    pub fn new(reserved: CpuList, housekeeping: CpuList) -> TuneRequest {
        TuneRequest {
            reserved,
            housekeeping,
            skip: Vec::new(),
            max_idle_latency_us: 0,
            rt_runtime_us: None,
            thp: Some(Thp::Never),
            hugepages: Vec::new(),
            root: PathBuf::from("/"),
        }
    }

    fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    fn wants(&self, k: Knob) -> bool {
        !self.skip.contains(&k)
    }
}

/// How a file reads and takes its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// Reads back what was written (in the kernel's spelling).
    Plain,
    /// Reads as the list of choices with the selected one in brackets ("always [madvise] never"),
    /// takes one choice.
    Selection,
    /// A count the kernel may satisfy only in part (nr_hugepages): read back after writing.
    Count,
}

/// One write `tune` makes, with the value the file holds now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnobWrite {
    pub knob: Knob,
    pub path: PathBuf,
    pub current: String,
    pub wanted: String,
    pub kind: FileKind,
}

impl KnobWrite {
    pub fn needed(&self) -> bool {
        !crate::txn::same_value(&self.current, &self.wanted)
    }
}

/// A knob this host does not have (or that cannot do what was asked), and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnobAbsent {
    pub knob: Knob,
    pub reason: String,
}

/// A kernel command-line word for the reserved/housekeeping split, and whether the running kernel
/// was booted with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BootParam {
    pub word: String,
    /// What the running kernel's command line has for the same key (`None`: nothing).
    pub booted_with: Option<String>,
    pub why: String,
}

impl BootParam {
    pub fn satisfied(&self) -> bool {
        self.booted_with.as_deref() == Some(self.word.as_str())
    }
}

/// Everything `tune` would do on this host: read-only, what `--dry-run` prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuningPlan {
    pub reserved: CpuList,
    pub housekeeping: CpuList,
    /// Every write, also those whose file already holds the wanted value (`needed() == false`).
    pub writes: Vec<KnobWrite>,
    pub absent: Vec<KnobAbsent>,
    pub boot: Vec<BootParam>,
    /// Notes on the boot parameters (e.g. a kernel built without NO_HZ_FULL).
    pub boot_notes: Vec<String>,
}

impl TuningPlan {
    /// The words to add to the kernel command line (those the running kernel was not booted with).
    pub fn cmdline_to_add(&self) -> String {
        self.boot.iter().filter(|b| !b.satisfied()).map(|b| b.word.as_str()).collect::<Vec<_>>().join(" ")
    }
}

/// Reads the current value of a file as `tune` compares it (the selected choice of a selection file).
fn read_value(path: &Path, kind: FileKind) -> Result<String> {
    let text = fsio::read_trim(path)?;
    Ok(match kind {
        FileKind::Selection => selected(&text).unwrap_or(&text).to_string(),
        _ => text,
    })
}

fn selected(text: &str) -> Option<&str> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(&text[start + 1..end])
}

fn cpus_of(text: &str) -> CpuList {
    CpuList::parse(text).unwrap_or_default()
}

/// Plans the tuning against the host under `req.root` (reads only).
pub fn plan_tuning(req: &TuneRequest) -> Result<TuningPlan> {
    let online = fsio::read_trim(req.path("/sys/devices/system/cpu/online")).map(|s| cpus_of(&s))?;
    if req.housekeeping.is_empty() {
        return Err(HostError::Invalid(
            "tuning needs housekeeping CPUs (for IRQs, workqueues, the watchdog): set node.housekeeping in the spec \
             or pass --housekeeping"
                .into(),
        ));
    }
    if req.reserved.is_empty() {
        return Err(HostError::Invalid(
            "tuning needs reserved CPUs: the node's CPUs minus housekeeping are empty; give the node more CPUs or pass --reserved".into(),
        ));
    }
    let both = req.reserved.intersection(&req.housekeeping);
    if !both.is_empty() {
        return Err(HostError::Invalid(format!("CPUs [{both}] are both reserved and housekeeping; a CPU is one or the other")));
    }
    for (what, set) in [("reserved", &req.reserved), ("housekeeping", &req.housekeeping)] {
        let off = set.difference(&online);
        if !off.is_empty() {
            return Err(HostError::Invalid(format!(
                "{what} CPUs [{off}] are not online (online: [{online}]); pick CPUs this host has"
            )));
        }
    }
    let mut writes = Vec::new();
    let mut absent = Vec::new();
    let add = |knob: Knob, path: PathBuf, wanted: String, kind: FileKind, writes: &mut Vec<KnobWrite>| -> Result<()> {
        let current = read_value(&path, kind)?;
        writes.push(KnobWrite { knob, path, current, wanted, kind });
        Ok(())
    };
    let cpu_dir = |cpu: u32| req.path(&format!("/sys/devices/system/cpu/cpu{cpu}"));

    if req.wants(Knob::Governor) {
        let mut missing = Vec::new();
        for cpu in req.reserved.iter() {
            let dir = cpu_dir(cpu).join("cpufreq");
            let gov = dir.join("scaling_governor");
            if !gov.exists() {
                missing.push(cpu);
                continue;
            }
            let available = fsio::read_trim(dir.join("scaling_available_governors")).unwrap_or_default();
            if !available.split_whitespace().any(|g| g == "performance") {
                absent.push(KnobAbsent {
                    knob: Knob::Governor,
                    reason: format!("cpu{cpu}: the cpufreq driver offers no `performance` governor (has: {available})"),
                });
                continue;
            }
            add(Knob::Governor, gov, "performance".into(), FileKind::Plain, &mut writes)?;
        }
        if !missing.is_empty() {
            absent.push(KnobAbsent {
                knob: Knob::Governor,
                reason: format!(
                    "no cpufreq on CPUs [{}] (no frequency-scaling driver: a VM, or the firmware controls frequency); nothing to set",
                    CpuList::from_cpus(missing)
                ),
            });
        }
    }

    if req.wants(Knob::PmQos) {
        // "n/a" is the file's spelling of a zero-latency constraint (no idle state at all); a number
        // is a limit in µs ("0" would mean "no constraint").
        let wanted = if req.max_idle_latency_us == 0 { "n/a".to_string() } else { req.max_idle_latency_us.to_string() };
        let mut missing = Vec::new();
        for cpu in req.reserved.iter() {
            let file = cpu_dir(cpu).join("power/pm_qos_resume_latency_us");
            if file.exists() {
                add(Knob::PmQos, file, wanted.clone(), FileKind::Plain, &mut writes)?;
            } else {
                missing.push(cpu);
            }
        }
        if !missing.is_empty() {
            absent.push(KnobAbsent {
                knob: Knob::PmQos,
                reason: format!(
                    "no per-CPU PM QoS file on CPUs [{}] (kernel without CONFIG_PM); C-states are limited by cpuidle only",
                    CpuList::from_cpus(missing)
                ),
            });
        }
    }

    if req.wants(Knob::Cstates) {
        let mut missing = Vec::new();
        for cpu in req.reserved.iter() {
            let dir = cpu_dir(cpu).join("cpuidle");
            let Ok(rd) = std::fs::read_dir(&dir) else {
                missing.push(cpu);
                continue;
            };
            let mut states: Vec<PathBuf> = rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("state")))
                .collect();
            states.sort();
            for st in states {
                let latency: u64 = fsio::read_trim(st.join("latency")).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
                let name = fsio::read_trim(st.join("name")).unwrap_or_default();
                // POLL (latency 0) is not a low-power state: it stays enabled so an idle CPU has a state.
                if latency > req.max_idle_latency_us as u64 && name != "POLL" {
                    add(Knob::Cstates, st.join("disable"), "1".into(), FileKind::Plain, &mut writes)?;
                }
            }
        }
        if !missing.is_empty() {
            let driver = fsio::read_trim(req.path("/sys/devices/system/cpu/cpuidle/current_driver")).unwrap_or_default();
            absent.push(KnobAbsent {
                knob: Knob::Cstates,
                reason: format!(
                    "no cpuidle states on CPUs [{}] (cpuidle driver: {}); idle is the architecture's default (a VM's HLT)",
                    CpuList::from_cpus(missing),
                    if driver.is_empty() { "none".to_string() } else { driver }
                ),
            });
        }
    }

    let mut single = |knob: Knob, abs: &str, wanted: String, kind: FileKind, why_absent: &str, writes: &mut Vec<KnobWrite>| -> Result<()> {
        if !req.wants(knob) {
            return Ok(());
        }
        let path = req.path(abs);
        if path.exists() {
            add(knob, path, wanted, kind, writes)
        } else {
            absent.push(KnobAbsent { knob, reason: format!("{abs} does not exist ({why_absent})") });
            Ok(())
        }
    };
    single(Knob::TimerMigration, "/proc/sys/kernel/timer_migration", "0".into(), FileKind::Plain, "kernel without CONFIG_SMP or NO_HZ_COMMON", &mut writes)?;
    single(
        Knob::IrqDefaultAffinity,
        "/proc/irq/default_smp_affinity",
        req.housekeeping.to_mask(),
        FileKind::Plain,
        "kernel without CONFIG_SMP",
        &mut writes,
    )?;
    single(
        Knob::WorkqueueCpumask,
        "/sys/devices/virtual/workqueue/cpumask",
        req.housekeeping.to_mask(),
        FileKind::Plain,
        "kernel before 4.2",
        &mut writes,
    )?;
    single(
        Knob::WatchdogCpumask,
        "/proc/sys/kernel/watchdog_cpumask",
        req.housekeeping.to_string(),
        FileKind::Plain,
        "kernel without the lockup detectors",
        &mut writes,
    )?;
    if let Some(rt) = req.rt_runtime_us {
        single(Knob::RtRuntime, "/proc/sys/kernel/sched_rt_runtime_us", rt.to_string(), FileKind::Plain, "kernel without RT scheduling", &mut writes)?;
    }
    if let Some(thp) = req.thp {
        single(
            Knob::Thp,
            "/sys/kernel/mm/transparent_hugepage/enabled",
            thp.as_str().into(),
            FileKind::Selection,
            "kernel without CONFIG_TRANSPARENT_HUGEPAGE",
            &mut writes,
        )?;
    }
    if req.wants(Knob::Hugepages) {
        for h in &req.hugepages {
            let node_dir = req.path(&format!("/sys/devices/system/node/node{}", h.node));
            let file = node_dir.join(format!("hugepages/hugepages-{}kB/nr_hugepages", h.size_kb));
            if !node_dir.exists() {
                return Err(HostError::Invalid(format!(
                    "hugepages on NUMA node {}: this host has no such node (see /sys/devices/system/node)",
                    h.node
                )));
            }
            if !file.exists() {
                let sizes: Vec<String> = std::fs::read_dir(node_dir.join("hugepages"))
                    .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().trim_start_matches("hugepages-").to_string()).collect())
                    .unwrap_or_default();
                return Err(HostError::Invalid(format!(
                    "hugepages of {} kB on node {}: this host offers sizes [{}]",
                    h.size_kb,
                    h.node,
                    sizes.join(", ")
                )));
            }
            add(Knob::Hugepages, file, h.count.to_string(), FileKind::Count, &mut writes)?;
        }
    }

    let (boot, boot_notes) = boot_params(req);
    Ok(TuningPlan { reserved: req.reserved.clone(), housekeeping: req.housekeeping.clone(), writes, absent, boot, boot_notes })
}

/// The kernel command line that completes the run-time tuning (only a reboot changes these).
fn boot_params(req: &TuneRequest) -> (Vec<BootParam>, Vec<String>) {
    let cmdline = fsio::read_trim(req.path("/proc/cmdline")).unwrap_or_default();
    let booted = |key: &str| cmdline.split_whitespace().rev().find(|w| w.split('=').next() == Some(key)).map(str::to_string);
    let r = &req.reserved;
    let hk = &req.housekeeping;
    let mut wanted = vec![
        (format!("isolcpus=managed_irq,domain,{r}"), "reserved CPUs out of load balancing and managed-IRQ placement"),
        (format!("nohz_full={r}"), "no scheduler tick on a reserved CPU running one task"),
        (format!("rcu_nocbs={r}"), "RCU callbacks run on housekeeping CPUs"),
        (format!("irqaffinity={hk}"), "IRQs set up during boot start on housekeeping CPUs"),
        ("skew_tick=1".to_string(), "ticks of different CPUs do not contend for the same locks"),
    ];
    let mut notes = Vec::new();
    if req.path("/sys/devices/system/cpu/intel_pstate").exists() {
        wanted.push((
            "intel_pstate=passive".to_string(),
            "intel_pstate's own algorithm ignores the governor; passive mode makes `performance` hold the frequency",
        ));
    } else {
        notes.push("intel_pstate is not in use on this host: no intel_pstate= word needed".to_string());
    }
    if crate::facts::kernel_config_value("CONFIG_NO_HZ_FULL").is_none() && req.root == Path::new("/") {
        notes.push("this kernel's config has no CONFIG_NO_HZ_FULL (or is unreadable): nohz_full= may be ignored".to_string());
    }
    let boot = wanted
        .into_iter()
        .map(|(word, why)| {
            let key = word.split('=').next().unwrap_or("").to_string();
            BootParam { booted_with: booted(&key), word, why: why.to_string() }
        })
        .collect();
    (boot, notes)
}

pub use crate::journal::tuning_state_dir;

/// What `apply_tuning` did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tuned {
    pub plan: TuningPlan,
    /// Journaled writes (what `reset` undoes).
    pub changes: usize,
}

/// Applies the tuning in one transaction journaled in `tuning_state_dir(dir)`; on any failure every
/// write already made is undone and the error names the step.
pub fn apply_tuning(req: &TuneRequest, dir: &StateDir, fault: Fault) -> Result<Tuned> {
    let plan = plan_tuning(req)?;
    let tdir = tuning_state_dir(dir);
    let _lock = tdir.lock()?;
    if let Some(existing) = tdir.load()? {
        if !existing.changes.is_empty() {
            return Err(HostError::Rejected(format!(
                "the host is already tuned ({} changes in {}); run `rtslice tune --undo` (or `rtslice reset`) first",
                existing.changes.len(),
                tdir.file().display()
            )));
        }
    }
    let mut state = State::new();
    tdir.save(&state)?;
    let mut txn = Txn::begin(&tdir, &mut state, fault);
    for w in plan.writes.iter().filter(|w| w.needed()) {
        if let Err(e) = write_knob(&mut txn, w) {
            let rollback_errors = txn.rollback();
            if rollback_errors.is_empty() {
                let _ = tdir.remove();
            }
            return Err(HostError::StepFailed {
                step: format!("tune {}: {} to {:?}", w.knob, w.path.display(), w.wanted),
                source: Box::new(e),
                rollback_errors,
            });
        }
    }
    let changes = txn.state.changes.len();
    if changes == 0 {
        tdir.remove()?;
    }
    Ok(Tuned { plan, changes })
}

fn write_knob(txn: &mut Txn, w: &KnobWrite) -> Result<()> {
    match w.kind {
        FileKind::Plain => txn.write(&w.path, &w.wanted),
        FileKind::Selection => {
            // Journaled as the selected choice (what the file takes back), not the whole list it reads as.
            txn.record(Change::Wrote { path: w.path.clone(), old: w.current.clone(), new: w.wanted.clone() })?;
            fsio::write(&w.path, &w.wanted)
        }
        FileKind::Count => {
            txn.write(&w.path, &w.wanted)?;
            let got = fsio::read_trim(&w.path)?;
            if got != w.wanted {
                return Err(HostError::other(format!(
                    "{}: asked for {} pages, the kernel reserved {got} (not enough free contiguous memory on that node); \
                     ask for fewer, or reserve them at boot (hugepages= on the kernel command line)",
                    w.path.display(),
                    w.wanted
                )));
            }
            Ok(())
        }
    }
}

/// Undoes the tuning journal only (workloads applied with `apply` stay).
pub fn reset_tuning(dir: &StateDir) -> Result<crate::ResetReport> {
    crate::reset::reset(&tuning_state_dir(dir), crate::ResetOptions::default())
}

/// The current value of every file `tune` can touch for this request (absent files as `None`): two
/// snapshots around tune + reset must be identical.
pub fn snapshot(req: &TuneRequest) -> Vec<(PathBuf, Option<String>)> {
    let mut files = vec![
        req.path("/proc/sys/kernel/timer_migration"),
        req.path("/proc/irq/default_smp_affinity"),
        req.path("/sys/devices/virtual/workqueue/cpumask"),
        req.path("/proc/sys/kernel/watchdog_cpumask"),
        req.path("/proc/sys/kernel/sched_rt_runtime_us"),
        req.path("/sys/kernel/mm/transparent_hugepage/enabled"),
    ];
    for cpu in req.reserved.union(&req.housekeeping).iter() {
        let dir = req.path(&format!("/sys/devices/system/cpu/cpu{cpu}"));
        files.push(dir.join("cpufreq/scaling_governor"));
        files.push(dir.join("power/pm_qos_resume_latency_us"));
        if let Ok(rd) = std::fs::read_dir(dir.join("cpuidle")) {
            let mut states: Vec<PathBuf> = rd.flatten().map(|e| e.path().join("disable")).collect();
            states.sort();
            files.extend(states);
        }
    }
    if let Ok(rd) = std::fs::read_dir(req.path("/sys/devices/system/node")) {
        let mut nodes: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("node")))
            .collect();
        nodes.sort();
        for node in nodes {
            if let Ok(rd) = std::fs::read_dir(node.join("hugepages")) {
                let mut sizes: Vec<PathBuf> = rd.flatten().map(|e| e.path().join("nr_hugepages")).collect();
                sizes.sort();
                files.extend(sizes);
            }
        }
    }
    files.into_iter().map(|f| (f.clone(), std::fs::read_to_string(&f).ok().map(|s| s.trim().to_string()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hugepage_requests_parse() {
        assert_eq!(HugepageRequest::parse("0:2M:512").unwrap(), HugepageRequest { node: 0, size_kb: 2048, count: 512 });
        assert_eq!(HugepageRequest::parse("1:1G:4").unwrap(), HugepageRequest { node: 1, size_kb: 1048576, count: 4 });
        assert_eq!(HugepageRequest::parse("0:2048kB:1").unwrap().size_kb, 2048);
        for bad in ["", "0:2M", "x:2M:1", "0:2T:1", "0:2M:-1", "0:2M:1:2"] {
            assert!(HugepageRequest::parse(bad).unwrap_err().contains("NODE:SIZE:COUNT"), "{bad}");
        }
    }

    #[test]
    fn selection_files_read_as_their_choice() {
        assert_eq!(selected("always [madvise] never"), Some("madvise"));
        assert_eq!(selected("never"), None);
    }

    #[test]
    fn knob_names_round_trip() {
        for k in Knob::ALL {
            assert_eq!(Knob::parse(k.name()), Some(k));
        }
        assert_eq!(Knob::parse("irq-default-affinity"), Some(Knob::IrqDefaultAffinity));
        assert_eq!(Knob::parse("nope"), None);
    }
}
