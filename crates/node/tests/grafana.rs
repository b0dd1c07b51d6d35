//! docs/grafana/rtslice.json is built on the daemon's metrics: every PromQL expression in it (panel
//! targets and template variables) names only families the daemon's `/metrics` exposes, with the
//! series suffixes their types give (`_total` of counters, `_bucket`/`_count`/`_sum` of histograms),
//! and each panel's expressions use at least one of them. No root needed: the family descriptors
//! are written even before any workload is followed.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

/// The series names `/metrics` can hold, from its `# TYPE` lines.
fn exposed_series() -> BTreeSet<String> {
    let dir = tempfile::tempdir().unwrap();
    let opts = rtslice_node::TelemetryOptions { trace: false, ..Default::default() };
    let t = rtslice_node::Telemetry::start(&opts, &dir.path().join("api.sock")).expect("telemetry starts");
    // One operation counted, so the daemon's own family has a series too.
    t.count_operation("deploy", 201);
    let text = t.encode();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut it = rest.split_whitespace();
        let (name, kind) = (it.next().unwrap(), it.next().unwrap());
        match kind {
            "counter" => {
                out.insert(format!("{name}_total"));
            }
            "histogram" => {
                for s in ["_bucket", "_count", "_sum"] {
                    out.insert(format!("{name}{s}"));
                }
            }
            _ => {
                out.insert(name.to_string());
            }
        }
    }
    out
}

/// Every `expr` / `query` string in the dashboard, with where it is.
fn expressions(v: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let here = match m.get("title").and_then(Value::as_str) {
                    Some(t) => format!("{at}/{t}"),
                    None => at.to_string(),
                };
                match (k.as_str(), x) {
                    ("expr" | "definition", Value::String(s)) => out.push((here, s.clone())),
                    ("query", Value::String(s)) if s.contains("rtslice_") => out.push((here, s.clone())),
                    _ => expressions(x, &here, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| expressions(x, at, out)),
        _ => {}
    }
}

#[test]
fn every_grafana_expression_names_only_families_the_daemon_exposes() {
    let exposed = exposed_series();
    assert!(exposed.contains("rtslice_wakeup_latency_seconds_bucket") && exposed.contains("rtslice_operations_total"), "{exposed:?}");
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/grafana/rtslice.json");
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("docs/grafana/rtslice.json")).expect("valid JSON");
    let mut exprs = Vec::new();
    expressions(&dash, "", &mut exprs);
    let panels = dash["panels"].as_array().unwrap().iter().filter(|p| p["type"] != "row").count();
    assert!(panels >= 15 && exprs.len() >= panels, "{panels} panels, {} expressions", exprs.len());
    let mut used = BTreeSet::new();
    let mut bad = Vec::new();
    for (at, e) in &exprs {
        let names: Vec<&str> = e
            .match_indices("rtslice_")
            .map(|(i, _)| {
                let rest = &e[i..];
                let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
                &rest[..end]
            })
            .collect();
        if names.is_empty() {
            bad.push(format!("{at}: {e}: names no rtslice family"));
        }
        for n in names {
            if exposed.contains(n) {
                used.insert(n.to_string());
            } else {
                bad.push(format!("{at}: {e}: {n} is not exposed"));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}\nexposed: {exposed:#?}");
    // The families all appear on the dashboard.
    for f in [
        "rtslice_wakeup_latency_seconds_bucket",
        "rtslice_preemption_latency_seconds_bucket",
        "rtslice_deadline_misses_total",
        "rtslice_ttis_total",
        "rtslice_throughput_bits_total",
        "rtslice_throttled_total",
        "rtslice_cpu_reserved_ratio",
        "rtslice_reservation_used_seconds_total",
        "rtslice_tracer_lost_events_total",
        "rtslice_operations_total",
    ] {
        assert!(used.contains(f), "{f} is on no panel");
    }
}
