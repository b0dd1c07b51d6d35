//! A plain directory shaped like resctrl (`/sys/fs/resctrl`), for tests on machines without it —
//! this development VM and CI's have no RDT (no `resctrl` in /proc/filesystems, no `rdt_a`/`cat_l3`
//! CPU flag), and qemu does not emulate it. It holds the files rtslice reads and writes; it is not
//! the kernel: see rtslice-host's `resctrl` module for the differences it models.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use rtslice_sys::resctrl::ResctrlInfo;

/// A two-socket Xeon-like L3 as resctrl describes it: 11 ways, the top two shareable, 16 CLOSIDs,
/// MBA 10 % / 10 %, monitoring, no CDP.
pub fn xeon_2s() -> ResctrlInfo {
    ResctrlInfo {
        cbm_mask: 0x7ff,
        min_cbm_bits: 1,
        num_closids: 16,
        shareable_bits: 0x600,
        domains: vec![0, 1],
        mba: Some((10, 10)),
        monitoring: true,
        cdp: false,
    }
}

/// Fills `root` (an empty directory) with resctrl's info files, the default group's `schemata`
/// (padded like the kernel prints it), an empty `tasks` and `mon_data/mon_L3_<id>/` counters.
pub fn make(root: &Path, shape: &ResctrlInfo) {
    let w = |p: PathBuf, v: String| {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, v).unwrap();
    };
    let l3 = root.join("info/L3");
    w(l3.join("cbm_mask"), format!("{:x}\n", shape.cbm_mask));
    w(l3.join("min_cbm_bits"), format!("{}\n", shape.min_cbm_bits));
    w(l3.join("num_closids"), format!("{}\n", shape.num_closids));
    w(l3.join("shareable_bits"), format!("{:x}\n", shape.shareable_bits));
    w(root.join("info/last_cmd_status"), "ok\n".into());
    let l3_line = shape.domains.iter().map(|d| format!("{d}={:x}", shape.cbm_mask)).collect::<Vec<_>>().join(";");
    let mut schemata = format!("    L3:{l3_line}\n");
    if let Some((min, gran)) = shape.mba {
        w(root.join("info/MB/min_bandwidth"), format!("{min}\n"));
        w(root.join("info/MB/bandwidth_gran"), format!("{gran}\n"));
        let mb = shape.domains.iter().map(|d| format!("{d}=100")).collect::<Vec<_>>().join(";");
        schemata.push_str(&format!("    MB:{mb}\n"));
    }
    w(root.join("schemata"), schemata);
    w(root.join("tasks"), String::new());
    if !shape.monitoring {
        return;
    }
    std::fs::create_dir_all(root.join("info/L3_MON")).unwrap();
    for d in &shape.domains {
        w(root.join(format!("mon_data/mon_L3_{d:02}/llc_occupancy")), "0\n".into());
        w(root.join(format!("mon_data/mon_L3_{d:02}/mbm_total_bytes")), "0\n".into());
    }
}

/// Every file under `root` with its content, and every directory (as `<dir>/`): two snapshots are
/// equal when nothing was left behind or changed.
pub fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                out.insert(format!("{rel}/"), String::new());
                walk(root, &e.path(), out);
            } else {
                out.insert(rel, std::fs::read_to_string(e.path()).unwrap());
            }
        }
    }
    walk(root, root, &mut out);
    out
}

/// This machine's resctrl, said plainly for test output: tests against a shaped directory say
/// they did not reach the kernel's.
pub fn host_has_resctrl() -> bool {
    rtslice_sys::resctrl::kernel_supports() && Path::new("/sys/fs/resctrl/info/L3").is_dir()
}
