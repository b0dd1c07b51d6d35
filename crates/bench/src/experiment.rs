//! The experiment file (`kind: Experiment`): what to run, under which interference, with which
//! isolation strategies, how often and for how long. See docs/bench.md for the format.
//!
//! Parsing is strict (unknown fields are errors, with line and column) because a typo in an
//! experiment silently measuring the wrong thing costs an hour of machine time.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rtslice_spec::SchedPolicy;
use serde::{Deserialize, Serialize};

use crate::strategy::Strategy;

mod decode;

#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error("cannot read experiment file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    /// Problems the YAML reader found, each at file:line:column.
    #[error("{count} problem(s), each at file:line:column:\n{errors}")]
    Located { count: usize, errors: rtslice_yaml::Errors },
    #[error("{file}: {count} problem(s):\n{}", problems.join("\n"))]
    Invalid { file: String, count: usize, problems: Vec<String> },
}

/// One interference generator that runs for the whole run, next to the workloads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ScenarioFile {
    /// `idle`, `user`, `kernel`, `rt` or `cache`: `rtslice noise KIND` (idle: nothing).
    Named(String),
    Full(ScenarioSpec),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioSpec {
    pub name: String,
    /// A kind of `rtslice noise` (user, kernel, rt, cache).
    #[serde(default)]
    pub noise: Option<String>,
    /// Extra arguments for `rtslice noise KIND`.
    #[serde(default)]
    pub args: Vec<String>,
    /// Any command instead of `rtslice noise` (started before the workloads, stopped after them).
    #[serde(default)]
    pub command: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scenario {
    pub name: String,
    pub kind: ScenarioKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ScenarioKind {
    Idle,
    Noise { kind: String, args: Vec<String> },
    Command { argv: Vec<String> },
}

pub const NOISE_KINDS: &[&str] = &["user", "kernel", "rt", "cache"];

/// A `reservation`'s period as an experiment gives it; unset, the bench writes one LTE TTI
/// (`specgen::RESERVATION_PERIOD`), as the studies did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum ReservationPeriod {
    /// Written into the spec: `period: 10ms`.
    Written(Duration),
    /// `period: default`: the spec writes none, so the node's `defaultPeriod` (100 ms) applies —
    /// the natural spec, a reservation that gives only its runtime.
    NodeDefault,
}

impl ReservationPeriod {
    /// `default`, or a duration within the kernel's range.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim() == "default" {
            return Ok(ReservationPeriod::NodeDefault);
        }
        kernel_period(text).map(ReservationPeriod::Written).map_err(|e| format!("{e}; or write `default` for the spec's"))
    }
}

/// A scheduling period within the kernel's range (a reservation's or a thread rule's).
pub(crate) fn kernel_period(text: &str) -> Result<Duration, String> {
    let d = rtslice_spec::units::parse_duration(text).map_err(|e| e.to_string())?;
    if d < rtslice_spec::MIN_PERIOD || d > rtslice_spec::MAX_PERIOD {
        let (lo, hi) = (rtslice_spec::units::format_duration(rtslice_spec::MIN_PERIOD), rtslice_spec::units::format_duration(rtslice_spec::MAX_PERIOD));
        return Err(format!("a period of {text} is outside the kernel's {lo}–{hi}"));
    }
    Ok(d)
}

impl From<ReservationPeriod> for String {
    fn from(p: ReservationPeriod) -> String {
        match p {
            ReservationPeriod::Written(d) => rtslice_spec::units::format_duration(d),
            ReservationPeriod::NodeDefault => "default".into(),
        }
    }
}

impl TryFrom<String> for ReservationPeriod {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        ReservationPeriod::parse(&text)
    }
}

/// How a workload is started. Exactly one of the kinds must be given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    pub name: String,
    /// The vBS emulator: `rtslice emulate --profile PROFILE --json ARGS`.
    #[serde(default)]
    pub emulate: Option<EmulateSpec>,
    /// Any command (argv). Output is parsed according to `output`.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// ICMP echo to an address inside a network namespace the runner creates.
    #[serde(default)]
    pub ping: Option<PingSpec>,
    /// Study B's DistWalk-style server and client (`rtslice loadgen`).
    #[serde(default)]
    pub loadgen: Option<LoadgenSpec>,
    /// How to read the command's output: `none`, `json` (one object on stdout), `stress-ng`
    /// (bogo-ops/s from --metrics-brief).
    #[serde(default)]
    pub output: Option<String>,
    /// `measured` (the latency-sensitive workload, gets the strategy) or `neighbour` (best effort,
    /// placed on what the strategy leaves).
    #[serde(default = "default_role")]
    pub role: Role,
    /// Relative size of this workload's CPU set when several measured workloads share the node
    /// (orthogonal layouts, study A's Cloud-RAN).
    #[serde(default = "one")]
    pub share: u32,
    /// How many copies run at once (study C's 1…N vBS).
    #[serde(default = "one")]
    pub replicas: u32,
    /// Thread placement for `thread`-style strategies when the workload is not an emulator profile
    /// rtslice knows: regex on thread name → CPU slot in the workload's set.
    #[serde(default)]
    pub threads: Vec<ThreadSlot>,
    /// Reserved share of each CPU for `reservation` (default 0.6 of a CPU).
    #[serde(default)]
    pub reservation: Option<f64>,
    /// The spec's `reclaim` for `reservation`: under SCHED_DEADLINE, SCHED_FLAG_RECLAIM and a split
    /// of the budget that follows each thread's measured use. Unset: the spec's default (on, unless
    /// a CFS pool shares the reservation); `false` keeps the fixed split.
    #[serde(default)]
    pub reclaim: Option<bool>,
    /// The period of the `reservation` (default one LTE TTI, 1 ms): a user's spec names its own
    /// (issue 39's eNB ran 7 ms every 10 ms) or none (`period: default`), and the period decides
    /// how long a burst may run before the budget throttles it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<ReservationPeriod>,
    /// What the vBS needs, for the strategies that size a reservation from it: `peak` (the
    /// profile's largest execution time every period) and `slo` (the smallest reservation the
    /// periodic model says meets the miss ratio).
    #[serde(default)]
    pub slo: Option<SloSpec>,
}

/// A measured workload's SLO and the execution-demand profile it is sized from (the spec's `slo`
/// and `profile`, docs/spec.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloSpec {
    pub deadline_miss_ratio: f64,
    pub profile: rtslice_spec::Profile,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Measured,
    Neighbour,
}

fn default_role() -> Role {
    Role::Measured
}
fn one() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmulateSpec {
    pub profile: String,
    #[serde(default)]
    pub args: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PingSpec {
    /// Interval between echoes (ping -i), default 10ms.
    #[serde(default)]
    pub interval: Option<String>,
    /// ICMP payload size in bytes (default 56).
    #[serde(default)]
    pub size: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadgenSpec {
    /// Extra arguments for the server (`rtslice loadgen server`).
    #[serde(default)]
    pub server_args: Vec<String>,
    /// Extra arguments for the client (`rtslice loadgen client`).
    #[serde(default)]
    pub client_args: Vec<String>,
}

/// One thread rule of a workload: regex on thread name → CPU slot in the workload's set, with the
/// scheduling class the rule gives (the spec's [`SchedPolicy`], so a slot means the same as a spec's
/// thread rule). Real-time threads are the ones a reservation serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ThreadSlotFile", into = "ThreadSlotFile")]
pub struct ThreadSlot {
    pub pattern: String,
    pub slot: u32,
    pub policy: SchedPolicy,
}

impl ThreadSlot {
    pub fn rt(&self) -> bool {
        matches!(self.policy, SchedPolicy::Fifo { .. } | SchedPolicy::Rr { .. })
    }
}

/// How a thread rule is written in the file: `policy` is `other` (default), `fifo` or `rr`, and
/// `priority` (1–99) goes with fifo/rr. The range is checked with the rest of the file so that all
/// problems are reported at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ThreadSlotFile {
    #[serde(rename = "match")]
    pattern: String,
    slot: u32,
    #[serde(default = "policy_other")]
    policy: String,
    #[serde(default)]
    priority: u32,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "rtslice_spec::units::serde_duration::option")]
    period: Option<std::time::Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    share: Option<f64>,
}

fn policy_other() -> String {
    "other".into()
}

impl TryFrom<ThreadSlotFile> for ThreadSlot {
    type Error = String;
    fn try_from(f: ThreadSlotFile) -> Result<ThreadSlot, String> {
        let policy = match f.policy.as_str() {
            "other" => SchedPolicy::Other { nice: None, share: f.share, period: f.period },
            "fifo" => SchedPolicy::Fifo { priority: f.priority, period: f.period },
            "rr" => SchedPolicy::Rr { priority: f.priority, period: f.period },
            p => return Err(format!("thread rule `{}`: policy `{p}` is not other, fifo or rr", f.pattern)),
        };
        Ok(ThreadSlot { pattern: f.pattern, slot: f.slot, policy })
    }
}

impl From<ThreadSlot> for ThreadSlotFile {
    fn from(t: ThreadSlot) -> ThreadSlotFile {
        let (policy, priority, period, share) = match t.policy {
            SchedPolicy::Fifo { priority, period } => ("fifo", priority, period, None),
            SchedPolicy::Rr { priority, period } => ("rr", priority, period, None),
            SchedPolicy::Other { share, period, .. } => ("other", 0, period, share),
            // Only other, fifo and rr can be read from a file; the rest never reach here.
            _ => ("other", 0, None, None),
        };
        ThreadSlotFile { pattern: t.pattern, slot: t.slot, policy: policy.into(), priority, period, share }
    }
}

/// A variant of a block: changes replicas or arguments of its workloads (a sweep point).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    /// Workload name → number of copies.
    #[serde(default)]
    pub replicas: BTreeMap<String, u32>,
    /// Workload name → arguments appended to its command.
    #[serde(default)]
    pub args: BTreeMap<String, Vec<String>>,
    /// Launch measured workloads through runc with this seccomp profile (`default` = Docker-like
    /// allow-list, `none`) and network (`own` namespace, `host`).
    #[serde(default)]
    pub oci: Option<OciVariant>,
    /// How the cell's spec reaches the kernel: one-shot `apply` (the default), or the node
    /// service one workload at a time, its agent included — what `rtslice daemon` does, in-process
    /// (`via: node`), so the two paths can be compared interleaved.
    #[serde(default)]
    pub via: Via,
    /// The reservation mechanism for the variant's cells, on either path (default: the path's own
    /// choice — apply's and the node's may differ on cgroup v1, docs/host.md), so the two paths
    /// can be compared at equal mechanisms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mechanism: Option<rtslice_plan::Mechanism>,
}

/// The path from a cell's spec to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    #[default]
    Apply,
    Node,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OciVariant {
    #[serde(default = "seccomp_default")]
    pub seccomp: String,
    #[serde(default = "network_default")]
    pub network: String,
}
fn seccomp_default() -> String {
    "none".into()
}
fn network_default() -> String {
    "host".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockFile {
    pub name: String,
    #[serde(default)]
    pub title: Option<String>,
    pub workloads: Vec<WorkloadSpec>,
    #[serde(default = "idle_only")]
    pub scenarios: Vec<ScenarioFile>,
    pub strategies: Vec<String>,
    #[serde(default)]
    pub variants: Vec<Variant>,
}
fn idle_only() -> Vec<ScenarioFile> {
    vec![ScenarioFile::Named("idle".into())]
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct QuickFile {
    #[serde(default)]
    pub duration: Option<String>,
    #[serde(default)]
    pub warmup: Option<String>,
    #[serde(default)]
    pub repetitions: Option<u32>,
    /// Keep only these variants in quick mode (all when absent).
    #[serde(default)]
    pub variants: Option<Vec<String>>,
    /// Keep only these scenarios in quick mode, in every block that has any of them (all when
    /// absent): a quick run shows that each strategy runs, not each strategy under each noise.
    #[serde(default)]
    pub scenarios: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentFile {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub duration: String,
    #[serde(default)]
    pub warmup: Option<String>,
    #[serde(default)]
    pub repetitions: Option<u32>,
    #[serde(default)]
    pub quick: Option<QuickFile>,
    /// Deadline-miss ratio the vBS must stay under (efficiency frontier); default 1e-3.
    #[serde(default)]
    pub target_miss_ratio: Option<f64>,
    /// Which measurements to take; default: all that apply to the workloads.
    #[serde(default)]
    pub metrics: Option<Vec<String>>,
    /// Miss-ratio targets of the density-at-an-SLO tables (docs/bench.md); none: no such tables.
    #[serde(default)]
    pub density_targets: Option<Vec<f64>>,
    pub blocks: Vec<BlockFile>,
}

pub const METRICS: &[&str] = &["sched_latency", "workload", "cpu", "switches", "rtt", "counters"];

/// A validated experiment, durations resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Experiment {
    pub name: String,
    pub title: String,
    pub description: String,
    pub duration: Duration,
    pub warmup: Duration,
    pub repetitions: u32,
    pub target_miss_ratio: f64,
    /// Miss-ratio targets of the density-at-an-SLO tables, ascending (empty: no such tables).
    #[serde(default)]
    pub density_targets: Vec<f64>,
    pub metrics: Vec<String>,
    pub blocks: Vec<Block>,
    pub quick: bool,
    /// Where it was read from (for the report).
    pub source: String,
    #[serde(skip)]
    quick_file: QuickFile,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Block {
    pub name: String,
    pub title: String,
    pub workloads: Vec<WorkloadSpec>,
    pub scenarios: Vec<Scenario>,
    pub strategies: Vec<Strategy>,
    /// Always at least one (a variant named "" with no changes when the file has none).
    pub variants: Vec<Variant>,
}

impl Experiment {
    pub fn load(path: &Path) -> Result<Experiment, ExperimentError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ExperimentError::Read { path: path.display().to_string(), source })?;
        Experiment::parse(&text, &path.display().to_string())
    }

    /// Reads an experiment file in two passes, each reporting all of its problems at once: the
    /// located YAML reader (unknown or missing fields, wrong types, each at its line and column,
    /// like specs), then the checks across fields (units, names, strategies, scenarios).
    pub fn parse(text: &str, file: &str) -> Result<Experiment, ExperimentError> {
        let raw = decode::experiment_file(text, file).map_err(|errors| ExperimentError::Located { count: errors.len(), errors })?;
        let mut problems = Vec::new();
        let exp = validate(raw, file, &mut problems);
        if problems.is_empty() {
            Ok(exp)
        } else {
            Err(ExperimentError::Invalid { file: file.to_string(), count: problems.len(), problems })
        }
    }

    /// Shortens every cell to seconds: the quick durations of the file, or 3 s with 1 s warm-up,
    /// one repetition.
    pub fn into_quick(mut self) -> Experiment {
        let q = self.quick_file.clone();
        let dur = q.duration.as_deref().and_then(|d| rtslice_spec::units::parse_duration(d).ok());
        let warm = q.warmup.as_deref().and_then(|d| rtslice_spec::units::parse_duration(d).ok());
        self.duration = dur.unwrap_or_else(|| self.duration.min(Duration::from_secs(3)));
        self.warmup = warm.unwrap_or_else(|| self.warmup.min(Duration::from_secs(1)));
        self.repetitions = q.repetitions.unwrap_or(1).max(1);
        if let Some(keep) = &q.variants {
            for b in &mut self.blocks {
                let kept: Vec<Variant> = b.variants.iter().filter(|v| keep.contains(&v.name)).cloned().collect();
                if !kept.is_empty() {
                    b.variants = kept;
                }
            }
        }
        if let Some(keep) = &q.scenarios {
            for b in &mut self.blocks {
                let kept: Vec<Scenario> = b.scenarios.iter().filter(|s| keep.contains(&s.name)).cloned().collect();
                if !kept.is_empty() {
                    b.scenarios = kept;
                }
            }
        }
        self.quick = true;
        self
    }

    pub fn wants(&self, metric: &str) -> bool {
        self.metrics.iter().any(|m| m == metric)
    }
}

fn dur(field: &str, value: &str, problems: &mut Vec<String>) -> Duration {
    match rtslice_spec::units::parse_duration(value) {
        Ok(d) => d,
        Err(e) => {
            problems.push(format!("  {field}: {e}"));
            Duration::ZERO
        }
    }
}

fn validate(raw: ExperimentFile, file: &str, problems: &mut Vec<String>) -> Experiment {
    if raw.api_version != "rtslice/v1" {
        problems.push(format!("  apiVersion: `{}` is not supported; write `rtslice/v1`", raw.api_version));
    }
    if raw.kind != "Experiment" {
        problems.push(format!("  kind: `{}`; an experiment file has `kind: Experiment`", raw.kind));
    }
    if raw.name.is_empty() || !raw.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        problems.push(format!("  name: `{}` must be non-empty and use only letters, digits, `-` and `_`", raw.name));
    }
    let duration = dur("duration", &raw.duration, problems);
    if duration.is_zero() && !problems.iter().any(|p| p.starts_with("  duration")) {
        problems.push("  duration: must be longer than 0s".into());
    }
    let warmup = raw.warmup.as_deref().map(|w| dur("warmup", w, problems)).unwrap_or(Duration::ZERO);
    let repetitions = raw.repetitions.unwrap_or(1);
    if repetitions == 0 {
        problems.push("  repetitions: must be at least 1".into());
    }
    let target = raw.target_miss_ratio.unwrap_or(1e-3);
    if !(0.0..1.0).contains(&target) {
        problems.push(format!("  target_miss_ratio: {target} is not in [0, 1)"));
    }
    let mut density_targets = raw.density_targets.clone().unwrap_or_default();
    for t in &density_targets {
        if !(*t > 0.0 && *t < 1.0) {
            problems.push(format!("  density_targets: {t} is not a miss ratio in (0, 1); write e.g. [1e-3, 1e-2]"));
        }
    }
    density_targets.sort_by(f64::total_cmp);
    density_targets.dedup();
    if let Some(q) = &raw.quick {
        if let Some(d) = &q.duration {
            dur("quick.duration", d, problems);
        }
        if let Some(w) = &q.warmup {
            dur("quick.warmup", w, problems);
        }
    }
    let metrics = match raw.metrics {
        None => METRICS.iter().map(|s| s.to_string()).collect(),
        Some(m) => {
            for x in &m {
                if !METRICS.contains(&x.as_str()) {
                    problems.push(format!("  metrics: unknown metric `{x}`; known: {}", METRICS.join(", ")));
                }
            }
            m
        }
    };
    if raw.blocks.is_empty() {
        problems.push("  blocks: at least one block (workloads × scenarios × strategies) is needed".into());
    }
    let mut blocks = Vec::new();
    let mut block_names = Vec::new();
    for (bi, b) in raw.blocks.into_iter().enumerate() {
        let at = format!("blocks[{bi}] ({})", b.name);
        if block_names.contains(&b.name) {
            problems.push(format!("  {at}: block name used twice"));
        }
        block_names.push(b.name.clone());
        blocks.push(validate_block(b, &at, problems));
    }
    let _ = file;
    Experiment {
        title: raw.title.unwrap_or_else(|| raw.name.clone()),
        name: raw.name,
        description: raw.description.unwrap_or_default(),
        duration,
        warmup,
        repetitions,
        target_miss_ratio: target,
        density_targets,
        metrics,
        blocks,
        quick: false,
        source: file.to_string(),
        quick_file: raw.quick.unwrap_or_default(),
    }
}

fn validate_block(b: BlockFile, at: &str, problems: &mut Vec<String>) -> Block {
    if b.workloads.is_empty() {
        problems.push(format!("  {at}.workloads: at least one workload is needed"));
    }
    let mut names: Vec<&str> = Vec::new();
    for (wi, w) in b.workloads.iter().enumerate() {
        let wat = format!("{at}.workloads[{wi}] ({})", w.name);
        if names.contains(&w.name.as_str()) {
            problems.push(format!("  {wat}: workload name used twice in this block"));
        }
        names.push(&w.name);
        let kinds = [w.emulate.is_some(), w.command.is_some(), w.ping.is_some(), w.loadgen.is_some()]
            .iter()
            .filter(|x| **x)
            .count();
        if kinds != 1 {
            problems.push(format!("  {wat}: give exactly one of `emulate`, `command`, `ping`, `loadgen` (found {kinds})"));
        }
        if let Some(c) = &w.command {
            if c.is_empty() {
                problems.push(format!("  {wat}.command: empty argv"));
            }
        }
        if let Some(o) = &w.output {
            if !["none", "json", "stress-ng"].contains(&o.as_str()) {
                problems.push(format!("  {wat}.output: `{o}` is not one of none, json, stress-ng"));
            }
        }
        if let Some(p) = &w.ping {
            if let Some(i) = &p.interval {
                dur(&format!("{wat}.ping.interval"), i, problems);
            }
        }
        if let Some(r) = w.reservation {
            if !(r > 0.0 && r <= 1.0) {
                problems.push(format!("  {wat}.reservation: {r} is not a share of a CPU in (0, 1]"));
            }
        }
        if w.period.is_some() && w.reservation.is_none() {
            problems.push(format!("  {wat}.period: the period of a `reservation`; this workload gives none"));
        }
        if w.replicas == 0 || w.share == 0 {
            problems.push(format!("  {wat}: replicas and share must be at least 1"));
        }
        for t in &w.threads {
            if let Err(e) = regex_lite_check(&t.pattern) {
                problems.push(format!("  {wat}.threads: `{}`: {e}", t.pattern));
            }
            match t.policy {
                SchedPolicy::Fifo { priority, .. } | SchedPolicy::Rr { priority, .. } if !(1..=99).contains(&priority) => {
                    problems.push(format!("  {wat}.threads: `{}`: priority must be 1–99", t.pattern))
                }
                _ => {}
            }
        }
    }
    if !b.workloads.iter().any(|w| w.role == Role::Measured) {
        problems.push(format!("  {at}.workloads: at least one workload must have role `measured`"));
    }
    let mut scenarios = Vec::new();
    for (si, s) in b.scenarios.into_iter().enumerate() {
        let sat = format!("{at}.scenarios[{si}]");
        let sc = match s {
            ScenarioFile::Named(n) if n == "idle" => Scenario { name: n, kind: ScenarioKind::Idle },
            ScenarioFile::Named(n) if NOISE_KINDS.contains(&n.as_str()) => {
                Scenario { kind: ScenarioKind::Noise { kind: n.clone(), args: vec![] }, name: n }
            }
            ScenarioFile::Named(n) => {
                problems.push(format!(
                    "  {sat}: `{n}` is not a built-in scenario (idle, {}); give {{name, noise|command}}",
                    NOISE_KINDS.join(", ")
                ));
                Scenario { name: n, kind: ScenarioKind::Idle }
            }
            ScenarioFile::Full(f) => match (f.noise, f.command) {
                (Some(k), None) => {
                    if !NOISE_KINDS.contains(&k.as_str()) {
                        problems.push(format!("  {sat}.noise: `{k}` is not one of {}", NOISE_KINDS.join(", ")));
                    }
                    Scenario { name: f.name, kind: ScenarioKind::Noise { kind: k, args: f.args } }
                }
                (None, Some(argv)) if !argv.is_empty() => Scenario { name: f.name, kind: ScenarioKind::Command { argv } },
                (None, None) => Scenario { name: f.name, kind: ScenarioKind::Idle },
                _ => {
                    problems.push(format!("  {sat}: give either `noise` or a non-empty `command`, not both"));
                    Scenario { name: f.name, kind: ScenarioKind::Idle }
                }
            },
        };
        if scenarios.iter().any(|x: &Scenario| x.name == sc.name) {
            problems.push(format!("  {sat}: scenario `{}` listed twice", sc.name));
        }
        scenarios.push(sc);
    }
    if scenarios.is_empty() {
        problems.push(format!("  {at}.scenarios: at least one scenario (e.g. `idle`)"));
    }
    let mut strategies = Vec::new();
    for s in &b.strategies {
        match s.parse::<Strategy>() {
            Ok(st) if strategies.contains(&st) => problems.push(format!("  {at}.strategies: `{s}` listed twice")),
            Ok(st) => strategies.push(st),
            Err(e) => problems.push(format!("  {at}.strategies: {e}")),
        }
    }
    if strategies.is_empty() {
        problems.push(format!("  {at}.strategies: at least one strategy (e.g. `none`)"));
    }
    let mut variants = b.variants;
    for (vi, v) in variants.iter().enumerate() {
        for w in v.replicas.keys().chain(v.args.keys()) {
            if !b.workloads.iter().any(|x| &x.name == w) {
                problems.push(format!("  {at}.variants[{vi}] ({}): no workload named `{w}` in this block", v.name));
            }
        }
        if let Some(o) = &v.oci {
            if !["default", "none"].contains(&o.seccomp.as_str()) || !["own", "host"].contains(&o.network.as_str()) {
                problems.push(format!(
                    "  {at}.variants[{vi}].oci: seccomp is `default` or `none`, network is `own` or `host`"
                ));
            }
        }
    }
    if variants.is_empty() {
        variants.push(Variant::default());
    }
    Block {
        title: b.title.unwrap_or_else(|| b.name.clone()),
        name: b.name,
        workloads: b.workloads,
        scenarios,
        strategies,
        variants,
    }
}

/// Thread patterns are regular expressions applied by the host crate; here only the obvious
/// mistakes are caught early (unbalanced brackets), the planner reports the rest with context.
fn regex_lite_check(p: &str) -> Result<(), String> {
    let mut depth: i32 = 0;
    let mut class = false;
    let mut escaped = false;
    for c in p.chars() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '[' if !class => class = true,
            ']' if class => class = false,
            '(' if !class => depth += 1,
            ')' if !class => depth -= 1,
            _ => {}
        }
        if depth < 0 {
            return Err("unbalanced `)`".into());
        }
    }
    if depth != 0 || class {
        return Err("unbalanced brackets".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINI: &str = r#"
apiVersion: rtslice/v1
kind: Experiment
name: mini
duration: 10s
warmup: 2s
repetitions: 3
blocks:
  - name: lat
    workloads:
      - name: vbs
        emulate: {profile: oai-lte}
    scenarios: [idle, user, {name: flood, noise: kernel, args: ["--rate", "100k"]}]
    strategies: [none, wide, irq+thread]
"#;

    #[test]
    fn parses_a_small_file() {
        let e = Experiment::parse(MINI, "mini.yaml").unwrap();
        assert_eq!(e.duration, Duration::from_secs(10));
        assert_eq!(e.warmup, Duration::from_secs(2));
        assert_eq!(e.repetitions, 3);
        assert_eq!(e.blocks[0].scenarios.len(), 3);
        assert_eq!(
            e.blocks[0].scenarios[2].kind,
            ScenarioKind::Noise { kind: "kernel".into(), args: vec!["--rate".into(), "100k".into()] }
        );
        assert_eq!(e.blocks[0].strategies, vec![Strategy::None, Strategy::Wide, Strategy::IrqThread]);
        assert_eq!(e.blocks[0].variants.len(), 1);
        let q = e.into_quick();
        assert!(q.duration <= Duration::from_secs(3));
        assert_eq!(q.repetitions, 1);
    }

    #[test]
    fn reports_all_problems_at_once() {
        let bad = MINI.replace("duration: 10s", "duration: 10").replace("irq+thread", "irq+magic").replace("user", "usr");
        let err = Experiment::parse(&bad, "bad.yaml").unwrap_err().to_string();
        assert!(err.contains("duration"), "{err}");
        assert!(err.contains("irq+magic"), "{err}");
        assert!(err.contains("`usr`"), "{err}");
        assert!(err.contains("3 problem(s)"), "{err}");
    }

    /// A workload's `period` is read as a duration within the kernel's range, and only beside a
    /// `reservation` (it is that reservation's period).
    #[test]
    fn a_workload_period_belongs_to_its_reservation() {
        let with = MINI.replace("        emulate: {profile: oai-lte}", "        emulate: {profile: oai-lte}\n        reservation: 0.9\n        period: 10ms");
        let e = Experiment::parse(&with, "ok.yaml").unwrap();
        assert_eq!(e.blocks[0].workloads[0].period, Some(ReservationPeriod::Written(Duration::from_millis(10))));
        let unwritten = with.replace("period: 10ms", "period: default");
        assert_eq!(Experiment::parse(&unwritten, "ok.yaml").unwrap().blocks[0].workloads[0].period, Some(ReservationPeriod::NodeDefault));
        // As the results directory keeps it: `default` and durations read back as written.
        for p in [ReservationPeriod::NodeDefault, ReservationPeriod::Written(Duration::from_micros(2500))] {
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(serde_json::from_str::<ReservationPeriod>(&json).unwrap(), p, "{json}");
        }
        let alone = MINI.replace("        emulate: {profile: oai-lte}", "        emulate: {profile: oai-lte}\n        period: 10ms");
        let err = Experiment::parse(&alone, "bad.yaml").unwrap_err().to_string();
        assert!(err.contains("period") && err.contains("reservation"), "{err}");
        let odd = MINI.replace("        emulate: {profile: oai-lte}", "        emulate: {profile: oai-lte}\n        reservation: 0.9\n        period: 10 parsecs");
        assert!(Experiment::parse(&odd, "bad.yaml").is_err());
        let long = odd.replace("10 parsecs", "5s");
        let err = Experiment::parse(&long, "bad.yaml").unwrap_err().to_string();
        assert!(err.contains("outside the kernel's") && err.contains("default"), "{err}");
    }

    #[test]
    fn unknown_field_has_a_location() {
        let bad = MINI.replace("warmup: 2s", "warmup: 2s\nwarmpu: 1s");
        let err = Experiment::parse(&bad, "bad.yaml").unwrap_err().to_string();
        assert!(err.contains("warmpu") && err.contains("line"), "{err}");
    }

    /// Three mistakes the reader sees, three errors, each at its line and column, in one pass.
    #[test]
    fn three_mistakes_three_located_errors() {
        let bad = MINI
            .replace("repetitions: 3", "repetitions: three")
            .replace("warmup: 2s", "warmup: 2s\nwarmpu: 1s")
            .replace("        emulate: {profile: oai-lte}", "        emulate: {profile: oai-lte, colour: red}");
        let err = Experiment::parse(&bad, "bad.yaml").unwrap_err();
        let ExperimentError::Located { errors, .. } = &err else { panic!("{err}") };
        let at: Vec<(usize, usize, &str)> = errors.iter().map(|e| (e.line, e.column, e.path.as_str())).collect();
        assert_eq!(
            at,
            vec![(7, 1, "warmpu"), (8, 14, "repetitions"), (13, 37, "blocks[0].workloads[0].emulate.colour")],
            "{err}"
        );
        assert!(err.to_string().contains("did you mean `warmup`?"), "{err}");
    }

    #[test]
    fn shipped_experiments_parse() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/experiments");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            Experiment::load(&path).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
        assert!(n >= 3);
    }

    /// density.yaml's SLO and targets reach the experiment; wrong ones are located errors.
    #[test]
    fn density_slo_and_targets_are_read_and_checked() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/experiments/density.yaml");
        let e = Experiment::load(std::path::Path::new(path)).unwrap();
        assert_eq!(e.density_targets, vec![1e-3, 1e-2]);
        let vbs = &e.blocks[1].workloads[0];
        let slo = vbs.slo.as_ref().unwrap();
        assert_eq!(slo.deadline_miss_ratio, 1e-3);
        assert_eq!(slo.profile.period, Duration::from_millis(1));
        assert_eq!(slo.profile.deadline, Duration::from_millis(3));
        assert!(slo.profile.execution.p99.is_some());
        let text = std::fs::read_to_string(path).unwrap();
        let bad = text.replace("deadline_miss_ratio: 1e-3", "deadline_miss_ratio: 3").replace("max: ", "maxx: ");
        let err = Experiment::parse(&bad, "d.yaml").unwrap_err().to_string();
        assert!(err.contains("maxx") && err.contains("profile"), "{err}");
        let bad = text.replace("deadline_miss_ratio: 1e-3", "deadline_miss_ratio: 3");
        let err = Experiment::parse(&bad, "d.yaml").unwrap_err().to_string();
        assert!(err.contains("slo.deadline_miss_ratio") && err.contains("(0, 1)"), "{err}");
        let bad = text.replace("density_targets: [1e-3, 1e-2]", "density_targets: [1e-3, 2]");
        let err = Experiment::parse(&bad, "d.yaml").unwrap_err().to_string();
        assert!(err.contains("density_targets"), "{err}");
    }

    #[test]
    fn workload_needs_exactly_one_kind() {
        let bad = MINI.replace("emulate: {profile: oai-lte}", "emulate: {profile: oai-lte}\n        command: [sleep, '1']");
        let err = Experiment::parse(&bad, "bad.yaml").unwrap_err().to_string();
        assert!(err.contains("exactly one"), "{err}");
    }
}

/// An emulated vBS (OAI LTE profile) measured by the experiment: the fixture the layout and spec
/// generation tests share.
#[cfg(test)]
pub(crate) fn test_vbs(name: &str, share: u32) -> WorkloadSpec {
    WorkloadSpec {
        name: name.into(),
        emulate: Some(EmulateSpec { profile: "oai-lte".into(), args: vec![] }),
        command: None,
        ping: None,
        loadgen: None,
        output: None,
        role: Role::Measured,
        share,
        replicas: 1,
        threads: vec![],
        reservation: None,
        reclaim: None,
        period: None,
        slo: Some(test_slo()),
    }
}

/// The SLO of examples/slo-vbs.yaml: 1e-3 misses, 200/320/450 µs per 1 ms TTI, 3 ms deadline.
#[cfg(test)]
pub(crate) fn test_slo() -> SloSpec {
    let us = std::time::Duration::from_micros;
    SloSpec {
        deadline_miss_ratio: 1e-3,
        profile: rtslice_spec::Profile {
            period: us(1000),
            deadline: us(3000),
            execution: rtslice_spec::ExecutionQuantiles { min: None, p50: Some(us(200)), p90: None, p99: Some(us(320)), p999: None, max: us(450) },
            histogram: vec![],
            source: None,
        },
    }
}
