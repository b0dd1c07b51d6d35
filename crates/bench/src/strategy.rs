//! Isolation strategies by name (study A's WA/TA/IA…, shielding, isolcpus; study B's reservation;
//! dedicated cores), as an experiment file names them. How each one lays a block's workloads out on
//! this host's CPUs is `layout`'s job.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Strategy {
    /// No affinity, default scheduler: what a stock host does.
    None,
    /// WA: the whole workload pinned to its CPU set; the kernel places threads inside.
    Wide,
    /// TA: each thread pinned to a CPU slot of the workload's set.
    Thread,
    /// IA: only IRQ/RPS steering to the workload's last CPU, no process affinity.
    Irq,
    /// IA-WA.
    IrqWide,
    /// IA-TA.
    IrqThread,
    /// cpuset shield: other user-space tasks are kept off the workload's CPUs.
    Shield,
    /// Boot-time isolated CPUs (`isolcpus=`); skipped when the host was not booted with them.
    Isolcpus,
    /// Per-CPU runtime/period by the best mechanism the host has.
    Reservation,
    /// Exclusive cores.
    Dedicated,
    /// A reservation per vBS sized by its peak: the profile's largest execution time every period
    /// (the workload's `slo.profile`), placed by the planner.
    Peak,
    /// A reservation per vBS sized by the planner from its SLO and profile with the periodic model
    /// (the spec's `slo` + `profile` and no runtime), placed by the planner.
    Slo,
    /// The SLO-sized reservation as the starting point (and guaranteed minimum), then the node
    /// service's closed loop (`adapt:`) grows and shrinks it at run time from the CPU it uses and
    /// the misses it reports, up to the profile's peak, through admission (`closed_loop`).
    ClosedLoop,
}

pub const ALL: &[Strategy] = &[
    Strategy::None,
    Strategy::Wide,
    Strategy::Thread,
    Strategy::Irq,
    Strategy::IrqWide,
    Strategy::IrqThread,
    Strategy::Shield,
    Strategy::Isolcpus,
    Strategy::Reservation,
    Strategy::Dedicated,
    Strategy::Peak,
    Strategy::Slo,
    Strategy::ClosedLoop,
];

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::Wide => "wide",
            Strategy::Thread => "thread",
            Strategy::Irq => "irq",
            Strategy::IrqWide => "irq+wide",
            Strategy::IrqThread => "irq+thread",
            Strategy::Shield => "shield",
            Strategy::Isolcpus => "isolcpus",
            Strategy::Reservation => "reservation",
            Strategy::Dedicated => "dedicated",
            Strategy::Peak => "peak",
            Strategy::Slo => "slo",
            Strategy::ClosedLoop => "closed-loop",
        }
    }

    /// The label study A uses in its tables.
    pub fn study_label(self) -> &'static str {
        match self {
            Strategy::None => "noA",
            Strategy::Wide => "WA",
            Strategy::Thread => "TA",
            Strategy::Irq => "IA",
            Strategy::IrqWide => "IA-WA",
            Strategy::IrqThread => "IA-TA",
            Strategy::Shield => "Shield",
            Strategy::Isolcpus => "isolCPU",
            Strategy::Reservation => "Reservation",
            Strategy::Dedicated => "Dedicated",
            Strategy::Peak => "Peak-sized",
            Strategy::Slo => "SLO-sized",
            Strategy::ClosedLoop => "Closed loop",
        }
    }

    pub fn steers_irqs(self) -> bool {
        matches!(self, Strategy::Irq | Strategy::IrqWide | Strategy::IrqThread)
    }

    /// Strategies that take CPUs away from everyone else keep a housekeeping CPU for the rest.
    pub(crate) fn needs_housekeeping(self) -> bool {
        matches!(self, Strategy::Shield | Strategy::Isolcpus | Strategy::Dedicated | Strategy::Reservation)
    }

    /// Strategies that size each reservation from the workload's `slo` profile.
    pub fn sizes_from_profile(self) -> bool {
        matches!(self, Strategy::Peak | Strategy::Slo | Strategy::ClosedLoop)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase().replace(['-', '_'], "+");
        let alias = match norm.as_str() {
            "noa" | "default" => "none",
            "wa" => "wide",
            "ta" => "thread",
            "ia" => "irq",
            "ia+wa" => "irq+wide",
            "ia+ta" => "irq+thread",
            "isolcpu" => "isolcpus",
            "shielding" => "shield",
            "peak+sized" | "static" => "peak",
            "slo+sized" => "slo",
            "closed+loop" | "adaptive" => "closed-loop",
            other => other,
        };
        ALL.iter().copied().find(|x| x.name() == alias).ok_or_else(|| {
            format!(
                "unknown strategy `{s}`; known: {}",
                ALL.iter().map(|x| x.name()).collect::<Vec<_>>().join(", ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_study_aliases_parse() {
        for s in ALL {
            assert_eq!(s.name().parse::<Strategy>().unwrap(), *s);
        }
        assert_eq!("IA-TA".parse::<Strategy>().unwrap(), Strategy::IrqThread);
        assert_eq!("WA".parse::<Strategy>().unwrap(), Strategy::Wide);
        assert!("magic".parse::<Strategy>().unwrap_err().contains("irq+thread"));
    }
}
