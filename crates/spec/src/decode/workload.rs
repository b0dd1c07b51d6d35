//! One workload of a spec: its fields, launch, demand, CPUs checked against the node, and slots.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rtslice_yaml::{self as yaml, index, join, Map, Reader, Val};

use super::profile::{profile_field, slo};
use super::threads::{check_deadline_shares, thread_rule};
use super::values::SpecValues;
use super::{check_runtime, effective_period, Known};
use crate::types::*;
use crate::units::format_duration;

const WORKLOAD_FIELDS: &[&str] =
    &[
        "name", "launch", "flavor", "hints", "demand", "memory", "cache", "memoryBandwidth", "isolation", "threads", "irqs", "net",
        "devices", "restart", "slo", "profile", "adapt",
    ];

pub(super) fn workload(
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
    if let Some(v) = f.get("cache") {
        w.cache = super::cache::cache_request(cx, v, &join(path, "cache"), known.node.cache.as_ref());
    }
    if let Some(v) = f.get("memoryBandwidth") {
        w.memory_bandwidth = super::cache::memory_bandwidth(cx, v, &join(path, "memoryBandwidth"));
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
        if let Some(iso) = cx.fields(v, &p, &["shield", "isolcpus", "wideAffinity", "smt", "locality"]) {
            w.isolation.shield = iso.optional(cx, "shield", |cx, x, p| cx.boolean(x, p)).unwrap_or(false);
            w.isolation.isolcpus = iso.optional(cx, "isolcpus", |cx, x, p| cx.boolean(x, p)).unwrap_or(false);
            w.isolation.wide_affinity =
                iso.optional(cx, "wideAffinity", |cx, x, p| cx.boolean(x, p)).unwrap_or(false);
            let best_effort = matches!(w.demand, Some(Demand::BestEffort(_))) || (w.demand.is_none() && w.flavor.is_none());
            if let Some(x) = iso.get("smt") {
                let names: Vec<&str> = SmtIsolation::ALL.iter().map(|s| s.name()).collect();
                if let Some(name) = cx.one_of(x, &join(&p, "smt"), &names) {
                    w.isolation.smt = SmtIsolation::ALL.into_iter().find(|s| s.name() == name).unwrap_or_default();
                    if best_effort && !w.isolation.smt.is_shared() {
                        cx.err(x, &join(&p, "smt"), format!("`{name}` keeps real-time work apart from best-effort siblings; this workload is best-effort (use `shared`, or give it a reservation or dedicated CPUs)"));
                    }
                }
            }
            if let Some(x) = iso.get("locality") {
                let names: Vec<&str> = Locality::ALL.iter().map(|l| l.name()).collect();
                if let Some(name) = cx.one_of(x, &join(&p, "locality"), &names) {
                    w.isolation.locality = Locality::ALL.into_iter().find(|l| l.name() == name).unwrap_or_default();
                }
            }
            if best_effort && (w.isolation.shield || w.isolation.isolcpus) {
                cx.err(v, &p, "shield and isolcpus need CPUs of the workload's own (a reservation or dedicated CPUs), not best-effort");
            }
        }
    }
    if let Some(v) = f.get("slo") {
        w.slo = slo(cx, v, &join(path, "slo"));
    }
    if let Some(v) = f.get("profile") {
        w.profile = profile_field(cx, v, &join(path, "profile"), known.files);
    }
    check_slo_demand(cx, &f, path);
    if let Some(v) = f.get("adapt") {
        w.adapt = adapt(cx, v, &join(path, "adapt"), &w, known.node.cap, known.default_period);
    }
    // The CPU count the slots of rules index into, when the spec fixes it.
    let count = match &w.demand {
        // The planner sizes an SLO's reservation on one CPU.
        None if f.has("slo") => Some(1),
        Some(Demand::Reservation(r)) => r.cpus.as_ref().map(|c| c.len() as u32).or(r.count).or(Some(1)),
        Some(Demand::Dedicated(d)) => d.cpus.as_ref().map(|c| c.len() as u32).or(d.count),
        Some(Demand::BestEffort(b)) => b.cpus.as_ref().map(|c| c.len() as u32),
        None => w.flavor.as_ref().and_then(|n| flavors.get(n)).map(|fl| w.hints.vcpus.unwrap_or(fl.vcpus)),
    };
    if let Some(v) = f.get("threads") {
        let p = join(path, "threads");
        if let Val::Seq(items) = &v.val {
            // The CFS pool is one cgroup quota with one period: two `other` rules may both name it,
            // but not differently (the plan would have to pick one without a word).
            let mut pool_period: Option<(Duration, String)> = None;
            for (i, item) in items.iter().enumerate() {
                let at = index(&p, i);
                if let Some(r) = thread_rule(cx, item, &at, count) {
                    if let SchedPolicy::Other { share: Some(_), period: Some(period), .. } = r.policy {
                        match &pool_period {
                            None => pool_period = Some((period, at.clone())),
                            Some((first, first_at)) if *first != period => cx.err(
                                item.get("period").unwrap_or(item),
                                &join(&at, "period"),
                                format!(
                                    "the workload's `other` rules share one CFS pool with one period, and {first_at} gives it {}; give both the same `period` (or only one of them a `period`)",
                                    format_duration(*first)
                                ),
                            ),
                            Some(_) => {}
                        }
                    }
                    w.threads.push(r);
                }
            }
            check_deadline_shares(cx, v, &p, &w.threads);
            // An `other` rule's share is a part of a reservation; nothing else has a budget to split.
            // (A flavor's demand is the node's to resolve; the planner refuses a share there if need be.)
            let reserved = matches!(w.demand, Some(Demand::Reservation(_))) || (w.demand.is_none() && (f.has("slo") || w.flavor.is_some()));
            if !reserved {
                for (i, item) in items.iter().enumerate() {
                    if let (Some(sv), Some("other") | None) = (item.get("share"), item.get("policy").and_then(|p| p.scalar_text()).as_deref()) {
                        cx.err(
                            sv,
                            &join(&index(&p, i), "share"),
                            "an `other` rule's share is a part of the workload's reservation, and this workload has none; give it a \
                             `reservation` (or an `slo`), or cap a best-effort workload with `bestEffort: { cap: ... }`",
                        );
                    }
                }
            }
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
    if let Some(v) = f.get("devices") {
        w.devices = devices(cx, v, &join(path, "devices"), count);
    }
    if let Some(v) = f.get("restart") {
        let p = join(path, "restart");
        if let Some(r) = restart(cx, v, &p) {
            let launched = matches!(w.launch, Some(Launch::Command { .. }) | Some(Launch::Oci { .. }) | Some(Launch::Podman { .. }));
            if r.policy != RestartPolicy::Never && !launched {
                cx.err(v, &p, "only a workload rtslice launches (`launch: command`, `oci` or `podman`) can be restarted; use `never`");
            }
            w.restart = r;
        }
    }
    (cx.error_count() == before).then_some(w)
}

/// `devices: [{ pci: "0000:3b:02.1", irqs: 1 }]`: each address once; `irqs` is `any` (default),
/// slots of the workload's CPUs, or `keep`.
fn devices(cx: &mut Reader, n: &yaml::Node, path: &str, count: Option<u32>) -> Vec<Device> {
    let Val::Seq(items) = &n.val else {
        cx.err(n, path, format!("must be a list of devices (`- pci: \"0000:3b:02.1\"`), found {}", n.kind()));
        return Vec::new();
    };
    let mut out: Vec<Device> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ip = index(path, i);
        let Some(f) = cx.fields(item, &ip, &["pci", "irqs"]) else { continue };
        let pci = match f.get("pci") {
            Some(v) => pci_address(cx, v, &join(&ip, "pci")),
            None => {
                cx.err(item, &join(&ip, "pci"), "missing; give the device's PCI address as `lspci -D` prints it, e.g. `pci: \"0000:3b:02.1\"`");
                None
            }
        };
        let irqs = match f.get("irqs") {
            None => Some(DeviceIrqs::default()),
            Some(v) if matches!(&v.val, Val::Str(s) if s == "keep") => Some(DeviceIrqs::Keep),
            Some(v) => slot_field(cx, v, &join(&ip, "irqs"), count).map(DeviceIrqs::Slots),
        };
        let Some(pci) = pci else { continue };
        if let Some(first) = out.iter().position(|d| d.pci == pci) {
            cx.err(f.get("pci").unwrap_or(item), &join(&ip, "pci"), format!("{pci} is already {}", index(path, first)));
            continue;
        }
        if let Some(irqs) = irqs {
            out.push(Device { pci, irqs });
        }
    }
    out
}

/// A PCI address, written as text (`0000:3b:02.1`; YAML would read an unquoted `3b:02.1` as text too).
pub(super) fn pci_address(cx: &mut Reader, n: &yaml::Node, path: &str) -> Option<rtslice_sys::pci::PciAddress> {
    let text = cx.string(n, path)?;
    match text.parse() {
        Ok(a) => Some(a),
        Err(e) => {
            cx.err(n, path, e);
            None
        }
    }
}

/// An SLO needs a profile to size from, a profile is only read for an SLO, and an SLO sizes (or is
/// checked against) a reservation — not dedicated CPUs, best effort or a flavor.
fn check_slo_demand(cx: &mut Reader, f: &Map, path: &str) {
    // A given reservation the closed loop adapts needs no profile: the SLO is the loop's target.
    let loop_target = f.has("adapt") && f.get("demand").is_some_and(|d| d.get("reservation").is_some());
    match (f.get("slo"), f.get("profile")) {
        (Some(_), None) if loop_target => {}
        (Some(v), None) => cx.err(
            v,
            &join(path, "slo"),
            "an SLO needs the workload's demand to size a reservation from: add `profile: { period: 1ms, deadline: 3ms, \
             execution: { p50: 300us, p99: 450us, max: 700us } }` or `profile: FILE` (written by `rtslice profile`)",
        ),
        (None, Some(v)) => cx.err(
            v,
            &join(path, "profile"),
            "a profile is read to size or check a reservation for an SLO: add `slo: { deadlineMissRatio: 1e-3 }` (or `p99Response`), or drop the profile",
        ),
        _ => {}
    }
    let Some(v) = f.get("slo") else { return };
    if f.has("flavor") {
        cx.err(v, &join(path, "slo"), "an SLO sizes the workload's reservation itself; drop `flavor` (or give `demand: reservation` to have the SLO checked against it)");
    }
    if let Some(d) = f.get("demand") {
        if d.get("dedicated").is_some() || d.get("bestEffort").is_some() {
            cx.err(v, &join(path, "slo"), "an SLO is met by a reservation (sized, or given as `demand: reservation`), not by dedicated CPUs or best effort; drop one of them");
        }
    }
}

/// `adapt: { min: 200us, max: 800us, interval: 2s }` on a reservation (given, or sized for an SLO).
fn adapt(cx: &mut Reader, n: &yaml::Node, path: &str, w: &Workload, cap: f64, default_period: Option<Duration>) -> Option<Adapt> {
    let f = cx.fields(n, path, &["min", "max", "interval"])?;
    let before = cx.error_count();
    let min = f.optional(cx, "min", |cx, x, p| cx.duration(x, p));
    let max = f.optional(cx, "max", |cx, x, p| cx.duration(x, p));
    let interval = f.optional(cx, "interval", |cx, x, p| cx.duration(x, p)).unwrap_or(DEFAULT_ADAPT_INTERVAL);
    let (runtime, period) = match (&w.demand, &w.profile) {
        (Some(Demand::Reservation(r)), _) => (Some(r.runtime), r.period.or(default_period)),
        (None, Some(p)) if w.slo.is_some() => (None, Some(p.period)),
        _ => {
            cx.err(n, path, "the loop resizes a reservation: give `demand: { reservation: ... }`, or an `slo` with a `profile` (the planner sizes the first reservation)");
            return None;
        }
    };
    for (key, d) in [("min", min), ("max", max)] {
        if d.is_some_and(|d| d.is_zero()) {
            cx.err(f.get(key).unwrap_or(n), &join(path, key), "a runtime must be above 0");
        }
    }
    if let (Some(lo), Some(hi)) = (min, max) {
        if lo > hi {
            cx.err(n, path, format!("min {} is above max {}", format_duration(lo), format_duration(hi)));
        }
    }
    if let Some(period) = period {
        let ceiling = period.mul_f64(cap.clamp(0.0, 1.0));
        if let Some(hi) = max.filter(|hi| *hi > ceiling) {
            cx.err(f.get("max").unwrap_or(n), &join(path, "max"), format!(
                "{} is more than the period {} allows under the node's cap ({}); at most {}",
                format_duration(hi), format_duration(period), cap, format_duration(ceiling)
            ));
        }
    }
    if let Some(r) = runtime {
        if min.is_some_and(|lo| r < lo) || max.is_some_and(|hi| r > hi) {
            cx.err(n, path, format!("the reservation's runtime {} is outside [min, max]: the loop starts from it", format_duration(r)));
        }
    }
    if interval < MIN_ADAPT_INTERVAL || interval > Duration::from_secs(3600) {
        cx.err(f.get("interval").unwrap_or(n), &join(path, "interval"), format!(
            "{} is outside 500ms..1h (the loop needs a few telemetry readings per interval)", format_duration(interval)
        ));
    }
    (cx.error_count() == before).then_some(Adapt { min, max, interval })
}

const RESTART_POLICIES: &[&str] = &["never", "on-failure", "always"];

fn restart_policy(cx: &mut Reader, n: &yaml::Node, path: &str) -> Option<RestartPolicy> {
    Some(match cx.one_of(n, path, RESTART_POLICIES)?.as_str() {
        "never" => RestartPolicy::Never,
        "on-failure" => RestartPolicy::OnFailure,
        _ => RestartPolicy::Always,
    })
}

/// `restart: on-failure`, or `restart: { policy: on-failure, backoff: 1s, maxBackoff: 5m }`.
fn restart(cx: &mut Reader, n: &yaml::Node, path: &str) -> Option<Restart> {
    if !matches!(n.val, Val::Map(_)) {
        return restart_policy(cx, n, path).map(|policy| Restart { policy, ..Restart::default() });
    }
    let f = cx.fields(n, path, &["policy", "backoff", "maxBackoff"])?;
    let policy = match f.get("policy") {
        Some(v) => restart_policy(cx, v, &join(path, "policy")),
        None => {
            cx.err(n, &join(path, "policy"), "missing; use never, on-failure or always");
            None
        }
    };
    let mut r = Restart::default();
    if let Some(v) = f.get("backoff") {
        let p = join(path, "backoff");
        match cx.duration(v, &p) {
            Some(d) if d.is_zero() => cx.err(v, &p, "must be more than 0 (a crashing workload would be restarted in a busy loop)"),
            Some(d) => r.backoff = d,
            None => {}
        }
    }
    if let Some(v) = f.get("maxBackoff") {
        if let Some(d) = cx.duration(v, &join(path, "maxBackoff")) {
            r.max_backoff = d;
        }
    }
    if r.max_backoff < r.backoff {
        let at = f.get("maxBackoff").or(f.get("backoff")).unwrap_or(n);
        cx.err(at, &join(path, "maxBackoff"), format!("{:?} is shorter than the backoff {:?}", r.max_backoff, r.backoff));
        return None;
    }
    r.policy = policy?;
    Some(r)
}

pub(super) fn slot_field(cx: &mut Reader, n: &yaml::Node, path: &str, count: Option<u32>) -> Option<Slots> {
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
    let f = cx.fields(n, path, &["command", "env", "cwd", "oci", "podman", "args", "options", "pid", "cgroup"])?;
    let kinds: Vec<&str> = ["command", "oci", "podman", "pid", "cgroup"].into_iter().filter(|k| f.has(k)).collect();
    if kinds.len() != 1 {
        let reason = if kinds.is_empty() {
            "say how to start the workload: `command`, `oci` (bundle dir or image), `podman` (image), `pid` or `cgroup`".to_string()
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
    if kinds[0] != "podman" {
        for k in ["args", "options"] {
            if let Some(v) = f.get(k) {
                cx.err(v, &join(path, k), format!("`{k}` applies to `podman` only"));
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
        "podman" => {
            let image = cx.string(f.get("podman").unwrap(), &join(path, "podman"))?;
            if image.trim().is_empty() {
                cx.err(f.get("podman").unwrap(), &join(path, "podman"), "an empty image reference; name an image (e.g. `oci:/srv/images/vbs`)");
                return None;
            }
            let mut list = |k: &str| -> Vec<String> {
                let Some(v) = f.get(k) else { return Vec::new() };
                let p = join(path, k);
                match &v.val {
                    Val::Seq(items) => items.iter().enumerate().filter_map(|(i, a)| cx.string(a, &index(&p, i))).collect(),
                    _ => {
                        cx.err(v, &p, format!("expected a list of strings, found {}", v.kind()));
                        Vec::new()
                    }
                }
            };
            let (args, options) = (list("args"), list("options"));
            Some(Launch::Podman { image, args, options })
        }
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
            // Unset: the planner's default (rtslice_plan: on unless a CFS pool shares the reservation).
            let reclaim = r.get("reclaim").and_then(|x| cx.boolean(x, &join(&p, "reclaim")));
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
