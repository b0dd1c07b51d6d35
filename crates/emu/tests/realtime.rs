//! Real-kernel proof of the emulator's timing behaviour and thread model (needs root: RT classes).

use std::time::{Duration, Instant};

use rtslice_emu::{os, run, Class, Config, Profile, SchedMode, EmuSummary};
use rtslice_testkit::{root_or_skip, KernelLock};

/// A light cell: 1 of 6 PRB scheduled every TTI (a fraction of one core even in a debug build).
fn light(profile: Profile, secs: u64) -> Config {
    let mut c = Config::new(profile);
    c.prb = Some(6);
    c.traffic = Some(1.0 / 6.0);
    c.duration = Duration::from_secs(secs);
    c.numerology = 0;
    c
}

fn line(s: &EmuSummary) -> String {
    format!(
        "{} ttis={} misses={} (ul_late {} dl_late {} dropped {}) nacks={} thr={:.2}/{:.2} Mbit/s proc p50/p99/max={:.0}/{:.0}/{:.0} µs clock wake p99/max={:.0}/{:.0} µs predicted load {:.0}% cpu {:.0}%",
        s.profile, s.ttis, s.deadline_misses, s.misses.ul_late, s.misses.dl_late, s.misses.ul_dropped,
        s.nacks, s.throughput_bps / 1e6, s.offered_bps / 1e6, s.proc_p50_us, s.proc_p99_us, s.proc_max_us,
        s.clock_wakeup_p99_us, s.clock_wakeup_max_us, s.load_predicted_percent, s.cpu_percent_total
    )
}

/// Runs `cfg()` beside a FIFO 99 sentinel on every CPU (rtslice_testkit::sentinel), up to three
/// times, until a run has no `bad` TTIs (`what`), and returns that run; `check` runs on every run.
/// The VM's host can hold off even a SCHED_FIFO 99 thread for milliseconds (DEVELOPERS.md:
/// cyclictest max 4–10 ms idle), or run a vCPU at a fraction of its speed, on one vCPU while the
/// other runs on; the sentinels record those spans. A run's bad TTIs are excused only when the
/// host's stalls during it explain them all, and then it is rerun; more than they explain fail the
/// test: the emulator's own threads, the highest real-time priorities after the sentinels, on an
/// otherwise idle machine, failed where the host did not make them. `None` (said loudly) when
/// every run's bad TTIs were the host's: it, not the emulator, decided the outcome.
fn run_excusing_host_stalls(cfg: impl Fn() -> Config, what: &str, bad: impl Fn(&EmuSummary) -> u64, check: impl Fn(&EmuSummary)) -> Option<EmuSummary> {
    let cpus = rtslice_sys::procfs::online_cpus().expect("online CPUs");
    let sentinel = rtslice_testkit::sentinel::Sentinel::start(&cpus);
    if let Some(why) = &sentinel.failed {
        eprintln!("no sentinel ({why}): every one of the {what} counts against the emulator");
    }
    let mut excused = Vec::new();
    for _attempt in 0..3 {
        let from = rtslice_sys::time::monotonic_ns();
        let s = run(cfg()).expect("emulator runs");
        let stalls = sentinel.between(from, rtslice_sys::time::monotonic_ns(), 1_000_000, 3);
        eprintln!(
            "{}; host stalls: {} ({:.1} ms, explain ≤ {} TTIs; {} seen only in the sentinel's hand-offs)",
            line(&s),
            stalls.count,
            stalls.total_ms,
            stalls.explained_misses,
            stalls.handoffs_only
        );
        check(&s);
        let n = bad(&s);
        if n == 0 {
            return Some(s);
        }
        assert!(
            n <= stalls.explained_misses,
            "{n} {what}, more than the {} host stalls on CPUs {cpus:?} explain ({:.1} ms in all, ≤ {} TTIs; the \
             clock thread's max wake-up {:.0} µs): {}",
            stalls.count,
            stalls.total_ms,
            stalls.explained_misses,
            s.clock_wakeup_max_us,
            line(&s)
        );
        excused.push(format!("{n} {what}, {} stalls of {:.1} ms", stalls.count, stalls.total_ms));
    }
    eprintln!("INCONCLUSIVE: three runs each had only the {what} host stalls explain ({excused:?}); rerun on a quiet machine");
    None
}

#[test]
fn light_load_in_the_rt_class_meets_every_deadline_for_10_s() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let check = |s: &EmuSummary| {
        for t in &s.threads {
            assert_eq!(t.class, t.class_requested, "{}: {:?}", t.name, t.note);
        }
        assert!(s.threads.iter().any(|t| t.class == Class::Fifo), "RT threads must run SCHED_FIFO");
        assert!(s.ttis >= 9_900, "a 10 s run has ~10,000 TTIs, got {}", s.ttis);
        assert_eq!(s.decode_failures, 0, "25 dB is far above MCS 16's threshold");
    };
    let Some(s) = run_excusing_host_stalls(|| light(Profile::OaiLte, 10), "deadline misses", |s| s.deadline_misses, check) else { return };
    assert_eq!(s.nacks, 0);
    assert!((s.throughput_bps - s.offered_bps).abs() / s.offered_bps < 0.01, "all TBs in time");
    assert!(s.userplane.packets_received > 0, "decoded payload is forwarded over UDP");
}

#[test]
fn thread_names_and_policies_in_proc_match_each_profile() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let pid = std::process::id();
    for profile in [Profile::OaiLte, Profile::Srsenb, Profile::NrGnb] {
        let expected = profile.threads(profile.defaults().workers);
        let mut cfg = light(profile, 3);
        cfg.sched = SchedMode::Profile;
        let runner = std::thread::spawn(move || run(cfg));
        let t0 = Instant::now();
        let mut seen = Vec::new();
        // Poll until every thread of the profile is visible (threads start after calibration).
        while t0.elapsed() < Duration::from_secs(20) {
            seen = std::fs::read_dir(format!("/proc/{pid}/task"))
                .expect("task dir")
                .filter_map(|e| {
                    let tid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
                    let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
                    Some((comm.trim().to_string(), os::task_policy(pid, tid)?))
                })
                .collect::<Vec<_>>();
            if expected.iter().all(|e| seen.iter().any(|(n, _)| *n == e.name)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for e in &expected {
            let (_, (class, prio)) = seen
                .iter()
                .find(|(n, _)| *n == e.name)
                .unwrap_or_else(|| panic!("{}: thread {} not in /proc (saw {:?})", profile.name(), e.name, seen));
            assert_eq!((*class, *prio), (e.class, e.priority), "{}: {} policy in /proc", profile.name(), e.name);
        }
        let s = runner.join().expect("runner thread").expect("emulator runs");
        assert_eq!(s.threads.len(), expected.len());
    }
}

#[test]
fn forcing_sched_other_runs_every_thread_under_cfs() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let mut cfg = light(Profile::Srsenb, 1);
    cfg.sched = SchedMode::Force(Class::Other);
    let s = run(cfg).expect("emulator runs");
    assert!(s.threads.iter().all(|t| t.class == Class::Other && t.priority == 0), "{:?}", s.threads);
    assert!(s.ttis > 900);
}

/// `--pi-locks`: nr-gnb's Tpool queue on a PI futex still hands every code block to one worker and
/// decodes them all (the lock orders the workers; it must not lose or duplicate blocks), and the
/// option is refused for a profile without that queue.
#[test]
fn nr_gnb_with_a_pi_queue_lock_decodes_every_code_block() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let cfg = || {
        let mut cfg = light(Profile::NrGnb, 1);
        cfg.pi_locks = true;
        cfg
    };
    // Every code block came back decoded: none failed and no TTI's uplink was left undone. A block
    // decoded late is still decoded (a NACK by its deadline): the host's stalls make those, and CI's
    // busy 2-vCPU runner made one (2026-11-27), so lateness is not this test's question. A TTI's
    // uplink is also left undone when the radio buffer overflows — the clock held back 10 ms — which
    // a CI run's host did (2026-11-28: 54 of 1,000, the 5 % load using 65 % of a CPU): those only
    // as far as the host's stalls explain them.
    let check = |s: &EmuSummary| {
        assert!(s.ttis > 900, "{}", line(s));
        assert_eq!(s.decode_failures, 0, "every code block decoded: {}", line(s));
    };
    run_excusing_host_stalls(cfg, "uplink TTIs left undone", |s| s.misses.ul_dropped, check);
    let mut lte = light(Profile::OaiLte, 1);
    lte.pi_locks = true;
    assert!(matches!(run(lte), Err(rtslice_emu::EmuError::Invalid(m)) if m.contains("--pi-locks")));
}
