//! A workload's service-level objective (`slo:`) and the demand profile it is sized from
//! (`profile:` inline, or the name of a file `rtslice profile` wrote, read through [`SpecFiles`]).

use std::time::Duration;

use rtslice_yaml::{self as yaml, index, join, DocKind, Reader, Val};

use super::values::SpecValues;
use crate::error::SpecErrors;
use crate::types::*;
use crate::units::format_duration;

const SLO_FIELDS: &[&str] = &["deadlineMissRatio", "p99Response"];

/// `slo: { deadlineMissRatio: 1e-3 }` or `slo: { p99Response: 2ms }`: exactly one target.
pub(super) fn slo(cx: &mut Reader, n: &yaml::Node, path: &str) -> Option<Slo> {
    let f = cx.fields(n, path, SLO_FIELDS)?;
    let given: Vec<&str> = SLO_FIELDS.iter().copied().filter(|k| f.has(k)).collect();
    match given.as_slice() {
        [] => {
            cx.err(n, path, "give a target: `deadlineMissRatio: 1e-3` (a fraction of jobs) or `p99Response: 2ms`");
            None
        }
        ["deadlineMissRatio"] => {
            let v = f.get("deadlineMissRatio")?;
            let p = join(path, "deadlineMissRatio");
            let r = cx.fraction(v, &p)?;
            if !(r > 0.0 && r < 1.0) {
                cx.err(v, &p, format!("{r} is not a ratio strictly between 0 and 1 (no reservation misses nothing, and 1 asks nothing); write e.g. `1e-3` or `0.1%`"));
                return None;
            }
            Some(Slo::DeadlineMissRatio(r))
        }
        ["p99Response"] => {
            let v = f.get("p99Response")?;
            let p = join(path, "p99Response");
            let d = cx.duration(v, &p)?;
            if d.is_zero() {
                cx.err(v, &p, "a response time must be above 0 (e.g. `2ms`)");
                return None;
            }
            Some(Slo::P99Response(d))
        }
        _ => {
            cx.err(n, path, "give one target, `deadlineMissRatio` or `p99Response`, not both (the reservation is sized for one)");
            None
        }
    }
}

/// `profile:` as a mapping, or a string naming a profile file read through `files`.
pub(super) fn profile_field(cx: &mut Reader, n: &yaml::Node, path: &str, files: &dyn SpecFiles) -> Option<Profile> {
    if let Val::Str(file) = &n.val {
        let file = file.trim();
        if file.is_empty() {
            cx.err(n, path, "an empty file name; name the file `rtslice profile` wrote, or write the profile inline");
            return None;
        }
        let read = match files.read(file) {
            Ok(r) => r,
            Err(why) => {
                cx.err(n, path, format!("cannot read profile file: {why}"));
                return None;
            }
        };
        return match parse_profile(&read.text, &read.name) {
            Ok(p) => Some(p),
            Err(errors) => {
                cx.err(n, path, format!("profile file `{}` is invalid ({} error(s), listed with their place in it)", read.name, errors.len()));
                cx.absorb(errors);
                None
            }
        };
    }
    profile(cx, n, path)
}

/// A profile file's text (JSON or YAML) with located errors naming `file`.
pub(crate) fn parse_profile(text: &str, file: &str) -> Result<Profile, SpecErrors> {
    let root = yaml::load(text, file, DocKind { noun: "profile", empty_hint: "a profile has `period`, `deadline` and `execution`" })?;
    let mut cx = Reader::new(file, "profile");
    let p = profile(&mut cx, &root, "");
    cx.finish(p)
}

fn positive_duration(cx: &mut Reader, v: &yaml::Node, path: &str) -> Option<Duration> {
    let d = cx.duration(v, path)?;
    if d.is_zero() {
        cx.err(v, path, "must be above 0");
        return None;
    }
    Some(d)
}

const QUANTILES: &[&str] = &["min", "p50", "p90", "p99", "p999", "max"];

fn profile(cx: &mut Reader, n: &yaml::Node, path: &str) -> Option<Profile> {
    let f = cx.fields(n, path, &["period", "deadline", "execution", "histogram", "source"])?;
    let before = cx.error_count();
    let period = f.required(cx, "period", "how often a job is released, e.g. `1ms` (a TTI)", positive_duration);
    // Longer than the period is fine (a vBS has 3 TTIs of HARQ budget); shorter than the execution
    // time too — that is what the miss ratio then says.
    let deadline = f.required(cx, "deadline", "how long after its release a job is due, e.g. `3ms`", positive_duration);
    let execution = f.required(cx, "execution", "the CPU time per job, e.g. `{ p50: 300us, p99: 450us, max: 700us }`", |cx, v, p| {
        quantiles(cx, v, p)
    });
    let histogram = f.optional(cx, "histogram", histogram).unwrap_or_default();
    let source = f.optional(cx, "source", |cx, v, p| cx.string(v, p));
    let profile = Profile { period: period?, deadline: deadline?, execution: execution?, histogram, source };
    (cx.error_count() == before).then_some(profile)
}

fn quantiles(cx: &mut Reader, n: &yaml::Node, path: &str) -> Option<ExecutionQuantiles> {
    let f = cx.fields(n, path, QUANTILES)?;
    let before = cx.error_count();
    let mut got: Vec<(&str, &yaml::Node, Duration)> = Vec::new();
    for &k in QUANTILES {
        if let Some(v) = f.get(k) {
            if let Some(d) = positive_duration(cx, v, &join(path, k)) {
                got.push((k, v, d));
            }
        }
    }
    let max = f.required(cx, "max", "the longest execution time seen; nothing bounds the tail without it", |_, _, _| {
        got.iter().find(|g| g.0 == "max").map(|g| g.2)
    });
    // In QUANTILES order, each must be at least the one before.
    for w in got.windows(2) {
        let ((ka, _, a), (kb, vb, b)) = (w[0], w[1]);
        if b < a {
            cx.err(vb, &join(path, kb), format!("{kb} {} is below {ka} {}; quantiles cannot decrease", format_duration(b), format_duration(a)));
        }
    }
    let at = |k: &str| got.iter().find(|g| g.0 == k).map(|g| g.2);
    let q = ExecutionQuantiles { min: at("min"), p50: at("p50"), p90: at("p90"), p99: at("p99"), p999: at("p999"), max: max? };
    (cx.error_count() == before).then_some(q)
}

/// `[{ value: 310us, count: 12 }, ...]`.
fn histogram(cx: &mut Reader, n: &yaml::Node, path: &str) -> Option<Vec<HistogramBin>> {
    let items = cx.seq(n, path, "bins `{ value: 310us, count: 12 }`")?;
    let before = cx.error_count();
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ip = index(path, i);
        let Some(b) = cx.fields(item, &ip, &["value", "count"]) else { continue };
        let value = b.required(cx, "value", "the execution time of this bin, e.g. `310us`", positive_duration);
        let count = b.required(cx, "count", "how many periods needed this much", |cx, v, p| cx.int(v, p, 1, i64::MAX));
        if let (Some(value), Some(count)) = (value, count) {
            out.push(HistogramBin { value, count: count as u64 });
        }
    }
    if items.is_empty() {
        cx.err(n, path, "an empty histogram; drop the field or give measured bins");
    }
    (cx.error_count() == before).then_some(out)
}
