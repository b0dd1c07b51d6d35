//! YAML → [`Spec`] with every error located. rtslice-yaml gives a tree where each node knows its line
//! and column; we walk it by hand (instead of serde) so that one pass can report *all* problems —
//! unknown fields, bad units, impossible values, cross-field conflicts — each with its position and
//! field path.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rtslice_yaml::{self as yaml, index, join, DocKind, Map, Reader, Val};

use crate::cpulist::parse_cpu_list;
use crate::error::SpecErrors;
use crate::types::*;
use crate::units::{format_duration, parse_bytes, parse_duration, parse_fraction};


/// How a spec names itself in messages about the whole file.
pub(crate) fn doc_kind(empty_hint: &str) -> DocKind<'_> {
    DocKind { noun: "spec", empty_hint }
}

/// Loads a spec's YAML text into the located tree.
pub(crate) fn load(text: &str, file: &str) -> Result<yaml::Node, SpecErrors> {
    let hint = format!("a spec starts with `apiVersion: {API_VERSION}`");
    yaml::load(text, file, doc_kind(&hint))
}

/// The spec's own value types (units, CPU lists, patterns), read like rtslice-yaml's typed accessors:
/// `None` after recording an error.
pub(crate) trait SpecValues {
    fn number(&mut self, node: &yaml::Node, path: &str) -> Option<f64>;
    fn duration(&mut self, node: &yaml::Node, path: &str) -> Option<Duration>;
    /// A duration used as a kernel period: 100 µs to 4.194304 s (sched_rt_period_us / deadline limits).
    fn period(&mut self, node: &yaml::Node, path: &str) -> Option<Duration>;
    fn fraction(&mut self, node: &yaml::Node, path: &str) -> Option<f64>;
    fn bytes(&mut self, node: &yaml::Node, path: &str) -> Option<u64>;
    /// `0-3,6`, a single id, or a list of ids.
    fn cpus(&mut self, node: &yaml::Node, path: &str) -> Option<Vec<u32>>;
    fn slots(&mut self, node: &yaml::Node, path: &str) -> Option<Slots>;
    fn regex(&mut self, node: &yaml::Node, path: &str) -> Option<String>;
}

impl SpecValues for Reader<'_> {
    fn number(&mut self, node: &yaml::Node, path: &str) -> Option<f64> {
        match &node.val {
            Val::Int(i) => Some(*i as f64),
            Val::Float(f) if f.is_finite() => Some(*f),
            // Percentages of one CPU may exceed 100% here (a cap of `150%`), so not parse_fraction.
            Val::Str(s) if s.trim_end().ends_with('%') => match s.trim().trim_end_matches('%').trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Some(v / 100.0),
                _ => {
                    self.err(node, path, format!("`{s}` is not a number or percentage"));
                    None
                }
            },
            _ => {
                self.err(node, path, format!("expected a number, found {}", node.kind()));
                None
            }
        }
    }

    fn duration(&mut self, node: &yaml::Node, path: &str) -> Option<Duration> {
        let Some(text) = node.scalar_text() else {
            self.err(node, path, format!("expected a duration such as `100ms`, found {}", node.kind()));
            return None;
        };
        match parse_duration(&text) {
            Ok(d) => Some(d),
            Err(e) => {
                self.err(node, path, e.to_string());
                None
            }
        }
    }

    /// A duration used as a kernel period: 100 µs to 4.194304 s (sched_rt_period_us / deadline limits).
    fn period(&mut self, node: &yaml::Node, path: &str) -> Option<Duration> {
        let d = self.duration(node, path)?;
        if d < MIN_PERIOD || d > MAX_PERIOD {
            self.err(
                node,
                path,
                format!(
                    "period {} is outside the kernel's range {}–{}",
                    format_duration(d),
                    format_duration(MIN_PERIOD),
                    format_duration(MAX_PERIOD)
                ),
            );
            return None;
        }
        Some(d)
    }

    fn fraction(&mut self, node: &yaml::Node, path: &str) -> Option<f64> {
        let Some(text) = node.scalar_text() else {
            self.err(node, path, format!("expected a fraction such as `0.95` or `95%`, found {}", node.kind()));
            return None;
        };
        match parse_fraction(&text) {
            Ok(f) => Some(f),
            Err(e) => {
                self.err(node, path, e.to_string());
                None
            }
        }
    }

    fn bytes(&mut self, node: &yaml::Node, path: &str) -> Option<u64> {
        let Some(text) = node.scalar_text() else {
            self.err(node, path, format!("expected a size such as `4096MB`, found {}", node.kind()));
            return None;
        };
        match parse_bytes(&text) {
            Ok(b) => Some(b),
            Err(e) => {
                self.err(node, path, e.to_string());
                None
            }
        }
    }

    /// `0-3,6`, a single id, or a list of ids.
    fn cpus(&mut self, node: &yaml::Node, path: &str) -> Option<Vec<u32>> {
        match &node.val {
            Val::Str(s) => match parse_cpu_list(s) {
                Ok(c) => Some(c),
                Err(e) => {
                    self.err(node, path, e.to_string());
                    None
                }
            },
            Val::Int(_) => self.int(node, path, 0, crate::cpulist::MAX_CPU_ID as i64).map(|c| vec![c as u32]),
            Val::Seq(items) => {
                let mut out = Vec::new();
                let mut ok = true;
                for (i, item) in items.iter().enumerate() {
                    match self.int(item, &index(path, i), 0, crate::cpulist::MAX_CPU_ID as i64) {
                        Some(c) => out.push(c as u32),
                        None => ok = false,
                    }
                }
                out.sort_unstable();
                out.dedup();
                ok.then_some(out)
            }
            _ => {
                self.err(node, path, format!("expected a CPU list such as `0-3,6` or [0, 1], found {}", node.kind()));
                None
            }
        }
    }

    fn slots(&mut self, node: &yaml::Node, path: &str) -> Option<Slots> {
        if let Val::Str(s) = &node.val {
            if s.trim() == "any" {
                return Some(Slots::Any);
            }
        }
        self.cpus(node, path).map(Slots::List)
    }

    fn regex(&mut self, node: &yaml::Node, path: &str) -> Option<String> {
        let text = self.string(node, path)?;
        if text.is_empty() {
            self.err(node, path, "empty pattern; write a regular expression such as `^ru-thread$`");
            return None;
        }
        match regex::Regex::new(&text) {
            Ok(_) => Some(text),
            Err(e) => {
                // The regex crate's message spans lines with a caret diagram; keep its last line.
                let msg = e.to_string();
                let short = msg.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(&msg).trim().to_string();
                self.err(node, path, format!("`{text}` is not a valid regular expression: {short}"));
                None
            }
        }
    }
}

/// Parses and validates; see [`crate::parse`].
pub(crate) fn parse(text: &str, file: &str) -> Result<Spec, SpecErrors> {
    let root = load(text, file)?;
    let mut cx = Reader::new(file, "spec");
    let spec = spec(&mut cx, &root);
    // spec() returns None only after reporting an error.
    cx.finish(spec)
}

fn spec(cx: &mut Reader, root: &yaml::Node) -> Option<Spec> {
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
    let known = Known { node: &node, default_period };
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
            for (i, item) in items.iter().enumerate() {
                let path = index("workloads", i);
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

/// The node as far as it parsed, whether it parsed without error, and its default period unless
/// that was given but invalid.
fn node(cx: &mut Reader, n: &yaml::Node, path: &str) -> (Node, bool, Option<Duration>) {
    let Some(f) = cx.fields(n, path, &["name", "cpus", "housekeeping", "cap", "defaultPeriod", "policy"]) else {
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
    let ok = cx.error_count() == before;
    (out, ok, default_period)
}

/// What the workloads are checked against.
struct Known<'a> {
    node: &'a Node,
    /// The node's default period; `None` when it was given but invalid (already reported).
    default_period: Option<Duration>,
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

const WORKLOAD_FIELDS: &[&str] =
    &["name", "launch", "flavor", "hints", "demand", "memory", "isolation", "threads", "irqs", "net"];

fn workload(
    cx: &mut Reader,
    n: &yaml::Node,
    path: &str,
    known: &Known,
    flavors: &BTreeMap<String, Flavor>,
    declared: &BTreeSet<String>,
) -> Option<Workload> {
    let f = cx.fields(n, path, WORKLOAD_FIELDS)?;
    let before = cx.error_count();
    let mut w = Workload::default();
    match f.get("name") {
        None => cx.err(n, &join(path, "name"), "missing; every workload needs a unique name"),
        Some(v) => {
            let p = join(path, "name");
            if let Some(name) = cx.string(v, &p) {
                let ok = name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
                    && name.len() <= 64;
                if !ok {
                    cx.err(v, &p, format!("`{name}` cannot name a cgroup; use letters, digits, `_`, `.`, `-` (at most 64, starting with a letter or digit)"));
                }
                w.name = name;
            }
        }
    }
    if let Some(v) = f.get("launch") {
        w.launch = launch(cx, v, &join(path, "launch"));
    }
    if let Some(v) = f.get("memory") {
        w.memory = cx.bytes(v, &join(path, "memory"));
    }
    if let Some(v) = f.get("flavor") {
        let p = join(path, "flavor");
        if let Some(name) = cx.string(v, &p) {
            if !declared.contains(&name) {
                let known: Vec<&str> = declared.iter().map(String::as_str).collect();
                cx.err(v, &p, format!("no flavor named `{name}`; defined: {}", if known.is_empty() { "none".into() } else { known.join(", ") }));
            }
            w.flavor = Some(name);
        }
    }
    if let Some(v) = f.get("hints") {
        let p = join(path, "hints");
        if !f.has("flavor") {
            cx.err(v, &p, "hints override a flavor's fields; this workload has no `flavor`");
        }
        if let Some(h) = cx.fields(v, &p, &["vcpus", "runtime", "period", "memory"]) {
            w.hints.vcpus = h.optional(cx, "vcpus", |cx, x, p| cx.int(x, p, 1, 8192)).map(|x| x as u32);
            w.hints.runtime = h.optional(cx, "runtime", |cx, x, p| cx.duration(x, p));
            w.hints.period = h.optional(cx, "period", |cx, x, p| cx.period(x, p));
            w.hints.memory = h.optional(cx, "memory", |cx, x, p| cx.bytes(x, p));
            // The effective runtime/period combine the hint and the flavor: check the result.
            if let Some(fl) = w.flavor.as_ref().and_then(|n| flavors.get(n)) {
                let runtime = w.hints.runtime.or(fl.runtime);
                let period = effective_period(h.get("period"), w.hints.period, fl.period.or(known.default_period));
                if let (Some(r), Some(at)) = (runtime, h.get("runtime").or(h.get("period"))) {
                    check_runtime(cx, at, &join(&p, if h.has("runtime") { "runtime" } else { "period" }), r, period);
                }
            }
        }
    }
    if let Some(v) = f.get("demand") {
        let p = join(path, "demand");
        if f.has("flavor") {
            cx.err(v, &p, "give either `demand` or `flavor`, not both (use `hints` to change a flavor)");
        }
        w.demand = demand(cx, v, &p, known);
    }
    if let Some(v) = f.get("isolation") {
        let p = join(path, "isolation");
        if let Some(iso) = cx.fields(v, &p, &["shield", "isolcpus", "wideAffinity"]) {
            w.isolation.shield = iso.optional(cx, "shield", |cx, x, p| cx.boolean(x, p)).unwrap_or(false);
            w.isolation.isolcpus = iso.optional(cx, "isolcpus", |cx, x, p| cx.boolean(x, p)).unwrap_or(false);
            w.isolation.wide_affinity =
                iso.optional(cx, "wideAffinity", |cx, x, p| cx.boolean(x, p)).unwrap_or(false);
            let best_effort = matches!(w.demand, Some(Demand::BestEffort(_))) || (w.demand.is_none() && w.flavor.is_none());
            if best_effort && (w.isolation.shield || w.isolation.isolcpus) {
                cx.err(v, &p, "shield and isolcpus need CPUs of the workload's own (a reservation or dedicated CPUs), not best-effort");
            }
        }
    }
    // The CPU count the slots of rules index into, when the spec fixes it.
    let count = match &w.demand {
        Some(Demand::Reservation(r)) => r.cpus.as_ref().map(|c| c.len() as u32).or(r.count).or(Some(1)),
        Some(Demand::Dedicated(d)) => d.cpus.as_ref().map(|c| c.len() as u32).or(d.count),
        Some(Demand::BestEffort(b)) => b.cpus.as_ref().map(|c| c.len() as u32),
        None => w.flavor.as_ref().and_then(|n| flavors.get(n)).map(|fl| w.hints.vcpus.unwrap_or(fl.vcpus)),
    };
    if let Some(v) = f.get("threads") {
        let p = join(path, "threads");
        if let Val::Seq(items) = &v.val {
            for (i, item) in items.iter().enumerate() {
                if let Some(r) = thread_rule(cx, item, &index(&p, i), count) {
                    w.threads.push(r);
                }
            }
            check_deadline_shares(cx, v, &p, &w.threads);
        } else {
            cx.err(v, &p, format!("must be a list of thread rules, found {}", v.kind()));
        }
    }
    if let Some(v) = f.get("irqs") {
        let p = join(path, "irqs");
        if let Val::Seq(items) = &v.val {
            for (i, item) in items.iter().enumerate() {
                let ip = index(&p, i);
                let Some(r) = cx.fields(item, &ip, &["match", "slots"]) else { continue };
                let pattern = match r.get("match") {
                    Some(m) => cx.regex(m, &join(&ip, "match")),
                    None => {
                        cx.err(item, &join(&ip, "match"), "missing; give the IRQ action-name regex (as in /proc/interrupts)");
                        None
                    }
                };
                let slots = r.get("slots").and_then(|s| slot_field(cx, s, &join(&ip, "slots"), count)).unwrap_or_default();
                if let Some(pattern) = pattern {
                    w.irqs.push(IrqRule { pattern, slots });
                }
            }
        } else {
            cx.err(v, &p, format!("must be a list of IRQ rules, found {}", v.kind()));
        }
    }
    if let Some(v) = f.get("net") {
        let p = join(path, "net");
        if let Val::Seq(items) = &v.val {
            for (i, item) in items.iter().enumerate() {
                let ip = index(&p, i);
                let Some(r) = cx.fields(item, &ip, &["interface", "rps", "xps"]) else { continue };
                let interface = match r.get("interface") {
                    Some(m) => cx.regex(m, &join(&ip, "interface")),
                    None => {
                        cx.err(item, &join(&ip, "interface"), "missing; give the interface name (a regex, e.g. `^veth-du1$`)");
                        None
                    }
                };
                let rps = r.get("rps").and_then(|s| slot_field(cx, s, &join(&ip, "rps"), count));
                let xps = r.get("xps").and_then(|s| slot_field(cx, s, &join(&ip, "xps"), count));
                if !r.has("rps") && !r.has("xps") {
                    cx.err(item, &ip, "give `rps`, `xps` or both (CPU slots, or `any`)");
                }
                if let Some(interface) = interface {
                    w.net.push(NetRule { interface, rps, xps });
                }
            }
        } else {
            cx.err(v, &p, format!("must be a list of interface rules, found {}", v.kind()));
        }
    }
    (cx.error_count() == before).then_some(w)
}

fn slot_field(cx: &mut Reader, n: &yaml::Node, path: &str, count: Option<u32>) -> Option<Slots> {
    let s = cx.slots(n, path)?;
    if let (Slots::List(l), Some(k)) = (&s, count) {
        if let Some(bad) = l.iter().find(|&&x| x >= k) {
            cx.err(n, path, format!("slot {bad} does not exist: the workload has {k} CPU(s), slots 0..{}", k.saturating_sub(1)));
            return None;
        }
    }
    if matches!(&s, Slots::List(l) if l.is_empty()) {
        cx.err(n, path, "an empty slot list would leave nowhere to run; write slots or `any`");
        return None;
    }
    Some(s)
}

fn launch(cx: &mut Reader, n: &yaml::Node, path: &str) -> Option<Launch> {
    let f = cx.fields(n, path, &["command", "env", "cwd", "oci", "pid", "cgroup"])?;
    let kinds: Vec<&str> = ["command", "oci", "pid", "cgroup"].into_iter().filter(|k| f.has(k)).collect();
    if kinds.len() != 1 {
        let reason = if kinds.is_empty() {
            "say how to start the workload: `command`, `oci` (bundle dir), `pid` or `cgroup`".to_string()
        } else {
            format!("`{}` exclude each other; choose one", kinds.join("`, `"))
        };
        cx.err(n, path, reason);
        return None;
    }
    if kinds[0] != "command" {
        for k in ["env", "cwd"] {
            if let Some(v) = f.get(k) {
                cx.err(v, &join(path, k), format!("`{k}` applies to `command` only"));
            }
        }
    }
    match kinds[0] {
        "command" => {
            let p = join(path, "command");
            let v = f.get("command").unwrap();
            let argv: Vec<String> = match &v.val {
                Val::Seq(items) => items.iter().enumerate().filter_map(|(i, a)| cx.string(a, &index(&p, i))).collect(),
                // A single string is split on whitespace, like a simple shell line without quoting.
                Val::Str(s) => s.split_whitespace().map(str::to_string).collect(),
                _ => {
                    cx.err(v, &p, format!("expected a list [program, args...], found {}", v.kind()));
                    return None;
                }
            };
            if argv.is_empty() {
                cx.err(v, &p, "the command is empty; give at least the program");
                return None;
            }
            let mut env = BTreeMap::new();
            if let Some(e) = f.get("env") {
                let ep = join(path, "env");
                if let Val::Map(pairs) = &e.val {
                    for (k, val) in pairs {
                        let Some(key) = cx.string(k, &ep) else { continue };
                        if key.is_empty() || key.contains('=') {
                            cx.err(k, &join(&ep, &key), "an environment variable name cannot be empty or contain `=`");
                        }
                        if let Some(val) = cx.string(val, &join(&ep, &key)) {
                            env.insert(key, val);
                        }
                    }
                } else {
                    cx.err(e, &ep, format!("expected a mapping NAME: value, found {}", e.kind()));
                }
            }
            let cwd = f.optional(cx, "cwd", |cx, c, p| cx.string(c, p));
            Some(Launch::Command { command: argv, env, cwd })
        }
        "oci" => cx.string(f.get("oci").unwrap(), &join(path, "oci")).map(|bundle| Launch::Oci { bundle }),
        "pid" => cx.int(f.get("pid").unwrap(), &join(path, "pid"), 1, i32::MAX as i64).map(|p| Launch::Pid { pid: p as u32 }),
        _ => cx.string(f.get("cgroup").unwrap(), &join(path, "cgroup")).map(|path| Launch::Cgroup { path }),
    }
}

fn check_cpus_usable(cx: &mut Reader, n: &yaml::Node, path: &str, cpus: &[u32], node: &Node) {
    if cpus.is_empty() {
        cx.err(n, path, "an empty CPU list; give CPUs or drop the field to let the planner choose");
        return;
    }
    if let NodeCpus::List(node_cpus) = &node.cpus {
        let missing: Vec<u32> = cpus.iter().copied().filter(|c| !node_cpus.contains(c)).collect();
        if !missing.is_empty() {
            cx.err(
                n,
                path,
                format!("CPU {} is not on the node (node CPUs: {})", crate::format_cpu_list(&missing), crate::format_cpu_list(node_cpus)),
            );
        }
    }
    let hk: Vec<u32> = cpus.iter().copied().filter(|c| node.housekeeping.contains(c)).collect();
    if !hk.is_empty() {
        cx.err(n, path, format!("CPU {} is a housekeeping CPU and is never given to workloads", crate::format_cpu_list(&hk)));
    }
}

fn count_and_cpus(cx: &mut Reader, f: &Map, path: &str, node: &Node) -> (Option<u32>, Option<Vec<u32>>, bool) {
    let mut ok = true;
    let count = f.get("count").and_then(|v| {
        let c = cx.int(v, &join(path, "count"), 1, 8192).map(|c| c as u32);
        ok &= c.is_some();
        c
    });
    let cpus = f.get("cpus").and_then(|v| {
        let p = join(path, "cpus");
        let c = cx.cpus(v, &p);
        match &c {
            Some(list) => {
                let before = cx.error_count();
                check_cpus_usable(cx, v, &p, list, node);
                ok &= cx.error_count() == before;
                if let Some(k) = count {
                    if k as usize != list.len() {
                        cx.err(v, &p, format!("{} CPU(s) listed but count is {k}; drop `count` or make them agree", list.len()));
                        ok = false;
                    }
                }
            }
            None => ok = false,
        }
        c
    });
    (count, cpus, ok)
}

fn demand(cx: &mut Reader, n: &yaml::Node, path: &str, known: &Known) -> Option<Demand> {
    let node = known.node;
    let f = cx.fields(n, path, &["reservation", "dedicated", "bestEffort"])?;
    let kinds: Vec<&str> = ["reservation", "dedicated", "bestEffort"].into_iter().filter(|k| f.has(k)).collect();
    if kinds.len() != 1 {
        cx.err(n, path, if kinds.is_empty() {
            "say what CPU time the workload needs: `reservation`, `dedicated` or `bestEffort`".to_string()
        } else {
            format!("`{}` exclude each other; choose one", kinds.join("`, `"))
        });
        return None;
    }
    let kind = kinds[0];
    let p = join(path, kind);
    let v = f.get(kind).unwrap();
    match kind {
        "reservation" => {
            let r = cx.fields(v, &p, &["runtime", "period", "count", "cpus", "reclaim"])?;
            let period = r.optional(cx, "period", |cx, x, p| cx.period(x, p));
            let runtime = match r.get("runtime") {
                Some(x) => {
                    let rt = cx.duration(x, &join(&p, "runtime"));
                    if let Some(rt) = rt {
                        check_runtime(cx, x, &join(&p, "runtime"), rt, effective_period(r.get("period"), period, known.default_period));
                    }
                    rt
                }
                None => {
                    cx.err(v, &join(&p, "runtime"), "missing; a reservation is `runtime` every `period` on each CPU");
                    None
                }
            };
            let (count, cpus, ok) = count_and_cpus(cx, &r, &p, node);
            if r.has("period") && period.is_none() || !ok {
                return None;
            }
            let reclaim = r.get("reclaim").and_then(|x| cx.boolean(x, &join(&p, "reclaim"))).unwrap_or(false);
            Some(Demand::Reservation(Reservation { runtime: runtime?, period, count, cpus, reclaim }))
        }
        "dedicated" => {
            let d = cx.fields(v, &p, &["count", "cpus"])?;
            let (count, cpus, ok) = count_and_cpus(cx, &d, &p, node);
            if count.is_none() && cpus.is_none() && ok {
                cx.err(v, &p, "say how many CPUs (`count: 2`) or which (`cpus: 4-7`)");
                return None;
            }
            ok.then_some(Demand::Dedicated(Dedicated { count, cpus }))
        }
        _ => {
            // `bestEffort: {}` and `bestEffort:` (null) both mean "defaults".
            if matches!(v.val, Val::Null) {
                return Some(Demand::BestEffort(BestEffort::default()));
            }
            let b = cx.fields(v, &p, &["weight", "cap", "cpus"])?;
            let before = cx.error_count();
            let weight = b.optional(cx, "weight", |cx, x, p| cx.int(x, p, 1, 10_000)).map(|x| x as u32);
            let cap = b.get("cap").and_then(|x| {
                let c = cx.number(x, &join(&p, "cap"))?;
                if c <= 0.0 {
                    cx.err(x, &join(&p, "cap"), "a cap must be above 0 CPUs (e.g. `0.5` or `50%` for half a CPU)");
                    return None;
                }
                Some(c)
            });
            let cpus = b.get("cpus").and_then(|x| {
                let c = cx.cpus(x, &join(&p, "cpus"))?;
                check_cpus_usable(cx, x, &join(&p, "cpus"), &c, node);
                Some(c)
            });
            (cx.error_count() == before).then_some(Demand::BestEffort(BestEffort { weight, cap, cpus }))
        }
    }
}

fn thread_rule(cx: &mut Reader, n: &yaml::Node, path: &str, count: Option<u32>) -> Option<ThreadRule> {
    let f = cx.fields(n, path, &["match", "policy", "priority", "nice", "runtime", "deadline", "period", "share", "slots"])?;
    let before = cx.error_count();
    let pattern = match f.get("match") {
        Some(m) => cx.regex(m, &join(path, "match")),
        None => {
            cx.err(n, &join(path, "match"), "missing; give a thread-name regex such as `^ru-thread$`");
            None
        }
    };
    let policy_name = match f.get("policy") {
        Some(p) => cx.string(p, &join(path, "policy")).unwrap_or_default(),
        None => "other".into(),
    };
    // Which fields each policy takes; the others are reported so nothing is silently ignored.
    let takes: &[&str] = match policy_name.as_str() {
        "other" | "batch" => &["nice"],
        "idle" => &[],
        "fifo" | "rr" => &["priority"],
        "deadline" => &["runtime", "deadline", "period", "share"],
        _ => {
            if let Some(p) = f.get("policy") {
                cx.err(p, &join(path, "policy"), format!("unknown policy `{policy_name}`; use other, batch, idle, fifo, rr or deadline"));
            }
            return None;
        }
    };
    for k in ["priority", "nice", "runtime", "deadline", "period", "share"] {
        if !takes.contains(&k) {
            if let Some(v) = f.get(k) {
                cx.err(v, &join(path, k), format!("`{k}` does not apply to policy `{policy_name}`"));
            }
        }
    }
    let nice = f.optional(cx, "nice", |cx, v, p| cx.int(v, p, -20, 19)).map(|v| v as i32);
    let policy = match policy_name.as_str() {
        "other" => SchedPolicy::Other { nice },
        "batch" => SchedPolicy::Batch { nice },
        "idle" => SchedPolicy::Idle,
        "fifo" | "rr" => {
            let priority = match f.get("priority") {
                Some(v) => cx.int(v, &join(path, "priority"), 1, 99).map(|v| v as u32),
                None => {
                    cx.err(n, &join(path, "priority"), format!("missing; {policy_name} needs a priority 1–99"));
                    None
                }
            }
            .unwrap_or(1);
            if policy_name == "fifo" {
                SchedPolicy::Fifo { priority }
            } else {
                SchedPolicy::Rr { priority }
            }
        }
        _ => {
            let runtime = f.optional(cx, "runtime", |cx, v, p| cx.duration(v, p));
            let deadline = f.optional(cx, "deadline", |cx, v, p| cx.duration(v, p));
            let period = f.optional(cx, "period", |cx, v, p| cx.period(v, p));
            let share = f.optional(cx, "share", |cx, v, p| cx.fraction(v, p));
            if let (Some(v), Some(s)) = (f.get("share"), share) {
                if s <= 0.0 {
                    cx.err(v, &join(path, "share"), "a share must be above 0");
                }
                if f.has("runtime") {
                    cx.err(v, &join(path, "share"), "give `runtime` or `share`, not both");
                }
            }
            // The kernel's own checks (sched_dl_overflow / __checkparam_dl): 1024 ns ≤ runtime ≤ deadline ≤ period.
            if let (Some(r), Some(v)) = (runtime, f.get("runtime")) {
                if r < Duration::from_nanos(1024) {
                    cx.err(v, &join(path, "runtime"), "SCHED_DEADLINE needs a runtime of at least 1024ns");
                }
                if let Some(d) = deadline.or(period) {
                    if r > d {
                        cx.err(v, &join(path, "runtime"), format!("runtime {} exceeds the deadline {}", format_duration(r), format_duration(d)));
                    }
                }
            }
            if let (Some(d), Some(p), Some(v)) = (deadline, period, f.get("deadline")) {
                if d > p {
                    cx.err(v, &join(path, "deadline"), format!("deadline {} exceeds the period {}", format_duration(d), format_duration(p)));
                }
            }
            if let (Some(d), Some(v)) = (deadline, f.get("deadline")) {
                if d < MIN_PERIOD && f.get("period").is_none() {
                    cx.err(v, &join(path, "deadline"), format!("deadline {} is below the kernel's minimum {}", format_duration(d), format_duration(MIN_PERIOD)));
                }
            }
            SchedPolicy::Deadline { runtime, deadline, period, share }
        }
    };
    let slots = f.get("slots").and_then(|s| slot_field(cx, s, &join(path, "slots"), count)).unwrap_or_default();
    (cx.error_count() == before).then(|| ThreadRule { pattern: pattern.unwrap_or_default(), policy, slots })
}

/// Shares of deadline rules divide one workload budget: together they cannot pass 100%.
fn check_deadline_shares(cx: &mut Reader, at: &yaml::Node, path: &str, rules: &[ThreadRule]) {
    let total: f64 = rules
        .iter()
        .filter_map(|r| match r.policy {
            SchedPolicy::Deadline { share, .. } => share,
            _ => None,
        })
        .sum();
    if total > 1.0 + 1e-9 {
        cx.err(at, path, format!("deadline shares add up to {:.0}% of the workload's budget; at most 100%", total * 100.0));
    }
}
