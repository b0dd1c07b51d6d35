//! Reaction time of the agent to threads born after apply: netlink process connector vs the 2 ms
//! polling fallback, interleaved A B A B (this machine is noisy: compare side by side).
//! The workload and the agent are this binary re-executed in a role (environment variable).
//!
//!   sudo cargo bench -p rtslice-agent --bench agent_reaction [-- ROUNDS THREADS]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rtslice_host::Mechanism;
use rtslice_host::sched::{self, SchedAttr};
use rtslice_host::{apply_setup, reset, AgentCommand, ApplyOptions, CpuList, Launch, ResetOptions, Setup, StateDir, ThreadRule, WorkloadSetup};

const ROLE: &str = "RTSLICE_AGENT_BENCH_ROLE";
const RULE: SchedAttr = SchedAttr::Fifo { priority: 7 };

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn spawner(threads: usize, out: PathBuf) {
    std::thread::sleep(Duration::from_millis(300));
    let want_cpus = CpuList::parse("1").unwrap();
    let mut reactions = Vec::new();
    for _ in 0..threads {
        let want_cpus = want_cpus.clone();
        let h = std::thread::Builder::new()
            .name("late-worker".into())
            .spawn(move || {
                let t0 = now_ns();
                let tid = sched::gettid();
                let end = Instant::now() + Duration::from_secs(2);
                while Instant::now() < end {
                    if sched::get_attr(tid).ok() == Some(RULE) && sched::get_affinity(tid).ok().as_ref() == Some(&want_cpus) {
                        return Some((now_ns() - t0) as f64 / 1000.0);
                    }
                    std::thread::sleep(Duration::from_micros(10));
                }
                None
            })
            .unwrap();
        reactions.push(h.join().unwrap());
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::write(out, serde_json::to_string(&reactions).unwrap()).unwrap();
    std::thread::sleep(Duration::from_secs(60));
}

fn round(poll: bool, threads: usize) -> Vec<Option<f64>> {
    let dir = tempfile::tempdir().unwrap();
    let result = dir.path().join("r.json");
    let exe = std::env::current_exe().unwrap();
    let mut env = vec![(ROLE.to_string(), "agent".to_string())];
    if poll {
        env.push(("POLL".into(), "1".into()));
    }
    let setup = Setup {
        workloads: vec![WorkloadSetup {
            name: format!("agent-bench-{}", std::process::id()),
            cpus: CpuList::parse("0-1").unwrap(),
            threads: vec![ThreadRule { name: "^late-worker$".into(), policy: Some(RULE), cpus: Some(CpuList::parse("1").unwrap()), period_ns: None }],
            launch: Launch::Command {
                argv: vec![exe.display().to_string()],
                env: vec![(ROLE.into(), "spawner".into()), ("OUT".into(), result.display().to_string()), ("THREADS".into(), threads.to_string())],
                cwd: None,
            },
            ..Default::default()
        }],
        ..Default::default()
    };
    let opts = ApplyOptions {
        mechanism: Some(Mechanism::None),
        agent: Some(AgentCommand { program: exe, args: vec![], env, state_dir_arg: false }),
        ..ApplyOptions::with_state_dir(dir.path())
    };
    apply_setup(&setup, &opts).expect("apply");
    let start = Instant::now();
    while !result.exists() && start.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = serde_json::from_str(&std::fs::read_to_string(&result).unwrap()).unwrap();
    reset(&StateDir::new(dir.path()), ResetOptions::default()).unwrap();
    r
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("agent") => {
            let dir = StateDir::new(std::env::var("RTSLICE_STATE_DIR").unwrap());
            let opts = rtslice_agent::AgentOptions { force_polling: std::env::var("POLL").is_ok(), ..Default::default() };
            rtslice_agent::run(&dir, &opts).unwrap();
            return;
        }
        Ok("spawner") => {
            spawner(std::env::var("THREADS").unwrap().parse().unwrap(), std::env::var("OUT").unwrap().into());
            return;
        }
        _ => {}
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || rtslice_host::facts::online_cpus().len() < 2 {
        eprintln!("agent_reaction: needs root and 2 CPUs; skipped");
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let rounds: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(3);
    let threads: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100);
    let _lock = rtslice_testkit::KernelLock::acquire();
    let (mut nl, mut po, mut missed) = (Vec::new(), Vec::new(), 0);
    for _ in 0..rounds {
        for poll in [false, true] {
            let r = round(poll, threads);
            missed += r.iter().filter(|x| x.is_none()).count();
            if poll { &mut po } else { &mut nl }.extend(r.into_iter().flatten());
        }
    }
    println!("agent reaction time to threads born after apply ({rounds} rounds × {threads} threads, interleaved; µs)");
    println!("{:<22} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}", "mode", "n", "min", "p50", "p90", "p99", "max");
    for (name, v) in [("netlink connector", &mut nl), ("polling 2 ms", &mut po)] {
        if v.is_empty() {
            continue;
        }
        println!(
            "{:<22} {:>6} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0}",
            name,
            v.len(),
            pct(v, 0.0),
            pct(v, 0.5),
            pct(v, 0.9),
            pct(v, 0.99),
            pct(v, 1.0)
        );
    }
    println!("threads that never got their rule within 2 s: {missed}");
    let within = nl.iter().filter(|&&x| x < 10_000.0).count();
    println!("netlink: {within}/{} within the 10 ms goal", nl.len());
}
