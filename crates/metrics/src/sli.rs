//! What a workload reports over the report channel: one JSON object of cumulative counters per
//! datagram (format version 1, docs/metrics.md), parsed and differenced here; the channel itself
//! (the socket, the sender's attribution) is `report`'s.

use serde::{Deserialize, Serialize};

/// The largest datagram read; longer ones are refused as invalid.
pub const MAX_REPORT_BYTES: usize = 4096;

/// One report: counters since the sending process started (monotonic; a restarted process starts
/// again from zero, which Prometheus reads as a counter reset). Absent counters are not reported by
/// this workload; unknown fields are ignored so senders can be newer than the node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliReport {
    /// Format version: 1.
    pub v: u32,
    /// TTIs (slots/subframes) with any processing deadline missed.
    #[serde(default)]
    pub deadline_misses: Option<u64>,
    /// TTIs processed.
    #[serde(default)]
    pub ttis: Option<u64>,
    /// Bits delivered in time (uplink + downlink).
    #[serde(default)]
    pub throughput_bits: Option<u64>,
    /// HARQ NACKs sent.
    #[serde(default)]
    pub nacks: Option<u64>,
}

impl SliReport {
    /// What this report adds to `earlier`, a previous report of the same process (cumulative
    /// counters: the difference, never negative).
    pub fn since(&self, earlier: &SliReport) -> SliReport {
        let d = |now: Option<u64>, then: Option<u64>| now.map(|n| n.saturating_sub(then.unwrap_or(0)));
        SliReport {
            v: self.v,
            deadline_misses: d(self.deadline_misses, earlier.deadline_misses),
            ttis: d(self.ttis, earlier.ttis),
            throughput_bits: d(self.throughput_bits, earlier.throughput_bits),
            nacks: d(self.nacks, earlier.nacks),
        }
    }

    /// Parses one datagram; the reason when it is not a version-1 report.
    pub fn parse(bytes: &[u8]) -> Result<SliReport, String> {
        if bytes.len() >= MAX_REPORT_BYTES {
            return Err(format!("longer than {} bytes", MAX_REPORT_BYTES - 1));
        }
        let r: SliReport = serde_json::from_slice(bytes).map_err(|e| format!("not a JSON report object: {e}"))?;
        if r.v != 1 {
            return Err(format!("format version {} (this node reads version 1)", r.v));
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_parse_with_absent_and_unknown_fields() {
        let r = SliReport::parse(br#"{"v":1,"ttis":100,"deadline_misses":2,"future":"x"}"#).unwrap();
        assert_eq!(r, SliReport { v: 1, ttis: Some(100), deadline_misses: Some(2), ..Default::default() });
        assert!(SliReport::parse(br#"{"v":2,"ttis":1}"#).unwrap_err().contains("version 2"));
        assert!(SliReport::parse(b"ttis 100").unwrap_err().contains("not a JSON report"));
        assert!(SliReport::parse(br#"{"v":1,"ttis":-1}"#).is_err());
        assert!(SliReport::parse(&vec![b' '; MAX_REPORT_BYTES]).unwrap_err().contains("longer than"));
    }
}
