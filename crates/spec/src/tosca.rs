//! TOSCA import (study B's form): VDUs whose `capabilities.nfv_compute.properties` carry `num_cpus`,
//! `mem_size` and `cpu_allocation` with `cpu.rt_runtime_us` / `cpu.rt_period_us` become workloads.
//! Everything that has no place in a spec is listed in `unmapped` with its position, never dropped
//! silently.

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

/// VDU node types we recognize (Tacker's and ETSI SOL001's).
fn is_vdu(node_type: &str) -> bool {
    node_type.starts_with("tosca.nodes.nfv.VDU")
}

/// Imports a TOSCA NFV template. Errors only when the text is not YAML/TOSCA or a VDU's values are
/// malformed; unknown or unsupported content goes to `unmapped`.
pub fn import_tosca(text: &str, file: &str) -> Result<ToscaImport, SpecErrors> {
    let root = yaml::load(text, file, TOSCA_DOC)?;
    let mut cx = Reader::new(file, "TOSCA template");
    let mut unmapped: Vec<SpecError> = Vec::new();
    let note = |unmapped: &mut Vec<SpecError>, n: &yaml::Node, path: &str, why: &str| {
        unmapped.push(SpecError { file: file.into(), line: n.line, column: n.col, path: path.into(), reason: why.into() })
    };
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
                            Val::Str(s) => note(&mut unmapped, k2, &join("topology_template", s), "not mapped: only node_templates are imported"),
                            _ => {}
                        }
                    }
                }
            }
            "tosca_definitions_version" | "description" | "metadata" | "imports" => {}
            other => note(&mut unmapped, k, other, "not mapped: no counterpart in an rtslice spec"),
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
    for (k, v) in nodes {
        let Some(name) = cx.string(k, "topology_template.node_templates") else { continue };
        let path = join("topology_template.node_templates", &name);
        let Val::Map(fields) = &v.val else {
            cx.err(v, &path, "a node template must be a mapping");
            continue;
        };
        let get = |key: &str| fields.iter().find(|(k, _)| matches!(&k.val, Val::Str(s) if s == key)).map(|(_, v)| v);
        let node_type = get("type").and_then(|t| match &t.val {
            Val::Str(s) => Some(s.clone()),
            _ => None,
        });
        if !node_type.as_deref().is_some_and(is_vdu) {
            note(&mut unmapped, k, &path, &format!("not mapped: node type `{}` is not a VDU", node_type.unwrap_or_default()));
            continue;
        }
        for (fk, _) in fields {
            if let Val::Str(s) = &fk.val {
                if !["type", "capabilities"].contains(&s.as_str()) {
                    note(&mut unmapped, fk, &join(&path, s), "not mapped: rtslice places CPU time only (images, networks, placement are out of scope)");
                }
            }
        }
        let props = get("capabilities")
            .and_then(|c| c.get("nfv_compute"))
            .and_then(|c| c.get("properties"));
        let ppath = join(&path, "capabilities.nfv_compute.properties");
        let Some(props) = props else {
            cx.err(v, &ppath, "missing; a VDU needs nfv_compute properties (num_cpus, cpu_allocation)");
            continue;
        };
        let mut w = Workload { name: sanitize(&name), ..Workload::default() };
        let mut vcpus: Option<u32> = None;
        let mut runtime: Option<Duration> = None;
        let mut period: Option<Duration> = None;
        let mut dedicated = false;
        if let Val::Map(pf) = &props.val {
            for (pk, pv) in pf {
                let Val::Str(key) = &pk.val else { continue };
                let kp = join(&ppath, key);
                match key.as_str() {
                    "num_cpus" => vcpus = cx.int(pv, &kp, 1, 8192).map(|x| x as u32),
                    "mem_size" => {
                        // TOSCA sizes are written `4096 MB`, `4 GB`.
                        let text = pv.scalar_text().unwrap_or_default().replace(' ', "");
                        match parse_bytes(&text) {
                            Ok(b) => w.memory = Some(b),
                            Err(e) => cx.err(pv, &kp, e.to_string()),
                        }
                    }
                    "cpu_allocation" => {
                        let Val::Map(alloc) = &pv.val else {
                            cx.err(pv, &kp, "must be a mapping");
                            continue;
                        };
                        for (ak, av) in alloc {
                            let Val::Str(akey) = &ak.val else { continue };
                            let ap = join(&kp, akey);
                            match akey.as_str() {
                                "cpu.rt_runtime_us" => runtime = micros(&mut cx, av, &ap),
                                "cpu.rt_period_us" => period = micros(&mut cx, av, &ap),
                                "cpu_affinity" => match av.scalar_text().as_deref() {
                                    Some("dedicated") => dedicated = true,
                                    Some("shared") => {}
                                    _ => note(&mut unmapped, av, &ap, "not mapped: only `dedicated` and `shared` are understood"),
                                },
                                _ => note(&mut unmapped, ak, &ap, "not mapped: no counterpart in an rtslice spec"),
                            }
                        }
                    }
                    _ => note(&mut unmapped, pk, &kp, "not mapped: no counterpart in an rtslice spec"),
                }
            }
        }
        let count = vcpus.unwrap_or(1);
        if vcpus.is_none() {
            note(&mut unmapped, props, &join(&ppath, "num_cpus"), "missing: assumed 1 CPU");
        }
        w.demand = Some(match (runtime, dedicated) {
            (Some(rt), _) => {
                if dedicated {
                    note(&mut unmapped, props, &join(&ppath, "cpu_allocation.cpu_affinity"), "ignored: a real-time reservation was given, which shares CPUs");
                }
                let p = period.unwrap_or(DEFAULT_PERIOD);
                if period.is_none() {
                    note(&mut unmapped, props, &join(&ppath, "cpu_allocation.cpu.rt_period_us"), "missing: the node's default period applies");
                }
                if rt > p {
                    cx.err(props, &join(&ppath, "cpu_allocation.cpu.rt_runtime_us"), "runtime exceeds the period");
                }
                Demand::Reservation(Reservation { runtime: rt, period, count: Some(count), cpus: None })
            }
            (None, true) => Demand::Dedicated(Dedicated { count: Some(count), cpus: None }),
            (None, false) => {
                if period.is_some() {
                    note(&mut unmapped, props, &join(&ppath, "cpu_allocation.cpu.rt_period_us"), "ignored: a period without a runtime reserves nothing");
                }
                Demand::BestEffort(BestEffort { weight: None, cap: Some(count as f64), cpus: None })
            }
        });
        spec.workloads.push(w);
    }
    if cx.error_count() > 0 {
        return Err(cx.into_errors());
    }
    // The imported spec must itself be valid; round-trip it through the parser to be sure.
    let text = crate::emit::to_yaml(&spec);
    crate::parse(&text, "<imported>")?;
    unmapped.sort_by_key(|u| (u.line, u.column));
    Ok(ToscaImport { spec, unmapped })
}

fn micros(cx: &mut Reader, n: &yaml::Node, path: &str) -> Option<Duration> {
    cx.int(n, path, 0, 4_194_304_000).map(|us| Duration::from_micros(us as u64))
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
