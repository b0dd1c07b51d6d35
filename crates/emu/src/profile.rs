//! Thread models of the real stacks (names, counts, default classes and priorities), from
//! vran-workload-facts.md and the stacks' code: OAI LTE eNB, srsRAN 4G srsENB, OAI NR gNB.

use serde::{Deserialize, Serialize};

use crate::os::Class;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    OaiLte,
    Srsenb,
    NrGnb,
}

/// What a thread does in the emulator's task graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadRole {
    /// Wakes on the TTI clock (absolute time) and receives the uplink samples.
    Clock,
    /// Uplink front end: FFT of part of the symbols, in parallel with the clock thread.
    FrontEnd,
    /// Uplink decoding (and, where the stack does it on the same thread, downlink build).
    L1,
    /// Downlink back end: IFFT.
    DlBackEnd,
    /// Downlink build + IFFT (NR L1_tx_thread).
    L1Tx,
    /// A pool worker: whole-TTI processing (srsENB) or code-block decoding (OAI NR Tpool).
    Worker,
    /// MAC/RLC: takes delivered transport blocks and hands user-plane bytes to the tunnel.
    Stack,
    /// Sends user-plane packets over a real UDP socket (GTP-U towards the core).
    UserPlaneTx,
    /// Receives user-plane packets from the socket.
    UserPlaneRx,
    /// Control plane: wakes periodically and builds/handles a message.
    Control,
}

/// One thread of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadSpec {
    pub name: String,
    pub role: ThreadRole,
    pub class: Class,
    pub priority: i32,
    /// Control threads: wake-up period.
    pub period_ms: u64,
}

fn t(name: &str, role: ThreadRole, class: Class, priority: i32) -> ThreadSpec {
    ThreadSpec { name: name.to_string(), role, class, priority, period_ms: 0 }
}

fn ctl(name: &str, period_ms: u64) -> ThreadSpec {
    ThreadSpec { name: name.to_string(), role: ThreadRole::Control, class: Class::Other, priority: 0, period_ms }
}

/// Carrier and timing defaults of a profile.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Defaults {
    pub prb: usize,
    pub mcs: u8,
    pub antennas: usize,
    /// Processing budget in TTIs (LTE HARQ: n+4 → 3 TTIs).
    pub budget_ttis: u32,
    pub workers: usize,
    /// Default load in percent of one core when neither --load nor --prb is given.
    pub load_percent: f64,
}

impl Profile {
    pub fn parse(s: &str) -> Option<Profile> {
        match s {
            "oai-lte" | "oai" => Some(Profile::OaiLte),
            "srsenb" | "srsran" => Some(Profile::Srsenb),
            "nr-gnb" | "oai-nr" | "gnb" => Some(Profile::NrGnb),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Profile::OaiLte => "oai-lte",
            Profile::Srsenb => "srsenb",
            Profile::NrGnb => "nr-gnb",
        }
    }

    pub fn defaults(self) -> Defaults {
        match self {
            // Study A: OAI eNB, 25 PRB (5 MHz), one antenna.
            Profile::OaiLte => Defaults { prb: 25, mcs: 16, antennas: 1, budget_ttis: 3, workers: 0, load_percent: 30.0 },
            // Study C: srsENB at 10 MHz (50 PRB); pool of M−1 = 3 workers.
            Profile::Srsenb => Defaults { prb: 50, mcs: 16, antennas: 1, budget_ttis: 3, workers: 3, load_percent: 30.0 },
            // OAI gNB, 40 MHz at 30 kHz (106 PRB), 2 antennas, Tpool of 8, budget 4 slots.
            Profile::NrGnb => Defaults { prb: 106, mcs: 16, antennas: 2, budget_ttis: 4, workers: 8, load_percent: 40.0 },
        }
    }

    /// Name of pool worker `i` (None: the stack has no pool). srsENB names them `WORKER<i>`; OAI NR
    /// names its Tpool workers `Tpool<i>_<core>`, core −1 meaning floating, which is how the
    /// emulator runs them.
    pub fn pool_thread_name(self, i: usize) -> Option<String> {
        match self {
            Profile::OaiLte => None,
            Profile::Srsenb => Some(format!("WORKER{i}")),
            Profile::NrGnb => Some(format!("Tpool{i}_-1")),
        }
    }

    /// A regular expression matching the name of every pool worker, whatever the pool size
    /// (`--workers`): tools that pick threads by name (bench's thread-affinity strategies) use it
    /// instead of listing the names of one pool size. Kept next to [`Profile::pool_thread_name`]
    /// so that the two change together (bench's thread-pattern test fails when they do not).
    pub fn pool_thread_pattern(self) -> Option<&'static str> {
        match self {
            Profile::OaiLte => None,
            Profile::Srsenb => Some("^WORKER[0-9]+$"),
            Profile::NrGnb => Some("^Tpool[0-9]+_-1$"),
        }
    }

    /// Every profile, for tools that iterate over them.
    pub const ALL: [Profile; 3] = [Profile::OaiLte, Profile::Srsenb, Profile::NrGnb];

    /// The threads of the stack. `workers` sizes the pool where the stack has one.
    pub fn threads(self, workers: usize) -> Vec<ThreadSpec> {
        use Class::*;
        use ThreadRole::*;
        match self {
            // OAI LTE: RT threads SCHED_FIFO at OAI_PRIORITY_RT_MAX (max − 2 = 97); ITTI tasks normal.
            Profile::OaiLte => vec![
                t("ru-thread", Clock, Fifo, 97),
                t("fep_processing", FrontEnd, Fifo, 97),
                t("lte-softmodem", L1, Fifo, 97),
                t("feptx_thread", DlBackEnd, Fifo, 97),
                t("TASK_GTPV1_U", UserPlaneTx, Other, 0),
                t("TASK_UDP", UserPlaneRx, Other, 0),
                ctl("TASK_S1AP", 100),
                ctl("TASK_SCTP", 100),
                ctl("TASK_RRC", 10),
            ],
            // srsENB (measured): TXRX 97, WORKER0..N−1 96, STACK 94 SCHED_FIFO; helpers normal.
            Profile::Srsenb => {
                let mut v = vec![t("TXRX", Clock, Fifo, 97)];
                for i in 0..workers {
                    v.push(t(&self.pool_thread_name(i).unwrap_or_default(), Worker, Fifo, 96));
                }
                v.push(t("STACK", Stack, Fifo, 94));
                v.push(t("RXsockets", UserPlaneRx, Other, 0));
                v.push(t("TASKWORKER0", UserPlaneTx, Other, 0));
                v.push(ctl("TASKWORKER1", 10));
                v.push(ctl("PRACH_WORKER", 10));
                v.push(ctl("METRICS_HUB", 1000));
                v
            }
            // OAI NR gNB: SCHED_RR at max − 2; Tpool workers named "Tpool<i>_<core>" (core −1 = floating).
            Profile::NrGnb => {
                let mut v = vec![
                    t("ru_thread", Clock, Rr, 97),
                    t("L1_rx_thread", L1, Rr, 97),
                    t("L1_tx_thread", L1Tx, Rr, 97),
                ];
                for i in 0..workers {
                    v.push(t(&self.pool_thread_name(i).unwrap_or_default(), Worker, Rr, 97));
                }
                v.push(t("TASK_GTPV1_U", UserPlaneTx, Other, 0));
                v.push(t("TASK_UDP", UserPlaneRx, Other, 0));
                v.push(ctl("TASK_RRC_GNB", 10));
                v.push(ctl("TASK_NGAP", 100));
                v.push(ctl("TASK_SCTP", 100));
                v.push(ctl("TASK_GNB_APP", 1000));
                v
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_in_comm() {
        for p in [Profile::OaiLte, Profile::Srsenb, Profile::NrGnb] {
            for th in p.threads(p.defaults().workers) {
                assert!(th.name.len() <= 15, "{} is longer than TASK_COMM_LEN − 1", th.name);
            }
        }
    }

    #[test]
    fn srsenb_has_the_measured_priorities() {
        let th = Profile::Srsenb.threads(3);
        let prio = |n: &str| th.iter().find(|t| t.name == n).unwrap().priority;
        assert_eq!((prio("TXRX"), prio("WORKER2"), prio("STACK")), (97, 96, 94));
    }
}
