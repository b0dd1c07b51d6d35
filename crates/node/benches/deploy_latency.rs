//! Deploy latency of one workload on a node already holding 50 (issue 12's benchmark), and the read
//! endpoints' requests/s. Real kernel, root (skips otherwise), the KernelLock held throughout.
//!
//! `cargo bench -p rtslice-node --bench deploy_latency` (release). What is timed: `Service::deploy`
//! of one reservation workload — admission by the live planner against the 50, then the host's
//! transaction (its cgroups, budget, journal with its fsyncs, the desired state) — with `launch`
//! omitted, so the workload's own start-up is excluded; each deploy is followed by its removal
//! (untimed). Prints p50, p99 and max over the rounds, then requests/s of `GET /v1/workloads/{name}`,
//! `GET /v1/workloads` and `GET /v1/events` over the unix socket (one client, sequential).
//! Environment: RTSLICE_BENCH_ROUNDS (default 200), RTSLICE_BENCH_HELD (default 50).

use std::time::{Duration, Instant};

use rtslice_node::{Service, ServiceOptions};

fn spec(names: &[String]) -> rtslice_spec::Spec {
    let mut text = "apiVersion: rtslice/v1\nworkloads:\n".to_string();
    for n in names {
        text.push_str(&format!("  - name: {n}\n    demand: {{ reservation: {{ runtime: 5ms, period: 1s, count: 1 }} }}\n"));
    }
    rtslice_spec::parse(&text, "bench.yaml").expect("the bench's spec is valid")
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    use rtslice_testkit::skip;
    // A benchmark's thread is `main`: the skip names the benchmark instead.
    if !rtslice_testkit::is_root() {
        skip::skip_named("deploy_latency", skip::ROOT, "the deploy benchmark changes cgroups: run it as root");
        return;
    }
    if !rtslice_host::doctor().mechanisms.contains(&rtslice_host::Mechanism::RtGroup) {
        skip::skip_named("deploy_latency", skip::RT_GROUPS, "the benchmark's node uses RT groups (cgroup v1 with RT_GROUP_SCHED)");
        return;
    }
    let env = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let rounds = env("RTSLICE_BENCH_ROUNDS", 200);
    let held = env("RTSLICE_BENCH_HELD", 50);
    let _lock = rtslice_testkit::KernelLock::acquire();
    let state = tempfile::tempdir().expect("a temporary directory");
    let opts = ServiceOptions {
        state_dir: state.path().into(),
        node: Default::default(),
        mechanism: Some(rtslice_host::Mechanism::RtGroup),
        grace: Duration::from_secs(1),
        launch_env: Vec::new(),
        boot_id_file: None,
        access: Default::default(),
        resctrl: None,
        hrtick: false,
        fair_server_off: false,
        oci: Default::default(),
    };
    let tag = std::process::id();
    let mut svc = Service::open(opts.clone()).expect("the node opens");
    let names: Vec<String> = (0..held).map(|i| format!("bench{tag}-{i}")).collect();
    let t = Instant::now();
    let out = svc.deploy(&spec(&names)).expect("the 50 deploy");
    assert!(out.iter().all(|o| o.phase == rtslice_node::Phase::Running), "all {held} run");
    eprintln!("{held} workloads deployed in {:.2} s", t.elapsed().as_secs_f64());
    let probe = spec(&[format!("bench{tag}-probe")]);
    // Interleaved: the admission alone (the planner's dry run), then the whole deploy.
    let (mut ms, mut admission) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let t = Instant::now();
        let d = svc.dry_run(&probe);
        admission.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(d[0]["fits"], true);
        let t = Instant::now();
        let o = svc.deploy(&probe).expect("the probe deploys");
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(o[0].phase, rtslice_node::Phase::Running);
        svc.remove(&probe.workloads[0].name).expect("the probe is removed");
    }
    for (what, v) in [("deploy (admission + apply)", &mut ms), ("admission alone (dry run)", &mut admission)] {
        v.sort_by(f64::total_cmp);
        println!(
            "{what} with {held} held: p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  ({rounds} rounds)",
            percentile(v, 0.5),
            percentile(v, 0.99),
            v[v.len() - 1]
        );
    }
    drop(svc);

    // The read endpoints, through the daemon on a unix socket.
    let socket = state.path().join("api.sock");
    let daemon_opts = rtslice_node::DaemonOptions { service: opts, socket: socket.clone(), listen: None, token_file: None, tls: None, reset_on_exit: true, telemetry: None };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(rtslice_node::run_until(daemon_opts, async move {
        let _ = rx.await;
    }));
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    for path in [format!("/v1/workloads/bench{tag}-0"), "/v1/workloads".to_string(), "/v1/events".to_string()] {
        let n = 200;
        let t = Instant::now();
        for _ in 0..n {
            let r = rt.block_on(rtslice_node::request(&socket, "GET", &path, None)).expect("the daemon answers");
            assert_eq!(r.status, 200);
        }
        println!("GET {path}: {:.0} requests/s (one client, a connection per request)", n as f64 / t.elapsed().as_secs_f64());
    }
    let _ = tx.send(());
    rt.block_on(server).expect("the daemon task").expect("the daemon stops and resets the node");
}
