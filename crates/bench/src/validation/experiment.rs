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

use serde::{Deserialize, Serialize};

use rtslice_loadgen::dist::Dist;
use rtslice_host::Mechanism;
use rtslice_loadgen::Protocol;

use super::{Result, ValidationError};

/// The mechanisms a validation can put the server under: host's `deadline` (per-thread
/// SCHED_DEADLINE, runtime Q, deadline = period P), `rt-group` (cgroup v1 RT group throttling, the
/// server SCHED_FIFO in a cgroup with cpu.rt_runtime_us/rt_period_us) and `none` (CFS, the baseline
/// the model does not describe). HCBS is refused: the model validation was never run on it.
pub fn parse_mechanism(s: &str) -> Result<Mechanism> {
    match s.parse::<Mechanism>() {
        Ok(m @ (Mechanism::Deadline | Mechanism::RtGroup | Mechanism::None)) => Ok(m),
        _ => Err(ValidationError::Invalid(format!("mechanism `{s}` is not one of deadline, rt-group, none"))),
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

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Raw {
    name: String,
    load: f64,
    bandwidth: f64,
    period: String,
    mechanism: String,
    #[serde(default)]
    protocol: Protocol,
    #[serde(default = "default_bytes")]
    request_bytes: u32,
    #[serde(default = "default_bytes")]
    reply_bytes: u32,
    interarrival: Vec<String>,
    #[serde(default = "default_samples")]
    samples: usize,
    #[serde(default = "default_quick")]
    quick_samples: usize,
    #[serde(default = "default_warmup")]
    warmup: usize,
    #[serde(default = "default_phi")]
    phi: f64,
    #[serde(default)]
    compute: Shape,
    #[serde(default)]
    link_bandwidth: Option<String>,
    #[serde(default = "default_seed")]
    seed: u64,
}

fn default_bytes() -> u32 {
    128
}
fn default_samples() -> usize {
    10_000
}
fn default_quick() -> usize {
    300
}
fn default_warmup() -> usize {
    100
}
fn default_phi() -> f64 {
    0.99
}
fn default_seed() -> u64 {
    1
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
    pub fn parse(text: &str, file: &str) -> Result<ValidationExperiment> {
        let err = |reason: String| ValidationError::File { file: file.to_string(), reason };
        let raw: Raw = serde_yaml_ng::from_str(text).map_err(|e| err(e.to_string()))?;
        let dur = |field: &str, v: &str| {
            rtslice_spec::units::parse_duration(v).map_err(|e| err(format!("{field}: {e}")))
        };
        let period = dur("period", &raw.period)?;
        let mechanism = parse_mechanism(&raw.mechanism).map_err(|e| err(e.to_string()))?;
        let interarrival = raw.interarrival.iter().map(|v| dur("interarrival", v)).collect::<Result<Vec<_>>>()?;
        if interarrival.is_empty() || interarrival.iter().any(|d| d.is_zero()) {
            return Err(err("interarrival: give at least one positive mean inter-arrival period, e.g. [500us, 1ms]".into()));
        }
        if !(raw.load > 0.0 && raw.load < 1.0) {
            return Err(err(format!("load: {} is outside (0, 1); LD = λ/μ is the load on a dedicated CPU", raw.load)));
        }
        if !(raw.bandwidth > 0.0 && raw.bandwidth <= 1.0) {
            return Err(err(format!("bandwidth: Q/P = {} is outside (0, 1]", raw.bandwidth)));
        }
        if raw.load >= raw.bandwidth {
            return Err(err(format!(
                "load {} is not below bandwidth {}: the server queue would be unstable (λ ≥ μQ/P) at every point",
                raw.load, raw.bandwidth
            )));
        }
        if !(raw.phi > 0.0 && raw.phi < 1.0) {
            return Err(err(format!("phi: {} is outside (0, 1)", raw.phi)));
        }
        if raw.samples == 0 || raw.quick_samples == 0 {
            return Err(err("samples and quickSamples must be positive".into()));
        }
        let link_bandwidth_bps = match &raw.link_bandwidth {
            None => None,
            Some(v) => Some(rtslice_spec::units::parse_bitrate(v).map_err(|e| err(format!("linkBandwidth: {e}")))?),
        };
        if let Some(bw) = link_bandwidth_bps {
            let nu = bw / 8.0 / raw.request_bytes.max(1) as f64;
            if let Some(t) = interarrival.iter().find(|t| 1.0 / t.as_secs_f64() >= nu) {
                return Err(err(format!(
                    "interarrival {t:?} sends {:.0} requests/s, more than the link carries (ν = σ/E[z] = {nu:.0}/s): \
                     the network queue would be unstable; raise linkBandwidth or lengthen the period",
                    1.0 / t.as_secs_f64()
                )));
            }
        }
        Ok(ValidationExperiment {
            name: raw.name,
            load: raw.load,
            bandwidth: raw.bandwidth,
            period,
            mechanism,
            protocol: raw.protocol,
            request_bytes: raw.request_bytes,
            reply_bytes: raw.reply_bytes,
            interarrival,
            samples: raw.samples,
            quick_samples: raw.quick_samples,
            warmup: raw.warmup,
            phi: raw.phi,
            compute: raw.compute,
            link_bandwidth_bps,
            seed: raw.seed,
        })
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
