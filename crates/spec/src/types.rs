//! The spec's data model. Field names here are the YAML keys (camelCase); see docs/spec.md.
//! Everything is plain data with pub fields, so other crates (bench, model) can build specs in Rust.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cpulist::serde_cpus;
use crate::units::serde_duration;

mod node;

pub use node::*;

/// The only spec version this crate reads.
pub const API_VERSION: &str = "rtslice/v1";
/// Default per-CPU real-time bandwidth cap (study B's 95%, the kernel's default RT throttling ratio).
pub const DEFAULT_CAP: f64 = 0.95;
/// Default reservation period when neither the workload nor its flavor gives one.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(100);
/// The kernel accepts RT/deadline periods between these bounds (sched_rt_period_us / dl checks).
pub const MIN_PERIOD: Duration = Duration::from_micros(100);
pub const MAX_PERIOD: Duration = Duration::from_micros(4_194_304);
/// The kernel's range for a CFS bandwidth period and quota (`min_cfs_quota_period`,
/// `max_cfs_quota_period`): 1 ms to 1 s.
pub const CFS_MIN_PERIOD: Duration = Duration::from_millis(1);
pub const CFS_MAX_PERIOD: Duration = Duration::from_secs(1);

/// A whole spec file: one node and the workloads that should share it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    /// Always [`API_VERSION`].
    pub api_version: String,
    #[serde(default)]
    pub node: Node,
    /// Named profiles (like OpenStack flavors); workloads refer to them by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub flavors: BTreeMap<String, Flavor>,
    #[serde(default)]
    pub workloads: Vec<Workload>,
}

impl Default for Spec {
    fn default() -> Self {
        Spec { api_version: API_VERSION.into(), node: Node::default(), flavors: BTreeMap::new(), workloads: Vec::new() }
    }
}

/// A named profile: `vcpus` CPUs, each with `runtime` every `period` (study B's
/// `hw:cpu.rt_runtime_us`/`hw:cpu.rt_period_us`). Without a runtime the flavor is best-effort.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Flavor {
    pub vcpus: u32,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
    pub runtime: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
    pub period: Option<Duration>,
    /// Memory in bytes (`4096MB` in YAML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::BytesText>"))]
    pub memory: Option<u64>,
}

/// Per-workload overrides of flavor fields (study B's scheduler hints); a hint wins over the flavor.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hints {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpus: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
    pub runtime: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
    pub period: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::BytesText>"))]
    pub memory: Option<u64>,
}

impl Hints {
    pub fn is_empty(&self) -> bool {
        self == &Hints::default()
    }
}

/// One thing to run (or already running) with its CPU demand and rules.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Workload {
    /// Unique; `[A-Za-z0-9][A-Za-z0-9_.-]*` (it names cgroups).
    pub name: String,
    /// How to start it; `None` = only create its slice (cgroup) and place nothing in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<Launch>,
    /// Take the demand from this flavor (exclusive with `demand`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor: Option<String>,
    #[serde(default, skip_serializing_if = "Hints::is_empty")]
    pub hints: Hints,
    /// CPU demand; when neither `demand` nor `flavor` is given the workload is best-effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demand: Option<Demand>,
    /// Memory limit in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::BytesText>"))]
    pub memory: Option<u64>,
    /// Ways of the last-level cache of its own (resctrl CAT), exclusive of every other group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::CacheRequest>,
    /// Memory-bandwidth ceiling (resctrl MBA) as a fraction of the link (`50%` = 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::FractionText>"))]
    pub memory_bandwidth: Option<f64>,
    #[serde(default, skip_serializing_if = "Isolation::is_default")]
    pub isolation: Isolation,
    /// Thread rules, first match wins (like a firewall).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<ThreadRule>,
    /// IRQ steering: IRQs whose action name (as in /proc/interrupts) matches go to CPU slots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub irqs: Vec<IrqRule>,
    /// RPS/XPS masks of (virtual) NICs serving this workload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub net: Vec<NetRule>,
    /// PCI devices passed to the workload (an SR-IOV VF, an accelerator): their device nodes go into
    /// its OCI container, their IRQs follow its CPUs, and it is placed near them (NUMA).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
    /// What the node service (`rtslice daemon`) does when the launched process exits.
    #[serde(default, skip_serializing_if = "Restart::is_default")]
    pub restart: Restart,
    /// The service level the workload needs; the planner sizes (or checks) its reservation with the
    /// periodic-task model from `profile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<Slo>,
    /// The workload's execution demand per period (inline, or read from a file `rtslice profile`
    /// wrote: the spec keeps the content, so a spec handed on — to the node service, to `to_yaml` —
    /// needs no file beside it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
    /// The node service's closed loop: the reservation's runtime follows what the workload uses and
    /// misses, between a guaranteed `min` and a `max` (docs/spec.md "Adaptive reservations").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapt: Option<Adapt>,
}

/// A reservation the node service resizes at run time (`adapt:`): every `interval` it reads the
/// budget's use and the misses the workload reported, and grows or shrinks the runtime per period
/// (through admission and the journal) between `min` and `max`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Adapt {
    /// The runtime per period the workload never drops below; default: the reservation it was
    /// admitted with (given, or sized for its SLO).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
    pub min: Option<Duration>,
    /// The runtime per period it never grows above; default: the period under the node's cap.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
    pub max: Option<Duration>,
    /// How often the loop decides (at most one change per interval).
    #[serde(default = "default_adapt_interval", with = "serde_duration")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::schema::DurationText"))]
    pub interval: Duration,
}

/// The closed loop's interval when the spec gives none: long enough for a few thousand TTIs (a miss
/// ratio of 1e-3 is visible), short enough to follow a traffic burst within seconds.
pub const DEFAULT_ADAPT_INTERVAL: Duration = Duration::from_secs(2);
/// The shortest interval: the telemetry's readings come every few hundred ms at best.
pub const MIN_ADAPT_INTERVAL: Duration = Duration::from_millis(500);

fn default_adapt_interval() -> Duration {
    DEFAULT_ADAPT_INTERVAL
}

/// A service-level objective of a periodic workload (one job every `profile.period`, due
/// `profile.deadline` after its release).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Slo {
    /// At most this fraction of jobs finish after their deadline (in (0, 1): `1e-3`, `0.1%`).
    DeadlineMissRatio(#[cfg_attr(feature = "schema", schemars(with = "crate::schema::FractionText"))] f64),
    /// 99 % of jobs finish within this time of their release.
    P99Response(
        #[serde(with = "serde_duration")]
        #[cfg_attr(feature = "schema", schemars(with = "crate::schema::DurationText"))]
        Duration,
    ),
}

/// A periodic workload's demand: a job every `period`, due `deadline` after its release, each
/// needing `execution` of CPU time. `rtslice profile` writes one as JSON (the same type, durations as
/// text), with the measured `histogram` beside the quantiles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profile {
    #[serde(with = "serde_duration")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::schema::DurationText"))]
    pub period: Duration,
    /// Relative deadline; may be longer than the period (a vBS's HARQ budget is 3 TTIs).
    #[serde(with = "serde_duration")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::schema::DurationText"))]
    pub deadline: Duration,
    pub execution: ExecutionQuantiles,
    /// Measured execution times per period with how often each occurred; when given, the model
    /// uses it instead of interpolating between the quantiles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub histogram: Vec<HistogramBin>,
    /// What was measured (written by `rtslice profile`; free text, not interpreted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Quantiles of the execution time per period; `max` is required (nothing bounds the tail without it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecutionQuantiles {
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
    pub min: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
    pub p50: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
    pub p90: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
    pub p99: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
    pub p999: Option<Duration>,
    #[serde(with = "serde_duration")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::schema::DurationText"))]
    pub max: Duration,
}

impl ExecutionQuantiles {
    /// The quantiles given, as (probability, value), lowest first; `max` is probability 1.
    pub fn points(&self) -> Vec<(f64, Duration)> {
        [(0.0, self.min), (0.5, self.p50), (0.9, self.p90), (0.99, self.p99), (0.999, self.p999), (1.0, Some(self.max))]
            .into_iter()
            .filter_map(|(q, v)| v.map(|v| (q, v)))
            .collect()
    }
}

/// `count` periods needed `value` of CPU time (values rounded up to the profile's resolution).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HistogramBin {
    #[serde(with = "serde_duration")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::schema::DurationText"))]
    pub value: Duration,
    pub count: u64,
}

/// A file a spec refers to (`profile: vbs1.profile.json`), as its reader was handed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecFile {
    /// How errors inside the file name it (the path the caller opened).
    pub name: String,
    pub text: String,
}

/// Where the files a spec refers to come from. The spec crate stays pure (no I/O): the caller that
/// read the spec from a file (the CLI) knows its directory and reads referenced files relative to
/// it; callers handed a spec as text (the node service's API, generated specs) have no directory
/// to resolve against and use [`NoFiles`].
pub trait SpecFiles {
    /// The file at `path` as written in the spec, or why it could not be read (with what to do).
    fn read(&self, path: &str) -> Result<SpecFile, String>;
}

/// No files: a spec naming one is refused with a located error that says to inline it.
pub struct NoFiles;

impl SpecFiles for NoFiles {
    fn read(&self, path: &str) -> Result<SpecFile, String> {
        Err(format!(
            "`{path}` is a file, and this spec was not read from a file whose directory it could be found in; \
             inline the profile (`profile: {{ period: 1ms, deadline: 3ms, execution: {{ p50: …, max: … }} }}`)"
        ))
    }
}

/// When the node service starts an exited workload again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// An exited workload stays exited (it keeps its reservation until removed).
    #[default]
    Never,
    /// Only when it exited with a non-zero status or a signal (or an unknown status: it exited while
    /// no daemon was its parent).
    OnFailure,
    /// Whatever its exit status.
    Always,
}

/// The restart policy and its exponential backoff: the n-th restart in a row waits
/// `min(backoff × 2^(n-1), maxBackoff)`; a run longer than `maxBackoff` starts the count anew.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Restart {
    pub policy: RestartPolicy,
    #[serde(default = "default_backoff", with = "serde_duration")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::schema::DurationText"))]
    pub backoff: Duration,
    #[serde(default = "default_max_backoff", with = "serde_duration")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::schema::DurationText"))]
    pub max_backoff: Duration,
}

/// The first restart's delay when the spec gives none.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);
/// The longest delay between restarts when the spec gives none.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(300);

fn default_backoff() -> Duration {
    DEFAULT_BACKOFF
}

fn default_max_backoff() -> Duration {
    DEFAULT_MAX_BACKOFF
}

impl Default for Restart {
    fn default() -> Restart {
        Restart { policy: RestartPolicy::Never, backoff: DEFAULT_BACKOFF, max_backoff: DEFAULT_MAX_BACKOFF }
    }
}

impl Restart {
    pub fn is_default(&self) -> bool {
        self == &Restart::default()
    }

    /// The delay before the `n`-th restart in a row (n ≥ 1).
    pub fn delay(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX);
        self.backoff.checked_mul(factor).unwrap_or(self.max_backoff).min(self.max_backoff)
    }
}

/// How a workload is started or found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged, deny_unknown_fields)]
pub enum Launch {
    /// Run `command[0]` with `command[1..]` as arguments.
    Command {
        command: Vec<String>,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
    },
    /// Run an OCI bundle (a directory with config.json and rootfs) with runc.
    Oci {
        #[serde(rename = "oci")]
        bundle: String,
    },
    /// Run a container image with podman (any reference podman takes: a name in its local storage,
    /// `oci:DIR`, `oci-archive:FILE`, `docker-archive:FILE`); rtslice places its processes in the
    /// workload's CPU groups before its program starts. docs/spec.md "launch".
    Podman {
        #[serde(rename = "podman")]
        image: String,
        /// Replace the image's command (its entrypoint stays), as `podman run IMAGE ARGS...` does.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        args: Vec<String>,
        /// More `podman create` options (volumes, environment, devices...), passed as given.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        options: Vec<String>,
    },
    /// Adopt a running process (all its threads).
    Pid { pid: u32 },
    /// Adopt every process of an existing cgroup (path under the cgroup mount or absolute).
    Cgroup {
        #[serde(rename = "cgroup")]
        path: String,
    },
}

/// What CPU time a workload asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Demand {
    /// `runtime` every `period` on each of `count` CPUs (bandwidth runtime/period per CPU).
    Reservation(Reservation),
    /// Whole CPUs, exclusively: they leave the shared pool.
    Dedicated(Dedicated),
    /// Whatever is left on the shared CPUs, weighted, optionally capped.
    BestEffort(BestEffort),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reservation {
    #[serde(with = "serde_duration")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::schema::DurationText"))]
    pub runtime: Duration,
    /// Default: the node's `defaultPeriod`.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
    pub period: Option<Duration>,
    /// Number of CPUs (default 1, or the length of `cpus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Exactly these CPUs instead of letting the planner choose.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_cpus::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::CpuListText>"))]
    pub cpus: Option<Vec<u32>>,
    /// Under SCHED_DEADLINE, let the workload's threads use bandwidth nobody else uses
    /// (SCHED_FLAG_RECLAIM, GRUB) and split its budget by their measured demand: the guarantee
    /// stays runtime/period. Unset: on, unless a rule gives a `share` of the reservation to a CFS
    /// pool (which reclaiming threads would take from). docs/spec.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Dedicated {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_cpus::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::CpuListText>"))]
    pub cpus: Option<Vec<u32>>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BestEffort {
    /// Relative weight 1–10000 (cgroup v2 `cpu.weight`; 100 is the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// At most this many CPUs' worth of time (`0.5` = half a CPU, `2` = two CPUs; CFS quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<f64>,
    /// Restrict to these CPUs (must be shared, non-housekeeping CPUs).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_cpus::option")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::CpuListText>"))]
    pub cpus: Option<Vec<u32>>,
}

/// Isolation of a workload's CPUs (study A's strategies).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Isolation {
    /// Shielding: an exclusive cpuset keeps every other task off this workload's CPUs.
    #[serde(default)]
    pub shield: bool,
    /// Hard isolation: the workload's CPUs must be in the kernel's `isolcpus=` list.
    #[serde(default)]
    pub isolcpus: bool,
    /// Wide affinity: set every thread's affinity to the whole CPU set (also threads not matched by rules).
    #[serde(default)]
    pub wide_affinity: bool,
    /// What may run on the SMT siblings of the workload's CPUs.
    #[serde(default, skip_serializing_if = "SmtIsolation::is_shared")]
    pub smt: SmtIsolation,
    /// Keep the workload's CPUs within one last-level cache or one NUMA node.
    #[serde(default, skip_serializing_if = "Locality::is_any")]
    pub locality: Locality,
}

/// `isolation.smt`: what the other hardware threads of a workload's cores may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, Hash)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum SmtIsolation {
    /// Siblings carry anything (the default).
    #[default]
    Shared,
    /// No best-effort workload on a sibling of the workload's CPUs (real-time work may share the core).
    NoBestEffortSibling,
    /// Each CPU on a core of its own whose other threads stay idle, held for this workload.
    WholeCore,
}

impl SmtIsolation {
    pub const ALL: [SmtIsolation; 3] = [SmtIsolation::Shared, SmtIsolation::NoBestEffortSibling, SmtIsolation::WholeCore];
    pub fn name(self) -> &'static str {
        match self {
            SmtIsolation::Shared => "shared",
            SmtIsolation::NoBestEffortSibling => "no-best-effort-sibling",
            SmtIsolation::WholeCore => "whole-core",
        }
    }
    pub fn is_shared(&self) -> bool {
        *self == SmtIsolation::Shared
    }
}

/// `isolation.locality`: the CPU group a multi-CPU workload must stay within.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, Hash)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Locality {
    /// Anywhere on the node (the default).
    #[default]
    Any,
    /// Every CPU in one last-level-cache group.
    Llc,
    /// Every CPU in one NUMA node.
    Numa,
}

impl Locality {
    pub const ALL: [Locality; 3] = [Locality::Any, Locality::Llc, Locality::Numa];
    pub fn name(self) -> &'static str {
        match self {
            Locality::Any => "any",
            Locality::Llc => "llc",
            Locality::Numa => "numa",
        }
    }
    pub fn is_any(&self) -> bool {
        *self == Locality::Any
    }
}

impl Isolation {
    pub fn is_default(&self) -> bool {
        self == &Isolation::default()
    }
}

/// Which CPUs of the workload's set a thread, IRQ or queue may use: indices ("slots") into the
/// workload's sorted CPU set, or anywhere in it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Slots {
    #[default]
    Any,
    /// Slot 0 is the workload's lowest CPU; with CPUs {4,5,6,7}, slot 3 is CPU 7.
    List(Vec<u32>),
}

impl Serialize for Slots {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Slots::Any => s.serialize_str("any"),
            Slots::List(l) => serde_cpus::serialize(l, s),
        }
    }
}

impl<'de> Deserialize<'de> for Slots {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Slots;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"any\" or slot indices (\"0-1\", 2, [0, 3])")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Slots, E> {
                if v == "any" {
                    Ok(Slots::Any)
                } else {
                    serde_cpus::CpusVisitor.visit_str(v).map(Slots::List)
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Slots, E> {
                serde_cpus::CpusVisitor.visit_u64(v).map(Slots::List)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Slots, A::Error> {
                serde_cpus::CpusVisitor.visit_seq(seq).map(Slots::List)
            }
        }
        d.deserialize_any(V)
    }
}

/// Scheduling class for threads matched by a rule. YAML: `policy: fifo` + `priority: 90`, etc.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "policy", rename_all = "lowercase")]
pub enum SchedPolicy {
    /// SCHED_OTHER (CFS). `share`: under a reservation, these threads' part of the workload's budget
    /// as CFS bandwidth — the workload's cgroup gets `share` of its runtime on every CPU as its CFS
    /// quota (`cpu.max` / `cpu.cfs_quota_us`), which bounds all its SCHED_OTHER threads together,
    /// and its real-time rules split the rest. For a worker pool that hands each job to whichever
    /// thread is free: one CFS bound follows the work where per-thread SCHED_DEADLINE budgets strand
    /// it (docs/results.md, Runs 5–8). `period`: the quota's period (1 ms–1 s; default the
    /// reservation's period, lengthened until the quota reaches the kernel's 1 ms minimum).
    Other {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nice: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::FractionText>"))]
        share: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
        #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
        period: Option<Duration>,
    },
    Batch {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nice: Option<i32>,
    },
    Idle,
    /// Priority 1–99. `period`: where a SCHED_DEADLINE reservation enforces the workload's budget,
    /// these threads run at this period (their deadline too) with their part of the budget scaled to
    /// it — the same bandwidth, earlier deadlines (a stack's TTI clock thread). Where the threads stay
    /// SCHED_FIFO/RR (a dedicated CPU, RT groups, HCBS) the kernel's priorities order them and it has
    /// no effect.
    Fifo {
        priority: u32,
        #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
        #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
        period: Option<Duration>,
    },
    /// As `fifo`, round-robin among equal priorities.
    Rr {
        priority: u32,
        #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
        #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
        period: Option<Duration>,
    },
    /// SCHED_DEADLINE. Either an explicit `runtime` (per thread), or a `share` of the workload's
    /// per-CPU reservation runtime; rules with neither split what is left equally.
    /// `period` defaults to the workload's period, `deadline` to the period.
    Deadline {
        #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
        #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
        runtime: Option<Duration>,
        #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
        #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
        deadline: Option<Duration>,
        #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_duration::option")]
        #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::DurationText>"))]
        period: Option<Duration>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schema", schemars(with = "Option<crate::schema::FractionText>"))]
        share: Option<f64>,
    },
}

impl SchedPolicy {
    /// SCHED_FIFO at `priority`, at the workload's period.
    pub fn fifo(priority: u32) -> SchedPolicy {
        SchedPolicy::Fifo { priority, period: None }
    }

    /// SCHED_RR at `priority`, at the workload's period.
    pub fn rr(priority: u32) -> SchedPolicy {
        SchedPolicy::Rr { priority, period: None }
    }
}

impl Default for SchedPolicy {
    fn default() -> Self {
        SchedPolicy::Other { nice: None, share: None, period: None }
    }
}

/// Threads whose name (comm, 15 chars max, as in /proc/PID/task/TID/comm) matches `pattern`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ThreadRule {
    /// Regular expression (Rust regex syntax), unanchored unless you write ^…$.
    #[serde(rename = "match")]
    pub pattern: String,
    #[serde(flatten)]
    pub policy: SchedPolicy,
    #[serde(default)]
    pub slots: Slots,
}

/// IRQs whose action name matches `pattern` (e.g. `^eth1-TxRx-` or an SR-IOV VF's `iavf-.*`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IrqRule {
    #[serde(rename = "match")]
    pub pattern: String,
    #[serde(default)]
    pub slots: Slots,
}

/// A PCI device given to one workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Device {
    /// Its PCI address, `0000:3b:02.1` (`lspci -D`).
    #[cfg_attr(feature = "schema", schemars(with = "crate::schema::PciAddressText"))]
    pub pci: rtslice_sys::pci::PciAddress,
    /// Where its IRQs go: the workload's CPUs (`any`, the default), some of its slots, or `keep`.
    #[serde(default, skip_serializing_if = "DeviceIrqs::is_default")]
    pub irqs: DeviceIrqs,
}

impl Device {
    pub fn new(pci: rtslice_sys::pci::PciAddress) -> Device {
        Device { pci, irqs: DeviceIrqs::default() }
    }
}

/// The affinity of a device's IRQs. A device's interrupts follow the workload it serves unless told
/// otherwise: left where they were, they land on any CPU, another workload's reserved ones included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceIrqs {
    /// These of the workload's CPU slots (`Slots::Any`: all of its CPUs).
    Slots(Slots),
    /// rtslice leaves their affinity alone (irqbalance, `rtslice tune`'s default affinity, or the
    /// kernel's own spread for managed IRQs decide).
    Keep,
}

impl Default for DeviceIrqs {
    fn default() -> Self {
        DeviceIrqs::Slots(Slots::Any)
    }
}

impl DeviceIrqs {
    pub fn is_default(&self) -> bool {
        *self == DeviceIrqs::default()
    }
}

impl Serialize for DeviceIrqs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            DeviceIrqs::Keep => s.serialize_str("keep"),
            DeviceIrqs::Slots(slots) => slots.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for DeviceIrqs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        if v.as_str() == Some("keep") {
            return Ok(DeviceIrqs::Keep);
        }
        Slots::deserialize(v).map(DeviceIrqs::Slots).map_err(serde::de::Error::custom)
    }
}

/// Receive/transmit packet steering for interfaces whose name matches `interface` (a regex).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetRule {
    pub interface: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rps: Option<Slots>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xps: Option<Slots>,
}

impl Spec {
    /// The demand a workload really has: its `demand`, or its flavor with hints applied,
    /// or best-effort when it gives neither. `None` if it names an unknown flavor
    /// (parse() already reported that), or states an SLO without a reservation: only the planner
    /// knows that one (it sizes it with the model and the kernel's facts, `WorkloadPlan::sizing`).
    pub fn effective_demand(&self, w: &Workload) -> Option<Demand> {
        if let Some(d) = &w.demand {
            return Some(d.clone());
        }
        if w.slo.is_some() {
            return None;
        }
        let Some(flavor_name) = &w.flavor else {
            return Some(Demand::BestEffort(BestEffort::default()));
        };
        let f = self.flavors.get(flavor_name)?;
        let vcpus = w.hints.vcpus.unwrap_or(f.vcpus);
        match w.hints.runtime.or(f.runtime) {
            Some(runtime) => Some(Demand::Reservation(Reservation {
                runtime,
                period: w.hints.period.or(f.period),
                count: Some(vcpus),
                cpus: None,
                reclaim: None,
            })),
            None => Some(Demand::BestEffort(BestEffort { weight: None, cap: Some(vcpus as f64), cpus: None })),
        }
    }

    /// Memory of a workload: its own, else its hint, else its flavor's.
    pub fn effective_memory(&self, w: &Workload) -> Option<u64> {
        w.memory
            .or(w.hints.memory)
            .or_else(|| w.flavor.as_ref().and_then(|f| self.flavors.get(f)).and_then(|f| f.memory))
    }
}

/// Shorthands for building specs in Rust (benchmarks, generated experiments).
impl Workload {
    /// A workload with only a name (best-effort, nothing launched).
    pub fn new(name: impl Into<String>) -> Self {
        Workload { name: name.into(), ..Workload::default() }
    }
    pub fn with_demand(mut self, demand: Demand) -> Self {
        self.demand = Some(demand);
        self
    }
    pub fn with_launch(mut self, launch: Launch) -> Self {
        self.launch = Some(launch);
        self
    }
    pub fn with_thread(mut self, rule: ThreadRule) -> Self {
        self.threads.push(rule);
        self
    }
    pub fn with_irq(mut self, pattern: impl Into<String>, slots: Slots) -> Self {
        self.irqs.push(IrqRule { pattern: pattern.into(), slots });
        self
    }
}

impl Demand {
    /// `runtime` every `period` on each of `count` CPUs the planner chooses.
    pub fn reservation(runtime: Duration, period: Duration, count: u32) -> Demand {
        Demand::Reservation(Reservation { runtime, period: Some(period), count: Some(count), cpus: None, reclaim: None })
    }
    /// `runtime` every `period` on exactly these CPUs.
    pub fn reservation_on(runtime: Duration, period: Duration, cpus: Vec<u32>) -> Demand {
        Demand::Reservation(Reservation { runtime, period: Some(period), count: None, cpus: Some(cpus), reclaim: None })
    }
    /// These whole CPUs, exclusively.
    pub fn dedicated(cpus: Vec<u32>) -> Demand {
        Demand::Dedicated(Dedicated { count: None, cpus: Some(cpus) })
    }
    /// Best-effort on the shared CPUs (or only `cpus`).
    pub fn best_effort(cpus: Option<Vec<u32>>) -> Demand {
        Demand::BestEffort(BestEffort { weight: None, cap: None, cpus })
    }
    /// The same demand fixed to the CPUs it already holds (a count becomes those CPUs), so that
    /// re-planning a live node keeps every admitted workload where it runs.
    pub fn pinned_to(self, cpus: &[u32]) -> Demand {
        match self {
            Demand::Reservation(mut r) => {
                r.cpus = Some(cpus.to_vec());
                r.count = None;
                Demand::Reservation(r)
            }
            Demand::Dedicated(mut x) => {
                x.cpus = Some(cpus.to_vec());
                x.count = None;
                Demand::Dedicated(x)
            }
            Demand::BestEffort(mut b) => {
                b.cpus = Some(cpus.to_vec());
                Demand::BestEffort(b)
            }
        }
    }
}

impl ThreadRule {
    pub fn new(pattern: impl Into<String>, policy: SchedPolicy, slots: Slots) -> Self {
        ThreadRule { pattern: pattern.into(), policy, slots }
    }
}

/// The part of a workload's budget its `other` rules take together as CFS bandwidth (`None`: no
/// rule has a share).
pub fn pool_share(rules: &[ThreadRule]) -> Option<f64> {
    let shares: Vec<f64> = rules
        .iter()
        .filter_map(|r| match r.policy {
            SchedPolicy::Other { share, .. } => share,
            _ => None,
        })
        .collect();
    (!shares.is_empty()).then(|| shares.iter().sum())
}
