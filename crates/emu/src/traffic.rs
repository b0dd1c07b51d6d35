//! Time-varying traffic: how much of the peak load a vBS is offered in each TTI.
//!
//! A real cell is not at its busy-hour load all day, and a density decision made at a constant
//! peak wastes what the quiet hours leave, while one made at the mean misses deadlines in the busy
//! hour. A [`Pattern`] gives every TTI a fraction of the peak load (1.0 = the peak `--load`,
//! `--prb`/`--traffic`); the runner turns fractions into scheduled PRBs through the calibration, so
//! the fraction is of the predicted CPU demand, not of the PRBs (a TTI's FFTs cost the same however
//! few PRBs are scheduled).
//!
//! Pure and deterministic: the same pattern and seed give the same trace on every host.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ldpc::Rng;

/// Number of load levels a busy-hour profile is quantised to: each level is one PHY set-up (its
/// own scheduled PRBs and synthesised radio), built before the first TTI, so they are few.
pub const BUSY_HOUR_LEVELS: usize = 8;

/// TTIs of a burst trace kept in memory; longer runs repeat it (2^22 TTIs: 70 min at 1 ms).
pub const BURST_TRACE_TTIS: u64 = 1 << 22;

/// Hour-by-hour shape of a day's cellular traffic, 0 at the night trough (04:00) and 1 at the
/// evening peak (20:00): a stylised version of the diurnal curves published for mobile networks
/// (a trough before dawn, a rise through the morning, a plateau over the day and an evening peak).
/// It is a shape, not a data set; the level between trough and peak is `low`.
pub const DAY_SHAPE: [f64; 24] = [
    0.45, 0.30, 0.18, 0.08, 0.00, 0.03, 0.12, 0.30, 0.50, 0.62, 0.70, 0.75, //
    0.78, 0.76, 0.74, 0.75, 0.78, 0.82, 0.88, 0.95, 1.00, 0.95, 0.80, 0.62,
];

/// How the offered load varies over time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "pattern", rename_all = "kebab-case")]
pub enum Pattern {
    /// Every TTI at the peak load (the emulator's behaviour before patterns existed).
    #[default]
    Constant,
    /// A day compressed into `cycle`: [`DAY_SHAPE`] scaled between `low` and the peak, linear
    /// between hours; the cycle starts at midnight.
    BusyHour {
        #[serde(with = "secs")]
        cycle: Duration,
        low: f64,
    },
    /// On/off: bursts at the peak load, `duty` of the time on average, each lasting `burst` on
    /// average (geometric lengths, a two-state Markov chain per TTI); `low` between bursts.
    Bursts {
        duty: f64,
        #[serde(with = "secs")]
        burst: Duration,
        low: f64,
    },
}

mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_secs_f64(f64::deserialize(d)?))
    }
}

impl Pattern {
    /// The pattern's parameters are usable for TTIs of `tti`; the message says what to change.
    pub fn validate(&self, tti: Duration) -> Result<(), String> {
        let low_ok = |low: f64| {
            if (0.0..=1.0).contains(&low) {
                Ok(())
            } else {
                Err(format!("the low level {low} must be a share of the peak load within [0, 1] (e.g. low=0.2)"))
            }
        };
        match *self {
            Pattern::Constant => Ok(()),
            Pattern::BusyHour { cycle, low } => {
                low_ok(low)?;
                if cycle < tti * 24 {
                    return Err(format!(
                        "a busy-hour cycle of {cycle:?} is shorter than 24 TTIs ({:?}); give a cycle of seconds (e.g. cycle=60s)",
                        tti * 24
                    ));
                }
                Ok(())
            }
            Pattern::Bursts { duty, burst, low } => {
                low_ok(low)?;
                if !(duty > 0.0 && duty < 1.0) {
                    return Err(format!("a burst duty cycle of {duty} must be within (0, 1) (e.g. duty=0.3); use constant for always on"));
                }
                if burst < tti {
                    return Err(format!(
                        "a mean burst of {burst:?} is shorter than one TTI ({tti:?})"
                    ));
                }
                // The mean gap between bursts, burst·(1−duty)/duty, must also be at least a TTI.
                if burst.as_secs_f64() * (1.0 - duty) / duty < tti.as_secs_f64() {
                    return Err(format!(
                        "duty {duty} with {burst:?} bursts leaves gaps shorter than one TTI; lower the duty or lengthen the bursts"
                    ));
                }
                Ok(())
            }
        }
    }

    /// The load levels (fractions of the peak, ascending, the last 1.0) this pattern uses.
    pub fn levels(&self) -> Vec<f64> {
        match *self {
            Pattern::Constant => vec![1.0],
            Pattern::Bursts { low, .. } if low >= 1.0 => vec![1.0],
            Pattern::Bursts { low, .. } => vec![low, 1.0],
            Pattern::BusyHour { low, .. } if low >= 1.0 => vec![1.0],
            Pattern::BusyHour { low, .. } => {
                // The top level is exactly the peak (1.0), not a sum that rounds just below it.
                let last = BUSY_HOUR_LEVELS - 1;
                (0..BUSY_HOUR_LEVELS).map(|k| if k == last { 1.0 } else { low + (1.0 - low) * k as f64 / last as f64 }).collect()
            }
        }
    }

    /// The unquantised fraction of the peak a busy-hour profile asks for at time `t` into the run.
    pub fn busy_hour_fraction(cycle: Duration, low: f64, t: Duration) -> f64 {
        let cycle_s = cycle.as_secs_f64().max(1e-9);
        let hour = (t.as_secs_f64() / cycle_s).fract() * 24.0;
        let h0 = hour.floor() as usize % 24;
        let h1 = (h0 + 1) % 24;
        let w = hour - hour.floor();
        let shape = DAY_SHAPE[h0] * (1.0 - w) + DAY_SHAPE[h1] * w;
        low + (1.0 - low) * shape
    }
}

/// A pattern laid out over a run's TTIs: the level index of every TTI.
#[derive(Debug, Clone)]
pub struct Trace {
    pattern: Pattern,
    tti: Duration,
    levels: Vec<f64>,
    /// Bursts only: the level of each TTI, repeated beyond its length.
    table: Vec<u8>,
}

impl Trace {
    /// The trace of `pattern` for `ttis` TTIs of length `tti`, bursts drawn from `seed`.
    pub fn new(pattern: Pattern, tti: Duration, ttis: u64, seed: u64) -> Result<Trace, String> {
        pattern.validate(tti)?;
        let levels = pattern.levels();
        let table = match pattern {
            Pattern::Bursts { duty, burst, .. } if levels.len() == 2 => {
                let len = ttis.clamp(1, BURST_TRACE_TTIS) as usize;
                let on_len = burst.as_secs_f64() / tti.as_secs_f64();
                let off_len = on_len * (1.0 - duty) / duty;
                let (p_end, p_start) = (1.0 / on_len, 1.0 / off_len);
                let mut rng = Rng::new(seed);
                // Start in the chain's stationary distribution, so a short run has the stated duty.
                let mut on = rng.unit() <= duty;
                (0..len)
                    .map(|_| {
                        let level = on as u8;
                        let u = rng.unit();
                        on = if on { u > p_end } else { u <= p_start };
                        level
                    })
                    .collect()
            }
            _ => vec![],
        };
        Ok(Trace {
            pattern,
            tti,
            levels,
            table,
        })
    }

    pub fn pattern(&self) -> Pattern {
        self.pattern
    }

    /// The load levels, as fractions of the peak (index = what [`Trace::level`] returns).
    pub fn levels(&self) -> &[f64] {
        &self.levels
    }

    /// The level index of TTI `n` (0-based).
    pub fn level(&self, n: u64) -> usize {
        match self.pattern {
            _ if self.levels.len() == 1 => 0,
            Pattern::Constant => 0,
            Pattern::Bursts { .. } => self.table[(n % self.table.len() as u64) as usize] as usize,
            Pattern::BusyHour { cycle, low } => {
                // The TTI's load is the profile at the middle of its air time, rounded to a level.
                let t = self.tti.mul_f64(n as f64 + 0.5);
                let f = Pattern::busy_hour_fraction(cycle, low, t);
                let steps = (self.levels.len() - 1) as f64;
                (((f - low) / (1.0 - low)) * steps)
                    .round()
                    .clamp(0.0, steps) as usize
            }
        }
    }

    /// The fraction of the peak offered in TTI `n`.
    pub fn fraction(&self, n: u64) -> f64 {
        self.levels[self.level(n)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    fn mean_and_peak(t: &Trace, ttis: u64) -> (f64, f64, f64) {
        let fr: Vec<f64> = (0..ttis).map(|n| t.fraction(n)).collect();
        let mean = fr.iter().sum::<f64>() / ttis as f64;
        let peak = fr.iter().copied().fold(0.0, f64::max);
        let min = fr.iter().copied().fold(1.0, f64::min);
        (mean, peak, min)
    }

    #[test]
    fn constant_is_the_peak_every_tti() {
        let t = Trace::new(Pattern::Constant, MS, 1000, 1).unwrap();
        assert_eq!(mean_and_peak(&t, 1000), (1.0, 1.0, 1.0));
    }

    /// Over one whole cycle the trace's mean is the day shape's mean scaled between low and the
    /// peak (the linear interpolation of a periodic table has the table's mean), its peak is the
    /// peak load and its trough the low level; quantisation to 8 levels moves the mean by at most
    /// half a step and in practice by far less.
    #[test]
    fn busy_hour_cycle_has_the_stated_mean_peak_and_trough() {
        let low = 0.25;
        let p = Pattern::BusyHour {
            cycle: Duration::from_secs(24),
            low,
        };
        let t = Trace::new(p, MS, 24_000, 7).unwrap();
        let (mean, peak, min) = mean_and_peak(&t, 24_000);
        let shape_mean = DAY_SHAPE.iter().sum::<f64>() / 24.0;
        let want = low + (1.0 - low) * shape_mean;
        assert!((mean - want).abs() < 0.01, "mean {mean} vs {want}");
        assert_eq!(peak, 1.0);
        assert_eq!(min, low);
        // Quantised, the trace stays within half a level of the continuous profile in every TTI.
        let half_step = (1.0 - low) / (BUSY_HOUR_LEVELS - 1) as f64 / 2.0 + 1e-12;
        for n in (0..24_000).step_by(37) {
            let exact = Pattern::busy_hour_fraction(
                Duration::from_secs(24),
                low,
                MS.mul_f64(n as f64 + 0.5),
            );
            assert!((t.fraction(n) - exact).abs() <= half_step, "TTI {n}");
        }
        // The evening peak is at 20:00 of the compressed day, the trough at 04:00.
        assert_eq!(t.fraction(20_000), 1.0);
        assert_eq!(t.fraction(4_000), low);
    }

    #[test]
    fn bursts_have_the_stated_duty_cycle_and_mean_length() {
        let p = Pattern::Bursts {
            duty: 0.3,
            burst: Duration::from_millis(20),
            low: 0.1,
        };
        let ttis = 1_000_000;
        let t = Trace::new(p, MS, ttis, 42).unwrap();
        let on: Vec<bool> = (0..ttis).map(|n| t.level(n) == 1).collect();
        let duty = on.iter().filter(|x| **x).count() as f64 / ttis as f64;
        assert!((duty - 0.3).abs() < 0.01, "duty {duty}");
        let bursts = on.windows(2).filter(|w| !w[0] && w[1]).count() as f64;
        let mean_len = on.iter().filter(|x| **x).count() as f64 / bursts;
        assert!((mean_len - 20.0).abs() < 1.0, "mean burst {mean_len} TTIs");
        let (mean, peak, min) = mean_and_peak(&t, ttis);
        assert!((mean - (0.1 + 0.9 * duty)).abs() < 1e-9);
        assert_eq!((peak, min), (1.0, 0.1));
    }

    #[test]
    fn bursts_depend_on_the_seed_and_only_on_it() {
        let p = Pattern::Bursts {
            duty: 0.5,
            burst: Duration::from_millis(5),
            low: 0.0,
        };
        let a = Trace::new(p, MS, 10_000, 1).unwrap();
        let b = Trace::new(p, MS, 10_000, 1).unwrap();
        let c = Trace::new(p, MS, 10_000, 2).unwrap();
        let la: Vec<usize> = (0..10_000).map(|n| a.level(n)).collect();
        assert_eq!(la, (0..10_000).map(|n| b.level(n)).collect::<Vec<_>>());
        assert_ne!(la, (0..10_000).map(|n| c.level(n)).collect::<Vec<_>>());
    }

    #[test]
    fn invalid_parameters_say_what_to_change() {
        let bad = Pattern::Bursts {
            duty: 1.0,
            burst: MS * 10,
            low: 0.1,
        }
        .validate(MS)
        .unwrap_err();
        assert!(bad.contains("constant"), "{bad}");
        let bad = Pattern::BusyHour {
            cycle: MS * 10,
            low: 0.2,
        }
        .validate(MS)
        .unwrap_err();
        assert!(bad.contains("cycle=60s"), "{bad}");
        let bad = Pattern::BusyHour {
            cycle: Duration::from_secs(60),
            low: 1.5,
        }
        .validate(MS)
        .unwrap_err();
        assert!(bad.contains("[0, 1]"), "{bad}");
        assert!(Pattern::Bursts {
            duty: 0.99,
            burst: MS,
            low: 0.0
        }
        .validate(MS)
        .is_err());
    }

    proptest! {
        /// Every TTI's fraction lies between low and the peak and is one of the pattern's levels.
        #[test]
        fn fractions_stay_within_low_and_peak(
            low in 0.0f64..1.0, duty in 0.05f64..0.9, burst_ms in 2u64..50, cycle_s in 1u64..100, seed in any::<u64>(), busy in any::<bool>()
        ) {
            let p = if busy {
                Pattern::BusyHour { cycle: Duration::from_secs(cycle_s), low }
            } else {
                Pattern::Bursts { duty, burst: MS * burst_ms as u32, low }
            };
            prop_assume!(p.validate(MS).is_ok());
            let t = Trace::new(p, MS, 5_000, seed).unwrap();
            let levels = p.levels();
            prop_assert_eq!(*levels.last().unwrap(), 1.0);
            for n in 0..5_000u64 {
                let f = t.fraction(n);
                prop_assert!(f >= low - 1e-12 && f <= 1.0 + 1e-12);
                prop_assert!(levels.contains(&f));
            }
        }
    }
}
