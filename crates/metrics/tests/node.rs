//! The collector on the real kernel (root; CI runs as root): a workload's cgroup with a process in
//! it, the continuous tracer following it, the report channel attributing datagrams by the
//! sender's cgroup, and the exposition over HTTP.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use rtslice_testkit::{cgroup_mount, KillOnDrop as Sleeper, TempCgroup};
use rtslice_metrics::{encode, NodeMetrics, Options, ReportChannel, Workload};
use rtslice_plan::{Mechanism, Reservation};

/// The workload's directories in the cpuset and cpu hierarchies (the same one on v2).
fn workload_cgroup(name: &str) -> TempCgroup {
    let mounts = ["cpuset", "cpu"].map(|c| cgroup_mount(&[c]).expect("a cgroup hierarchy"));
    TempCgroup::new(&mounts, &format!("metrics-{name}"))
}

/// Shell commands that move the shell itself into every directory of `cg`.
fn enter_script(cg: &TempCgroup) -> String {
    cg.dirs().iter().map(|d| format!("echo $$ > {}/cgroup.procs; ", d.display())).collect()
}

/// A shell in the cgroup(s) that forks a `sleep` every 10 ms, started inside before it forks;
/// killed when dropped (also when an assertion fails).
fn sleeper_in(cg: &TempCgroup) -> Sleeper {
    let enter = enter_script(cg);
    Sleeper(Command::new("sh").args(["-c", &format!("{enter}while :; do sleep 0.01; done")]).spawn().expect("spawn sh"))
}

/// Sends one datagram with socat from inside `cg` (or from the test's own cgroup). socat stays
/// alive for a moment after sending (it waits for the end of its input): the node attributes a
/// report by the sender's cgroup when it reads it, which needs the sender to still exist.
fn send_from(cg: Option<&TempCgroup>, socket: &Path, payload: &str) {
    let enter = cg.map(enter_script).unwrap_or_default();
    let status = Command::new("sh")
        .args(["-c", &format!("{enter}(printf '%s' '{payload}'; sleep 0.3) | socat -u - UNIX-SENDTO:{}", socket.display())])
        .status()
        .expect("sh with socat (Debian package socat)");
    assert!(status.success());
}

/// The value of the sample whose line starts with `prefix` (name and labels, up to the space).
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(prefix) && l[prefix.len()..].starts_with(' '))?.rsplit(' ').next()?.parse().ok()
}

#[test]
fn families_follow_a_workload_and_reports_are_attributed_by_cgroup() {
    rtslice_testkit::root_or_skip!();
    let _lock = rtslice_testkit::KernelLock::acquire();
    let cg = workload_cgroup("a");
    let child = sleeper_in(&cg);
    let metrics = NodeMetrics::new(Options::default());
    let workload = Workload {
        name: "vbs-a".into(),
        cgroup: cg.dir().to_path_buf(),
        cpu_cgroup: cg.dirs().last().unwrap().to_path_buf(),
        cpus: vec![0],
        reservation: Some(Reservation::from_micros(300, 1000)),
        mechanism: Mechanism::RtGroup,
        resctrl_group: None,
    };
    metrics.set_workloads(vec![workload.clone()]).unwrap();
    assert_eq!(metrics.tracer_error(), None);
    let registry = metrics.registry();
    let socket = std::env::temp_dir().join(format!("rtslice-metrics-test-{}.sock", std::process::id()));
    let channel = ReportChannel::bind(&socket, metrics.clone()).unwrap();

    std::thread::sleep(Duration::from_millis(rtslice_testkit::timing_bound("trace window ms", 1000.0, 10000.0) as u64));
    send_from(Some(&cg), &socket, r#"{"v":1,"ttis":1000,"deadline_misses":7,"throughput_bits":123456,"nacks":3}"#);
    send_from(None, &socket, r#"{"v":1,"ttis":5}"#); // the test's own cgroup: no workload
    send_from(Some(&cg), &socket, "ttis 5"); // not the format
    std::thread::sleep(Duration::from_millis(300));
    let stolen_before = rtslice_sys::procfs::stolen_s();
    let text = encode(&registry);
    let stolen_after = rtslice_sys::procfs::stolen_s();
    assert!(text.ends_with("# EOF\n"), "{text}");

    // The shell's wake-ups, in a histogram whose buckets are cumulative and end at +Inf = count.
    let sh = r#"{workload="vbs-a",thread="sh"}"#;
    let count = sample(&text, &format!("rtslice_wakeup_latency_seconds_count{sh}")).expect("the shell's wake-up histogram");
    assert!(count >= 3.0, "{count} wake-ups");
    let inf = sample(&text, r#"rtslice_wakeup_latency_seconds_bucket{le="+Inf",workload="vbs-a",thread="sh"}"#).unwrap();
    assert_eq!(inf, count);
    let bucket_lines: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("rtslice_wakeup_latency_seconds_bucket{le=") && l.contains(r#",workload="vbs-a",thread="sh"} "#))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(bucket_lines.len(), rtslice_metrics::latency_bounds_ns().len() + 1);
    assert!(bucket_lines.windows(2).all(|w| w[0] <= w[1]), "not cumulative: {bucket_lines:?}");
    assert!(text.contains(r#"rtslice_wakeup_latency_seconds_bucket{le="0.000001024",workload="vbs-a",thread="sh"}"#), "{text}");
    // Every `sleep` the shell forked exited; its counts stay in the `sleep` series.
    assert!(sample(&text, r#"rtslice_wakeup_latency_seconds_count{workload="vbs-a",thread="sleep"}"#).unwrap() >= 1.0);
    assert!(sample(&text, r#"rtslice_context_switches_total{workload="vbs-a",thread="sh",kind="voluntary"}"#).unwrap() >= count - 1.0);
    assert!(sample(&text, &format!("rtslice_cpu_seconds_total{sh}")).unwrap() > 0.0);
    assert_eq!(sample(&text, &format!("rtslice_threads{sh}")), Some(1.0));
    assert!(text.contains("rtslice_migrations_total{workload=\"vbs-a\",thread=\"sh\"}"));
    assert!(text.contains("# TYPE rtslice_preemption_latency_seconds histogram"));

    let resv = r#"{workload="vbs-a",mechanism="rt_group"}"#;
    assert_eq!(sample(&text, &format!("rtslice_reservation_runtime_seconds{resv}")), Some(0.0003));
    assert_eq!(sample(&text, &format!("rtslice_reservation_period_seconds{resv}")), Some(0.001));
    assert_eq!(sample(&text, &format!("rtslice_reservation_cpus{resv}")), Some(1.0));
    assert!(sample(&text, &format!("rtslice_reservation_used_seconds_total{resv}")).unwrap() > 0.0);
    assert_eq!(sample(&text, &format!("rtslice_throttled_total{resv}")), Some(0.0));
    assert_eq!(sample(&text, r#"rtslice_cpu_reserved_ratio{cpu="0"}"#), Some(0.3));
    assert_eq!(sample(&text, r#"rtslice_cpu_free_ratio{cpu="0"}"#), Some(0.7));
    assert!(sample(&text, r#"rtslice_irqs_total{cpu="0"}"#).unwrap() > 0.0);
    assert!(sample(&text, r#"rtslice_softirqs_total{cpu="0",kind="timer"}"#).unwrap() > 0.0);
    // The hypervisor's steal is /proc/stat's, read between the two readings around the scrape.
    let stolen = sample(&text, r#"rtslice_cpu_stolen_seconds_total{cpu="0"}"#).unwrap();
    let at = |r: &[(u32, f64)]| r.iter().find(|c| c.0 == 0).unwrap().1;
    assert!(stolen >= at(&stolen_before) && stolen <= at(&stolen_after), "{stolen} s stolen, outside [{}, {}]", at(&stolen_before), at(&stolen_after));

    // The report from inside the workload's cgroup counts for it; the others are refused.
    assert_eq!(sample(&text, r#"rtslice_ttis_total{workload="vbs-a"}"#), Some(1000.0));
    assert_eq!(sample(&text, r#"rtslice_deadline_misses_total{workload="vbs-a"}"#), Some(7.0));
    assert_eq!(sample(&text, r#"rtslice_throughput_bits_total{workload="vbs-a"}"#), Some(123456.0));
    assert_eq!(sample(&text, r#"rtslice_nacks_total{workload="vbs-a"}"#), Some(3.0));
    assert_eq!(sample(&text, r#"rtslice_reports_total{result="accepted"}"#), Some(1.0));
    assert_eq!(sample(&text, r#"rtslice_reports_total{result="unattributed"}"#), Some(1.0));
    assert_eq!(sample(&text, r#"rtslice_reports_total{result="invalid"}"#), Some(1.0));
    assert_eq!(sample(&text, "rtslice_tracer_up"), Some(1.0));
    assert_eq!(sample(&text, "rtslice_workloads"), Some(1.0));
    assert_eq!(sample(&text, "rtslice_collection_errors_total"), Some(0.0));

    // The sender exited: its last report stays counted (counters never go back).
    let again = encode(&registry);
    assert_eq!(sample(&again, r#"rtslice_ttis_total{workload="vbs-a"}"#), Some(1000.0));
    assert!(sample(&again, &format!("rtslice_wakeup_latency_seconds_count{sh}")).unwrap() >= count);

    // Over HTTP, with the OpenMetrics content type.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (status, ctype, body) = rt.block_on(async {
        use tower::ServiceExt;
        let app = rtslice_metrics::router(Arc::new(metrics.registry()));
        let resp = app.oneshot(axum::http::Request::get("/metrics").body(axum::body::Body::empty()).unwrap()).await.unwrap();
        let status = resp.status();
        let ctype = resp.headers()["content-type"].to_str().unwrap().to_string();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 24).await.unwrap();
        (status, ctype, String::from_utf8(body.to_vec()).unwrap())
    });
    assert_eq!(status, 200);
    assert!(ctype.starts_with("application/openmetrics-text"));
    assert!(body.contains(r#"rtslice_wakeup_latency_seconds_count{workload="vbs-a",thread="sh"}"#), "{body}");

    // Removing the workload removes its series and stops following its cgroup.
    metrics.set_workloads(Vec::new()).unwrap();
    let after = encode(&registry);
    assert!(!after.contains("workload=\"vbs-a\""), "{after}");
    drop(channel);
    assert!(!socket.exists(), "the socket file is removed with the channel");
    drop(child);
}

#[test]
fn bad_workloads_are_refused_with_a_reason() {
    let metrics = NodeMetrics::new(Options { trace: false, raw_tp: false });
    let w = Workload {
        name: "x".into(),
        cgroup: "/nonexistent/cg".into(),
        cpu_cgroup: "/nonexistent/cg".into(),
        cpus: vec![0],
        reservation: None,
        mechanism: Mechanism::None,
        resctrl_group: None,
    };
    let e = metrics.set_workloads(vec![w.clone()]).unwrap_err().to_string();
    assert!(e.contains("\"x\"") && e.contains("/nonexistent/cg") && e.contains("does not exist"), "{e}");
    let ok = Workload { cgroup: std::env::temp_dir(), ..w };
    let e = metrics.set_workloads(vec![ok.clone(), ok]).unwrap_err().to_string();
    assert!(e.contains("listed twice"), "{e}");
    // Without the tracer the thread families are empty and say why.
    let text = encode(&metrics.registry());
    assert!(text.contains("rtslice_tracer_up 0"));
    assert!(text.contains("# TYPE rtslice_wakeup_latency_seconds histogram"));
}

#[test]
fn llc_occupancy_and_memory_traffic_come_from_the_workloads_own_resctrl_group() {
    // A directory shaped like resctrl (this machine has none): the workload's group holds its own
    // mon_data, different from the default group's, and only the group's is exported.
    let root = tempfile::tempdir().unwrap();
    rtslice_testkit::resctrl::make(root.path(), &rtslice_testkit::resctrl::xeon_2s());
    std::fs::write(root.path().join("mon_data/mon_L3_00/llc_occupancy"), "99999999\n").unwrap();
    let group = root.path().join("rtslice-du");
    for (l3, occ, mbm) in [("mon_L3_00", 1_048_576u64, 5_000u64), ("mon_L3_01", 524_288, 7_000)] {
        std::fs::create_dir_all(group.join("mon_data").join(l3)).unwrap();
        std::fs::write(group.join("mon_data").join(l3).join("llc_occupancy"), format!("{occ}\n")).unwrap();
        std::fs::write(group.join("mon_data").join(l3).join("mbm_total_bytes"), format!("{mbm}\n")).unwrap();
    }
    let metrics = NodeMetrics::new(Options { trace: false, raw_tp: false });
    let w = Workload {
        name: "du".into(),
        cgroup: std::env::temp_dir(),
        cpu_cgroup: std::env::temp_dir(),
        cpus: vec![0],
        reservation: None,
        mechanism: Mechanism::None,
        resctrl_group: Some(group),
    };
    metrics.set_workloads(vec![w]).unwrap();
    let text = encode(&metrics.registry());
    assert!(text.contains("rtslice_llc_occupancy_bytes{workload=\"du\"} 1572864"), "{text}");
    assert!(text.contains("rtslice_memory_traffic_bytes_total{workload=\"du\"} 12000"), "{text}");
}

/// A sender's last report often arrives after it exited (an emulator sends its final totals and
/// ends): read late it is no longer in any workload's cgroup, and a collection may already have
/// retired its previous report. Both cases still count for its workload, exactly once.
#[test]
fn a_last_report_read_after_its_sender_exited_still_counts_once() {
    rtslice_testkit::root_or_skip!();
    let _lock = rtslice_testkit::KernelLock::acquire();
    let cg = workload_cgroup("late");
    let metrics = NodeMetrics::new(Options { trace: false, raw_tp: false });
    let workload = Workload {
        name: "vbs-late".into(),
        cgroup: cg.dir().to_path_buf(),
        cpu_cgroup: cg.dirs().last().unwrap().to_path_buf(),
        cpus: vec![0],
        reservation: None,
        mechanism: Mechanism::None,
        resctrl_group: None,
    };
    metrics.set_workloads(vec![workload]).unwrap();
    let registry = metrics.registry();
    let ttis = |text: &str| sample(text, r#"rtslice_ttis_total{workload="vbs-late"}"#);
    let exited = |mut s: Sleeper| {
        let pid = s.0.id();
        let _ = s.0.kill();
        let _ = s.0.wait();
        pid
    };

    // 1. Read after the exit, before any collection: the sender's earlier report places it.
    let a = Sleeper(Command::new("sh").args(["-c", &format!("{}exec sleep 30", enter_script(&cg))]).spawn().unwrap());
    std::thread::sleep(Duration::from_millis(200)); // in the cgroup by now
    metrics.record_report(Some(a.0.id()), br#"{"v":1,"ttis":10,"deadline_misses":1}"#);
    let a = exited(a);
    metrics.record_report(Some(a), br#"{"v":1,"ttis":15,"deadline_misses":1}"#);
    assert_eq!(ttis(&encode(&registry)), Some(15.0));

    // 2. Read after a collection retired the sender's previous report: only the difference is added.
    let b = Sleeper(Command::new("sh").args(["-c", &format!("{}exec sleep 30", enter_script(&cg))]).spawn().unwrap());
    std::thread::sleep(Duration::from_millis(200));
    metrics.record_report(Some(b.0.id()), br#"{"v":1,"ttis":100}"#);
    let b = exited(b);
    assert_eq!(ttis(&encode(&registry)), Some(115.0), "b's report retired at this collection");
    metrics.record_report(Some(b), br#"{"v":1,"ttis":120}"#);
    let text = encode(&registry);
    assert_eq!(ttis(&text), Some(135.0), "b's last report adds 20, not 120");
    assert_eq!(sample(&text, r#"rtslice_deadline_misses_total{workload="vbs-late"}"#), Some(1.0));

    // A pid never seen in the workload is still refused.
    metrics.record_report(Some(u32::MAX - 7), br#"{"v":1,"ttis":1000}"#);
    let text = encode(&registry);
    assert_eq!(ttis(&text), Some(135.0));
    assert_eq!(sample(&text, r#"rtslice_reports_total{result="accepted"}"#), Some(4.0));
    assert_eq!(sample(&text, r#"rtslice_reports_total{result="unattributed"}"#), Some(1.0));
}
