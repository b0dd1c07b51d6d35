//! A validation experiment (YAML): study B's setting for one row of its Table 3.
//!
//! ```yaml
//! name: ld05-qp08-deadline
//! load: 0.5            # LD = λ/μ, the load on a dedicated CPU
//! bandwidth: 0.8       # Q/P
//! period: 2ms          # P
//! mechanism: deadline  # deadline | rt-group | none (no reservation: plain CFS, for comparison)
//! protocol: udp        # udp | tcp
//! requestBytes: 128
//! replyBytes: 128
//! interarrival: [200us, 500us, 1ms, 2ms, 5ms]   # mean inter-arrival periods swept
//! samples: 10000       # per point
//! quickSamples: 300    # per point with --quick
//! warmup: 100          # first replies per point not counted
//! phi: 0.99
//! compute: exponential # shape of compute amounts: exponential | constant | uniform
//! linkBandwidth: 10Mbit  # optional: tc tbf on the veth pair, the network becomes a second queue
//! seed: 1
//! ```

use std::time::Duration;

use rtslice_host::Mechanism;
use rtslice_loadgen::dist::Dist;
use rtslice_loadgen::Protocol;
use rtslice_yaml::{Node, Reader};
use serde::{Deserialize, Serialize};

use super::{Result, ValidationError};

/// The mechanisms a validation can put the server under: host's `deadline` (per-thread
/// SCHED_DEADLINE, runtime Q, deadline = period P), `rt-group` (cgroup v1 RT group throttling, the
/// server SCHED_FIFO in a cgroup with cpu.rt_runtime_us/rt_period_us) and `none` (CFS, the baseline
/// the model does not describe). HCBS is refused: the model validation was never run on it.
pub fn parse_mechanism(s: &str) -> Result<Mechanism> {
    match s.parse::<Mechanism>() {
        Ok(m @ (Mechanism::Deadline | Mechanism::RtGroup | Mechanism::None)) => Ok(m),
        _ => Err(ValidationError::Invalid(format!("mechanism `{s}` is not one of deadline, rt-group (or rt_group), none"))),
    }
}

/// How validation files, reports and result file names spell a mechanism (`rt-group`, kebab-case
/// as in the shipped files and results; host's own records say `rt_group`).
pub fn mechanism_label(m: Mechanism) -> &'static str {
    match m {
        Mechanism::Hcbs => "hcbs",
        Mechanism::Deadline => "deadline",
        Mechanism::RtGroup => "rt-group",
        Mechanism::None => "none",
    }
}

fn serialize_mechanism<S: serde::Serializer>(m: &Mechanism, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(mechanism_label(*m))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    #[default]
    Exponential,
    Constant,
    /// Uniform on [0, 2·mean] (cv = 1/√3).
    Uniform,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidationExperiment {
    pub name: String,
    pub load: f64,
    pub bandwidth: f64,
    #[serde(with = "rtslice_spec::units::serde_duration")]
    pub period: Duration,
    #[serde(serialize_with = "serialize_mechanism")]
    pub mechanism: Mechanism,
    pub protocol: Protocol,
    pub request_bytes: u32,
    pub reply_bytes: u32,
    pub interarrival: Vec<Duration>,
    pub samples: usize,
    pub quick_samples: usize,
    pub warmup: usize,
    pub phi: f64,
    pub compute: Shape,
    pub link_bandwidth_bps: Option<f64>,
    pub seed: u64,
}

impl ValidationExperiment {
    /// Reads a validation file with the located YAML reader: every problem (unknown or missing
    /// field, wrong type, bad unit, out-of-range value, unstable point) is reported at once, each
    /// at its line and column, like specs.
    pub fn parse(text: &str, file: &str) -> Result<ValidationExperiment> {
        let kind = rtslice_yaml::DocKind {
            noun: "validation file",
            empty_hint: "a validation file names `load`, `bandwidth`, `period`, `mechanism` and `interarrival`",
        };
        let root = rtslice_yaml::load(text, file, kind).map_err(ValidationError::Located)?;
        let mut r = rtslice_yaml::Reader::new(file, "validation file");
        let exp = decode(&mut r, &root);
        r.finish(exp).map_err(ValidationError::Located)
    }

    /// Q, rounded to whole microseconds (cgroup v1 takes µs).
    pub fn runtime(&self) -> Duration {
        Duration::from_micros((self.period.as_secs_f64() * self.bandwidth * 1e6).round() as u64)
    }

    /// The compute-amount distribution at a mean inter-arrival period: mean C = LD · T.
    pub fn compute_dist(&self, interarrival: Duration) -> Dist {
        let mean = interarrival.mul_f64(self.load);
        match self.compute {
            Shape::Exponential => Dist::Exponential { mean },
            Shape::Constant => Dist::Constant(mean),
            Shape::Uniform => Dist::Uniform { lo: Duration::ZERO, hi: mean * 2 },
        }
    }
}

const FIELDS: &[&str] = &[
    "name", "load", "bandwidth", "period", "mechanism", "protocol", "requestBytes", "replyBytes", "interarrival", "samples",
    "quickSamples", "warmup", "phi", "compute", "linkBandwidth", "seed",
];

fn duration(r: &mut Reader<'_>, n: &Node, path: &str) -> Option<Duration> {
    let text = r.string(n, path)?;
    match rtslice_spec::units::parse_duration(&text) {
        Ok(d) => Some(d),
        Err(e) => {
            r.err(n, path, e.to_string());
            None
        }
    }
}

fn count(r: &mut Reader<'_>, n: &Node, path: &str) -> Option<usize> {
    r.int(n, path, 0, i64::from(u32::MAX)).map(|v| v as usize)
}

/// Decodes and checks every field; `None` when anything was wrong (the reader holds why).
fn decode(r: &mut Reader<'_>, root: &Node) -> Option<ValidationExperiment> {
    let m = r.fields(root, "", FIELDS)?;
    let name = m.required(r, "name", "name the experiment (it names the result files)", |r, n, p| r.string(n, p));
    let load = m.required(r, "load", "give LD = λ/μ, e.g. `load: 0.5`", |r, n, p| {
        let v = r.float(n, p)?;
        if !(v > 0.0 && v < 1.0) {
            r.err(n, p, format!("{v} is outside (0, 1); LD = λ/μ is the load on a dedicated CPU"));
            return None;
        }
        Some((v, n))
    });
    let bandwidth = m.required(r, "bandwidth", "give Q/P, e.g. `bandwidth: 0.8`", |r, n, p| {
        let v = r.float(n, p)?;
        if !(v > 0.0 && v <= 1.0) {
            r.err(n, p, format!("Q/P = {v} is outside (0, 1]"));
            return None;
        }
        Some(v)
    });
    if let (Some((ld, at)), Some(bw)) = (load, bandwidth) {
        if ld >= bw {
            r.err(at, "load", format!("load {ld} is not below bandwidth {bw}: the server queue would be unstable (λ ≥ μQ/P) at every point"));
        }
    }
    let period = m.required(r, "period", "give the reservation period P, e.g. `period: 2ms`", duration);
    let mechanism = m.required(r, "mechanism", "give deadline, rt-group or none", |r, n, p| {
        let text = r.string(n, p)?;
        match parse_mechanism(&text) {
            Ok(m) => Some(m),
            Err(e) => {
                r.err(n, p, e.to_string());
                None
            }
        }
    });
    let protocol = m
        .optional(r, "protocol", |r, n, p| r.one_of(n, p, &["udp", "tcp"]))
        .map(|s| if s == "tcp" { Protocol::Tcp } else { Protocol::Udp })
        .unwrap_or_default();
    let bytes = |r: &mut Reader<'_>, n: &Node, p: &str| r.int(n, p, 0, i64::from(u32::MAX)).map(|v| v as u32);
    let request_bytes = m.optional(r, "requestBytes", bytes).unwrap_or(128);
    let reply_bytes = m.optional(r, "replyBytes", bytes).unwrap_or(128);
    let interarrival = m.required(r, "interarrival", "list the mean inter-arrival periods to sweep, e.g. [500us, 1ms]", |r, n, p| {
        let items = r.seq(n, p, "durations")?;
        if items.is_empty() {
            r.err(n, p, "give at least one positive mean inter-arrival period, e.g. [500us, 1ms]");
            return None;
        }
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = rtslice_yaml::index(p, i);
            match duration(r, item, &at) {
                Some(d) if d.is_zero() => r.err(item, &at, "must be positive"),
                Some(d) => out.push((d, item)),
                None => {}
            }
        }
        (out.len() == items.len()).then_some(out)
    });
    let samples = m.optional(r, "samples", count).unwrap_or(10_000);
    let quick_samples = m.optional(r, "quickSamples", count).unwrap_or(300);
    if samples == 0 || quick_samples == 0 {
        r.err(m.node(), "samples", "samples and quickSamples must be positive");
    }
    let warmup = m.optional(r, "warmup", count).unwrap_or(100);
    let phi = m
        .optional(r, "phi", |r, n, p| {
            let v = r.float(n, p)?;
            if !(v > 0.0 && v < 1.0) {
                r.err(n, p, format!("{v} is outside (0, 1)"));
                return None;
            }
            Some(v)
        })
        .unwrap_or(0.99);
    let compute = m
        .optional(r, "compute", |r, n, p| r.one_of(n, p, &["exponential", "constant", "uniform"]))
        .map(|s| match s.as_str() {
            "constant" => Shape::Constant,
            "uniform" => Shape::Uniform,
            _ => Shape::Exponential,
        })
        .unwrap_or_default();
    let link_bandwidth_bps = m.optional(r, "linkBandwidth", |r, n, p| {
        let text = r.string(n, p)?;
        match rtslice_spec::units::parse_bitrate(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                r.err(n, p, e.to_string());
                None
            }
        }
    });
    let seed = m.optional(r, "seed", |r, n, p| r.int(n, p, 0, i64::MAX).map(|v| v as u64)).unwrap_or(1);
    if let (Some(bw), Some(points)) = (link_bandwidth_bps, &interarrival) {
        let nu = bw / 8.0 / request_bytes.max(1) as f64;
        if let Some((t, at)) = points.iter().find(|(t, _)| 1.0 / t.as_secs_f64() >= nu) {
            r.err(
                at,
                "interarrival",
                format!(
                    "interarrival {t:?} sends {:.0} requests/s, more than the link carries (ν = σ/E[z] = {nu:.0}/s): \
                     the network queue would be unstable; raise linkBandwidth or lengthen the period",
                    1.0 / t.as_secs_f64()
                ),
            );
        }
    }
    Some(ValidationExperiment {
        name: name?,
        load: load?.0,
        bandwidth: bandwidth?,
        period: period?,
        mechanism: mechanism?,
        protocol,
        request_bytes,
        reply_bytes,
        interarrival: interarrival?.into_iter().map(|(d, _)| d).collect(),
        samples,
        quick_samples,
        warmup,
        phi,
        compute,
        link_bandwidth_bps,
        seed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "name: t\nload: 0.5\nbandwidth: 0.8\nperiod: 2ms\nmechanism: rt-group\ninterarrival: [500us, 1ms]\n";

    #[test]
    fn parses_with_defaults() {
        let e = ValidationExperiment::parse(GOOD, "t.yaml").unwrap();
        assert_eq!(e.runtime(), Duration::from_micros(1600));
        assert_eq!(e.mechanism, Mechanism::RtGroup);
        assert_eq!(e.samples, 10_000);
        assert_eq!(e.protocol, Protocol::Udp);
        assert_eq!(e.compute_dist(Duration::from_millis(1)).mean(), Duration::from_micros(500));
    }

    #[test]
    fn both_spellings_of_rt_group_are_accepted() {
        // `rtslice doctor` and `apply --mechanism` print rt_group; the shipped files say rt-group.
        for spelling in ["rt-group", "rt_group"] {
            let e = ValidationExperiment::parse(&GOOD.replace("rt-group", spelling), "t.yaml").unwrap();
            assert_eq!(e.mechanism, Mechanism::RtGroup, "{spelling}");
        }
    }

    #[test]
    fn refuses_bad_input_with_the_field() {
        let cases = [
            (GOOD.replace("load: 0.5", "load: 0.9"), "unstable"),
            (GOOD.replace("period: 2ms", "period: 2"), "period"),
            (GOOD.replace("rt-group", "hcbs"), "mechanism"),
            (GOOD.replace("[500us, 1ms]", "[]"), "interarrival"),
            (format!("{GOOD}colour: red\n"), "colour"),
            (format!("{GOOD}linkBandwidth: 1Mbit\n"), "link carries"),
        ];
        for (text, word) in cases {
            let e = ValidationExperiment::parse(&text, "x.yaml").unwrap_err().to_string();
            assert!(e.starts_with("x.yaml") && e.contains(word), "{e}");
        }
    }
}

#[cfg(test)]
mod located {
    /// Three mistakes, three errors, each at its line and column, in one pass.
    #[test]
    fn three_mistakes_three_located_errors() {
        let text = "name: t\nload: 1.5\nbandwidth: 0.8\nperiod: 2 fortnights\nmechanism: deadline\ninterarrival: [1ms]\ncolour: red\n";
        let e = super::ValidationExperiment::parse(text, "x.yaml").unwrap_err().to_string();
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(lines.len(), 3, "{e}");
        assert!(lines[0].starts_with("x.yaml:2:7: load:"), "{e}");
        assert!(lines[1].starts_with("x.yaml:4:9: period:"), "{e}");
        assert!(lines[2].starts_with("x.yaml:7:1: colour: unknown field"), "{e}");
    }
}

#[cfg(test)]
mod shipped {
    /// The experiment files shipped with the crate stay valid.
    #[test]
    fn shipped_experiments_parse() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/validation");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|x| x != "yaml") {
                continue; // results/
            }
            let text = std::fs::read_to_string(&path).unwrap();
            super::ValidationExperiment::parse(&text, &path.display().to_string()).unwrap();
            n += 1;
        }
        assert!(n >= 3);
    }
}
