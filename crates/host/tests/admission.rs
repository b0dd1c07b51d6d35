//! SCHED_DEADLINE admission of an attached real-time stack succeeds the first time, every time
//! (issue 15): a process shaped like srsENB (TXRX, three WORKERs, STACK; each wakes every 1 ms and
//! computes briefly) starts outside the partition, last running on CPU 0; apply attaches it to a
//! partition on CPU 1 and makes its threads SCHED_DEADLINE. The kernel admits a deadline thread where
//! it last ran, so a thread still asleep on CPU 0 used to be refused (EPERM/EBUSY); apply now waits for
//! it to run inside the partition. 20 consecutive applies, each counted as first-try or not.
//!
//! The stack is this test binary re-executed in a helper role.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rtslice_host::sched::{self, SchedAttr};
use rtslice_host::{
    apply_setup, reset, ApplyOptions, CpuList, Launch, Mechanism, ResetOptions, Reservation, Setup, StateDir, ThreadRule,
    WorkloadSetup,
};
use rtslice_testkit::{root_or_skip, skip, KernelLock};

const ROLE: &str = "RTSLICE_ADMISSION_ROLE";
const THREADS: [&str; 5] = ["TXRX", "WORKER0", "WORKER1", "WORKER2", "STACK"];

/// Helper role: five named threads, each waking every 1 ms (a TTI) for ~50 µs of work, until killed.
/// Prints `READY` once every thread runs under its name.
#[test]
fn helper_stack_role() {
    if std::env::var(ROLE).as_deref() != Ok("stack") {
        return;
    }
    let (started, running) = std::sync::mpsc::channel();
    let handles: Vec<_> = THREADS
        .iter()
        .map(|name| {
            let started = started.clone();
            std::thread::Builder::new()
                .name(name.to_string())
                .spawn(move || {
                    // The name is set before the closure runs.
                    let _ = started.send(());
                    loop {
                        std::thread::sleep(Duration::from_millis(1));
                        let t = Instant::now();
                        while t.elapsed() < Duration::from_micros(50) {
                            std::hint::spin_loop();
                        }
                    }
                })
                .unwrap()
        })
        .collect();
    for _ in THREADS {
        running.recv().unwrap();
    }
    println!("READY");
    std::io::Write::flush(&mut std::io::stdout()).unwrap();
    for h in handles {
        let _ = h.join();
    }
}

fn rule(name: &str) -> ThreadRule {
    ThreadRule { name: name.into(), policy: Some(SchedAttr::Fifo { priority: 50 }), cpus: None, period_ns: None }
}

#[test]
fn twenty_applies_of_an_attached_five_thread_stack_succeed_first_try() {
    root_or_skip!();
    if !skip::cpus_or_skip(2) {
        return;
    }
    let _lock = KernelLock::acquire();
    let before = snapshot();
    let mut first_try = 0;
    let mut failures = Vec::new();
    let mut took = Vec::new();
    for round in 0..20 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "helper_stack_role", "--nocapture"])
            .env(ROLE, "stack")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Wait for the helper's word that its five threads run (no time bound: a slow guest only
        // takes longer; a helper that dies closes the pipe), then make them last run on CPU 0
        // (outside the partition).
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let ready = std::io::BufRead::lines(stdout).map_while(|l| l.ok()).any(|l| l == "READY");
        assert!(ready, "the stack helper exited before its threads ran: {:?}", child.wait());
        for tid in sched::threads_of(pid) {
            sched::set_affinity(tid, &CpuList::parse("0").unwrap()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        let dir = tempfile::tempdir().unwrap();
        let setup = Setup {
            workloads: vec![WorkloadSetup {
                name: format!("enb-{}-{round}", std::process::id()),
                cpus: CpuList::parse("1").unwrap(),
                reservation: Some(Reservation::from_micros(70_000, 100_000)),
                threads: vec![rule("^TXRX$"), rule("^WORKER"), rule("^STACK$")],
                launch: Launch::Attach { pids: vec![pid] },
                ..Default::default()
            }],
            ..Default::default()
        };
        let opts = ApplyOptions { mechanism: Some(Mechanism::Deadline), ..ApplyOptions::with_state_dir(dir.path()) };
        let t0 = Instant::now();
        match apply_setup(&planned(setup, Some(Mechanism::Deadline)), &opts) {
            Ok(_) => {
                took.push(t0.elapsed());
                first_try += 1;
                let _cleanup = reset_on_drop(dir.path());
                // Every thread holds its share: TXRX and STACK a third of 70 ms, each WORKER a ninth.
                for tid in sched::threads_of(pid) {
                    let comm = sched::comm_of(pid, tid).unwrap_or_default();
                    let want = match comm.as_str() {
                        "TXRX" | "STACK" => Some(23_333_333),
                        c if c.starts_with("WORKER") => Some(23_333_333 / 3),
                        _ => None,
                    };
                    if let Some(runtime_ns) = want {
                        assert_eq!(
                            sched::get_attr(tid).unwrap(),
                            SchedAttr::Deadline { runtime_ns, deadline_ns: 100_000_000, period_ns: 100_000_000, reclaim: false },
                            "{comm}"
                        );
                    }
                }
                reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
            }
            Err(e) => {
                failures.push(format!("round {round}: {e}"));
                let _ = reset(&StateDir::new(dir.path()), ResetOptions::default());
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    took.sort();
    eprintln!(
        "MEASURED: {first_try}/20 applies of an attached 5-thread stack under SCHED_DEADLINE succeeded first try (apply time median {:?}, max {:?}); failures: {failures:?}",
        took.get(took.len() / 2),
        took.last()
    );
    assert_restored(&before);
    assert_eq!(first_try, 20, "{failures:#?}");
}
