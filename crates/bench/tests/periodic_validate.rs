//! Root: the periodic-task model against real SCHED_DEADLINE reservations (`rtslice_bench::periodic`).
//! The quick test checks the path end to end; the full sweep behind `--ignored` writes the table
//! that docs/model.md reports.

use rtslice_bench::periodic::{validate_periodic, PeriodicValidation};

#[test]
fn quick_periodic_validation_under_sched_deadline() {
    rtslice_testkit::root_or_skip!();
    let _lock = rtslice_testkit::KernelLock::acquire(); // real deadline reservations, timing
    // A 15-PRB carrier (about 200 µs of work per TTI on a quiet day): twice its mean demand must
    // still fit in the 1 ms period for the loose point, also on a day when this VM runs it 2-3x
    // slower (2026-11-26: the 25-PRB job took 676 µs per period, and the loose runtime was capped
    // at the period).
    let cfg = PeriodicValidation {
        prb: 15,
        profile_jobs: 1500,
        jobs: 1500,
        rounds: 1,
        periods_s: vec![1e-3],
        demand_multiples: vec![1.1, 2.0],
        ..PeriodicValidation::default_sweep()
    };
    let report = validate_periodic(&cfg, &mut |l| eprintln!("{l}")).unwrap();
    eprintln!("{}", report.table());
    assert_eq!(report.points.len(), 2, "both reservations are stable by the profile");
    let (tight, loose) = (&report.points[0], &report.points[1]);
    for p in &report.points {
        assert_eq!(p.measured.jobs, 1500);
        // The jobs do the same work as the profile: the execution time agrees within 2x (noisy VM).
        let ratio = p.measured.mean_exec_s / report.profile_mean_s;
        assert!((0.5..2.0).contains(&ratio), "mean execution {ratio}x the profile's");
        // Exact enforcement never predicts fewer misses than the tick's credit.
        assert!(p.predicted_exact_miss + 1e-12 >= p.predicted.miss_ratio);
        assert!(p.measured.p50_s >= 0.5 * report.profile_p50_s);
    }
    // The kernel's rules replayed on each run's own per-period CPU time are a floor under the miss
    // ratio the run measured: the host's stalls (time the vCPU is not running, not charged to the
    // job) only add misses. It fails if the reservation were not what the kernel enforced (a job
    // left under SCHED_FIFO misses far less than a tight replay predicts). Measured on this VM:
    // replayed/measured 0.79-1.0 over the 18 points of docs/model.md's two noisy sweeps, 0.12-1.0
    // at the nine points with misses of five quick runs (0.12 when stalls, not the budget, made
    // the misses). The margin is for the replay averaging over tick phases where the run saw one,
    // and for 1500 jobs.
    for p in &report.points {
        let (meas, replay) = (p.measured.miss_ratio, p.replayed_own_miss);
        assert!(
            replay <= 1.25 * meas + 0.01,
            "Q = {:.0} µs: measured miss ratio {meas:.4}, but the kernel's rules replayed on the same run's CPU \
             times give {replay:.4}: the job was not held to its reservation",
            p.runtime_s * 1e6
        );
    }
    assert!(
        tight.utilization > 0.85 && loose.utilization < 0.6,
        "utilizations {:.2} and {:.2}: the profile's mean {:.0} µs per period is too large for this check",
        tight.utilization,
        loose.utilization,
        report.profile_mean_s * 1e6
    );
    // Half the bandwidth of the loose reservation, nearly all of it used: jobs wait for budget after
    // the long ones, so the response's tail grows. The tail, not the median: on a quiet host the
    // median job (~240 µs) fits the tight budget (280-360 µs) and the median response moved only
    // 1.03-1.12x (2026-11-27, 2 of 5 runs below 1.3x), while the p99 grew 4-27x in the 5 runs after
    // (2081 against 516 µs … 13091 against 489). Only with a light tail: when this VM stalls (profile p99 above 3x its
    // median, 2026-11-27 in CI: 2143 against 469 µs) the tight budget is set from a mean the stalls
    // inflate, and the stalls reach both points alike.
    //
    // The margin is against the floor (the same jobs under SCHED_FIFO with no reservation,
    // interleaved), and against the loose point only the order: the loose budget (twice the mean)
    // sits near the profile's p99 job, so its own p99 response falls on either side of the cliff
    // where a job overruns into the next period — 1113 µs against a 665 µs floor in a clean-clone CI
    // run (2026-11-27, tight 1398 µs, failing the old 1.3x-the-loose margin); in the 14 runs after,
    // 1111–2276 µs in 9 and 595–679 µs in the others, the floor 589–688 µs, and the tight point's
    // p99 4086–19112 µs in the last 8.
    let light_tail = report.profile_p99_s <= 3.0 * report.profile_p50_s;
    eprintln!(
        "p99 response: floor {:.0} µs, Q = {:.0} µs {:.0} µs, Q = {:.0} µs {:.0} µs",
        report.floor.p99_s * 1e6,
        tight.runtime_s * 1e6,
        tight.measured.p99_s * 1e6,
        loose.runtime_s * 1e6,
        loose.measured.p99_s * 1e6
    );
    // The loose point's p99 is the host's when the misses its own run's CPU times do not explain
    // (the kernel's rules replayed on them) are 1 % of its jobs or more: then more than 1 % of
    // responses exceed the deadline for reasons outside its budget, and so does its p99. CI on
    // 2026-11-28: 48 of 1500 missed at Q = 790 µs where the replay explains none, p99 10765 µs
    // against the tight point's 4301 µs (max 17 ms: one long stall).
    let hosts_tail = loose.measured.miss_ratio - loose.replayed_own_miss >= 0.01;
    if hosts_tail {
        eprintln!(
            "Q = {:.0} µs: {:.4} of its jobs missed beyond what its own replay explains ({:.4}): its p99 is the host's; \
             only the tight point's against the floor is checked",
            loose.runtime_s * 1e6,
            loose.measured.miss_ratio,
            loose.replayed_own_miss
        );
    }
    if light_tail {
        assert!(
            tight.measured.p99_s > report.floor.p99_s * 1.3 && (hosts_tail || tight.measured.p99_s >= loose.measured.p99_s),
            "p99 response under Q = {:.0} µs: {} s, under Q = {:.0} µs: {} s, with no reservation: {} s",
            tight.runtime_s * 1e6,
            tight.measured.p99_s,
            loose.runtime_s * 1e6,
            loose.measured.p99_s,
            report.floor.p99_s
        );
    } else {
        eprintln!(
            "response ordering not checked: the profile's p99 {:.0} µs is above 3x its median {:.0} µs (a stalling host); \
             the replay agreement above was checked",
            report.profile_p99_s * 1e6,
            report.profile_p50_s * 1e6
        );
    }
    // And the model sees the same: the tight reservation's predicted median is above the loose one's.
    assert!(tight.predicted.p50_s > loose.predicted.p50_s);
}

/// `cargo test -p rtslice-bench --release --test periodic_validate -- --ignored --nocapture`:
/// the sweep of docs/model.md ("Periodic tasks: validation"), written to
/// crates/bench/validation/results/periodic.{md,json}.
#[test]
#[ignore = "about 3 minutes of real-time measurement; run by hand for docs/model.md"]
fn periodic_validation_sweep() {
    rtslice_testkit::root_or_skip!();
    let _lock = rtslice_testkit::KernelLock::acquire();
    let cfg = PeriodicValidation::default_sweep();
    let report = validate_periodic(&cfg, &mut |l| eprintln!("{l}")).unwrap();
    let table = report.table();
    println!("{table}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("validation/results");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("periodic.md"), &table).unwrap();
    // The predicted response distributions are long; the percentiles next to them stay.
    let mut json = serde_json::to_value(&report).unwrap();
    strip(&mut json, "response");
    std::fs::write(dir.join("periodic.json"), serde_json::to_string_pretty(&json).unwrap()).unwrap();
}

fn strip(v: &mut serde_json::Value, key: &str) {
    match v {
        serde_json::Value::Object(m) => {
            m.remove(key);
            m.values_mut().for_each(|x| strip(x, key));
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| strip(x, key)),
        _ => {}
    }
}

