//! Overhead of tracing on a context-switch-heavy workload: a pipe ping-pong between two threads pinned
//! to one CPU (every round trip is two context switches and two wake-ups), measured with no tracer,
//! with rtslice's BPF tracer (the library as `rtslice trace` uses it, reading snapshots every second),
//! with libbpf-tools' `runqlat -L -p PID` (Debian package libbpf-tools: per-thread histograms of the
//! same process, the reference for a small, exact tracer), and with a bpftrace script equivalent to
//! runqlat. Conditions are interleaved (A B C D, B C D A, …) and compared as ratios of the median
//! per-switch cost; each tracer's added cost per switch (over no tracer) is also given as a ratio to
//! runqlat's (issue 13's goal: ≤ 1.0). The tracers' own CPU use is reported too. Needs root; prints
//! why it skips otherwise.
//!
//!     cargo bench -p rtslice-trace --bench overhead [-- ROUNDS ROUND_TRIPS]

use std::io::{BufRead, BufReader};
use std::os::fd::RawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rtslice_trace::{Mode, Options, Target, TraceSession};

const BPFTRACE_RUNQLAT: &str = r#"
tracepoint:sched:sched_wakeup, tracepoint:sched:sched_wakeup_new { @qtime[args->pid] = nsecs; }
tracepoint:sched:sched_switch {
  if (args->prev_state == 0) { @qtime[args->prev_pid] = nsecs; }
  $ns = @qtime[args->next_pid];
  if ($ns) { @usecs[args->next_pid] = hist((nsecs - $ns) / 1000); }
  delete(@qtime[args->next_pid]);
}
"#;

fn pin_to(cpu: usize) {
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn pipe() -> (RawFd, RawFd) {
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

fn xfer(fd_w: RawFd, fd_r: RawFd) {
    let b = [1u8];
    let mut r = [0u8];
    unsafe {
        assert_eq!(libc::write(fd_w, b.as_ptr().cast(), 1), 1);
        assert_eq!(libc::read(fd_r, r.as_mut_ptr().cast(), 1), 1);
    }
}

/// The ping side runs on the caller's thread; the pong thread lives as long as the process.
struct PingPong {
    to_pong: RawFd,
    from_pong: RawFd,
}

impl PingPong {
    fn start(cpu: usize) -> PingPong {
        let (a_r, a_w) = pipe();
        let (b_r, b_w) = pipe();
        std::thread::Builder::new()
            .name("pong".into())
            .spawn(move || {
                pin_to(cpu);
                let mut r = [0u8];
                loop {
                    unsafe {
                        if libc::read(a_r, r.as_mut_ptr().cast(), 1) != 1 {
                            return;
                        }
                        libc::write(b_w, r.as_ptr().cast(), 1);
                    }
                }
            })
            .unwrap();
        PingPong { to_pong: a_w, from_pong: b_r }
    }

    /// ns per context switch over `n` round trips.
    fn run(&self, n: u64) -> f64 {
        let t = Instant::now();
        for _ in 0..n {
            xfer(self.to_pong, self.from_pong);
        }
        t.elapsed().as_nanos() as f64 / (2 * n) as f64
    }
}

fn proc_cpu_ns(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<u64> = stat.rsplit_once(") ").map(|(_, r)| r.split_whitespace().filter_map(|x| x.parse().ok()).collect()).unwrap_or_default();
    // utime, stime are fields 14, 15 (index 11, 12 after the state field is dropped by parse)
    let tick = rtslice_sys::procfs::ticks_per_second();
    if f.len() < 13 {
        return 0;
    }
    (f[10] + f[11]) * 1_000_000_000 / tick
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cond {
    None,
    Rtslice,
    Runqlat,
    Bpftrace,
}

const RUNQLAT: &str = "/usr/sbin/runqlat";

struct Sample {
    ns_per_switch: f64,
    tracer_cpu_ns: u64,
    bpf_ns: Option<u64>,
    wall_ns: u64,
}

fn measure(cond: Cond, pp: &PingPong, n: u64) -> Option<Sample> {
    let t0 = Instant::now();
    match cond {
        Cond::None => Some(Sample { ns_per_switch: pp.run(n), tracer_cpu_ns: 0, bpf_ns: None, wall_ns: t0.elapsed().as_nanos() as u64 }),
        Cond::Rtslice => {
            // The session is read every second from another thread, as the CLI's live view does.
            let session = TraceSession::start(
                Target::Pids(vec![std::process::id()]),
                Options { mode: Mode::Bpf, hw_counters: false, ..Default::default() },
            )
            .expect("rtslice BPF tracer");
            let done = Arc::new(AtomicBool::new(false));
            let reader = {
                let done = done.clone();
                std::thread::spawn(move || {
                    let mut next = Instant::now() + Duration::from_secs(1);
                    while !done.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(20));
                        if Instant::now() >= next {
                            let _ = session.snapshot();
                            next += Duration::from_secs(1);
                        }
                    }
                    session.finish()
                })
            };
            let t = Instant::now();
            let ns = pp.run(n);
            let wall = t.elapsed().as_nanos() as u64;
            done.store(true, Ordering::Relaxed);
            let report = reader.join().unwrap();
            let ping = report.threads.iter().map(|t| t.wakeup.events).max().unwrap_or(0);
            assert!(ping >= n / 2, "rtslice saw only {ping} wake-ups of {n} round trips");
            Some(Sample {
                ns_per_switch: ns,
                tracer_cpu_ns: report.overhead.read_cpu_ns,
                bpf_ns: report.overhead.bpf_run_time_ns,
                wall_ns: wall,
            })
        }
        Cond::Bpftrace | Cond::Runqlat => {
            let mut cmd = if cond == Cond::Bpftrace {
                let mut c = Command::new("bpftrace");
                c.args(["-e", BPFTRACE_RUNQLAT]);
                c
            } else {
                // runqlat's stdout is block-buffered into a pipe: line buffering (coreutils' stdbuf)
                // lets its "Tracing …" line through as soon as it is attached.
                let mut c = Command::new("stdbuf");
                c.args(["-oL", RUNQLAT, "-L", "-p", &std::process::id().to_string()]);
                c
            };
            let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().ok()?;
            let mut out = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            // bpftrace prints "Attaching N probes...", runqlat "Tracing run queue latency..." once
            // their programs are attached.
            while out.read_line(&mut line).ok()? > 0 && !line.contains("Attaching") && !line.contains("Tracing") {
                line.clear();
            }
            std::thread::sleep(Duration::from_millis(200));
            let cpu0 = proc_cpu_ns(child.id());
            let t = Instant::now();
            let ns = pp.run(n);
            let wall = t.elapsed().as_nanos() as u64;
            let cpu1 = proc_cpu_ns(child.id());
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut out, &mut rest);
            let _ = child.wait();
            Some(Sample { ns_per_switch: ns, tracer_cpu_ns: cpu1 - cpu0, bpf_ns: None, wall_ns: wall })
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("overhead benchmark SKIPPED: needs root (BPF)");
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let rounds: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(5);
    let n: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let _lock = rtslice_testkit::KernelLock::acquire();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let cpu = cpus - 1;
    pin_to(cpu);
    let pp = PingPong::start(cpu);
    pp.run(20_000); // warm-up
    let have_bpftrace = Command::new("bpftrace").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    let mut conds = vec![Cond::None, Cond::Rtslice];
    if std::path::Path::new(RUNQLAT).exists() {
        conds.push(Cond::Runqlat);
    } else {
        eprintln!("{RUNQLAT} not installed (Debian package libbpf-tools): no comparison with runqlat");
    }
    if have_bpftrace {
        conds.push(Cond::Bpftrace);
    } else {
        eprintln!("bpftrace not installed: comparing no tracer and rtslice only");
    }
    let mut results: Vec<(Cond, Vec<Sample>)> = conds.iter().map(|&c| (c, Vec::new())).collect();
    for r in 0..rounds {
        for i in 0..conds.len() {
            let c = conds[(r + i) % conds.len()];
            if let Some(s) = measure(c, &pp, n) {
                eprintln!("round {r} {c:?}: {:.0} ns/switch", s.ns_per_switch);
                results.iter_mut().find(|(k, _)| *k == c).unwrap().1.push(s);
            }
        }
    }
    let base = median(&mut results[0].1.iter().map(|s| s.ns_per_switch).collect::<Vec<_>>());
    println!("* user-space CPU while measuring: rtslice = snapshot reads (loading excluded), runqlat and bpftrace = their process");
    println!("pipe ping-pong on CPU {cpu}, {rounds} interleaved rounds of {n} round trips ({} switches each)", 2 * n);
    let medians: Vec<(Cond, f64)> =
        results.iter().map(|(c, s)| (*c, median(&mut s.iter().map(|s| s.ns_per_switch).collect::<Vec<_>>()))).collect();
    let runqlat_added = medians.iter().find(|(c, _)| *c == Cond::Runqlat).map(|(_, m)| m - base);
    println!(
        "{:<10} {:>12} {:>8} {:>10} {:>14} {:>22} {:>18}",
        "tracer", "ns/switch", "ratio", "added ns", "vs runqlat", "tracer user CPU %*", "BPF ns/switch"
    );
    for (c, samples) in &mut results {
        let med = median(&mut samples.iter().map(|s| s.ns_per_switch).collect::<Vec<_>>());
        let added = med - base;
        // Added cost relative to runqlat's added cost (noise can make either negative: say so).
        let vs_runqlat = match runqlat_added {
            Some(r) if *c != Cond::None && r > 0.0 => format!("{:.2}", added / r),
            Some(_) if *c != Cond::None => "n/a (noise)".to_string(),
            _ => "-".to_string(),
        };
        let cpu_pct = median(&mut samples.iter().map(|s| 100.0 * s.tracer_cpu_ns as f64 / s.wall_ns as f64).collect::<Vec<_>>());
        let bpf = samples.iter().filter_map(|s| s.bpf_ns).map(|b| b as f64 / (2 * n) as f64).collect::<Vec<_>>();
        let bpf = if bpf.is_empty() { "-".to_string() } else { format!("{:.0}", median(&mut bpf.clone())) };
        println!(
            "{:<10} {:>12.0} {:>8.3} {:>10.0} {:>14} {:>22} {:>18}",
            format!("{c:?}").to_lowercase(),
            med,
            med / base,
            added,
            vs_runqlat,
            if *c == Cond::None { "-".into() } else { format!("{cpu_pct:.2}") },
            bpf
        );
    }
}
