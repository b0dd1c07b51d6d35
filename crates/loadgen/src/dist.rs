//! Distributions of inter-arrival times and compute amounts: `exp:1ms`, `const:500us`,
//! `uniform:100us:1ms`.

use std::str::FromStr;
use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution, Exp};
use rtslice_spec::units::{format_duration, parse_duration};

use crate::{LoadgenError, Result};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dist {
    /// Exponential with this mean (Poisson arrivals, M/M/1 service): cv = 1.
    Exponential { mean: Duration },
    /// Always this value: cv = 0.
    Constant(Duration),
    /// Uniform between `lo` and `hi`.
    Uniform { lo: Duration, hi: Duration },
}

impl Dist {
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        match *self {
            Dist::Exponential { mean } => {
                if mean.is_zero() {
                    return Duration::ZERO;
                }
                let exp = Exp::new(1.0 / mean.as_secs_f64()).expect("positive rate");
                Duration::from_secs_f64(exp.sample(rng))
            }
            Dist::Constant(d) => d,
            Dist::Uniform { lo, hi } => {
                Duration::from_secs_f64(rng.random_range(lo.as_secs_f64()..=hi.as_secs_f64()))
            }
        }
    }

    pub fn mean(&self) -> Duration {
        match *self {
            Dist::Exponential { mean } => mean,
            Dist::Constant(d) => d,
            Dist::Uniform { lo, hi } => (lo + hi) / 2,
        }
    }

    /// Coefficient of variation (standard deviation / mean), what the M/G/1 extension takes.
    pub fn cv(&self) -> f64 {
        match *self {
            Dist::Exponential { .. } => 1.0,
            Dist::Constant(_) => 0.0,
            Dist::Uniform { lo, hi } => {
                let (lo, hi) = (lo.as_secs_f64(), hi.as_secs_f64());
                if lo + hi == 0.0 {
                    0.0
                } else {
                    (hi - lo) / (3f64.sqrt() * (hi + lo))
                }
            }
        }
    }

    /// The same shape scaled to a new mean (the validation sweep keeps the shape, moves the mean).
    pub fn with_mean(&self, mean: Duration) -> Dist {
        match *self {
            Dist::Exponential { .. } => Dist::Exponential { mean },
            Dist::Constant(_) => Dist::Constant(mean),
            Dist::Uniform { lo, hi } => {
                let old = self.mean().as_secs_f64();
                if old == 0.0 {
                    return Dist::Constant(mean);
                }
                let k = mean.as_secs_f64() / old;
                Dist::Uniform { lo: lo.mul_f64(k), hi: hi.mul_f64(k) }
            }
        }
    }
}

impl FromStr for Dist {
    type Err = LoadgenError;
    /// `exp:1ms` (or `exponential:1ms`), `const:500us`, `uniform:100us:1ms`; a bare duration is constant.
    fn from_str(s: &str) -> Result<Dist> {
        let bad = |why: String| {
            LoadgenError::Invalid(format!(
                "distribution `{s}`: {why}; write `exp:1ms`, `const:500us` or `uniform:100us:1ms`"
            ))
        };
        let dur = |t: &str| parse_duration(t).map_err(|e| bad(e.to_string()));
        let parts: Vec<&str> = s.trim().split(':').collect();
        match parts.as_slice() {
            [d] => Ok(Dist::Constant(dur(d)?)),
            ["exp" | "exponential", m] => Ok(Dist::Exponential { mean: dur(m)? }),
            ["const" | "constant", d] => Ok(Dist::Constant(dur(d)?)),
            ["uniform", lo, hi] => {
                let (lo, hi) = (dur(lo)?, dur(hi)?);
                if lo > hi {
                    return Err(bad("the lower end is above the upper end".into()));
                }
                Ok(Dist::Uniform { lo, hi })
            }
            _ => Err(bad("unknown form".into())),
        }
    }
}

impl std::fmt::Display for Dist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Dist::Exponential { mean } => write!(f, "exp:{}", format_duration(mean)),
            Dist::Constant(d) => write!(f, "const:{}", format_duration(d)),
            Dist::Uniform { lo, hi } => write!(f, "uniform:{}:{}", format_duration(lo), format_duration(hi)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    #[test]
    fn parses_and_prints() {
        for s in ["exp:1ms", "const:500us", "uniform:100us:1ms"] {
            assert_eq!(s.parse::<Dist>().unwrap().to_string(), s);
        }
        assert_eq!("2ms".parse::<Dist>().unwrap(), Dist::Constant(Duration::from_millis(2)));
        assert!("gauss:1ms".parse::<Dist>().is_err());
        assert!("uniform:2ms:1ms".parse::<Dist>().is_err());
        assert!("exp:1".parse::<Dist>().unwrap_err().to_string().contains("no unit"));
    }

    #[test]
    fn sample_means_and_cv() {
        let mut rng = StdRng::seed_from_u64(7);
        for d in [
            Dist::Exponential { mean: Duration::from_micros(500) },
            Dist::Uniform { lo: Duration::from_micros(100), hi: Duration::from_micros(900) },
        ] {
            let xs: Vec<f64> = (0..200_000).map(|_| d.sample(&mut rng).as_secs_f64()).collect();
            let m = xs.iter().sum::<f64>() / xs.len() as f64;
            let sd = (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / xs.len() as f64).sqrt();
            assert!((m / d.mean().as_secs_f64() - 1.0).abs() < 0.01, "{d}: mean {m}");
            assert!((sd / m - d.cv()).abs() < 0.02, "{d}: cv {}", sd / m);
        }
        let scaled = Dist::Uniform { lo: Duration::from_micros(100), hi: Duration::from_micros(300) }
            .with_mean(Duration::from_micros(400));
        assert_eq!(scaled, Dist::Uniform { lo: Duration::from_micros(200), hi: Duration::from_micros(600) });
    }
}
