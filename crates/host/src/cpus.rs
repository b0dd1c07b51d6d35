//! CPU lists in the kernel's formats: "0-3,6" (cpuset.cpus, smp_affinity_list) and hex masks
//! "f,ffffffff" (rps_cpus, xps_cpus, smp_affinity).

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct CpuList(BTreeSet<u32>);

impl CpuList {
    pub fn new() -> CpuList {
        CpuList(BTreeSet::new())
    }

    pub fn from_cpus(cpus: impl IntoIterator<Item = u32>) -> CpuList {
        CpuList(cpus.into_iter().collect())
    }

    /// Parses "0-3,6", "" (empty) and tolerates whitespace/newlines as the kernel prints them.
    pub fn parse(text: &str) -> Result<CpuList, String> {
        let mut set = BTreeSet::new();
        for part in text.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a, b),
                None => (part, part),
            };
            let a: u32 = a.trim().parse().map_err(|_| format!("bad CPU list element {part:?} in {text:?}"))?;
            let b: u32 = b.trim().parse().map_err(|_| format!("bad CPU list element {part:?} in {text:?}"))?;
            if a > b || b > 8191 {
                return Err(format!("bad CPU range {part:?} in {text:?}"));
            }
            set.extend(a..=b);
        }
        Ok(CpuList(set))
    }

    /// Parses a kernel hex mask ("3", "00000000,00000003").
    pub fn parse_mask(text: &str) -> Result<CpuList, String> {
        let hex: String = text.trim().chars().filter(|c| *c != ',').collect();
        let mut set = BTreeSet::new();
        for (i, c) in hex.chars().rev().enumerate() {
            let nibble = c.to_digit(16).ok_or_else(|| format!("bad CPU mask {text:?}"))?;
            for bit in 0..4 {
                if nibble & (1 << bit) != 0 {
                    set.insert((i * 4 + bit) as u32);
                }
            }
        }
        Ok(CpuList(set))
    }

    /// Hex mask with 32-bit groups separated by commas, as the kernel accepts it.
    pub fn to_mask(&self) -> String {
        let max = self.0.iter().next_back().copied().unwrap_or(0);
        let words = (max / 32 + 1) as usize;
        let mut w = vec![0u32; words];
        for &c in &self.0 {
            w[(c / 32) as usize] |= 1 << (c % 32);
        }
        w.iter().rev().map(|x| format!("{x:08x}")).collect::<Vec<_>>().join(",")
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }
    pub fn is_subset(&self, other: &CpuList) -> bool {
        self.0.is_subset(&other.0)
    }
    pub fn union(&self, other: &CpuList) -> CpuList {
        CpuList(self.0.union(&other.0).copied().collect())
    }
    pub fn difference(&self, other: &CpuList) -> CpuList {
        CpuList(self.0.difference(&other.0).copied().collect())
    }
    pub fn intersection(&self, other: &CpuList) -> CpuList {
        CpuList(self.0.intersection(&other.0).copied().collect())
    }
    pub fn insert(&mut self, cpu: u32) {
        self.0.insert(cpu);
    }
}

impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpus: Vec<u32> = self.0.iter().copied().collect();
        let mut parts = Vec::new();
        let mut i = 0;
        while i < cpus.len() {
            let start = cpus[i];
            let mut end = start;
            while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
                i += 1;
                end = cpus[i];
            }
            parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
            i += 1;
        }
        f.write_str(&parts.join(","))
    }
}

impl fmt::Debug for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuList({self})")
    }
}

impl From<CpuList> for String {
    fn from(c: CpuList) -> String {
        c.to_string()
    }
}

impl TryFrom<String> for CpuList {
    type Error = String;
    fn try_from(s: String) -> Result<CpuList, String> {
        CpuList::parse(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_round_trips() {
        for text in ["0-3,6", "1", "", "0,2,4-7,9"] {
            assert_eq!(CpuList::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(CpuList::parse(" 0-1\n").unwrap().to_string(), "0-1");
        assert!(CpuList::parse("3-1").is_err());
        assert!(CpuList::parse("a").is_err());
    }

    #[test]
    fn masks_match_kernel_format() {
        assert_eq!(CpuList::parse("0-1").unwrap().to_mask(), "00000003");
        assert_eq!(CpuList::parse("0,33").unwrap().to_mask(), "00000002,00000001");
        assert_eq!(CpuList::parse_mask("00000002,00000001").unwrap().to_string(), "0,33");
        assert_eq!(CpuList::parse_mask("0\n").unwrap().to_string(), "");
        assert_eq!(CpuList::parse_mask("f0").unwrap().to_string(), "4-7");
    }
}
