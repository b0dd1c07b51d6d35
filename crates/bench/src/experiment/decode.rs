//! The experiment file read with the located YAML reader (rtslice-yaml): every unknown or missing
//! field and every wrong type in one pass, each at its line and column. Checks that need several
//! fields (units, names, strategies) run afterwards in `validate`, on what this returns.

use std::collections::BTreeMap;

use rtslice_spec::SchedPolicy;
use rtslice_yaml::{index, DocKind, Errors, Node, Reader, Val};

use super::{
    BlockFile, EmulateSpec, ExperimentFile, LoadgenSpec, OciVariant, PingSpec, QuickFile, Role, ScenarioFile, ScenarioSpec,
    SloSpec, ThreadSlot, Variant, Via, WorkloadSpec,
};

pub(super) fn experiment_file(text: &str, file: &str) -> Result<ExperimentFile, Errors> {
    let kind = DocKind {
        noun: "experiment file",
        empty_hint: "an experiment file starts with `apiVersion: rtslice/v1` and `kind: Experiment`",
    };
    let root = rtslice_yaml::load(text, file, kind)?;
    let mut r = Reader::new(file, "experiment file");
    let exp = experiment(&mut r, &root);
    r.finish(exp)
}

fn string(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<String> {
    r.string(n, p)
}

fn u32_of(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<u32> {
    r.int(n, p, 0, i64::from(u32::MAX)).map(|v| v as u32)
}

fn float(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<f64> {
    r.float(n, p)
}

fn boolean(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<bool> {
    r.boolean(n, p)
}

fn strings(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<Vec<String>> {
    list(r, n, p, "strings", string)
}

/// A list whose items are decoded by `item`; `None` when any item was wrong (all are looked at).
fn list<T>(
    r: &mut Reader<'_>,
    n: &Node,
    p: &str,
    what: &str,
    item: impl Fn(&mut Reader<'_>, &Node, &str) -> Option<T>,
) -> Option<Vec<T>> {
    let items = r.seq(n, p, what)?;
    let out: Vec<Option<T>> = items.iter().enumerate().map(|(i, x)| item(r, x, &index(p, i))).collect();
    out.into_iter().collect()
}

fn experiment(r: &mut Reader<'_>, root: &Node) -> Option<ExperimentFile> {
    let m = r.fields(
        root,
        "",
        &[
            "apiVersion",
            "kind",
            "name",
            "title",
            "description",
            "duration",
            "warmup",
            "repetitions",
            "quick",
            "target_miss_ratio",
            "metrics",
            "density_targets",
            "blocks",
        ],
    )?;
    let api_version = m.required(r, "apiVersion", "write `apiVersion: rtslice/v1`", string);
    let kind = m.required(r, "kind", "write `kind: Experiment`", string);
    let name = m.required(r, "name", "name the experiment (letters, digits, `-`, `_`)", string);
    let title = m.optional(r, "title", string);
    let description = m.optional(r, "description", string);
    let duration = m.required(r, "duration", "give each run's length, e.g. `duration: 30s`", string);
    let warmup = m.optional(r, "warmup", string);
    let repetitions = m.optional(r, "repetitions", u32_of);
    let quick = m.optional(r, "quick", quick);
    let target_miss_ratio = m.optional(r, "target_miss_ratio", float);
    let metrics = m.optional(r, "metrics", strings);
    let density_targets = m.optional(r, "density_targets", |r, n, p| list(r, n, p, "miss ratios", float));
    let blocks = m.required(r, "blocks", "list at least one block (workloads × scenarios × strategies)", |r, n, p| {
        list(r, n, p, "blocks", block)
    });
    Some(ExperimentFile {
        api_version: api_version?,
        kind: kind?,
        name: name?,
        title,
        description,
        duration: duration?,
        warmup,
        repetitions,
        quick,
        target_miss_ratio,
        metrics,
        density_targets,
        blocks: blocks?,
    })
}

fn quick(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<QuickFile> {
    let m = r.fields(n, p, &["duration", "warmup", "repetitions", "variants", "scenarios"])?;
    Some(QuickFile {
        duration: m.optional(r, "duration", string),
        warmup: m.optional(r, "warmup", string),
        repetitions: m.optional(r, "repetitions", u32_of),
        variants: m.optional(r, "variants", strings),
        scenarios: m.optional(r, "scenarios", strings),
    })
}

fn block(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<BlockFile> {
    let m = r.fields(n, p, &["name", "title", "workloads", "scenarios", "strategies", "variants"])?;
    let name = m.required(r, "name", "name the block", string);
    let title = m.optional(r, "title", string);
    let workloads = m.required(r, "workloads", "list the block's workloads", |r, n, p| list(r, n, p, "workloads", workload));
    let scenarios = match m.get("scenarios") {
        None => Some(vec![ScenarioFile::Named("idle".into())]),
        Some(s) => list(r, s, &m.path_of("scenarios"), "scenarios", scenario),
    };
    let strategies = m.required(r, "strategies", "list at least one strategy (e.g. `none`)", strings);
    let variants = m.optional(r, "variants", |r, n, p| list(r, n, p, "variants", variant)).unwrap_or_default();
    Some(BlockFile { name: name?, title, workloads: workloads?, scenarios: scenarios?, strategies: strategies?, variants })
}

fn scenario(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<ScenarioFile> {
    if let Val::Str(name) = &n.val {
        return Some(ScenarioFile::Named(name.clone()));
    }
    let m = r.fields(n, p, &["name", "noise", "args", "command"])?;
    let name = m.required(r, "name", "name the scenario", string);
    let noise = m.optional(r, "noise", string);
    let args = m.optional(r, "args", strings).unwrap_or_default();
    let command = m.optional(r, "command", strings);
    Some(ScenarioFile::Full(ScenarioSpec { name: name?, noise, args, command }))
}

fn workload(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<WorkloadSpec> {
    let m = r.fields(
        n,
        p,
        &["name", "emulate", "command", "ping", "loadgen", "output", "role", "share", "replicas", "threads", "reservation", "reclaim", "period", "slo"],
    )?;
    let name = m.required(r, "name", "name the workload", string);
    let emulate = m.optional(r, "emulate", |r, n, p| {
        let e = r.fields(n, p, &["profile", "args"])?;
        let profile = e.required(r, "profile", "name an emulator profile (oai-lte, srsenb, nr-gnb)", string);
        let args = e.optional(r, "args", strings).unwrap_or_default();
        Some(EmulateSpec { profile: profile?, args })
    });
    let command = m.optional(r, "command", strings);
    let ping = m.optional(r, "ping", |r, n, p| {
        let e = r.fields(n, p, &["interval", "size"])?;
        let interval = e.optional(r, "interval", string);
        let size = e.optional(r, "size", u32_of);
        Some(PingSpec { interval, size })
    });
    let loadgen = m.optional(r, "loadgen", |r, n, p| {
        let e = r.fields(n, p, &["server_args", "client_args"])?;
        let server_args = e.optional(r, "server_args", strings).unwrap_or_default();
        let client_args = e.optional(r, "client_args", strings).unwrap_or_default();
        Some(LoadgenSpec { server_args, client_args })
    });
    let output = m.optional(r, "output", string);
    let role = m
        .optional(r, "role", |r, n, p| r.one_of(n, p, &["measured", "neighbour"]))
        .map(|s| if s == "neighbour" { Role::Neighbour } else { Role::Measured })
        .unwrap_or(Role::Measured);
    let share = m.optional(r, "share", u32_of).unwrap_or(1);
    let replicas = m.optional(r, "replicas", u32_of).unwrap_or(1);
    let threads = m.optional(r, "threads", |r, n, p| list(r, n, p, "thread rules", thread)).unwrap_or_default();
    let reservation = m.optional(r, "reservation", float);
    let reclaim = m.optional(r, "reclaim", boolean);
    let period = m.optional(r, "period", reservation_period);
    let slo = m.optional(r, "slo", slo);
    Some(WorkloadSpec { name: name?, emulate, command, ping, loadgen, output, role, share, replicas, threads, reservation, reclaim, period, slo })
}

/// `slo: {deadline_miss_ratio: 1e-3, profile: {period: 1ms, deadline: 3ms, p50: …, p90: …, p99: …, p999: …, max: …}}`:
/// the spec's `slo` and inline `profile` (docs/spec.md) in the experiment file's snake_case.
fn slo(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<SloSpec> {
    let m = r.fields(n, p, &["deadline_miss_ratio", "profile"])?;
    let ratio = m.required(r, "deadline_miss_ratio", "give the miss-ratio target, e.g. `deadline_miss_ratio: 1e-3`", float);
    let profile = m.required(r, "profile", "give the execution profile: period, deadline, max and any of p50, p90, p99, p999", |r, n, p| {
        let f = r.fields(n, p, &["period", "deadline", "p50", "p90", "p99", "p999", "max"])?;
        let mut d = |key: &str, need: bool| -> Option<std::time::Duration> {
            let text = if need { f.required(r, key, "give a duration, e.g. 300us", string) } else { f.optional(r, key, string) }?;
            match rtslice_spec::units::parse_duration(&text) {
                Ok(v) => Some(v),
                Err(e) => {
                    r.err(n, &format!("{p}.{key}"), format!("{e}"));
                    None
                }
            }
        };
        let (period, deadline, max) = (d("period", true), d("deadline", true), d("max", true));
        let (p50, p90, p99, p999) = (d("p50", false), d("p90", false), d("p99", false), d("p999", false));
        Some(rtslice_spec::Profile {
            period: period?,
            deadline: deadline?,
            execution: rtslice_spec::ExecutionQuantiles { min: None, p50, p90, p99, p999, max: max? },
            histogram: vec![],
            source: Some("experiment file".into()),
        })
    });
    if let Some(x) = ratio {
        if !(x > 0.0 && x < 1.0) {
            r.err(n, &format!("{p}.deadline_miss_ratio"), format!("{x} is not a miss ratio in (0, 1); write e.g. 1e-3"));
        }
    }
    Some(SloSpec { deadline_miss_ratio: ratio?, profile: profile? })
}

/// A reservation's period: a duration within the kernel's range, or `default` (none written).
fn reservation_period(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<super::ReservationPeriod> {
    let text = string(r, n, p)?;
    super::ReservationPeriod::parse(&text).map_err(|e| r.err(n, p, e)).ok()
}

/// A scheduling period within the kernel's range (a thread rule's).
fn period(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<std::time::Duration> {
    let text = string(r, n, p)?;
    super::kernel_period(&text).map_err(|e| r.err(n, p, e)).ok()
}

fn thread(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<ThreadSlot> {
    let m = r.fields(n, p, &["match", "slot", "policy", "priority", "period", "share"])?;
    let pattern = m.required(r, "match", "give a regular expression on thread names", string);
    let slot = m.required(r, "slot", "give the CPU slot in the workload's set (0, 1, …)", u32_of);
    let policy = m.optional(r, "policy", |r, n, p| r.one_of(n, p, &["other", "fifo", "rr"])).unwrap_or_else(|| "other".into());
    // The 1–99 range is checked with the rest of the file in `validate`.
    let priority = m.optional(r, "priority", u32_of).unwrap_or(0);
    // As a spec's rule: under a SCHED_DEADLINE reservation these threads' own period.
    let period = m.optional(r, "period", period);
    let policy_is_rt = policy != "other";
    let policy = match policy.as_str() {
        "fifo" => SchedPolicy::Fifo { priority, period },
        "rr" => SchedPolicy::Rr { priority, period },
        _ => {
            // As a spec's `other` rule: a share of the reservation as CFS bandwidth, at `period`.
            let share = m.optional(r, "share", float);
            if let Some(s) = share.filter(|s| !(*s > 0.0 && *s < 1.0)) {
                r.err(n, &format!("{p}.share"), format!("{s} is not a share of the reservation in (0, 1)"));
            }
            if m.has("period") && share.is_none() {
                r.err(n, &format!("{p}.period"), "`period` applies to fifo and rr rules, and to an `other` rule with a `share` (its CFS bandwidth period)");
            }
            SchedPolicy::Other { nice: None, share, period }
        }
    };
    if m.has("share") && policy_is_rt {
        r.err(n, &format!("{p}.share"), "`share` applies to an `other` rule (its part of the reservation as CFS bandwidth)");
    }
    Some(ThreadSlot { pattern: pattern?, slot: slot?, policy })
}

fn variant(r: &mut Reader<'_>, n: &Node, p: &str) -> Option<Variant> {
    let m = r.fields(n, p, &["name", "replicas", "args", "oci", "via", "mechanism"])?;
    let name = m.required(r, "name", "name the variant", string);
    let replicas = m.optional(r, "replicas", |r, n, p| {
        let map = r.map(n, p)?;
        let out: Vec<Option<(String, u32)>> =
            map.entries().map(|(k, _, v)| u32_of(r, v, &map.path_of(k)).map(|c| (k.to_string(), c))).collect();
        out.into_iter().collect::<Option<BTreeMap<_, _>>>()
    });
    let args = m.optional(r, "args", |r, n, p| {
        let map = r.map(n, p)?;
        let out: Vec<Option<(String, Vec<String>)>> =
            map.entries().map(|(k, _, v)| strings(r, v, &map.path_of(k)).map(|a| (k.to_string(), a))).collect();
        out.into_iter().collect::<Option<BTreeMap<_, _>>>()
    });
    let oci = m.optional(r, "oci", |r, n, p| {
        let o = r.fields(n, p, &["seccomp", "network"])?;
        let seccomp = o.optional(r, "seccomp", string).unwrap_or_else(|| "none".into());
        let network = o.optional(r, "network", string).unwrap_or_else(|| "host".into());
        Some(OciVariant { seccomp, network })
    });
    let via = m.optional(r, "via", |r, n, p| match string(r, n, p)?.as_str() {
        "apply" => Some(Via::Apply),
        "node" => Some(Via::Node),
        other => {
            r.err(n, p, format!("`{other}`: the path to the kernel is `apply` (one-shot, the default) or `node` (the node service, as `rtslice daemon`)"));
            None
        }
    });
    let mechanism = m.optional(r, "mechanism", |r, n, p| match string(r, n, p)?.parse::<rtslice_plan::Mechanism>() {
        Ok(m) => Some(m),
        Err(e) => {
            r.err(n, p, e);
            None
        }
    });
    Some(Variant { name: name?, replicas: replicas.unwrap_or_default(), args: args.unwrap_or_default(), oci, via: via.unwrap_or_default(), mechanism })
}
