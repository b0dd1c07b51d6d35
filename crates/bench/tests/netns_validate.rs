//! Root: the validation path end to end in network namespaces: veth pair with a token bucket, the
//! server as its own process in one namespace, the client in the other, a quick sweep, the Table 3
//! report and the SVG plot. Mechanism `none` here (no reservation); the reserved mechanisms go
//! through rtslice's host crate and are exercised by `rtslice model validate`.

mod common;

use rtslice_bench::validation::{validate, PlainLauncher, ValidateOptions, ValidationExperiment};

#[test]
fn quick_validation_in_namespaces() {
    rtslice_testkit::root_or_skip!();
    let _lock = rtslice_testkit::KernelLock::acquire(); // creates netns, measures latency
    let exp = ValidationExperiment::parse(
        "name: smoke\nload: 0.3\nbandwidth: 1.0\nperiod: 2ms\nmechanism: none\nprotocol: udp\n\
         requestBytes: 1000\ninterarrival: [2ms, 5ms]\nquickSamples: 150\nwarmup: 10\nlinkBandwidth: 50Mbit\n",
        "smoke.yaml",
    )
    .unwrap();
    let opts = ValidateOptions {
        quick: true,
        // The server as `rtslice model validate` starts it (a test of another crate cannot name
        // loadgen's own small server binary).
        server_command: vec![common::rtslice_bin().display().to_string(), "loadgen".into(), "server".into()],
        client_fifo: None,
        tag: format!("t{}", std::process::id() % 100_000),
        hrtick: None,
        kernel_lock: false, // held above
    };
    let mut lines = Vec::new();
    let report = validate(&exp, &opts, &PlainLauncher, &mut |l| lines.push(l.to_string())).unwrap();
    assert_eq!(report.points.len(), 2);
    for p in &report.points {
        assert_eq!(p.measured.count, 150);
        // The network and the work are real: no round trip beats the mean work's lower tail of 0,
        // but the mean must exceed the mean work itself.
        assert!(p.measured.mean_s > p.mean_compute_s, "{p:?}");
        assert!(p.model_mean_s > 0.0 && p.model_percentile_s > p.model_mean_s);
        // The server's per-request overhead is measured from the counters in its replies.
        let o = p.server_overhead_s.expect("overhead measured");
        assert!(o > 0.0 && o < 5e-3, "overhead {o}");
    }
    assert!(report.corrected_one_way_delay_s <= report.one_way_delay_s);
    assert!(report.one_way_delay_s > 0.0 && report.one_way_delay_s < 5e-3, "δ = {}", report.one_way_delay_s);
    assert!(report.model.contains("network M/M/1"), "{}", report.model);
    let md = report.to_markdown();
    assert!(md.contains("| 1000 | 0.3 | 1 | none |"), "{md}");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("smoke.svg");
    rtslice_bench::validation::write_svg(&report, &svg).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("model mean"), "{}", &text[..200.min(text.len())]);
    // The namespaces are gone afterwards.
    let left = std::process::Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&left.stdout).contains(&opts.tag), "namespaces left behind");
}

/// Root: the same quick run with the server under a real reservation made by rtslice's spec → plan →
/// apply path, for each mechanism this host offers; everything is reset afterwards.
fn quick_reserved(mechanism: &str) {
    use rtslice_bench::validation::HostLauncher;
    rtslice_testkit::root_or_skip!();
    let _lock = rtslice_testkit::KernelLock::acquire();
    let exp = ValidationExperiment::parse(
        &format!(
            "name: smoke-{mechanism}\nload: 0.4\nbandwidth: 0.8\nperiod: 2ms\nmechanism: {mechanism}\n\
             interarrival: [1ms, 3ms]\nquickSamples: 150\nwarmup: 10\n"
        ),
        "smoke.yaml",
    )
    .unwrap();
    let tag = format!("{}{}", &mechanism[..1], std::process::id() % 100_000);
    let opts = ValidateOptions {
        quick: true,
        // The server as `rtslice model validate` starts it (a test of another crate cannot name
        // loadgen's own small server binary).
        server_command: vec![common::rtslice_bin().display().to_string(), "loadgen".into(), "server".into()],
        client_fifo: Some(50),
        tag: tag.clone(),
        hrtick: None,
        kernel_lock: false, // held above
    };
    let report = validate(&exp, &opts, &HostLauncher::new(&tag), &mut |l| eprintln!("{l}")).unwrap();
    let expected = if mechanism == "deadline" { "by deadline" } else { "by rt_group" };
    assert!(report.reservation.contains("1600us every 2ms") && report.reservation.contains(expected), "{}", report.reservation);
    assert!(report.reservation_spec.as_deref().unwrap_or("").contains("runtime: 1600us"));
    for p in &report.points {
        assert_eq!(p.measured.count, 150, "{p:?}");
        assert!(p.measured.mean_s > p.mean_compute_s, "{p:?}");
    }
    assert!(!std::path::Path::new(&format!("/run/rtslice-loadgen/{tag}")).exists(), "state dir left behind");
    let cgroups = std::process::Command::new("find").args(["/sys/fs/cgroup", "-maxdepth", "4", "-name", &format!("*{tag}*")]).output().unwrap();
    assert!(String::from_utf8_lossy(&cgroups.stdout).trim().is_empty(), "cgroups left: {}", String::from_utf8_lossy(&cgroups.stdout));
}

#[test]
fn quick_validation_under_deadline() {
    quick_reserved("deadline");
}

#[test]
fn quick_validation_under_rt_group() {
    quick_reserved("rt-group");
}
