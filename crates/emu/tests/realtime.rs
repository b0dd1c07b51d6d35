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

/// A light cell in the real-time classes runs as configured: every thread in the class it asked
/// for, one TTI per millisecond, every transport block decoded, the decoded payload forwarded. How
/// many deadlines it meets on a host is measured, not judged: the host's stalls decide that on
/// this VM (a FIFO 99 clock thread held off 4-16 ms), and study A's benchmark reports the idle vBS's
/// misses with intervals (`rtslice bench examples/experiments/study-a-tables.yaml`, docs/results.md).
#[test]
fn light_load_in_the_rt_class_runs_every_tti_in_its_classes() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let s = run(light(Profile::OaiLte, 5)).expect("emulator runs");
    eprintln!("{}", line(&s));
    for t in &s.threads {
        assert_eq!(t.class, t.class_requested, "{}: {:?}", t.name, t.note);
    }
    assert!(s.threads.iter().any(|t| t.class == Class::Fifo), "RT threads must run SCHED_FIFO");
    // The clock releases one TTI per millisecond of wall time, stalls or not (it catches up).
    assert!(s.ttis >= 4_950, "a 5 s run has ~5,000 TTIs, got {}", s.ttis);
    assert_eq!(s.decode_failures, 0, "25 dB is far above MCS 16's threshold");
    // In time or late, a block decoded is delivered: what arrived in time is at most what was offered.
    assert!(s.throughput_bps <= s.offered_bps * 1.0001 && s.throughput_bps > 0.0, "{}", line(&s));
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
    // Every code block that was decoded came back decoded: none failed (the lock orders the
    // workers; a lost or duplicated block would fail its CRC or never return). A TTI's uplink left
    // undone because the host held the clock back past the radio buffer is the host's timing, not
    // the lock's: counted in the log only.
    let s = run(cfg()).expect("emulator runs");
    eprintln!("{}", line(&s));
    assert!(s.ttis > 900, "{}", line(&s));
    assert_eq!(s.decode_failures, 0, "every code block decoded: {}", line(&s));
    assert!(s.throughput_bps > 0.0, "decoded blocks were delivered: {}", line(&s));
    let mut lte = light(Profile::OaiLte, 1);
    lte.pi_locks = true;
    assert!(matches!(run(lte), Err(rtslice_emu::EmuError::Invalid(m)) if m.contains("--pi-locks")));
}
