//! TOSCA import. Two VDU forms become workloads:
//! - Tacker's (study B): `tosca.nodes.nfv.VDU.*` whose `capabilities.nfv_compute.properties` carry
//!   `num_cpus`, `mem_size` and `cpu_allocation` with `cpu.rt_runtime_us` / `cpu.rt_period_us`;
//! - ETSI SOL001's `tosca.nodes.nfv.Vdu.Compute`: `capabilities.virtual_compute.properties` with
//!   `virtual_cpu.num_virtual_cpu`, `virtual_memory.virtual_mem_size`, the same real-time keys in a
//!   `requested_additional_capabilities` entry's `target_performance_parameters`, and
//!   `properties.vdu_profile` for the number of instances.
//!
//! Everything that has no place in a spec is listed in `unmapped` with its position, never dropped
//! silently. A template without any VDU is an error (an empty spec would admit nothing, silently).

use std::time::Duration;

use rtslice_yaml::{self as yaml, join, DocKind, Reader, Val};

use crate::error::{SpecError, SpecErrors};
use crate::types::*;
use crate::units::parse_bytes;

/// The result of an import: a spec (already valid) and what could not be carried over.
#[derive(Debug, Clone, PartialEq)]
pub struct ToscaImport {
    pub spec: Spec,
    /// Each entry is located like an error (file, line, column, path) and says why it was not mapped.
    pub unmapped: Vec<SpecError>,
}

/// How a TOSCA template names itself in messages about the whole file.
const TOSCA_DOC: DocKind<'static> =
    DocKind { noun: "TOSCA template", empty_hint: "a TOSCA template starts with `tosca_definitions_version`" };

/// ETSI GS NFV-SOL 001's VDU node type.
const SOL001_VDU: &str = "tosca.nodes.nfv.Vdu.Compute";

/// The VDU forms we read.
#[derive(Clone, Copy, PartialEq)]
enum VduForm {
    Tacker,
    Sol001,
}

fn vdu_form(node_type: &str) -> Option<VduForm> {
    if node_type == SOL001_VDU {
        Some(VduForm::Sol001)
    } else if node_type.starts_with("tosca.nodes.nfv.VDU") {
        Some(VduForm::Tacker)
    } else {
        None
    }
}

/// Collects what was not mapped, located like errors.
struct Notes<'f> {
    file: &'f str,
    unmapped: Vec<SpecError>,
}

impl Notes<'_> {
    fn add(&mut self, at: &yaml::Node, path: &str, why: &str) {
        self.unmapped.push(SpecError { file: self.file.into(), line: at.line, column: at.col, path: path.into(), reason: why.into() });
    }
}

const NO_COUNTERPART: &str = "not mapped: no counterpart in an rtslice spec";
const CPU_TIME_ONLY: &str = "not mapped: rtslice places CPU time only (images, networks, placement are out of scope)";

/// What a VDU asks for, whatever its form.
#[derive(Default)]
struct VduDemand {
    vcpus: Option<u32>,
    memory: Option<u64>,
    runtime: Option<Duration>,
    period: Option<Duration>,
    /// A period was written but is invalid (reported): nothing is compared with it.
    period_invalid: bool,
    dedicated: bool,
    /// SOL001 `vdu_profile.min_number_of_instances`; one when not given.
    instances: Option<u32>,
    /// Where the real-time keys were found, for the notes about them.
    rt_path: String,
    /// The compute properties' position: notes and errors about the demand as a whole point there.
    at: Position,
}

/// A position only, to point at after the tree walk.
#[derive(Default, Clone, Copy)]
struct Position {
    line: usize,
    col: usize,
}

impl Position {
    fn of(n: &yaml::Node) -> Self {
        Position { line: n.line, col: n.col }
    }
    fn node(self) -> yaml::Node {
        yaml::Node { line: self.line, col: self.col, val: Val::Null }
    }
}

/// A mapping's entries with string keys (others are not TOSCA names and are skipped), in file order.
fn str_entries(n: &yaml::Node) -> impl Iterator<Item = (&str, &yaml::Node, &yaml::Node)> {
    n.as_map().unwrap_or_default().iter().filter_map(|(k, v)| Some((k.as_str()?, k, v)))
}

/// Imports a TOSCA NFV template. Errors when the text is not YAML/TOSCA, has no VDU, or a VDU's
/// values are malformed; unknown or unsupported content goes to `unmapped`.
pub fn import_tosca(text: &str, file: &str) -> Result<ToscaImport, SpecErrors> {
    let root = yaml::load(text, file, TOSCA_DOC)?;
    let mut cx = Reader::new(file, "TOSCA template");
    let mut notes = Notes { file, unmapped: Vec::new() };
    let Val::Map(top) = &root.val else {
        cx.err(&root, "", "a TOSCA template is a mapping with `topology_template`");
        return Err(cx.into_errors());
    };
    let mut templates = None;
    for (k, v) in top {
        let key = match &k.val {
            Val::Str(s) => s.as_str(),
            _ => "",
        };
        match key {
            "topology_template" => {
                if let Val::Map(tt) = &v.val {
                    for (k2, v2) in tt {
                        match &k2.val {
                            Val::Str(s) if s == "node_templates" => templates = Some(v2),
                            Val::Str(s) => notes.add(k2, &join("topology_template", s), "not mapped: only node_templates are imported"),
                            _ => {}
                        }
                    }
                }
            }
            "tosca_definitions_version" | "description" | "metadata" | "imports" => {}
            other => notes.add(k, other, NO_COUNTERPART),
        }
    }
    let Some(templates) = templates else {
        cx.err(&root, "topology_template.node_templates", "missing; nothing to import");
        return Err(cx.into_errors());
    };
    let Val::Map(nodes) = &templates.val else {
        cx.err(templates, "topology_template.node_templates", "must be a mapping of node names to nodes");
        return Err(cx.into_errors());
    };
    let mut spec = Spec::default();
    let mut vdus = 0;
    for (k, v) in nodes {
        let Some(name) = cx.string(k, "topology_template.node_templates") else { continue };
        let path = join("topology_template.node_templates", &name);
        let Val::Map(_) = &v.val else {
            cx.err(v, &path, "a node template must be a mapping");
            continue;
        };
        let node_type = v.get("type").and_then(|t| t.as_str()).unwrap_or_default();
        let Some(form) = vdu_form(node_type) else {
            notes.add(k, &path, &format!("not mapped: node type `{node_type}` is not a VDU"));
            continue;
        };
        vdus += 1;
        let before = cx.error_count();
        let vdu = match form {
            VduForm::Tacker => tacker_vdu(&mut cx, &mut notes, v, &path),
            VduForm::Sol001 => sol001_vdu(&mut cx, &mut notes, v, &path),
        };
        if cx.error_count() != before {
            continue;
        }
        if let Some(vdu) = vdu {
            push_workloads(&mut cx, &mut notes, &mut spec, &name, v, &path, vdu);
        }
    }
    if vdus == 0 && cx.error_count() == 0 {
        cx.err(
            templates,
            "topology_template.node_templates",
            format!("no VDU to import; workloads come from node templates of type `{SOL001_VDU}` (ETSI SOL001) or `tosca.nodes.nfv.VDU.Tacker`"),
        );
    }
    if cx.error_count() > 0 {
        return Err(cx.into_errors());
    }
    // The imported spec must itself be valid; round-trip it through the parser to be sure.
    let text = crate::emit::to_yaml(&spec);
    crate::parse(&text, "<imported>")?;
    let mut unmapped = notes.unmapped;
    unmapped.sort_by_key(|u| (u.line, u.column));
    Ok(ToscaImport { spec, unmapped })
}

/// Tacker's form: `capabilities.nfv_compute.properties`.
fn tacker_vdu(cx: &mut Reader, notes: &mut Notes, v: &yaml::Node, path: &str) -> Option<VduDemand> {
    for (key, k, _) in str_entries(v) {
        if !["type", "capabilities"].contains(&key) {
            notes.add(k, &join(path, key), CPU_TIME_ONLY);
        }
    }
    let ppath = join(path, "capabilities.nfv_compute.properties");
    let Some(props) = v.get("capabilities").and_then(|c| c.get("nfv_compute")).and_then(|c| c.get("properties")) else {
        cx.err(v, &ppath, "missing; a VDU needs nfv_compute properties (num_cpus, cpu_allocation)");
        return None;
    };
    let mut vdu = VduDemand { rt_path: join(&ppath, "cpu_allocation"), at: Position::of(props), ..VduDemand::default() };
    for (pk, pv) in props.as_map().unwrap_or_default() {
        let Some(key) = pk.as_str() else { continue };
        let kp = join(&ppath, key);
        match key {
            "num_cpus" => vdu.vcpus = cx.int(pv, &kp, 1, 8192).map(|x| x as u32),
            "mem_size" => vdu.memory = size(cx, pv, &kp),
            "cpu_allocation" => {
                let Val::Map(alloc) = &pv.val else {
                    cx.err(pv, &kp, "must be a mapping");
                    continue;
                };
                for (ak, av) in alloc {
                    let Some(akey) = ak.as_str() else { continue };
                    rt_key(cx, notes, &mut vdu, akey, ak, av, &join(&kp, akey));
                }
            }
            _ => notes.add(pk, &kp, NO_COUNTERPART),
        }
    }
    if vdu.vcpus.is_none() {
        notes.add(props, &join(&ppath, "num_cpus"), "missing: assumed 1 CPU");
    }
    Some(vdu)
}

/// One real-time key of a cpu_allocation (Tacker) or target_performance_parameters (SOL001).
fn rt_key(cx: &mut Reader, notes: &mut Notes, vdu: &mut VduDemand, key: &str, k: &yaml::Node, v: &yaml::Node, path: &str) {
    match key {
        "cpu.rt_runtime_us" => vdu.runtime = micros(cx, v, path),
        "cpu.rt_period_us" => {
            vdu.period = micros(cx, v, path);
            vdu.period_invalid = vdu.period.is_none();
        }
        // `hw:cpu_policy` is the OpenStack flavor key SOL001 templates carry for pinned CPUs.
        "cpu_affinity" | "hw:cpu_policy" => match v.scalar_text().as_deref() {
            Some("dedicated") => vdu.dedicated = true,
            Some("shared") => {}
            _ => notes.add(v, path, "not mapped: only `dedicated` and `shared` are understood"),
        },
        _ => notes.add(k, path, NO_COUNTERPART),
    }
}

/// ETSI SOL001's form: `capabilities.virtual_compute.properties` and `properties.vdu_profile`.
fn sol001_vdu(cx: &mut Reader, notes: &mut Notes, v: &yaml::Node, path: &str) -> Option<VduDemand> {
    let mut vdu = VduDemand::default();
    for (key, k, val) in str_entries(v) {
        let kp = join(path, key);
        match key {
            "type" => {}
            "capabilities" => {
                for (ckey, ck, _) in str_entries(val) {
                    if ckey != "virtual_compute" {
                        notes.add(ck, &join(&kp, ckey), NO_COUNTERPART);
                    }
                }
            }
            "properties" => {
                let Some(props) = cx.map(val, &kp) else { continue };
                for (pkey, pk, pv) in props.entries() {
                    let pp = join(&kp, pkey);
                    match pkey {
                        // A VDU's human name and description say nothing about CPU time.
                        "name" | "description" => {}
                        "vdu_profile" => vdu_profile(cx, notes, &mut vdu, pv, &pp),
                        _ => notes.add(pk, &pp, CPU_TIME_ONLY),
                    }
                }
            }
            _ => notes.add(k, &kp, CPU_TIME_ONLY),
        }
    }
    let ppath = join(path, "capabilities.virtual_compute.properties");
    let Some(props) = v.get("capabilities").and_then(|c| c.get("virtual_compute")).and_then(|c| c.get("properties")) else {
        cx.err(v, &ppath, "missing; a Vdu.Compute needs virtual_compute properties (virtual_cpu.num_virtual_cpu, virtual_memory.virtual_mem_size)");
        return None;
    };
    vdu.at = Position::of(props);
    let props = cx.map(props, &ppath)?;
    for (key, k, val) in props.entries() {
        let kp = join(&ppath, key);
        match key {
            "virtual_cpu" => {
                let Some(cpu) = cx.map(val, &kp) else { continue };
                for (ckey, ck, cv) in cpu.entries() {
                    let cp = join(&kp, ckey);
                    match ckey {
                        "num_virtual_cpu" => vdu.vcpus = cx.int(cv, &cp, 1, 8192).map(|x| x as u32),
                        "virtual_cpu_pinning" => match cv.get("virtual_cpu_pinning_policy").and_then(|p| p.scalar_text()).as_deref() {
                            // SOL001: `static` pins each virtual CPU to a physical one.
                            Some("static") => vdu.dedicated = true,
                            Some("dynamic") => {}
                            _ => notes.add(cv, &cp, "not mapped: only virtual_cpu_pinning_policy `static` and `dynamic` are understood"),
                        },
                        _ => notes.add(ck, &cp, NO_COUNTERPART),
                    }
                }
            }
            "virtual_memory" => {
                let Some(mem) = cx.map(val, &kp) else { continue };
                for (mkey, mk, mv) in mem.entries() {
                    let mp = join(&kp, mkey);
                    match mkey {
                        "virtual_mem_size" => vdu.memory = size(cx, mv, &mp),
                        _ => notes.add(mk, &mp, NO_COUNTERPART),
                    }
                }
            }
            "requested_additional_capabilities" => {
                let Some(caps) = cx.map(val, &kp) else { continue };
                for (capname, _, cap) in caps.entries() {
                    let capp = join(&kp, capname);
                    let Some(cap) = cx.map(cap, &capp) else { continue };
                    for (fkey, fk, fv) in cap.entries() {
                        let fp = join(&capp, fkey);
                        match fkey {
                            // The capability's identity, not a demand.
                            "requested_additional_capability_name"
                            | "support_mandatory"
                            | "min_requested_additional_capability_version"
                            | "preferred_requested_additional_capability_version" => {}
                            "target_performance_parameters" => {
                                let Some(params) = cx.map(fv, &fp) else { continue };
                                vdu.rt_path = fp.clone();
                                for (tkey, tk, tv) in params.entries() {
                                    rt_key(cx, notes, &mut vdu, tkey, tk, tv, &join(&fp, tkey));
                                }
                            }
                            _ => notes.add(fk, &fp, NO_COUNTERPART),
                        }
                    }
                }
            }
            _ => notes.add(k, &kp, NO_COUNTERPART),
        }
    }
    if vdu.vcpus.is_none() {
        notes.add(props.node(), &join(&ppath, "virtual_cpu.num_virtual_cpu"), "missing: assumed 1 CPU");
    }
    if vdu.rt_path.is_empty() {
        vdu.rt_path = join(&ppath, "requested_additional_capabilities");
    }
    Some(vdu)
}

/// `vdu_profile`: the VDU is instantiated `min_number_of_instances` times; rtslice reserves for those.
fn vdu_profile(cx: &mut Reader, notes: &mut Notes, vdu: &mut VduDemand, n: &yaml::Node, path: &str) {
    let Some(profile) = cx.map(n, path) else { return };
    let min = profile.optional(cx, "min_number_of_instances", |cx, n, p| cx.int(n, p, 0, 1024));
    let max = profile.optional(cx, "max_number_of_instances", |cx, n, p| cx.int(n, p, 0, 1024));
    if let (Some(lo), Some(hi), Some(at)) = (min, max, profile.get("max_number_of_instances")) {
        if hi < lo {
            cx.err(at, &profile.path_of("max_number_of_instances"), format!("{hi} is below min_number_of_instances {lo}"));
        } else if hi > lo {
            notes.add(at, &profile.path_of("max_number_of_instances"), &format!("not mapped: reserved for the {lo} initial instance(s); scaling out to {hi} is not reserved"));
        }
    }
    for (key, k, _) in profile.entries() {
        if !["min_number_of_instances", "max_number_of_instances"].contains(&key) {
            notes.add(k, &profile.path_of(key), NO_COUNTERPART);
        }
    }
    vdu.instances = min.map(|m| m as u32);
}

/// The workload(s) of one VDU: one per instance (`name`, or `name-1`… when there are several).
fn push_workloads(cx: &mut Reader, notes: &mut Notes, spec: &mut Spec, name: &str, template: &yaml::Node, path: &str, vdu: VduDemand) {
    let count = vdu.vcpus.unwrap_or(1);
    let at = &vdu.at.node();
    let rt = &vdu.rt_path;
    let demand = match (vdu.runtime, vdu.dedicated) {
        (Some(runtime), _) => {
            if vdu.dedicated {
                notes.add(at, &join(rt, "cpu_affinity"), "ignored: a real-time reservation was given, which shares CPUs");
            }
            if vdu.period.is_none() && !vdu.period_invalid {
                notes.add(at, &join(rt, "cpu.rt_period_us"), "missing: the node's default period applies");
            }
            if vdu.period.is_some_and(|p| runtime > p) || vdu.period.is_none() && !vdu.period_invalid && runtime > DEFAULT_PERIOD {
                cx.err(at, &join(rt, "cpu.rt_runtime_us"), "runtime exceeds the period");
                return;
            }
            Demand::Reservation(Reservation { runtime, period: vdu.period, count: Some(count), cpus: None, reclaim: None })
        }
        (None, true) => Demand::Dedicated(Dedicated { count: Some(count), cpus: None }),
        (None, false) => {
            if vdu.period.is_some() {
                notes.add(at, &join(rt, "cpu.rt_period_us"), "ignored: a period without a runtime reserves nothing");
            }
            Demand::BestEffort(BestEffort { weight: None, cap: Some(count as f64), cpus: None })
        }
    };
    let instances = vdu.instances.unwrap_or(1);
    if instances == 0 {
        notes.add(template, &join(path, "properties.vdu_profile.min_number_of_instances"), "no instance at start: nothing reserved");
    }
    for i in 1..=instances {
        let base = sanitize(name);
        let name = if instances == 1 { base } else { format!("{}-{i}", base.chars().take(58).collect::<String>()) };
        spec.workloads.push(Workload { name, memory: vdu.memory, demand: Some(demand.clone()), ..Workload::default() });
    }
}

/// A TOSCA size (`4096 MB`, `4 GB`: the space is TOSCA's style), in powers of 1024 like spec sizes.
fn size(cx: &mut Reader, n: &yaml::Node, path: &str) -> Option<u64> {
    let text = n.scalar_text().unwrap_or_default().replace(' ', "");
    match parse_bytes(&text) {
        Ok(b) => Some(b),
        Err(e) => {
            cx.err(n, path, e.to_string());
            None
        }
    }
}

/// Microseconds, as an integer or (SOL001's target_performance_parameters are strings) a string of one.
fn micros(cx: &mut Reader, n: &yaml::Node, path: &str) -> Option<Duration> {
    const MAX_US: i64 = 4_194_304_000;
    let us = match &n.val {
        Val::Str(s) => match s.trim().parse::<i64>() {
            Ok(us) if (0..=MAX_US).contains(&us) => us,
            _ => {
                cx.err(n, path, format!("`{s}` is not a whole number of microseconds in 0..={MAX_US}"));
                return None;
            }
        },
        _ => cx.int(n, path, 0, MAX_US)?,
    };
    Some(Duration::from_micros(us as u64))
}

/// TOSCA names may contain characters a cgroup name should not.
fn sanitize(name: &str) -> String {
    let s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '-' }).collect();
    let s = s.trim_start_matches(|c: char| !c.is_ascii_alphanumeric()).to_string();
    if s.is_empty() {
        "vdu".into()
    } else {
        s.chars().take(64).collect()
    }
}
