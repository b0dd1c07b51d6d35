//! A real Prometheus (Debian's `prometheus`, installed by `make deps`) scrapes `rtslice metrics
//! serve` while an emulated vBS runs under a reservation applied by `rtslice apply`, and
//! `rtslice trace` measures the same threads at the same time. PromQL through Prometheus' HTTP API
//! must agree with the trace (p99 wake-up latency, within the histogram's bucket widths) and with
//! the emulator's own summary (TTIs and deadline misses it reported over the report channel).
//! Root (CI runs as root); takes the host-wide kernel-test lock.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use rtslice_testkit::prom::{free_port, http_get, now_unix, promql_quantile_band_ns, trace_quantile_ns, trace_wakeup_buckets, value_of, wait_for, Prometheus};
use rtslice_testkit::{skip, skip_unless, KillOnDrop, OnDrop};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_rtslice");
/// How long `rtslice trace` and the PromQL windows look at the workload.
const WINDOW_S: u64 = 30;

/// `rtslice reset` of the test's own state directory `state` when dropped.
fn reset_on_drop(state: PathBuf) -> OnDrop<impl FnOnce()> {
    OnDrop::new(move || {
        let out = Command::new(BIN).args(["reset", "--state-dir"]).arg(&state).output();
        if let Ok(o) = out {
            if !o.status.success() {
                eprintln!("rtslice reset: {}", String::from_utf8_lossy(&o.stderr));
            }
        }
    })
}

#[test]
fn prometheus_scrapes_metrics_that_agree_with_trace_and_the_emulator() {
    skip_unless!(rtslice_testkit::is_root(), skip::ROOT, "needs root (apply, BPF; CI runs as root)");
    let _lock = rtslice_testkit::KernelLock::acquire();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let socket = dir.path().join("report.sock");
    let emu_out = dir.path().join("emu.json");
    let emu_s = WINDOW_S + 20;

    // One emulated vBS (OAI LTE, 1 ms TTIs, its threads SCHED_FIFO as the real stack's) on CPU 1
    // under a 60 % RT group reservation (a period of several 4 ms ticks: HZ=250 without HRTICK).
    let spec = format!(
        r#"apiVersion: rtslice/v1
node:
  name: metrics-test
  housekeeping: 0
workloads:
  - name: vbs
    launch:
      command: [sh, -c, "exec env RTSLICE_REPORT_SOCKET={sock} {bin} emulate --profile oai-lte --duration {emu_s}s --load 20% --json > {out}"]
    demand:
      reservation: {{ runtime: 12ms, period: 20ms, count: 1 }}
"#,
        sock = socket.display(),
        bin = BIN,
        out = emu_out.display()
    );
    let spec_path = dir.path().join("spec.yaml");
    std::fs::write(&spec_path, spec).unwrap();

    let metrics_port = free_port();
    // The metrics server first, so the report socket exists when the emulator starts.
    let server = KillOnDrop(
        Command::new(BIN)
            .args(["metrics", "serve", "--listen", &format!("127.0.0.1:{metrics_port}"), "--refresh", "500ms", "--state-dir"])
            .arg(&state)
            .arg("--report-socket")
            .arg(&socket)
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    wait_for("rtslice metrics serve", Duration::from_secs(30), || http_get(metrics_port, "/metrics").is_ok_and(|(s, _)| s == 200));

    let prom = Prometheus::start(dir.path(), &[format!("127.0.0.1:{metrics_port}")]);

    let out = Command::new(BIN).args(["apply", "--mechanism", "rt_group", "--state-dir"]).arg(&state).arg(&spec_path).output().unwrap();
    assert!(out.status.success(), "apply: {}", String::from_utf8_lossy(&out.stderr));
    let _applied = reset_on_drop(state.clone());

    // The server follows the state directory: wait until its tracer sees the emulator's threads.
    wait_for("the workload's series", Duration::from_secs(30), || {
        http_get(metrics_port, "/metrics").is_ok_and(|(_, b)| b.contains("rtslice_wakeup_latency_seconds_count{workload=\"vbs\""))
    });
    // Let the emulator settle (calibration, thread start) before the window.
    std::thread::sleep(Duration::from_secs(5));

    // `rtslice trace` of the same workload over the window, while Prometheus scrapes.
    let trace = Command::new(BIN)
        .args(["trace", "--workload", "vbs", "--duration", &format!("{WINDOW_S}s"), "--json", "-q", "--require-bpf", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    let trace_end = now_unix();
    assert!(trace.status.success(), "trace: {}", String::from_utf8_lossy(&trace.stderr));
    let report: Value = serde_json::from_slice(&trace.stdout).expect("trace JSON");
    // Let the scrape that follows the window's end land.
    std::thread::sleep(Duration::from_secs(2));

    // 1. The issue's query, per series: one finite p99 per thread of the workload that woke up.
    let per_thread = prom.query("histogram_quantile(0.99, rate(rtslice_wakeup_latency_seconds_bucket[30s]))", trace_end);
    let vbs: Vec<&Value> = per_thread.iter().filter(|s| s["metric"]["workload"] == "vbs").collect();
    assert!(vbs.iter().filter(|s| value_of(s).is_finite()).count() >= 3, "per-thread p99s: {per_thread:?}");

    // 2. The workload's p99 over all its threads: Prometheus vs the trace's fine histogram.
    let q = format!("histogram_quantile(0.99, sum by (le) (rate(rtslice_wakeup_latency_seconds_bucket{{workload=\"vbs\"}}[{WINDOW_S}s])))");
    let prom_p99_s = value_of(prom.query(&q, trace_end).first().expect("a p99 for the workload"));
    let merged = trace_wakeup_buckets(&report);
    let events: u64 = merged.iter().map(|b| b.2).sum();
    assert!(events >= 10_000, "the trace saw only {events} wake-ups in {WINDOW_S} s");
    let trace_p99_ns = trace_quantile_ns(&merged, 0.99) as f64;
    // Tolerance from the bucket widths (derived in promql_quantile_band_ns).
    let (lo, hi) = promql_quantile_band_ns(&rtslice_metrics::latency_bounds_ns(), trace_p99_ns);
    eprintln!(
        "p99 wake-up latency: Prometheus {:.1} µs, rtslice trace {:.1} µs ({} events); accepted {:.1}..{:.1} µs",
        prom_p99_s * 1e6,
        trace_p99_ns / 1e3,
        events,
        lo / 1e3,
        hi / 1e3
    );
    assert!(prom_p99_s * 1e9 >= lo && prom_p99_s * 1e9 <= hi, "Prometheus p99 {prom_p99_s} s disagrees with the trace's {trace_p99_ns} ns");

    // 3. Wake-up counts over the window agree (same events, counted by two readers of one map).
    let prom_events =
        value_of(&prom.query(&format!("sum(increase(rtslice_wakeup_latency_seconds_count{{workload=\"vbs\"}}[{WINDOW_S}s]))"), trace_end)[0]);
    let ratio = prom_events / events as f64;
    eprintln!("wake-ups in the window: Prometheus {prom_events:.0}, rtslice trace {events} (ratio {ratio:.3})");
    // increase() extrapolates the scraped samples to the window's edges; a 1 s scrape interval in
    // a 30 s window bounds the difference at about 2/30.
    assert!((ratio - 1.0).abs() <= 2.5 / WINDOW_S as f64, "wake-ups: Prometheus {prom_events} vs trace {events}");

    // 4. The SLIs: the emulator's last report carries its final totals; Prometheus must hold exactly
    // the summary the emulator printed, and the miss rate PromQL gives must match its ratio.
    wait_for("the emulator's summary", Duration::from_secs(emu_s + 60), || {
        std::fs::read_to_string(&emu_out).is_ok_and(|t| serde_json::from_str::<Value>(&t).is_ok())
    });
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&emu_out).unwrap()).unwrap();
    std::thread::sleep(Duration::from_secs(3)); // a scrape after the last report
    let at = now_unix();
    let ttis = value_of(&prom.query("rtslice_ttis_total{workload=\"vbs\"}", at)[0]);
    let misses = value_of(&prom.query("rtslice_deadline_misses_total{workload=\"vbs\"}", at)[0]);
    let nacks = value_of(&prom.query("rtslice_nacks_total{workload=\"vbs\"}", at)[0]);
    eprintln!("emulator: {} TTIs, {} misses, {} NACKs; Prometheus: {ttis} TTIs, {misses} misses, {nacks} NACKs", summary["ttis"], summary["deadline_misses"], summary["nacks"]);
    assert_eq!(ttis, summary["ttis"].as_u64().unwrap() as f64);
    assert_eq!(misses, summary["deadline_misses"].as_u64().unwrap() as f64);
    assert_eq!(nacks, summary["nacks"].as_u64().unwrap() as f64);
    let miss_rate_q = format!("rate(rtslice_deadline_misses_total{{workload=\"vbs\"}}[{WINDOW_S}s]) / rate(rtslice_ttis_total{{workload=\"vbs\"}}[{WINDOW_S}s])");
    let rate = value_of(&prom.query(&miss_rate_q, trace_end)[0]);
    let tti_rate = value_of(&prom.query(&format!("rate(rtslice_ttis_total{{workload=\"vbs\"}}[{WINDOW_S}s])"), trace_end)[0]);
    eprintln!("miss rate over the window: {rate:.5} (emulator's whole run: {:.5}); TTIs/s {tti_rate:.1}", misses / ttis.max(1.0));
    assert!(rate.is_finite() && (0.0..=1.0).contains(&rate), "miss rate {rate}");
    // 1 ms TTIs: about 1000 per second, reported once a second.
    assert!((tti_rate - 1000.0).abs() <= 1000.0 * 2.5 / WINDOW_S as f64, "TTIs/s {tti_rate}");
    // The window's misses (extrapolated by rate()) cannot be more than the whole run's.
    assert!(rate * tti_rate * WINDOW_S as f64 <= misses * (1.0 + 2.5 / WINDOW_S as f64) + 1.0, "miss rate {rate} vs {misses} misses in the run");

    drop(server);
}
