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
        }
    }

    pub fn steers_irqs(self) -> bool {
        matches!(self, Strategy::Irq | Strategy::IrqWide | Strategy::IrqThread)
    }

    /// Strategies that take CPUs away from everyone else keep a housekeeping CPU for the rest.
    pub(crate) fn needs_housekeeping(self) -> bool {
        matches!(self, Strategy::Shield | Strategy::Isolcpus | Strategy::Dedicated | Strategy::Reservation)
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
