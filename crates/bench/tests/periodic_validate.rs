//! Root: the periodic-task model's validation path against real SCHED_DEADLINE reservations
//! (`rtslice_bench::periodic`), end to end: every job runs under the budget the kernel enforced.
//! The full sweep that compares predicted with measured misses is a benchmark
//! (`cargo bench -p rtslice-bench --bench periodic_validate`), its table in docs/model.md.

use rtslice_bench::periodic::{validate_periodic, PeriodicValidation};

#[test]
fn quick_periodic_validation_under_sched_deadline() {
    rtslice_testkit::root_or_skip!();
    let _lock = rtslice_testkit::KernelLock::acquire(); // real deadline reservations, timing
    // A 15-PRB carrier (about 200 µs of work per TTI on a quiet day): twice its mean demand must
    // still fit in the 1 ms period for the loose point, also on a day when this VM runs it 2-3x
    // slower (a larger carrier's loose runtime then reached the period and was capped).
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
    // How the tail grows with a tighter budget, and how the model's predictions compare with the
    // measured misses, is the benchmark's to measure (benches/periodic_validate.rs, docs/model.md):
    // on this VM the host's stalls decide the p99s as often as the budgets do.
    eprintln!(
        "p99 response: floor {:.0} µs, Q = {:.0} µs {:.0} µs, Q = {:.0} µs {:.0} µs",
        report.floor.p99_s * 1e6,
        tight.runtime_s * 1e6,
        tight.measured.p99_s * 1e6,
        loose.runtime_s * 1e6,
        loose.measured.p99_s * 1e6
    );
    // And the model sees the same: the tight reservation's predicted median is above the loose one's.
    assert!(tight.predicted.p50_s > loose.predicted.p50_s);
}
