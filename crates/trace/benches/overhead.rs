//! Overhead of tracing on a context-switch-heavy workload: a pipe ping-pong between two threads pinned
//! to one CPU (every round trip is two context switches and two wake-ups), measured with no tracer,
//! with rtslice's BPF tracer (the library as `rtslice trace --pid` uses it, reading snapshots every
//! second), with libbpf-tools' `runqlat -L -p PID` (Debian package libbpf-tools: per-thread
//! histograms of the same process, the reference for a small, exact tracer), and with a bpftrace
//! script equivalent to runqlat.
//!
//! Conditions are interleaved (A B C D, B C D A, …) and compared *paired*: in each round a tracer's
//! added cost per switch is its ns/switch minus that round's no-tracer ns/switch, and rtslice's
//! added cost minus runqlat's is taken round by round too (issue 13/39's goal: ≤ 0). Each is given
//! as the median over rounds with its min–max and a distribution-free confidence interval of the
//! median (order statistics of the binomial, ≥ 95 % coverage where the rounds allow). What the
//! hypervisor took from the ping-pong's CPU while each condition ran (/proc/stat steal) is reported
//! with it: a noisy host shows up there, not as a silent error; so is what the rest of this VM took
//! from that CPU meanwhile. The tracers' own user-space CPU and their BPF run time per ping-pong
//! switch (all their program runs on every CPU: rtslice's from its sampled bpf_stats, runqlat's with
//! `--stats-cost`) are reported too. Needs root; skips otherwise.
//!
//!     cargo bench -p rtslice-trace --bench overhead [-- ROUNDS ROUND_TRIPS] [--no-bpftrace] [--stats-cost] [--fifo]
//!
//! `--external=NAME=PATH` (repeatable) adds rtslice's tracer run as a process of its own by another
//! build of this benchmark (`PATH --serve-pid=PID`, as `rtslice trace --pid` runs): two builds —
//! e.g. before and after a change — compared in the same interleaved, paired rounds.
//!
//! `--fifo` runs the ping-pong under SCHED_FIFO (priority 10), so that on a busy machine other
//! tasks of the VM (builds, tests) do not share its CPU — they still may for the 5 % that RT
//! throttling and the fair server leave them — while the tracers' user-space parts, under
//! SCHED_OTHER, run on the other CPUs.
//! `--stats-cost` adds runqlat with the kernel's BPF run-time statistics switched on (an
//! `rtslice trace` session samples them rather than holding them for its whole life): what that
//! switch costs per event, and runqlat's own BPF run time per switch.

use std::io::{BufRead, BufReader};
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rtslice_sys::procfs::{stolen_between, stolen_s};
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

fn set_affinity(cpus: &[usize]) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET stays within it for ids < 1024.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
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
    ping_tid: u32,
    pong_tid: u32,
}

fn gettid() -> u32 {
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The CPU time the scheduler charged a thread of this process so far (schedstat's first field, ns).
fn exec_ns(tid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap_or_default();
    s.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// SCHED_FIFO for the calling thread; false (with the reason on stderr) when refused.
fn fifo(priority: i32) -> bool {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: param is a valid sched_param; 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        eprintln!("SCHED_FIFO refused ({}): the ping-pong runs under SCHED_OTHER", std::io::Error::last_os_error());
        return false;
    }
    true
}

/// Back to SCHED_OTHER on every CPU: for what the ping-pong's thread starts (threads and children
/// inherit its policy and affinity), which must not compete with it as it would not in real use.
fn unpin(cpus: &[usize]) {
    set_affinity(cpus);
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: param is a valid sched_param; 0 is the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
}

impl PingPong {
    fn start(cpu: usize, rt: bool) -> PingPong {
        let (a_r, a_w) = pipe();
        let (b_r, b_w) = pipe();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("pong".into())
            .spawn(move || {
                set_affinity(&[cpu]);
                if rt {
                    fifo(10);
                }
                tx.send(gettid()).unwrap();
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
        PingPong { to_pong: a_w, from_pong: b_r, ping_tid: gettid(), pong_tid: rx.recv().unwrap() }
    }

    /// ns per context switch over `n` round trips.
    fn run(&self, n: u64) -> f64 {
        let t = Instant::now();
        for _ in 0..n {
            xfer(self.to_pong, self.from_pong);
        }
        t.elapsed().as_nanos() as f64 / (2 * n) as f64
    }

    fn exec_ns(&self) -> u64 {
        exec_ns(self.ping_tid) + exec_ns(self.pong_tid)
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
    /// runqlat while the kernel's BPF run-time statistics are on (`--stats-cost`).
    RunqlatStats,
    Bpftrace,
    /// rtslice's tracer in another process: a build of this benchmark run as `--serve-pid=PID`
    /// (`--external=NAME=PATH`; e.g. the same benchmark built from an older commit).
    External(usize),
}

/// `--external=NAME=PATH` tracers: (name, path of a build of this benchmark).
static EXTERNAL: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

impl Cond {
    fn name(self) -> &'static str {
        match self {
            Cond::None => "none",
            Cond::Rtslice => "rtslice",
            Cond::Runqlat => "runqlat",
            Cond::RunqlatStats => "runqlat+stats",
            Cond::Bpftrace => "bpftrace",
            Cond::External(i) => EXTERNAL.get().and_then(|e| e.get(i)).map_or("?", |e| e.0.as_str()),
        }
    }
}

const RUNQLAT: &str = "/usr/sbin/runqlat";

struct Sample {
    ns_per_switch: f64,
    tracer_cpu_ns: u64,
    bpf_ns: Option<u64>,
    wall_ns: u64,
    /// Seconds the hypervisor took from the ping-pong's CPU while it ran.
    stolen_s: f64,
    /// Seconds its CPU gave to anything else in this VM meanwhile (other tasks, interrupts): the
    /// run's wall time less the ping-pong threads' charged CPU time and the steal.
    others_s: f64,
}

/// Steal of one CPU so far (s).
fn stolen_on(cpu: usize) -> Vec<(u32, f64)> {
    stolen_s().into_iter().filter(|(c, _)| *c as usize == cpu).collect()
}

/// Runs the ping-pong: ns/switch, wall ns, and what the host (steal) and the rest of this VM took
/// from its CPU over the same interval (s).
fn timed_run(pp: &PingPong, n: u64, cpu: usize) -> (f64, u64, f64, f64) {
    let s0 = stolen_on(cpu);
    let e0 = pp.exec_ns();
    let t = Instant::now();
    let ns = pp.run(n);
    let wall = t.elapsed().as_nanos() as u64;
    let ran = pp.exec_ns().saturating_sub(e0);
    let stolen: f64 = stolen_between(&s0, &stolen_on(cpu)).iter().map(|(_, s)| s).sum();
    let others = (wall.saturating_sub(ran) as f64 / 1e9 - stolen).max(0.0);
    (ns, wall, stolen, others)
}

fn measure(cond: Cond, pp: &PingPong, n: u64, cpu: usize, all_cpus: &[usize]) -> Option<Sample> {
    match cond {
        Cond::None => {
            let (ns, wall, stolen, others) = timed_run(pp, n, cpu);
            Some(Sample { ns_per_switch: ns, tracer_cpu_ns: 0, bpf_ns: None, wall_ns: wall, stolen_s: stolen, others_s: others })
        }
        Cond::Rtslice => {
            // The session is started and read every second by another thread, as the CLI's live
            // view does — on any CPU and under SCHED_OTHER, as the CLI would run (not pinned to the
            // ping-pong's CPU as this thread is): the session's own thread inherits them.
            let done = Arc::new(AtomicBool::new(false));
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let reader = {
                let done = done.clone();
                let all = all_cpus.to_vec();
                std::thread::spawn(move || {
                    unpin(&all);
                    let session = TraceSession::start(
                        Target::Pids(vec![std::process::id()]),
                        Options { mode: Mode::Bpf, hw_counters: false, ..Default::default() },
                    )
                    .expect("rtslice BPF tracer");
                    ready_tx.send(()).unwrap();
                    snapshot_every_second_until(&session, &done);
                    session.finish()
                })
            };
            ready_rx.recv().expect("the tracer thread started the session");
            // As for the tools below: loading leaves work behind (frees, RCU callbacks) that is not
            // a cost per event.
            std::thread::sleep(Duration::from_millis(200));
            let (ns, wall, stolen, others) = timed_run(pp, n, cpu);
            done.store(true, Ordering::Relaxed);
            let report = reader.join().unwrap();
            let ping = report.threads.iter().map(|t| t.wakeup.events).max().unwrap_or(0);
            assert!(ping >= n / 2, "rtslice saw only {ping} wake-ups of {n} round trips");
            Some(Sample {
                ns_per_switch: ns,
                tracer_cpu_ns: report.overhead.read_cpu_ns,
                bpf_ns: report.overhead.bpf_run_time_ns,
                wall_ns: wall,
                stolen_s: stolen,
                others_s: others,
            })
        }
        Cond::External(i) => {
            let path = &EXTERNAL.get()?.get(i)?.1;
            let mut cmd = Command::new(path);
            cmd.arg(format!("--serve-pid={}", std::process::id()));
            let all = all_cpus.to_vec();
            // SAFETY: as for runqlat below.
            unsafe {
                cmd.pre_exec(move || {
                    unpin(&all);
                    Ok(())
                });
            }
            let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().ok()?;
            let mut out = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            while out.read_line(&mut line).ok()? > 0 && !line.contains("Tracing") {
                line.clear();
            }
            std::thread::sleep(Duration::from_millis(200));
            let cpu0 = proc_cpu_ns(child.id());
            let (ns, wall, stolen, others) = timed_run(pp, n, cpu);
            let cpu1 = proc_cpu_ns(child.id());
            drop(child.stdin.take());
            let _ = std::io::Read::read_to_string(&mut out, &mut String::new());
            let _ = child.wait();
            // Its BPF run time is left out: its session's sample windows fall mostly outside the run.
            Some(Sample { ns_per_switch: ns, tracer_cpu_ns: cpu1.saturating_sub(cpu0), bpf_ns: None, wall_ns: wall, stolen_s: stolen, others_s: others })
        }
        Cond::Bpftrace | Cond::Runqlat | Cond::RunqlatStats => {
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
            let all = all_cpus.to_vec();
            // SAFETY: sched_setaffinity and sched_setscheduler are plain system calls, safe between fork
            // and exec; the closure allocates nothing.
            unsafe {
                cmd.pre_exec(move || {
                    unpin(&all);
                    Ok(())
                });
            }
            let stats = if cond == Cond::RunqlatStats { Some(rtslice_sys::bpf::enable_run_time_stats().ok()?) } else { None };
            // The programs loaded from here on are the tool's: with the statistics on, their run time.
            let last_id = libbpf_rs::query::ProgInfoIter::default().map(|p| p.id).max().unwrap_or(0);
            let run_ns = || -> u64 { libbpf_rs::query::ProgInfoIter::default().filter(|p| p.id > last_id).map(|p| p.run_time_ns).sum() };
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
            let bpf0 = stats.as_ref().map(|_| run_ns());
            let (ns, wall, stolen, others) = timed_run(pp, n, cpu);
            let bpf_ns = bpf0.map(|b| run_ns().saturating_sub(b));
            let cpu1 = proc_cpu_ns(child.id());
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut out, &mut rest);
            let _ = child.wait();
            drop(stats);
            Some(Sample { ns_per_switch: ns, tracer_cpu_ns: cpu1.saturating_sub(cpu0), bpf_ns, wall_ns: wall, stolen_s: stolen, others_s: others })
        }
    }
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

fn median(v: &[f64]) -> f64 {
    let v = sorted(v);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Distribution-free confidence interval of the median: the order statistics (k, n+1-k) for the
/// largest k whose coverage 1 - 2·P(Bin(n, ½) < k) is still ≥ 95 % (n = 10: the 2nd and 9th, 97.9 %).
/// With fewer than 6 values no such k exists: the interval is the min–max, with its coverage.
fn median_ci(v: &[f64]) -> (f64, f64, f64) {
    let v = sorted(v);
    let n = v.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, 0.0);
    }
    // P(Bin(n, ½) ≤ j) for j = 0..n.
    let mut cdf = Vec::with_capacity(n + 1);
    let (mut c, mut acc) = (1.0f64, 0.0f64);
    for j in 0..=n {
        if j > 0 {
            c = c * (n + 1 - j) as f64 / j as f64;
        }
        acc += c / 2f64.powi(n as i32);
        cdf.push(acc);
    }
    let coverage = |k: usize| 1.0 - 2.0 * cdf[k - 1];
    let k = (1..=n.div_ceil(2)).rev().find(|&k| coverage(k) >= 0.95).unwrap_or(1);
    (v[k - 1], v[n - k], coverage(k))
}

/// "median [lo, hi]" of per-round values, with the min–max when it is wider than the interval.
fn interval(v: &[f64]) -> String {
    let (lo, hi, cov) = median_ci(v);
    let s = sorted(v);
    format!("{:.0} [{lo:.0}, {hi:.0}]{:.0}% (min {:.0} max {:.0})", median(v), cov * 100.0, s[0], s[s.len() - 1])
}

/// `--serve-pid=PID`: rtslice's tracer as a process of its own, as `rtslice trace --pid PID` runs —
/// attached, it says "Tracing", reads a snapshot every second, and exits when its stdin closes.
fn serve(pid: u32) {
    let session = TraceSession::start(Target::Pids(vec![pid]), Options { mode: Mode::Bpf, hw_counters: false, ..Default::default() })
        .expect("rtslice BPF tracer");
    println!("Tracing pid {pid}");
    let done = Arc::new(AtomicBool::new(false));
    {
        let done = done.clone();
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            done.store(true, Ordering::Relaxed);
        });
    }
    snapshot_every_second_until(&session, &done);
    session.finish();
}

/// Keeps a tracer session as the daemon does (a snapshot read every second) until `done`.
fn snapshot_every_second_until(session: &TraceSession, done: &AtomicBool) {
    let mut next = Instant::now() + Duration::from_secs(1);
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        if Instant::now() >= next {
            let _ = session.snapshot();
            next += Duration::from_secs(1);
        }
    }
}

fn main() {
    if !rtslice_testkit::is_root() {
        rtslice_testkit::skip::skip(rtslice_testkit::skip::ROOT, "the overhead benchmark loads BPF programs: needs root");
        return;
    }
    let raw: Vec<String> = std::env::args().skip(1).collect();
    // Tracing for a parent run of this benchmark, which holds the kernel lock.
    if let Some(pid) = raw.iter().find_map(|a| a.strip_prefix("--serve-pid=")?.parse().ok()) {
        serve(pid);
        return;
    }
    let _ = EXTERNAL.set(
        raw.iter()
            .filter_map(|a| a.strip_prefix("--external="))
            .filter_map(|e| e.split_once('=').map(|(n, p)| (n.to_string(), p.to_string())))
            .collect(),
    );
    let args: Vec<&String> = raw.iter().filter(|a| !a.starts_with("--")).collect();
    let rounds: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(10);
    let n: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let flag = |f: &str| raw.iter().any(|a| a == f);
    let _lock = rtslice_testkit::KernelLock::acquire();
    let online: Vec<usize> =
        rtslice_sys::procfs::online_cpus().map(|c| c.into_iter().map(|c| c as usize).collect()).unwrap_or_else(|_| vec![0]);
    let cpu = *online.last().unwrap_or(&0);
    set_affinity(&[cpu]);
    let rt = flag("--fifo") && fifo(10);
    let pp = PingPong::start(cpu, rt);
    pp.run(20_000); // warm-up
    let have_bpftrace =
        !flag("--no-bpftrace") && Command::new("bpftrace").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    let mut conds = vec![Cond::None, Cond::Rtslice];
    if std::path::Path::new(RUNQLAT).exists() {
        conds.push(Cond::Runqlat);
        if flag("--stats-cost") {
            conds.push(Cond::RunqlatStats);
        }
    } else {
        eprintln!("{RUNQLAT} not installed (Debian package libbpf-tools): no comparison with runqlat");
    }
    conds.extend((0..EXTERNAL.get().map_or(0, Vec::len)).map(Cond::External));
    if have_bpftrace {
        conds.push(Cond::Bpftrace);
    } else {
        eprintln!("bpftrace left out (not installed, or --no-bpftrace)");
    }
    // results[r][i]: round r, condition conds[i].
    let mut results: Vec<Vec<Option<Sample>>> = Vec::new();
    let steal0 = stolen_s();
    let started = Instant::now();
    for r in 0..rounds {
        let mut row: Vec<Option<Sample>> = conds.iter().map(|_| None).collect();
        for i in 0..conds.len() {
            let k = (r + i) % conds.len();
            let s = measure(conds[k], &pp, n, cpu, &online);
            if let Some(s) = &s {
                eprintln!(
                    "round {r} {:<14} {:>6.0} ns/switch, {:>4.0} ms stolen, {:>4.0} ms to others",
                    conds[k].name(),
                    s.ns_per_switch,
                    s.stolen_s * 1e3,
                    s.others_s * 1e3
                );
            }
            row[k] = s;
        }
        results.push(row);
    }
    let wall_s = started.elapsed().as_secs_f64();
    let steal = stolen_between(&steal0, &stolen_s());

    let col = |i: usize| -> Vec<&Sample> { results.iter().filter_map(|row| row[i].as_ref()).collect() };
    // Paired with the same round's no-tracer run.
    let added = |i: usize| -> Vec<f64> {
        results.iter().filter_map(|row| Some(row[i].as_ref()?.ns_per_switch - row[0].as_ref()?.ns_per_switch)).collect()
    };
    let base = median(&col(0).iter().map(|s| s.ns_per_switch).collect::<Vec<_>>());
    println!();
    println!(
        "pipe ping-pong on CPU {cpu} ({}), {rounds} interleaved rounds of {n} round trips ({} switches, each with its wake-up)",
        if rt { "SCHED_FIFO 10" } else { "SCHED_OTHER" },
        2 * n
    );
    println!("added ns/switch: paired with the round's no-tracer run; median [confidence interval of the median]coverage (min, max over rounds)");
    println!(
        "{:<14} {:>10} {:>7} {:>52} {:>10} {:>10} {:>10} {:>10}",
        "tracer", "ns/switch", "ratio", "added ns/switch", "user CPU%*", "BPF ns/sw", "stolen ms", "others ms"
    );
    for (i, c) in conds.iter().enumerate() {
        let samples = col(i);
        if samples.is_empty() {
            continue;
        }
        let med = median(&samples.iter().map(|s| s.ns_per_switch).collect::<Vec<_>>());
        let add = if *c == Cond::None { "-".to_string() } else { interval(&added(i)) };
        let cpu_pct = median(&samples.iter().map(|s| 100.0 * s.tracer_cpu_ns as f64 / s.wall_ns as f64).collect::<Vec<_>>());
        let bpf: Vec<f64> = samples.iter().filter_map(|s| s.bpf_ns).map(|b| b as f64 / (2 * n) as f64).collect();
        let stolen_ms: f64 = samples.iter().map(|s| s.stolen_s * 1e3).sum();
        let others_ms: f64 = samples.iter().map(|s| s.others_s * 1e3).sum();
        println!(
            "{:<14} {:>10.0} {:>7.3} {:>52} {:>10} {:>10} {:>10.0} {:>10.0}",
            c.name(),
            med,
            med / base,
            add,
            if *c == Cond::None { "-".into() } else { format!("{cpu_pct:.2}") },
            if bpf.is_empty() { "-".to_string() } else { format!("{:.0}", median(&bpf)) },
            stolen_ms,
            others_ms
        );
    }
    if let (Some(rt), Some(rq)) = (conds.iter().position(|c| *c == Cond::Rtslice), conds.iter().position(|c| *c == Cond::Runqlat)) {
        let diff: Vec<f64> =
            results.iter().filter_map(|row| Some(row[rt].as_ref()?.ns_per_switch - row[rq].as_ref()?.ns_per_switch)).collect();
        let (a, b) = (median(&added(rt)), median(&added(rq)));
        println!(
            "rtslice - runqlat, paired by round: {} ns/switch; ratio of median added costs {:.2} (goal: difference ≤ 0)",
            interval(&diff),
            if b > 0.0 { a / b } else { f64::NAN }
        );
    }
    let paired = |a: usize, b: usize| -> Vec<f64> {
        results.iter().filter_map(|row| Some(row[a].as_ref()?.ns_per_switch - row[b].as_ref()?.ns_per_switch)).collect()
    };
    let externals: Vec<usize> = (0..conds.len()).filter(|&i| matches!(conds[i], Cond::External(_))).collect();
    if let Some(rq) = conds.iter().position(|c| *c == Cond::Runqlat) {
        for &e in &externals {
            println!("{} - runqlat, paired by round: {} ns/switch", conds[e].name(), interval(&paired(e, rq)));
        }
    }
    for (k, &a) in externals.iter().enumerate() {
        for &b in &externals[k + 1..] {
            println!("{} - {}, paired by round: {} ns/switch", conds[a].name(), conds[b].name(), interval(&paired(a, b)));
        }
    }
    if let (Some(rq), Some(rs)) = (conds.iter().position(|c| *c == Cond::Runqlat), conds.iter().position(|c| *c == Cond::RunqlatStats)) {
        let diff: Vec<f64> =
            results.iter().filter_map(|row| Some(row[rs].as_ref()?.ns_per_switch - row[rq].as_ref()?.ns_per_switch)).collect();
        println!("cost of BPF run-time statistics (runqlat+stats - runqlat, paired): {} ns/switch", interval(&diff));
    }
    let total: f64 = steal.iter().map(|(_, s)| s).sum();
    println!(
        "host steal over the run ({wall_s:.1} s): {} ({:.2} % of {} CPUs' time); on CPU {cpu} while measuring: {:.0} ms",
        steal.iter().map(|(c, s)| format!("CPU {c} {:.0} ms", s * 1e3)).collect::<Vec<_>>().join(", "),
        100.0 * total / (wall_s * steal.len().max(1) as f64),
        steal.len(),
        results.iter().flatten().flatten().map(|s| s.stolen_s * 1e3).sum::<f64>()
    );
    let (run_s, others_s) = results.iter().flatten().flatten().fold((0.0, 0.0), |(w, o), s| (w + s.wall_ns as f64 / 1e9, o + s.others_s));
    println!(
        "CPU {cpu} given to other tasks and interrupts of this VM while measuring: {:.0} ms of {:.1} s ({:.2} %): the ping-pong's \
         own noise; a busy VM shows here",
        others_s * 1e3,
        run_s,
        100.0 * others_s / run_s.max(1e-9)
    );
    println!("* user CPU: rtslice = its snapshot reads (loading excluded), runqlat and bpftrace = their process");
}
