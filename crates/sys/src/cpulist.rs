//! CPU lists and masks in the kernel's text formats: `0-3,6,8-9` (cpuset.cpus, /sys/devices/system/
//! cpu/online, smp_affinity_list) and comma-separated 32-bit hex words (rps_cpus, smp_affinity).
//! Pure: no I/O, so the spec crate can re-export it.

use std::fmt::Write as _;

/// The kernel never has more CPUs than this (NR_CPUS upper bound); a larger id is a typo.
pub const MAX_CPU_ID: u32 = 8191;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a CPU list ({why}); write e.g. `0-3,6`")]
pub struct CpuListError {
    pub input: String,
    pub why: String,
}

/// Parses `0-3,6,8-9` (also with spaces and a trailing newline, as read from sysfs; an empty string
/// is the empty list). The result is sorted and unique.
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

/// Formats CPU ids as the kernel does: `0-3,6` (sorted, duplicates dropped, runs as ranges).
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

/// Formats CPU ids as a hexadecimal mask the way /sys/class/net/*/queues/*/rps_cpus and
/// /proc/irq/*/smp_affinity print it (comma-separated 32-bit words, most significant first; the
/// empty set is one zero word).
pub fn format_cpu_mask(cpus: &[u32]) -> String {
    let max = cpus.iter().copied().max().unwrap_or(0);
    let words = (max / 32 + 1) as usize;
    let mut mask = vec![0u32; words];
    for &c in cpus {
        mask[(c / 32) as usize] |= 1 << (c % 32);
    }
    mask.iter().rev().map(|w| format!("{w:08x}")).collect::<Vec<_>>().join(",")
}

/// Parses a hexadecimal CPU mask as the kernel prints it (`00000002,00000000`, `f`, with or
/// without a trailing newline). The result is sorted.
pub fn parse_cpu_mask(input: &str) -> Result<Vec<u32>, CpuListError> {
    let err = |why: String| CpuListError { input: input.to_string(), why };
    let mut cpus = Vec::new();
    let words: Vec<&str> = input.trim().split(',').collect();
    for (i, word) in words.iter().rev().enumerate() {
        let w = u32::from_str_radix(word.trim(), 16).map_err(|_| err(format!("`{word}` is not a 32-bit hex word")))?;
        for bit in 0..32 {
            if w & (1 << bit) != 0 {
                let cpu = i as u32 * 32 + bit;
                if cpu > MAX_CPU_ID {
                    return Err(err(format!("CPU {cpu} is above the kernel's limit of {MAX_CPU_ID}")));
                }
                cpus.push(cpu);
            }
        }
    }
    cpus.sort_unstable();
    Ok(cpus)
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
        assert!(parse_cpu_list("1-").is_err());
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(format_cpu_list(&[]), "");
        assert_eq!(format_cpu_mask(&[0, 1, 7]), "00000083");
        assert_eq!(format_cpu_mask(&[33]), "00000002,00000000");
        assert_eq!(format_cpu_mask(&[]), "00000000");
    }

    /// What sysfs and procfs actually print: a trailing newline, the empty isolated list, one CPU.
    #[test]
    fn kernel_spellings() {
        assert_eq!(parse_cpu_list("0-1\n").unwrap(), vec![0, 1]);
        assert_eq!(parse_cpu_list("\n").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpu_list("5\n").unwrap(), vec![5]);
        assert_eq!(parse_cpu_list("0,2-3,8-11\n").unwrap(), vec![0, 2, 3, 8, 9, 10, 11]);
        assert_eq!(parse_cpu_mask("3\n").unwrap(), vec![0, 1]);
        assert_eq!(parse_cpu_mask("00000002,00000000\n").unwrap(), vec![33]);
        assert_eq!(parse_cpu_mask("ffffffff").unwrap(), (0..32).collect::<Vec<_>>());
        assert!(parse_cpu_mask("xyz").is_err());
    }

    /// This machine's own files parse (they are what every reader in rtslice relies on).
    #[test]
    fn parses_this_machines_sysfs() {
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
        let cpus = parse_cpu_list(&online).unwrap();
        assert!(!cpus.is_empty(), "{online:?}");
        assert_eq!(format_cpu_list(&cpus), online.trim());
        if let Ok(isolated) = std::fs::read_to_string("/sys/devices/system/cpu/isolated") {
            parse_cpu_list(&isolated).unwrap();
        }
    }

    fn cpu_sets() -> impl Strategy<Value = Vec<u32>> {
        proptest::collection::vec(prop_oneof![0u32..300, 0u32..=MAX_CPU_ID], 0..60).prop_map(|mut v| {
            v.sort_unstable();
            v.dedup();
            v
        })
    }

    proptest! {
        #[test]
        fn list_round_trip(cpus in cpu_sets()) {
            let text = format_cpu_list(&cpus);
            prop_assert_eq!(parse_cpu_list(&text).unwrap(), cpus.clone());
            // sysfs adds a newline; every reader must take it.
            prop_assert_eq!(parse_cpu_list(&format!("{text}\n")).unwrap(), cpus);
        }

        #[test]
        fn mask_round_trip(cpus in cpu_sets()) {
            prop_assert_eq!(parse_cpu_mask(&format_cpu_mask(&cpus)).unwrap(), cpus);
        }

        /// Any order and repetition is accepted and normalized, as the kernel does on write.
        #[test]
        fn unsorted_input_is_normalized(raw in proptest::collection::vec(0u32..64, 0..20)) {
            let text = raw.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            let mut want = raw.clone();
            want.sort_unstable();
            want.dedup();
            prop_assert_eq!(parse_cpu_list(&text).unwrap(), want);
        }

        #[test]
        fn never_panics(s in "\\PC*") {
            let _ = parse_cpu_list(&s);
            let _ = parse_cpu_mask(&s);
        }
    }
}
