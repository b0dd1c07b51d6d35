//! Reading Linux resctrl (`/sys/fs/resctrl`: Intel RDT / AMD PQoS): what the L3 offers
//! (`info/L3`, `info/MB`), schemata lines, a group's monitoring counters (`mon_data`), which group a
//! thread is in, and whether a path is the resctrl file system at all. Every reader takes the root
//! so tests read a directory shaped like resctrl; writing is rtslice-host's (journaled).

use std::path::{Path, PathBuf};

use crate::error::{Result, SysError};

/// The usual mount point.
pub const DEFAULT_ROOT: &str = "/sys/fs/resctrl";
/// `statfs(2)`'s f_type of resctrl (include/uapi/linux/magic.h: RDTGROUP_SUPER_MAGIC).
pub const RDTGROUP_SUPER_MAGIC: u64 = 0x7655821;

/// `info/L3` and `info/MB`: what cache and memory-bandwidth allocation the hardware offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResctrlInfo {
    /// `info/L3/cbm_mask`: every way of one L3.
    pub cbm_mask: u64,
    /// `info/L3/min_cbm_bits`.
    pub min_cbm_bits: u32,
    /// `info/L3/num_closids` (the default group's included).
    pub num_closids: u32,
    /// `info/L3/shareable_bits`: ways other agents (I/O) may use.
    pub shareable_bits: u64,
    /// The L3 domain ids of the root group's schemata (`L3:0=…;1=…`).
    pub domains: Vec<u32>,
    /// `info/MB/min_bandwidth` and `info/MB/bandwidth_gran`, when MBA is there.
    pub mba: Option<(u32, u32)>,
    /// `info/L3_MON` exists: per-group LLC occupancy / MBM counters.
    pub monitoring: bool,
    /// `info/L3CODE`: code/data prioritization is on (the schemata then has L3CODE/L3DATA, not L3).
    pub cdp: bool,
}

fn read(path: PathBuf) -> Result<String> {
    std::fs::read_to_string(&path).map(|s| s.trim().to_string()).map_err(SysError::read(path))
}

fn hex(path: PathBuf) -> Result<u64> {
    let text = read(path.clone())?;
    u64::from_str_radix(&text, 16).map_err(|_| SysError::Invalid(format!("{}: {text:?} is not a hex bitmask", path.display())))
}

fn num(path: PathBuf) -> Result<u32> {
    let text = read(path.clone())?;
    text.parse().map_err(|_| SysError::Invalid(format!("{}: {text:?} is not a number", path.display())))
}

/// What resctrl at `root` offers; `Ok(None)` when there is no L3 allocation there (not mounted,
/// or a CPU without CAT). Errors are files that exist but cannot be read or make no sense.
pub fn read_info(root: &Path) -> Result<Option<ResctrlInfo>> {
    let l3 = root.join("info/L3");
    let cdp = root.join("info/L3CODE").is_dir();
    let l3 = if l3.is_dir() { l3 } else if cdp { root.join("info/L3CODE") } else { return Ok(None) };
    let mb = root.join("info/MB");
    let mba = if mb.is_dir() { Some((num(mb.join("min_bandwidth"))?, num(mb.join("bandwidth_gran"))?)) } else { None };
    let schemata = read(root.join("schemata"))?;
    let resource = if cdp { "L3CODE" } else { "L3" };
    let domains = parse_schemata(&schemata)
        .into_iter()
        .find(|(r, _)| r == resource)
        .map(|(_, d)| d.into_iter().map(|(id, _)| id).collect())
        .unwrap_or_default();
    Ok(Some(ResctrlInfo {
        cbm_mask: hex(l3.join("cbm_mask"))?,
        min_cbm_bits: num(l3.join("min_cbm_bits"))?,
        num_closids: num(l3.join("num_closids"))?,
        shareable_bits: hex(l3.join("shareable_bits")).unwrap_or(0),
        domains,
        mba,
        monitoring: root.join("info/L3_MON").is_dir(),
        cdp,
    }))
}

/// A schemata file: `(resource, [(domain id, value)])` per line, e.g. `("L3", [(0, "fff")])`.
/// The kernel pads resource names for alignment (`    MB:0=100`); lines that do not parse are skipped.
pub fn parse_schemata(text: &str) -> Vec<(String, Vec<(u32, String)>)> {
    text.lines()
        .filter_map(|line| {
            let (res, doms) = line.trim().split_once(':')?;
            let doms = doms
                .split(';')
                .filter_map(|d| {
                    let (id, v) = d.split_once('=')?;
                    Some((id.trim().parse().ok()?, v.trim().to_string()))
                })
                .collect();
            Some((res.trim().to_string(), doms))
        })
        .collect()
}

/// LLC occupancy (bytes) and total memory traffic (bytes, a counter) of the group at `group`,
/// summed over its `mon_data/mon_L3_*` domains; `None` when the group has no monitoring data.
/// Domains that read "Unavailable" (the kernel's answer while an RMID is not yet counted) are skipped.
pub fn monitor(group: &Path) -> Option<(u64, u64)> {
    let rd = std::fs::read_dir(group.join("mon_data")).ok()?;
    let (mut occ, mut mbm, mut any) = (0u64, 0u64, false);
    for e in rd.flatten() {
        if !e.file_name().to_string_lossy().starts_with("mon_L3_") {
            continue;
        }
        let value = |f: &str| std::fs::read_to_string(e.path().join(f)).ok().and_then(|s| s.trim().parse::<u64>().ok());
        if let Some(v) = value("llc_occupancy") {
            occ += v;
            any = true;
        }
        if let Some(v) = value("mbm_total_bytes") {
            mbm += v;
            any = true;
        }
    }
    any.then_some((occ, mbm))
}

/// The resctrl control group a thread is in, as `/proc/<tid>/cpu_resctrl_groups` names it (`res:/`
/// → `""` for the default group, `res:/rtslice-du` → `"rtslice-du"`); `None` when the kernel has no
/// such file (no resctrl, or before 5.x) or the thread is gone.
pub fn task_group(tid: i32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/cpu_resctrl_groups")).ok()?;
    parse_task_group(&text)
}

pub fn parse_task_group(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.trim().strip_prefix("res:")).map(|g| g.trim_matches('/').to_string())
}

/// Whether `path` lies on the resctrl file system (not a plain directory shaped like it).
pub fn is_resctrl(path: &Path) -> bool {
    rustix::fs::statfs(path).map(|s| s.f_type as u64 == RDTGROUP_SUPER_MAGIC).unwrap_or(false)
}

/// The CPU's flags that announce cache/bandwidth allocation and monitoring (/proc/cpuinfo's `cat_l3`,
/// `cdp_l3`, `mba`, `cqm_llc`, `cqm_occup_llc`, `cqm_mbm_total`, `rdt_a`), for doctor and tests.
pub fn cpu_flags() -> Vec<String> {
    const RDT: &[&str] = &["rdt_a", "cat_l3", "cdp_l3", "mba", "cqm_llc", "cqm_occup_llc", "cqm_mbm_total", "cqm_mbm_local"];
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = text.lines().find(|l| l.starts_with("flags")).and_then(|l| l.split_once(':')).map(|(_, f)| f).unwrap_or("");
    flags.split_whitespace().filter(|f| RDT.contains(f)).map(str::to_string).collect()
}

/// Whether the running kernel knows resctrl at all (/proc/filesystems).
pub fn kernel_supports() -> bool {
    std::fs::read_to_string("/proc/filesystems").map(|s| s.lines().any(|l| l.trim_end().ends_with("resctrl"))).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemata_lines_with_the_kernels_padding() {
        let s = parse_schemata("    L3:0=fffff;1=fff00\n    MB:0=100;1= 50\n");
        assert_eq!(s[0], ("L3".to_string(), vec![(0, "fffff".to_string()), (1, "fff00".to_string())]));
        assert_eq!(s[1].1[1], (1, "50".to_string()));
    }

    #[test]
    fn task_groups() {
        assert_eq!(parse_task_group("res:/\nmon:/\n"), Some(String::new()));
        assert_eq!(parse_task_group("res:/rtslice-du\nmon:/rtslice-du/\n"), Some("rtslice-du".into()));
        assert_eq!(parse_task_group(""), None);
    }

    #[test]
    fn info_of_a_resctrl_shaped_directory() {
        // A plain directory shaped like resctrl (this machine has none): what read_info parses.
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read_info(d.path()).unwrap(), None);
        std::fs::create_dir_all(d.path().join("info/L3")).unwrap();
        std::fs::create_dir_all(d.path().join("info/MB")).unwrap();
        for (f, v) in [("cbm_mask", "7ff"), ("min_cbm_bits", "1"), ("num_closids", "16"), ("shareable_bits", "600")] {
            std::fs::write(d.path().join("info/L3").join(f), format!("{v}\n")).unwrap();
        }
        std::fs::write(d.path().join("info/MB/min_bandwidth"), "10\n").unwrap();
        std::fs::write(d.path().join("info/MB/bandwidth_gran"), "10\n").unwrap();
        std::fs::write(d.path().join("schemata"), "    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n").unwrap();
        let info = read_info(d.path()).unwrap().unwrap();
        assert_eq!((info.cbm_mask, info.min_cbm_bits, info.num_closids, info.shareable_bits), (0x7ff, 1, 16, 0x600));
        assert_eq!(info.domains, vec![0, 1]);
        assert_eq!(info.mba, Some((10, 10)));
        assert!(!is_resctrl(d.path()), "a temp directory is not the resctrl file system");
        std::fs::write(d.path().join("info/L3/cbm_mask"), "zz\n").unwrap();
        assert!(read_info(d.path()).unwrap_err().to_string().contains("not a hex bitmask"));
    }
}
