//! Real interference on the real kernel, and proof that teardown leaves nothing behind.

use std::process::Command;
use std::time::Duration;

use rtslice_noise::{cleanup_stale, Noise, NoiseKind, NoiseSpec, RtPolicy};
use rtslice_testkit::{root_or_skip, KernelLock};

fn netns_list() -> String {
    String::from_utf8_lossy(&Command::new("ip").args(["netns", "list"]).output().expect("ip netns list").stdout).into_owned()
}

fn last_cpu() -> usize {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online cpus");
    online.trim().rsplit(['-', ',']).next().and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Processes whose process group is `pgid` (the tool and everything it forked).
fn group_members(pgid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            // field 3 = state, 5 = pgrp; zombies are already dead
            (f.first() != Some(&"Z") && f.get(2)?.parse::<u32>().ok()? == pgid).then_some(pid)
        })
        .collect()
}

#[test]
fn kernel_flood_delivers_packets_steers_softirq_and_leaves_no_namespace() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let cpu = last_cpu();
    let mut spec = NoiseSpec::new(NoiseKind::Kernel, vec![cpu]);
    spec.flood.pps = Some(20_000);
    let mut g = Noise::start(spec).expect("flood starts");
    let pids = g.pids();
    std::thread::sleep(Duration::from_millis(1500));
    let r = g.report();
    let f = r.flood.clone().expect("flood stats");
    eprintln!("{r:?}");
    let names = f.namespaces.clone();
    assert_eq!(names.len(), 2);
    assert!(names.iter().all(|n| netns_list().contains(n.as_str())));
    assert!(f.sent_pps > 10_000.0 && f.sent_pps < 30_000.0, "paced at 20 kpps: {}", f.sent_pps);
    assert!(f.rx_pps > 0.5 * f.sent_pps, "the veth receives the flood: {f:?}");
    assert!(f.delivered_pps > 0.0, "socat consumes datagrams: {f:?}");
    let target = r.per_cpu.iter().find(|c| c.cpu == cpu).expect("target cpu share");
    assert!(target.net_rx_per_s > 100.0, "RPS puts NET_RX softirqs on CPU {cpu}: {target:?}");
    drop(g);
    let after = netns_list();
    for n in &names {
        assert!(!after.contains(n.as_str()), "namespace {n} left behind: {after}");
    }
    for p in pids {
        assert!(group_members(p).is_empty(), "consumer group {p} left behind");
    }
}

#[test]
fn user_noise_runs_study_a_stressors_and_stop_kills_the_whole_group() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let cpu = last_cpu();
    let g = Noise::start(NoiseSpec::new(NoiseKind::User, vec![cpu])).expect("stress-ng starts");
    let pids = g.pids();
    assert_eq!(pids.len(), 1, "one stress-ng set per chosen CPU");
    std::thread::sleep(Duration::from_millis(1500));
    let cmdline = std::fs::read_to_string(format!("/proc/{}/cmdline", pids[0])).expect("cmdline").replace('\0', " ");
    for a in ["-d 1", "--hdd-bytes 200M", "-m 1", "--vm-bytes 1G", "--iomix 1", "--iomix-bytes 100M", "--mq 0"] {
        assert!(cmdline.contains(a), "study A's stressor `{a}` missing from {cmdline}");
    }
    assert!(group_members(pids[0]).len() > 3, "stress-ng forks its stressors");
    let r = g.stop().expect("teardown");
    let busy = r.per_cpu.iter().find(|c| c.cpu == cpu).map(|c| c.busy_percent).unwrap_or(0.0);
    assert!(busy > 50.0, "CPU {cpu} is kept busy: {busy}%");
    assert!(group_members(pids[0]).is_empty(), "stressors left behind");
}

#[test]
fn rt_noise_runs_four_periodic_fifo_tasks_and_goes_away() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let cpu = last_cpu();
    let mut spec = NoiseSpec::new(NoiseKind::Rt, vec![cpu]);
    spec.rt.policy = RtPolicy::Fifo;
    spec.rt.priority = 10;
    let g = Noise::start(spec).expect("rt-app starts");
    let pid = g.pids()[0];
    std::thread::sleep(Duration::from_millis(1500));
    let fifo_tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .filter_map(|e| {
            let tid = e.ok()?.file_name().into_string().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            (f.get(41 - 3)? == &"1" && f.get(40 - 3)? == &"10").then_some(tid)
        })
        .count();
    assert_eq!(fifo_tasks, 4, "study B: four SCHED_FIFO rt-app tasks");
    drop(g);
    assert!(group_members(pid).is_empty(), "rt-app left behind");
}

#[test]
fn namespaces_of_dead_processes_are_cleaned_up() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    // pid_max is below 2^22 here: this pid cannot exist.
    let name = "rtsn4194999-0-tx";
    let ok = Command::new("ip").args(["netns", "add", name]).status().expect("ip").success();
    assert!(ok);
    let gone = cleanup_stale();
    assert!(gone.iter().any(|g| g == name), "{gone:?}");
    assert!(!netns_list().contains(name));
}

#[test]
fn bad_requests_are_refused_before_anything_starts() {
    let e = Noise::start(NoiseSpec::new(NoiseKind::User, vec![4096])).err().expect("CPU 4096 is not online");
    assert!(e.to_string().contains("not online"), "{e}");
    let mut spec = NoiseSpec::new(NoiseKind::Rt, vec![0]);
    spec.rt.runtime = Duration::from_millis(200);
    let e = Noise::start(spec).err().expect("runtime above period");
    assert!(e.to_string().contains("at most the period"), "{e}");
}
