//! Cache allocation through the node service: admission by the live planner against the ways the
//! running workloads hold (pinned, never re-placed), the host's resctrl written one workload at a
//! time. resctrl is a directory shaped like it (rtslice_testkit::resctrl): this machine has no RDT
//! and qemu cannot emulate it, so the kernel's own checks of a mask are not exercised here (see
//! rtslice-host's `resctrl` module for what the shaped directory models). Root, KernelLock.

#[path = "../../host/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::Duration;

use rtslice_node::{Service, ServiceOptions};
use rtslice_testkit::resctrl::{make, snapshot, xeon_2s, ResctrlInfo};
use rtslice_testkit::{root_or_skip, KernelLock, OnDrop};

fn name(n: &str) -> String {
    format!("ca{}-{n}", std::process::id())
}

/// A best-effort `sleep` on the last CPU asking for `cache`.
fn spec(n: &str, cache: &str) -> rtslice_spec::Spec {
    let cpu = rtslice_host::facts::online_cpus().iter().last().unwrap();
    let text = format!(
        "apiVersion: rtslice/v1\nworkloads:\n  - name: {}\n    launch: {{command: [sleep, '60']}}\n    demand: {{bestEffort: {{cpus: [{cpu}]}}}}\n    cache: {cache}\n",
        name(n)
    );
    rtslice_spec::parse(&text, "t.yaml").unwrap()
}

/// The L3 domain of the last CPU (0 where sysfs gives no cache id).
fn l3_id() -> u32 {
    let cpu = rtslice_host::facts::online_cpus().iter().last().unwrap();
    rtslice_sys::topology::llc_id(Path::new("/"), cpu).unwrap_or(0)
}

/// The L3 mask the file `schemata` of `group` (a directory) gives the domain of the last CPU.
fn l3(group: &Path) -> u64 {
    let d = l3_id();
    let text = std::fs::read_to_string(group.join("schemata")).unwrap();
    let line = text.lines().map(str::trim).find(|l| l.starts_with("L3:")).unwrap().to_string();
    let entry = line[3..].split(';').find(|e| e.starts_with(&format!("{d}="))).unwrap().to_string();
    u64::from_str_radix(&entry[format!("{d}=").len()..], 16).unwrap()
}

#[test]
fn running_workloads_keep_their_ways_and_a_later_one_gets_only_free_ones() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let root = tempfile::tempdir().unwrap();
    let mut domains: Vec<u32> =
        rtslice_host::facts::online_cpus().iter().map(|c| rtslice_sys::topology::llc_id(Path::new("/"), c).unwrap_or(0)).collect();
    domains.dedup();
    make(root.path(), &ResctrlInfo { domains, ..xeon_2s() });
    let resctrl_before = snapshot(root.path());
    let kernel_before = common::snapshot();
    let state = tempfile::tempdir().unwrap();
    let opts = ServiceOptions {
        state_dir: state.path().into(),
        node: Default::default(),
        mechanism: None,
        grace: Duration::from_secs(2),
        launch_env: Vec::new(),
        boot_id_file: None,
        access: Default::default(),
        resctrl: Some(root.path().into()),
        hrtick: false,
        fair_server_off: false,
        oci: Default::default(),
    };
    let host_opts = rtslice_host::NodeOptions { resctrl: Some(root.path().into()), ..rtslice_host::NodeOptions::with_state_dir(state.path()) };
    let _cleanup = OnDrop::new(|| {
        if let Ok((node, _)) = rtslice_host::Node::open(host_opts.clone()) {
            if let Err(e) = node.reset() {
                eprintln!("cleanup: {e}");
            }
        }
    });
    let mut svc = Service::open(opts).expect("open the service");
    let group = |n: &str| root.path().join(format!("rtslice-{}", name(n)));
    let running = |svc: &Service, n: &str| svc.host().record(&name(n)).unwrap().is_some();
    // 11 ways, the top two shareable: a's 4 at the bottom (f), c's 2 above them (30).
    svc.deploy(&spec("a", "{ways: 4}")).unwrap();
    svc.deploy(&spec("c", "{ways: 2}")).unwrap();
    assert!(running(&svc, "a") && running(&svc, "c"));
    assert_eq!((l3(&group("a")), l3(&group("c")), l3(root.path())), (0x00f, 0x030, 0x7c0));
    // a goes: the planner still sees c at 30 (re-planned from scratch, c alone would sit at the
    // bottom and d would be given c's ways).
    svc.remove(&name("a")).unwrap();
    svc.deploy(&spec("d", "{ways: 4}")).unwrap();
    assert!(running(&svc, "d"), "d fits the 4 ways a freed");
    assert_eq!((l3(&group("d")), l3(&group("c")), l3(root.path())), (0x00f, 0x030, 0x7c0));
    // The API shows what each holds, as resctrl writes it.
    let c = &svc.get(&name("c")).unwrap()["cache"];
    assert_eq!((c["ways"].as_u64(), c["l3"][0]["mask"].as_str()), (Some(2), Some("30")), "{c}");
    // Exact masks are refused with the holder named when they overlap.
    let out = svc.deploy(&spec("e", &format!("{{masks: {{{}: \"0x60\"}}}}", l3_id()))).unwrap();
    assert!(!running(&svc, "e"));
    let e = out[0].reason.clone().unwrap_or_default();
    assert!(e.contains("overlaps ways reserved already") && e.contains(&name("c")), "{e}");
    for n in ["e", "d", "c"] {
        svc.remove(&name(n)).unwrap();
    }
    drop(svc);
    let (node, _) = rtslice_host::Node::open(host_opts.clone()).unwrap();
    node.reset().unwrap();
    assert_eq!(snapshot(root.path()), resctrl_before, "resctrl as found");
    common::assert_restored(&kernel_before);
}
