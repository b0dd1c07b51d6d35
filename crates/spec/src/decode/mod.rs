//! YAML → [`Spec`] with every error located. rtslice-yaml gives a tree where each node knows its line
//! and column; we walk it by hand (instead of serde) so that one pass can report *all* problems —
//! unknown fields, bad units, impossible values, cross-field conflicts — each with its position and
//! field path.
//!
//! Table of contents:
//! - this file: the document, the node, flavors and the runtime-within-period check they share
//!   with workloads;
//! - [`values`]: the spec's own value types (numbers and percentages, durations and periods,
//!   fractions, bytes, CPU lists, slots, patterns);
//! - [`workload`]: one workload (launch, demand, CPUs against the node, slots);
//! - [`threads`]: per-thread rules and the deadline shares they divide a budget into;
//! - [`profile`]: a workload's SLO and demand profile (inline, or a file the caller reads).
//! - [`topology`]: the node's SMT cores, LLC groups, NUMA nodes and NIC locality.

mod profile;
mod cache;
mod threads;
mod topology;
mod values;
mod workload;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rtslice_yaml::{self as yaml, index, join, DocKind, Reader, Val};

pub(crate) use self::profile::parse_profile;
use self::values::SpecValues;
use self::workload::workload;
use crate::error::SpecErrors;
use crate::types::*;
use crate::units::format_duration;


/// How a spec names itself in messages about the whole file.
pub(crate) fn doc_kind(empty_hint: &str) -> DocKind<'_> {
    DocKind { noun: "spec", empty_hint }
}

/// Loads a spec's YAML text into the located tree.
pub(crate) fn load(text: &str, file: &str) -> Result<yaml::Node, SpecErrors> {
    let hint = format!("a spec starts with `apiVersion: {API_VERSION}`");
    yaml::load(text, file, doc_kind(&hint))
}

/// Parses and validates; see [`crate::parse_with_files`].
pub(crate) fn parse(text: &str, file: &str, files: &dyn SpecFiles) -> Result<Spec, SpecErrors> {
    let root = load(text, file)?;
    let mut cx = Reader::new(file, "spec");
    let spec = spec(&mut cx, &root, files);
    // spec() returns None only after reporting an error.
    cx.finish(spec)
}

fn spec(cx: &mut Reader, root: &yaml::Node, files: &dyn SpecFiles) -> Option<Spec> {
    let f = cx.fields(root, "", &["apiVersion", "node", "flavors", "workloads"])?;
    match f.get("apiVersion") {
        None => cx.err(root, "apiVersion", format!("missing; the first line of a spec is `apiVersion: {API_VERSION}`")),
        Some(n) => {
            if let Some(v) = cx.string(n, "apiVersion") {
                if v != API_VERSION {
                    cx.err(n, "apiVersion", format!("`{v}` is not supported; this rtslice reads `{API_VERSION}`"));
                }
            }
        }
    }
    // A node with errors is still used (as far as it parsed) to check the workloads against it.
    // An invalid `defaultPeriod` is reported once; runtimes are not also compared with a stand-in.
    let (node, node_ok, default_period) = match f.get("node") {
        Some(n) => node(cx, n, "node"),
        None => (Node::default(), true, Some(DEFAULT_PERIOD)),
    };
    let known = Known { node: &node, default_period, files };
    // Flavors with errors are left out of `flavors` (so nothing is checked against their values) but
    // their names stay known (so a workload naming one is not told it does not exist).
    let mut flavors = BTreeMap::new();
    let mut declared = BTreeSet::new();
    if let Some(n) = f.get("flavors") {
        if let Val::Map(pairs) = &n.val {
            for (k, v) in pairs {
                let Some(name) = cx.string(k, "flavors") else { continue };
                let path = join("flavors", &name);
                declared.insert(name.clone());
                if let Some(fl) = flavor(cx, v, &path, &known) {
                    flavors.insert(name, fl);
                }
            }
        } else {
            cx.err(n, "flavors", format!("must be a mapping of flavor names to flavors, found {}", n.kind()));
        }
    }
    let mut workloads = Vec::new();
    if let Some(n) = f.get("workloads") {
        if let Val::Seq(items) = &n.val {
            let mut seen: BTreeMap<String, usize> = BTreeMap::new();
            let mut devices_seen: BTreeMap<rtslice_sys::pci::PciAddress, usize> = BTreeMap::new();
            for (i, item) in items.iter().enumerate() {
                let path = index("workloads", i);
                devices_once(cx, item, &path, i, &mut devices_seen);
                // Checked on the raw name so a duplicate is reported even when the workload has other errors.
                if let Val::Map(pairs) = &item.val {
                    let name = pairs.iter().find(|(k, _)| matches!(&k.val, Val::Str(s) if s == "name")).map(|(_, v)| v);
                    if let Some(n @ yaml::Node { val: Val::Str(name), .. }) = name {
                        if let Some(first) = seen.insert(name.clone(), i) {
                            cx.err(n, &join(&path, "name"), format!("`{name}` is already the name of workloads[{first}]"));
                        }
                    }
                }
                if let Some(w) = workload(cx, item, &path, &known, &flavors, &declared) {
                    workloads.push(w);
                }
            }
        } else {
            cx.err(n, "workloads", format!("must be a list of workloads, found {}", n.kind()));
        }
    }
    if !node_ok {
        return None;
    }
    Some(Spec { api_version: API_VERSION.into(), node, flavors, workloads })
}

/// A device is passed to one workload: a second workload naming it is an error at its `pci`.
/// Checked on the raw tree (unparsable addresses are the workload's own errors).
fn devices_once(cx: &mut Reader, item: &yaml::Node, path: &str, i: usize, seen: &mut BTreeMap<rtslice_sys::pci::PciAddress, usize>) {
    let Some(yaml::Node { val: Val::Seq(devices), .. }) = item.get("devices") else { return };
    let mine: BTreeSet<rtslice_sys::pci::PciAddress> = devices
        .iter()
        .enumerate()
        .filter_map(|(k, d)| {
            let v = d.get("pci")?;
            let Val::Str(s) = &v.val else { return None };
            let addr = s.parse().ok()?;
            if let Some(&first) = seen.get(&addr).filter(|&&first| first != i) {
                cx.err(v, &join(&index(&join(path, "devices"), k), "pci"), format!("{addr} is already passed to workloads[{first}]; a device serves one workload"));
            }
            Some(addr)
        })
        .collect();
    for addr in mine {
        seen.entry(addr).or_insert(i);
    }
}

/// One workload from a located tree that was not read from a spec file (the pod annotations of
/// `crate::annotations`), checked against `node` exactly as a spec's workload is.
pub(crate) fn workload_tree(cx: &mut Reader, n: &yaml::Node, node: &Node) -> Option<Workload> {
    let known = Known { node, default_period: Some(node.default_period), files: &NoFiles };
    workload(cx, n, "", &known, &BTreeMap::new(), &BTreeSet::new())
}

/// The node as far as it parsed, whether it parsed without error, and its default period unless
/// that was given but invalid.
fn node(cx: &mut Reader, n: &yaml::Node, path: &str) -> (Node, bool, Option<Duration>) {
    let Some(f) = cx.fields(n, path, &["name", "cpus", "housekeeping", "cap", "defaultPeriod", "policy", "topology", "cache"]) else {
        return (Node::default(), false, Some(DEFAULT_PERIOD));
    };
    let mut out = Node::default();
    let before = cx.error_count();
    if let Some(v) = f.get("name") {
        out.name = cx.string(v, &join(path, "name"));
    }
    if let Some(v) = f.get("cpus") {
        let p = join(path, "cpus");
        if matches!(&v.val, Val::Str(s) if s.trim() == "discovered") {
            out.cpus = NodeCpus::Discovered;
        } else if let Some(c) = cx.cpus(v, &p) {
            if c.is_empty() {
                cx.err(v, &p, "the node needs at least one CPU (or write `discovered`)");
            }
            out.cpus = NodeCpus::List(c);
        }
    }
    if let Some(v) = f.get("housekeeping") {
        let p = join(path, "housekeeping");
        if let Some(h) = cx.cpus(v, &p) {
            if let NodeCpus::List(cpus) = &out.cpus {
                let missing: Vec<u32> = h.iter().copied().filter(|c| !cpus.contains(c)).collect();
                if !missing.is_empty() {
                    cx.err(v, &p, format!("CPU {} is not on the node (node CPUs: {})", crate::format_cpu_list(&missing), crate::format_cpu_list(cpus)));
                }
                if h.len() == cpus.len() && !cpus.is_empty() {
                    cx.err(v, &p, "every CPU is housekeeping; leave at least one CPU for workloads");
                }
            }
            out.housekeeping = h;
        }
    }
    if let Some(v) = f.get("cap") {
        let p = join(path, "cap");
        if let Some(c) = cx.fraction(v, &p) {
            if c <= 0.0 {
                cx.err(v, &p, "the cap must be above 0 (0.95 is the usual value)");
            }
            out.cap = c;
        }
    }
    let mut default_period = Some(out.default_period);
    if let Some(v) = f.get("defaultPeriod") {
        default_period = cx.period(v, &join(path, "defaultPeriod"));
        if let Some(d) = default_period {
            out.default_period = d;
        }
    }
    if let Some(v) = f.get("policy") {
        let p = join(path, "policy");
        if let Some(s) = cx.string(v, &p) {
            match FitPolicy::ALL.iter().find(|pol| pol.name() == s) {
                Some(pol) => out.policy = *pol,
                None => cx.err(v, &p, format!("unknown policy `{s}`; use worst-fit, best-fit or first-fit")),
            }
        }
    }
    if let Some(v) = f.get("topology") {
        let node_cpus = match &out.cpus {
            NodeCpus::List(c) => Some(c.as_slice()),
            NodeCpus::Discovered => None,
        };
        out.topology = topology::topology(cx, v, &join(path, "topology"), node_cpus);
    }
    if let Some(v) = f.get("cache") {
        out.cache = cache::node_cache(cx, v, &join(path, "cache"), &out.cpus);
    }
    let ok = cx.error_count() == before;
    (out, ok, default_period)
}

/// What the workloads are checked against.
struct Known<'a> {
    node: &'a Node,
    /// The node's default period; `None` when it was given but invalid (already reported).
    default_period: Option<Duration>,
    /// Reads the files workloads refer to (profiles).
    files: &'a dyn SpecFiles,
}

/// The period a runtime is checked against: the field's value, `fallback` when the field is absent,
/// and none when the field is present but invalid (its own error is the true one).
fn effective_period(given: Option<&yaml::Node>, parsed: Option<Duration>, fallback: Option<Duration>) -> Option<Duration> {
    match (given, parsed) {
        (_, Some(p)) => Some(p),
        (Some(_), None) => None,
        (None, None) => fallback,
    }
}

fn flavor(cx: &mut Reader, n: &yaml::Node, path: &str, known: &Known) -> Option<Flavor> {
    let f = cx.fields(n, path, &["vcpus", "runtime", "period", "memory"])?;
    let before = cx.error_count();
    let vcpus = f.required(cx, "vcpus", "a flavor says how many CPUs (`vcpus: 1`)", |cx, v, p| cx.int(v, p, 1, 8192)).map(|v| v as u32);
    let runtime = f.optional(cx, "runtime", |cx, v, p| cx.duration(v, p));
    let period = f.optional(cx, "period", |cx, v, p| cx.period(v, p));
    let memory = f.optional(cx, "memory", |cx, v, p| cx.bytes(v, p));
    if let (Some(r), Some(v)) = (runtime, f.get("runtime")) {
        check_runtime(cx, v, &join(path, "runtime"), r, effective_period(f.get("period"), period, known.default_period));
    }
    if f.has("period") && !f.has("runtime") {
        cx.err(f.get("period").unwrap(), &join(path, "period"), "a period without a runtime means nothing; add `runtime`");
    }
    let flavor = Flavor { vcpus: vcpus?, runtime, period, memory };
    (cx.error_count() == before).then_some(flavor)
}

/// A runtime above 0 and, when the period is known, not longer than it.
fn check_runtime(cx: &mut Reader, at: &yaml::Node, path: &str, runtime: Duration, period: Option<Duration>) {
    if runtime.is_zero() {
        cx.err(at, path, "a reservation needs a runtime above 0");
    } else if let Some(period) = period.filter(|&p| runtime > p) {
        cx.err(
            at,
            path,
            format!(
                "runtime {} is longer than the period {}; a CPU cannot give more than 100% (use more CPUs)",
                format_duration(runtime),
                format_duration(period)
            ),
        );
    }
}
