//! The kernel's bandwidth admission in the planner's fixed point (each runtime/period rounded up to
//! a part per billion of a CPU, the cap to the nearest one): `rtslice plan` refuses with these
//! checks, and the host checks a setup with the same ones before it touches anything, so a plan the
//! planner admitted is never refused by the host over a rounding, nor the reverse.

use std::time::Duration;

use crate::{bw_f64, bw_from_f64, bw_of, Bw};

/// A sum of bandwidths above what is offered, in CPUs (1.0 = one whole CPU).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Exceeded {
    /// What the parts need together.
    pub need: f64,
    /// The cap times the CPUs.
    pub offered: f64,
}

/// A part: (runtime, period).
pub type Part = (Duration, Duration);

fn offered(cap: f64, cpus: u32) -> Bw {
    bw_from_f64(cap.clamp(0.0, 1.0)).saturating_mul(Bw::from(cpus))
}

/// Whether `parts` fit in `cap` of each of `cpus` CPUs.
pub fn fits(parts: impl IntoIterator<Item = Part>, cap: f64, cpus: u32) -> Result<(), Exceeded> {
    let need = parts.into_iter().map(|(r, p)| bw_of(r, p)).fold(0, Bw::saturating_add);
    let offered = offered(cap, cpus);
    if need <= offered {
        Ok(())
    } else {
        Err(Exceeded { need: bw_f64(need), offered: bw_f64(offered) })
    }
}

/// What `parts` take together, in CPUs.
pub fn sum(parts: impl IntoIterator<Item = Part>) -> f64 {
    bw_f64(parts.into_iter().map(|(r, p)| bw_of(r, p)).fold(0, Bw::saturating_add))
}

/// The first of `items` with which the running sum, after what `held` takes, no longer fits in
/// `cap` of one CPU (a global account, as RT groups' and HCBS's root are), with the sum there.
pub fn first_exceeding(held: impl IntoIterator<Item = Part>, items: impl IntoIterator<Item = Part>, cap: f64) -> Option<(usize, Exceeded)> {
    let offered = offered(cap, 1);
    let mut sum = held.into_iter().map(|(r, p)| bw_of(r, p)).fold(0, Bw::saturating_add);
    for (i, (r, p)) in items.into_iter().enumerate() {
        sum = sum.saturating_add(bw_of(r, p));
        if sum > offered {
            return Some((i, Exceeded { need: bw_f64(sum), offered: bw_f64(offered) }));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(r: u64, p: u64) -> Part {
        (Duration::from_millis(r), Duration::from_millis(p))
    }

    #[test]
    fn exact_sums_at_the_cap_fit_and_one_nanosecond_more_does_not() {
        assert_eq!(fits([ms(50, 100), ms(45, 100)], 0.95, 1), Ok(()));
        let over = (Duration::from_nanos(45_000_001), Duration::from_millis(100));
        assert!(fits([ms(50, 100), over], 0.95, 1).is_err());
        // Per CPU: 1.8 of two CPUs at 0.95 each fits, 1.91 does not.
        assert_eq!(fits([ms(90, 100), ms(90, 100)], 0.95, 2), Ok(()));
        assert_eq!(fits([ms(191, 100)], 0.95, 2), Err(Exceeded { need: 1.91, offered: 1.9 }));
    }

    #[test]
    fn thirds_round_up_so_three_never_fill_a_whole_cpu() {
        // The kernel could admit 3 × 1/3 at a cap of 1.0; the planner never plans the last
        // nanosecond of a CPU (each part rounded up), so it refuses: the safe side.
        assert!(fits([ms(1, 3), ms(1, 3), ms(1, 3)], 1.0, 1).is_err());
    }

    #[test]
    fn first_exceeding_names_the_item_that_crosses() {
        let held = [ms(20, 100)];
        assert_eq!(first_exceeding(held, [ms(30, 100), ms(40, 100)], 0.95), None);
        let (i, x) = first_exceeding(held, [ms(30, 100), ms(40, 100), ms(6, 100), ms(1, 100)], 0.95).unwrap();
        assert_eq!((i, x.need, x.offered), (2, 0.96, 0.95));
    }
}
