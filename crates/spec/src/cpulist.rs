//! CPU lists as the kernel writes them (`0-3,6,8-9`), and their serde forms: a spec may write a CPU
//! list either as such a string or as a YAML sequence of ids; we always serialize the string.

use std::fmt::Write as _;

/// The kernel never has more CPUs than this (NR_CPUS upper bound); a larger id is a typo.
pub const MAX_CPU_ID: u32 = 8191;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a CPU list ({why}); write e.g. `0-3,6`")]
pub struct CpuListError {
    pub input: String,
    pub why: String,
}

/// Parses `0-3,6,8-9` (also with spaces, an empty string is the empty list). Result is sorted, unique.
pub fn parse_cpu_list(input: &str) -> Result<Vec<u32>, CpuListError> {
    let err = |why: String| CpuListError { input: input.to_string(), why };
    let mut cpus = Vec::new();
    for part in input.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let lo: u32 = lo.parse().map_err(|_| err(format!("`{lo}` is not a CPU id")))?;
        let hi: u32 = hi.parse().map_err(|_| err(format!("`{hi}` is not a CPU id")))?;
        if lo > hi {
            return Err(err(format!("range `{part}` runs backwards")));
        }
        if hi > MAX_CPU_ID {
            return Err(err(format!("CPU {hi} is above the kernel's limit of {MAX_CPU_ID}")));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats sorted CPU ids as the kernel does: `0-3,6`.
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    out
}

/// Formats CPU ids as a hexadecimal mask the way /sys/class/net/*/queues/*/rps_cpus expects
/// (comma-separated 32-bit words, most significant first).
pub fn format_cpu_mask(cpus: &[u32]) -> String {
    let max = cpus.iter().copied().max().unwrap_or(0);
    let words = (max / 32 + 1) as usize;
    let mut mask = vec![0u32; words];
    for &c in cpus {
        mask[(c / 32) as usize] |= 1 << (c % 32);
    }
    mask.iter().rev().map(|w| format!("{w:08x}")).collect::<Vec<_>>().join(",")
}

/// serde helpers: `Vec<u32>` as a CPU-list string, accepting a string or a sequence when reading.
pub mod serde_cpus {
    use serde::{de, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(cpus: &[u32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_cpu_list(cpus))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
        d.deserialize_any(CpusVisitor)
    }

    pub(crate) struct CpusVisitor;
    impl<'de> de::Visitor<'de> for CpusVisitor {
        type Value = Vec<u32>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a CPU list such as \"0-3,6\" or a sequence of CPU ids")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u32>, E> {
            super::parse_cpu_list(v).map_err(E::custom)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Vec<u32>, E> {
            u32::try_from(v).map(|c| vec![c]).map_err(|_| E::custom("CPU id too large"))
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u32>, A::Error> {
            let mut out = Vec::new();
            while let Some(c) = seq.next_element::<u32>()? {
                out.push(c);
            }
            out.sort_unstable();
            out.dedup();
            Ok(out)
        }
    }

    /// The same for `Option<Vec<u32>>`.
    pub mod option {
        use serde::{Deserializer, Serializer};
        pub fn serialize<S: Serializer>(cpus: &Option<Vec<u32>>, s: S) -> Result<S::Ok, S::Error> {
            match cpus {
                Some(c) => super::serialize(c, s),
                None => s.serialize_none(),
            }
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u32>>, D::Error> {
            super::deserialize(d).map(Some)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lists() {
        assert_eq!(parse_cpu_list("0-3,6").unwrap(), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_cpu_list(" 7, 4-5 ").unwrap(), vec![4, 5, 7]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("99999").is_err());
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(format_cpu_mask(&[0, 1, 7]), "00000083");
        assert_eq!(format_cpu_mask(&[33]), "00000002,00000000");
    }

    proptest! {
        #[test]
        fn round_trip(mut cpus in proptest::collection::vec(0u32..300, 0..40)) {
            cpus.sort_unstable();
            cpus.dedup();
            prop_assert_eq!(parse_cpu_list(&format_cpu_list(&cpus)).unwrap(), cpus);
        }
    }
}
