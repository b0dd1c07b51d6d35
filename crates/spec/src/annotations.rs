//! A Kubernetes pod's contract with rtslice: `rtslice.io/*` annotations, read into the spec's
//! [`Workload`] with the spec's own decoder and located messages (docs/kubernetes.md).
//!
//! Each annotation's value is YAML holding exactly one part of a spec workload:
//! `rtslice.io/reservation` is `demand.reservation`, `rtslice.io/dedicated` is `demand.dedicated`,
//! `rtslice.io/threads` is `threads`, `rtslice.io/irqs` is `irqs`, `rtslice.io/isolation` is
//! `isolation`. Suffixed with `.<container>` an annotation applies to that container only and wins
//! over the unsuffixed one, field by field.
//!
//! The annotations of one container are assembled into one located tree and checked by the spec's
//! workload decoder, so cross-field rules (slots against the CPU count, deadline shares, isolation of
//! best-effort work) hold exactly as in a spec file. Each annotation's nodes are moved to lines of
//! their own (`LINE_BLOCK` apart) so every error can be traced back to the annotation it came from:
//! the error's `file` is the annotation's key, its line and column are within the annotation's value.

use std::collections::BTreeMap;

use rtslice_yaml::{self as yaml, DocKind, Error, Errors, Reader, Val};

use crate::types::{Node, Workload};

/// Every rtslice annotation starts with this.
pub const PREFIX: &str = "rtslice.io/";

/// The annotation fields a pod may use, and where each one sits in a spec workload.
pub const FIELDS: &[(&str, &[&str])] = &[
    ("reservation", &["demand", "reservation"]),
    ("dedicated", &["demand", "dedicated"]),
    ("threads", &["threads"]),
    ("irqs", &["irqs"]),
    ("isolation", &["isolation"]),
];

/// Fields of a spec workload that have no annotation, with why (said instead of "unknown").
const REFUSED: &[(&str, &str)] = &[
    ("slo", "sizing a reservation from a latency objective is not supported on pods yet; size it with `rtslice model size` and give `rtslice.io/reservation`"),
    ("launch", "kubelet starts the container; rtslice only gives it its reservation"),
    ("memory", "use the container's resources.limits.memory"),
    ("net", "RPS/XPS of a pod's interface is the CNI's business; not supported on pods"),
    ("flavor", "flavors are not supported on pods; give `rtslice.io/reservation`"),
];

/// Lines of one annotation's value in the assembled tree start at `k * LINE_BLOCK`.
const LINE_BLOCK: usize = 1_000_000;

/// Whether any `rtslice.io/` annotation is present (a pod without one is not rtslice's business).
pub fn wants_rtslice<'a>(annotations: impl IntoIterator<Item = (&'a String, &'a String)>) -> bool {
    annotations.into_iter().any(|(k, _)| k.starts_with(PREFIX) && k != INVENTORY)
}

/// The Node annotation a node service publishes its inventory in (not a pod annotation).
pub const INVENTORY: &str = "rtslice.io/inventory";

/// The planner workload name of a pod's container: `<namespace>.<pod>.<container>`, characters a
/// cgroup name cannot hold replaced by `-`; longer than 64 characters: the first 47, `-`, and 16 hex
/// digits of the FNV-1a hash of the whole name (stable across runs and machines).
pub fn workload_name(namespace: &str, pod: &str, container: &str) -> String {
    let whole = format!("{namespace}.{pod}.{container}");
    let mut name: String = whole.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '-' }).collect();
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        name.insert(0, 'p');
    }
    if name.len() > 64 {
        let mut h: u64 = 0xcbf29ce484222325;
        for b in whole.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        name.truncate(47);
        name = format!("{name}-{h:016x}");
    }
    name
}

/// The workload of container `container`, named `name`, from the pod's annotations; `Ok(None)` when
/// no rtslice annotation applies to it. `containers`: the names of the pod's containers when known
/// (a suffix naming none of them is an error); `node`: what explicit CPUs are checked against.
pub fn container_workload(
    annotations: &BTreeMap<String, String>,
    containers: Option<&[String]>,
    container: &str,
    name: &str,
    node: &Node,
) -> Result<Option<Workload>, Errors> {
    let mut errors = Vec::new();
    // field -> (annotation key, value), suffixed winning over unsuffixed.
    let mut chosen: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    let field_names: Vec<&str> = FIELDS.iter().map(|(f, _)| *f).collect();
    for (key, value) in annotations {
        let Some(rest) = key.strip_prefix(PREFIX) else { continue };
        if key == INVENTORY {
            continue;
        }
        let (field, suffix) = match rest.split_once('.') {
            Some((f, c)) => (f, Some(c)),
            None => (rest, None),
        };
        let Some(&(field, _)) = FIELDS.iter().find(|(f, _)| *f == field) else {
            let reason = match REFUSED.iter().find(|(f, _)| *f == field) {
                Some((_, why)) => format!("`{PREFIX}{field}` is not supported: {why}"),
                None => match yaml::suggest(field, &field_names) {
                    Some(s) => format!("unknown rtslice annotation; did you mean `{PREFIX}{s}`?"),
                    None => format!("unknown rtslice annotation; rtslice reads {PREFIX}{{{}}}[.<container>]", field_names.join(",")),
                },
            };
            errors.push(whole_error(key, reason));
            continue;
        };
        if let (Some(c), Some(all)) = (suffix, containers) {
            if !all.iter().any(|x| x == c) {
                errors.push(whole_error(key, format!("the pod has no container named `{c}` (containers: {})", all.join(", "))));
                continue;
            }
        }
        match suffix {
            Some(c) if c == container => {
                chosen.insert(field, (key, value));
            }
            None => {
                chosen.entry(field).or_insert((key, value));
            }
            Some(_) => {}
        }
    }
    if !errors.is_empty() {
        return Err(Errors(errors));
    }
    if chosen.is_empty() {
        return Ok(None);
    }
    if chosen.contains_key("reservation") && chosen.contains_key("dedicated") {
        let (r, d) = (chosen["reservation"].0, chosen["dedicated"].0);
        return Err(Errors(vec![whole_error(d, format!("`{r}` and `{d}` exclude each other for container `{container}`; give one"))]));
    }
    if !chosen.contains_key("reservation") && !chosen.contains_key("dedicated") {
        let keys: Vec<&str> = chosen.values().map(|(k, _)| *k).collect();
        return Err(Errors(vec![whole_error(
            keys[0],
            format!("container `{container}` has {} but no CPUs of its own: add `{PREFIX}reservation` or `{PREFIX}dedicated`", keys.join(", ")),
        )]));
    }

    // Assemble the workload tree; remember which annotation each line block belongs to.
    let at = |val: Val| yaml::Node { line: 0, col: 0, val };
    let key_node = |k: &str| at(Val::Str(k.to_string()));
    let mut blocks: Vec<(&str, String)> = Vec::new();
    let mut demand: Vec<(yaml::Node, yaml::Node)> = Vec::new();
    let mut fields: Vec<(yaml::Node, yaml::Node)> = vec![(key_node("name"), at(Val::Str(name.to_string())))];
    for (field, path) in FIELDS {
        let Some((key, value)) = chosen.get(field) else { continue };
        let hint = format!("give the {field} as YAML, e.g. `{}`", example(field));
        let mut tree = match yaml::load(value, key, DocKind { noun: "annotation value", empty_hint: &hint }) {
            Ok(t) => t,
            Err(e) => {
                errors.extend(e.0);
                continue;
            }
        };
        blocks.push((key, path.join(".")));
        shift(&mut tree, blocks.len() * LINE_BLOCK);
        if path.len() == 2 {
            demand.push((key_node(path[1]), tree));
        } else {
            fields.push((key_node(path[0]), tree));
        }
    }
    if !errors.is_empty() {
        return Err(Errors(errors));
    }
    if !demand.is_empty() {
        fields.push((key_node("demand"), at(Val::Map(demand))));
    }
    let root = at(Val::Map(fields));
    let mut cx = Reader::new("pod annotations", "workload");
    let w = crate::decode::workload_tree(&mut cx, &root, node);
    let found = cx.into_errors();
    if found.is_empty() {
        if let Some(w) = w {
            return Ok(Some(w));
        }
    }
    let mut out: Vec<Error> = found
        .0
        .into_iter()
        .map(|mut e| {
            let k = e.line / LINE_BLOCK;
            if let Some((key, prefix)) = k.checked_sub(1).and_then(|i| blocks.get(i)) {
                e.file = key.to_string();
                e.line -= k * LINE_BLOCK;
                e.path = e.path.strip_prefix(prefix.as_str()).map(|p| p.trim_start_matches('.').to_string()).unwrap_or(e.path);
            }
            e
        })
        .collect();
    if out.is_empty() {
        out.push(whole_error("pod annotations", format!("container `{container}`: the annotations do not make a workload")));
    }
    Err(Errors(out))
}

/// The workloads of every container of a pod that rtslice annotations give one, in container order.
/// All containers' errors are reported together.
pub fn pod_workloads(
    annotations: &BTreeMap<String, String>,
    namespace: &str,
    pod: &str,
    containers: &[String],
    node: &Node,
) -> Result<Vec<(String, Workload)>, Errors> {
    let mut out = Vec::new();
    let mut errors: Vec<Error> = Vec::new();
    for c in containers {
        match container_workload(annotations, Some(containers), c, &workload_name(namespace, pod, c), node) {
            Ok(Some(w)) => out.push((c.clone(), w)),
            Ok(None) => {}
            Err(e) => {
                for x in e.0 {
                    // The same annotation applies to several containers: say each problem once.
                    if !errors.contains(&x) {
                        errors.push(x);
                    }
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(Errors(errors))
    }
}

fn whole_error(key: &str, reason: String) -> Error {
    Error { file: key.to_string(), line: 0, column: 0, path: String::new(), reason }
}

fn example(field: &str) -> &'static str {
    match field {
        "reservation" => "{runtime: 400us, period: 1ms, count: 2}",
        "dedicated" => "{count: 2}",
        "threads" => "[{match: ^phy, policy: fifo, priority: 90, slots: 0}]",
        "irqs" => "[{match: ^eth1-TxRx-, slots: 1}]",
        _ => "{isolcpus: true}",
    }
}

fn shift(n: &mut yaml::Node, by: usize) {
    n.line += by;
    match &mut n.val {
        Val::Seq(items) => items.iter_mut().for_each(|x| shift(x, by)),
        Val::Map(pairs) => pairs.iter_mut().for_each(|(k, v)| {
            shift(k, by);
            shift(v, by);
        }),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Demand, SchedPolicy, Slots};
    use proptest::prelude::*;
    use std::time::Duration;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }
    fn cs(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_vbs_pod_gives_the_spec_workload() {
        let a = ann(&[
            ("rtslice.io/reservation.du", "{runtime: 400us, period: 1ms, count: 2}"),
            ("rtslice.io/threads.du", "[{match: ^phy, policy: fifo, priority: 90, slots: 0}, {match: ., policy: other}]"),
            ("rtslice.io/irqs.du", "[{match: ^eth1-TxRx-, slots: 1}]"),
            ("other.io/x", "ignored"),
        ]);
        let w = container_workload(&a, Some(&cs(&["du", "sidecar"])), "du", "ran.vbs1.du", &Node::default()).unwrap().unwrap();
        assert_eq!(w.name, "ran.vbs1.du");
        assert_eq!(w.demand, Some(Demand::reservation(Duration::from_micros(400), Duration::from_millis(1), 2)));
        assert_eq!(w.threads.len(), 2);
        assert_eq!(w.threads[0].policy, SchedPolicy::fifo(90));
        assert_eq!(w.threads[0].slots, Slots::List(vec![0]));
        assert_eq!(w.irqs[0].pattern, "^eth1-TxRx-");
        // The sidecar has none of its own and there is no pod-wide annotation.
        assert_eq!(container_workload(&a, Some(&cs(&["du", "sidecar"])), "sidecar", "x", &Node::default()).unwrap(), None);
    }

    #[test]
    fn suffixed_wins_field_by_field() {
        let a = ann(&[
            ("rtslice.io/reservation", "{runtime: 10ms, period: 100ms}"),
            ("rtslice.io/reservation.du", "{runtime: 50ms, period: 100ms}"),
            ("rtslice.io/threads", "[{match: ., policy: fifo, priority: 10}]"),
        ]);
        let all = cs(&["du", "cu"]);
        let du = container_workload(&a, Some(&all), "du", "du", &Node::default()).unwrap().unwrap();
        let cu = container_workload(&a, Some(&all), "cu", "cu", &Node::default()).unwrap().unwrap();
        assert_eq!(du.demand, Some(Demand::reservation(Duration::from_millis(50), Duration::from_millis(100), 1)).map(|d| match d {
            Demand::Reservation(mut r) => {
                r.count = None;
                Demand::Reservation(r)
            }
            d => d,
        }));
        let Some(Demand::Reservation(r)) = &cu.demand else { panic!("{cu:?}") };
        assert_eq!(r.runtime, Duration::from_millis(10));
        assert_eq!(du.threads, cu.threads);
        let got = pod_workloads(&a, "ns", "p", &all, &Node::default()).unwrap();
        assert_eq!(got.iter().map(|(c, w)| (c.as_str(), w.name.as_str())).collect::<Vec<_>>(), vec![("du", "ns.p.du"), ("cu", "ns.p.cu")]);
    }

    #[test]
    fn errors_name_the_annotation_line_column_and_field() {
        let a = ann(&[
            ("rtslice.io/reservation.du", "{runtime: 400us, period: 1ms, count: 2}"),
            ("rtslice.io/threads.du", "[{match: ^phy, policy: fif, priority: 90}, {match: x, policy: fifo, priority: 9, slots: 2}]"),
        ]);
        let e = container_workload(&a, None, "du", "du", &Node::default()).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("rtslice.io/threads.du:1:"), "{text}");
        assert!(text.contains("[0].policy: unknown policy `fif`"), "{text}");
        assert!(text.contains("[1].slots: slot 2 does not exist: the workload has 2 CPU(s)"), "{text}");
        assert_eq!(e.len(), 2, "{text}");
        for x in e.iter() {
            assert_eq!(x.line, 1, "{x}");
        }
    }

    #[test]
    fn reservation_errors_are_located_in_their_own_annotation() {
        let a = ann(&[("rtslice.io/reservation", "runtime: 2ms\nperiod: 1ms\n"), ("rtslice.io/isolation", "{shield: yes please}")]);
        let e = container_workload(&a, None, "c", "c", &Node::default()).unwrap_err();
        let runtime = e.iter().find(|x| x.file == "rtslice.io/reservation").unwrap_or_else(|| panic!("{e}"));
        assert_eq!((runtime.line, runtime.column, runtime.path.as_str()), (1, 10, "runtime"), "{e}");
        let shield = e.iter().find(|x| x.file == "rtslice.io/isolation").unwrap_or_else(|| panic!("{e}"));
        assert_eq!(shield.path, "shield", "{e}");
    }

    #[test]
    fn contract_level_errors() {
        let n = Node::default();
        let typo = container_workload(&ann(&[("rtslice.io/reservaton", "{runtime: 1ms}")]), None, "c", "c", &n).unwrap_err();
        assert!(typo.to_string().contains("did you mean `rtslice.io/reservation`"), "{typo}");
        let slo = container_workload(&ann(&[("rtslice.io/slo", "{p99: 1ms}")]), None, "c", "c", &n).unwrap_err();
        assert!(slo.to_string().contains("not supported"), "{slo}");
        let both = ann(&[("rtslice.io/reservation", "{runtime: 1ms}"), ("rtslice.io/dedicated", "{count: 1}")]);
        assert!(container_workload(&both, None, "c", "c", &n).unwrap_err().to_string().contains("exclude each other"));
        let rules_only = ann(&[("rtslice.io/threads", "[{match: ., policy: fifo, priority: 1}]")]);
        assert!(container_workload(&rules_only, None, "c", "c", &n).unwrap_err().to_string().contains("no CPUs of its own"));
        let ghost = ann(&[("rtslice.io/reservation.dux", "{runtime: 1ms}")]);
        let e = container_workload(&ghost, Some(&cs(&["du"])), "du", "du", &n).unwrap_err();
        assert!(e.to_string().starts_with("rtslice.io/reservation.dux:0:0: the pod has no container named `dux`"), "{e}");
        let bad_yaml = ann(&[("rtslice.io/reservation", "{runtime: [")]);
        let e = container_workload(&bad_yaml, None, "c", "c", &n).unwrap_err();
        assert!(e.to_string().starts_with("rtslice.io/reservation:"), "{e}");
        assert!(e.to_string().contains("not valid YAML"), "{e}");
        let empty = ann(&[("rtslice.io/dedicated", "")]);
        assert!(container_workload(&empty, None, "c", "c", &n).unwrap_err().to_string().contains("e.g. `{count: 2}`"));
        // The inventory is a Node annotation: never read as a pod's contract.
        assert_eq!(container_workload(&ann(&[(INVENTORY, "{}")]), None, "c", "c", &n).unwrap(), None);
    }

    #[test]
    fn names_are_cgroup_safe_and_stable() {
        assert_eq!(workload_name("ran", "vbs1", "du"), "ran.vbs1.du");
        assert_eq!(workload_name("ran", "vbs1", "d u/x"), "ran.vbs1.d-u-x");
        let long = workload_name("a-very-long-namespace-name", "a-pod-name-that-goes-on-and-on-and-on", "du");
        assert_eq!(long.len(), 64);
        assert_eq!(long, workload_name("a-very-long-namespace-name", "a-pod-name-that-goes-on-and-on-and-on", "du"));
        assert_ne!(long, workload_name("a-very-long-namespace-name", "a-pod-name-that-goes-on-and-on-and-on", "cu"));
    }

    proptest! {
        /// Any annotation set either gives a workload or errors that each name an `rtslice.io/`
        /// annotation (or the pod), never a panic; a valid reservation round-trips its numbers.
        #[test]
        fn never_panics_and_errors_name_an_annotation(
            field in prop::sample::select(vec!["reservation", "dedicated", "threads", "irqs", "isolation", "slo", "reserv"]),
            suffix in prop::option::of(prop::sample::select(vec!["du", "cu"])),
            value in "[ -~]{0,40}",
        ) {
            let key = match suffix { Some(s) => format!("rtslice.io/{field}.{s}"), None => format!("rtslice.io/{field}") };
            let a = ann(&[(key.as_str(), value.as_str())]);
            match container_workload(&a, Some(&cs(&["du"])), "du", "ns.p.du", &Node::default()) {
                Ok(_) => {}
                Err(e) => {
                    prop_assert!(!e.is_empty());
                    for x in e.iter() {
                        prop_assert!(x.file.starts_with("rtslice.io/") || x.file == "pod annotations", "{}", x);
                        prop_assert!(x.line < LINE_BLOCK, "{}", x);
                    }
                }
            }
        }

        #[test]
        fn reservations_round_trip(runtime_us in 100u64..1000, period_us in 1000u64..100_000, count in 1u32..8) {
            let a = ann(&[("rtslice.io/reservation", &format!("{{runtime: {runtime_us}us, period: {period_us}us, count: {count}}}"))]);
            let w = container_workload(&a, None, "c", "c", &Node::default()).unwrap().unwrap();
            prop_assert_eq!(w.demand, Some(Demand::reservation(Duration::from_micros(runtime_us), Duration::from_micros(period_us), count)));
        }
    }
}
