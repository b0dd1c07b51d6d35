//! Writing a [`Spec`] back as YAML that [`crate::parse`] reads (used by `rtslice import` and by
//! programs that generate specs). serde gives the shape; saphyr's emitter does the quoting.

use std::borrow::Cow;

use saphyr::{Mapping, Scalar, ScalarStyle, Yaml, YamlEmitter};

use crate::units::format_bytes;
use crate::Spec;

/// The spec as YAML text, ending with a newline.
pub fn to_yaml(spec: &Spec) -> String {
    let value = serde_json::to_value(spec).expect("a Spec always serializes");
    let mut out = String::new();
    let mut emitter = YamlEmitter::new(&mut out);
    emitter.dump(&convert(&value)).expect("writing to a String cannot fail");
    // The emitter starts documents with `---`; a spec file reads better without it.
    let body = out.strip_prefix("---\n").unwrap_or(&out).to_string();
    body + "\n"
}

const KEY_ORDER: &[&str] = &[
    "apiVersion", "name", "node", "flavors", "workloads", "cpus", "housekeeping", "cap", "defaultPeriod", "policy",
    "topology", "smt", "llc", "numa", "nics", "pci",
    "vcpus", "launch", "command", "flavor", "hints", "demand", "runtime", "period", "count", "memory", "isolation",
    "match", "interface", "priority", "nice", "deadline", "share", "slots", "threads", "irqs", "net", "devices",
];

fn convert(v: &serde_json::Value) -> Yaml<'static> {
    use serde_json::Value as J;
    let plain = |s: String| Yaml::Representation(Cow::Owned(s), ScalarStyle::Plain, None);
    match v {
        J::Null => plain("null".into()),
        J::Bool(b) => plain(b.to_string()),
        J::Number(n) => plain(n.to_string()),
        J::String(s) => Yaml::Value(Scalar::String(Cow::Owned(s.clone()))),
        J::Array(items) => Yaml::Sequence(items.iter().map(convert).collect()),
        J::Object(map) => {
            // serde_json's map is sorted by key; put the fields people look for first, in spec order.
            let rank = |k: &str| KEY_ORDER.iter().position(|o| *o == k).unwrap_or(KEY_ORDER.len());
            let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
            entries.sort_by_key(|(k, _)| (rank(k), (*k).clone()));
            let mut m = Mapping::new();
            for (k, v) in entries {
                let value = match (k.as_str(), v.as_u64()) {
                    // Sizes are bytes in the types (and in JSON); people read them in units.
                    ("memory", Some(bytes)) => plain(format_bytes(bytes)),
                    _ => convert(v),
                };
                m.insert(Yaml::Value(Scalar::String(Cow::Owned(k.clone()))), value);
            }
            Yaml::Mapping(m)
        }
    }
}
