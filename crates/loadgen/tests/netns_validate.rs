//! Root: the validation path end to end in network namespaces: veth pair with a token bucket, the
//! server as its own process in one namespace, the client in the other, a quick sweep, the Table 3
//! report and the SVG plot. Mechanism `none` here (no reservation); the reserved mechanisms go
//! through rtslice's host crate and are exercised by `rtslice model validate`.

use rtslice_loadgen::experiment::Experiment;
use rtslice_loadgen::validate::{validate, PlainLauncher, ValidateOptions};

#[test]
fn quick_validation_in_namespaces() {
    rtslice_testkit::root_or_skip!();
    let _lock = rtslice_testkit::KernelLock::acquire(); // creates netns, measures latency
    let exp = Experiment::parse(
        "name: smoke\nload: 0.3\nbandwidth: 1.0\nperiod: 2ms\nmechanism: none\nprotocol: udp\n\
         requestBytes: 1000\ninterarrival: [2ms, 5ms]\nquickSamples: 150\nwarmup: 10\nlinkBandwidth: 50Mbit\n",
        "smoke.yaml",
    )
    .unwrap();
    let opts = ValidateOptions {
        quick: true,
        server_command: vec![env!("CARGO_BIN_EXE_rtslice-lg-server").to_string()],
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
    }
    assert!(report.one_way_delay_s > 0.0 && report.one_way_delay_s < 5e-3, "δ = {}", report.one_way_delay_s);
    assert!(report.model.contains("network M/M/1"), "{}", report.model);
    let md = report.to_markdown();
    assert!(md.contains("| 1000 | 0.3 | 1 | none |"), "{md}");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("smoke.svg");
    rtslice_loadgen::plot::write_svg(&report, &svg).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("model mean"), "{}", &text[..200.min(text.len())]);
    // The namespaces are gone afterwards.
    let left = std::process::Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&left.stdout).contains(&opts.tag), "namespaces left behind");
}
