//! `slo:` and `profile:` on a workload: decoded with located errors like every other field, a
//! profile file read through the caller's `SpecFiles` (errors located in that file), and the
//! profile type round-tripping through JSON (the file `rtslice profile` writes).

use std::time::Duration;

use rtslice_spec::*;

fn spec(workload: &str) -> String {
    format!("apiVersion: rtslice/v1\nnode: {{ cpus: 0-1, housekeeping: [0] }}\nworkloads:\n  - name: vbs1\n{workload}")
}

fn errors(text: &str) -> String {
    match parse(text, "s.yaml") {
        Ok(s) => panic!("expected errors, parsed {s:?}"),
        Err(e) => e.to_string(),
    }
}

struct OneFile(&'static str, &'static str);

impl SpecFiles for OneFile {
    fn read(&self, path: &str) -> Result<SpecFile, String> {
        if path == self.0 {
            Ok(SpecFile { name: format!("dir/{path}"), text: self.1.into() })
        } else {
            Err(format!("dir/{path}: no such file"))
        }
    }
}

#[test]
fn inline_profile_and_slo() {
    let s = parse(
        &spec("    slo: { deadlineMissRatio: 1e-3 }\n    profile: { period: 1ms, deadline: 3ms, execution: { p50: 300us, p99: 450us, max: 700us } }\n"),
        "s.yaml",
    )
    .unwrap();
    let w = &s.workloads[0];
    assert_eq!(w.slo, Some(Slo::DeadlineMissRatio(1e-3)));
    let p = w.profile.as_ref().unwrap();
    assert_eq!((p.period, p.deadline, p.execution.max), (Duration::from_millis(1), Duration::from_millis(3), Duration::from_micros(700)));
    // No demand: only the planner knows the reservation.
    assert_eq!(s.effective_demand(w), None);
    // Percent and the p99 form.
    let s = parse(&spec("    slo: { deadlineMissRatio: 5% }\n    profile: { period: 1ms, deadline: 1ms, execution: { max: 700us } }\n"), "s.yaml").unwrap();
    assert_eq!(s.workloads[0].slo, Some(Slo::DeadlineMissRatio(0.05)));
    let s = parse(&spec("    slo: { p99Response: 2ms }\n    profile: { period: 1ms, deadline: 1ms, execution: { max: 700us } }\n"), "s.yaml").unwrap();
    assert_eq!(s.workloads[0].slo, Some(Slo::P99Response(Duration::from_millis(2))));
    // The spec round-trips through to_yaml with the profile inline.
    assert_eq!(parse(&to_yaml(&s), "again.yaml").unwrap(), s);
}

#[test]
fn errors_are_located_with_fixes() {
    let e = errors(&spec("    slo: { deadline_miss_ratio: 1e-3 }\n    profile: { period: 1ms, deadline: 3ms, execution: { max: 700us } }\n"));
    assert!(e.contains("s.yaml:5:12: workloads[0].slo.deadline_miss_ratio: unknown field") && e.contains("did you mean `deadlineMissRatio`"), "{e}");
    let e = errors(&spec("    slo: { deadlineMissRatio: 1 }\n    profile: { period: 1ms, deadline: 3ms, execution: { max: 700us } }\n"));
    assert!(e.contains("workloads[0].slo.deadlineMissRatio: 1 is not a ratio strictly between 0 and 1"), "{e}");
    let e = errors(&spec("    slo: { deadlineMissRatio: 1e-3 }\n"));
    assert!(e.contains("s.yaml:5:10: workloads[0].slo: an SLO needs the workload's demand") && e.contains("rtslice profile"), "{e}");
    let e = errors(&spec("    profile: { period: 1ms, deadline: 3ms, execution: { max: 700us } }\n"));
    assert!(e.contains("workloads[0].profile: a profile is read to size or check a reservation for an SLO"), "{e}");
    let e = errors(&spec("    slo: { p99Response: 2 }\n    profile: { period: 1ms, deadline: 0ms, execution: { p50: 500us, p99: 450us, max: 700us } }\n"));
    assert!(e.contains("workloads[0].slo.p99Response: `2` has no unit"), "{e}");
    assert!(e.contains("workloads[0].profile.deadline: must be above 0"), "{e}");
    assert!(e.contains("workloads[0].profile.execution.p99: p99 450us is below p50 500us"), "{e}");
    let e = errors(&spec("    slo: { deadlineMissRatio: 1e-3 }\n    profile: { period: 1ms, deadline: 3ms, execution: { p50: 300us } }\n"));
    assert!(e.contains("workloads[0].profile.execution.max: missing"), "{e}");
    let e = errors(&spec("    slo: { deadlineMissRatio: 1e-3 }\n    demand: { dedicated: { count: 1 } }\n    profile: { period: 1ms, deadline: 3ms, execution: { max: 700us } }\n"));
    assert!(e.contains("not by dedicated CPUs or best effort"), "{e}");
    // A file named in a spec parsed without files.
    let e = errors(&spec("    slo: { deadlineMissRatio: 1e-3 }\n    profile: vbs1.profile.json\n"));
    assert!(e.contains("workloads[0].profile: cannot read profile file: `vbs1.profile.json` is a file") && e.contains("inline the profile"), "{e}");
}

#[test]
fn profile_files_are_read_through_the_caller() {
    let text = spec("    slo: { deadlineMissRatio: 1e-3 }\n    profile: vbs1.profile.json\n");
    let good = r#"{ "period": "1ms", "deadline": "3ms", "execution": { "p50": "300us", "max": "700us" },
  "histogram": [ { "value": "300us", "count": 90 }, { "value": "700us", "count": 10 } ], "source": "test" }"#;
    let s = parse_with_files(&text, "s.yaml", &OneFile("vbs1.profile.json", good)).unwrap();
    let p = s.workloads[0].profile.as_ref().unwrap();
    assert_eq!(p.histogram.len(), 2);
    assert_eq!(p.histogram[1], HistogramBin { value: Duration::from_micros(700), count: 10 });
    // Errors inside the file point into the file.
    let bad = "{ \"period\": \"1ms\",\n  \"deadline\": \"3ms\",\n  \"execution\": { \"max\": \"700\" } }";
    let e = parse_with_files(&text, "s.yaml", &OneFile("vbs1.profile.json", bad)).unwrap_err().to_string();
    assert!(e.contains("s.yaml:6:14: workloads[0].profile: profile file `dir/vbs1.profile.json` is invalid"), "{e}");
    assert!(e.contains("dir/vbs1.profile.json:3:25: execution.max: `700` has no unit"), "{e}");
    let e = parse_with_files(&text, "s.yaml", &OneFile("other.json", good)).unwrap_err().to_string();
    assert!(e.contains("cannot read profile file: dir/vbs1.profile.json: no such file"), "{e}");
}

#[test]
fn a_profile_round_trips_through_json() {
    let p = Profile {
        period: Duration::from_millis(1),
        deadline: Duration::from_millis(3),
        execution: ExecutionQuantiles {
            min: Some(Duration::from_micros(200)),
            p50: Some(Duration::from_micros(300)),
            p90: None,
            p99: Some(Duration::from_micros(450)),
            p999: None,
            max: Duration::from_micros(700),
        },
        histogram: vec![HistogramBin { value: Duration::from_micros(300), count: 3 }],
        source: Some("pid 1".into()),
    };
    let json = serde_json::to_string_pretty(&p).unwrap();
    assert_eq!(parse_profile(&json, "p.json").unwrap(), p);
}

/// `adapt:` (the node service's closed loop) on a reservation, given or sized for an SLO.
#[test]
fn adapt_on_a_reservation_or_an_slo() {
    let s = parse(&spec("    demand: { reservation: { runtime: 400us, period: 1ms } }\n    adapt: { min: 200us, max: 800us }\n"), "s.yaml").unwrap();
    let a = s.workloads[0].adapt.unwrap();
    assert_eq!((a.min, a.max, a.interval), (Some(Duration::from_micros(200)), Some(Duration::from_micros(800)), DEFAULT_ADAPT_INTERVAL));
    assert_eq!(parse(&to_yaml(&s), "again.yaml").unwrap(), s);
    let s = parse(
        &spec("    slo: { deadlineMissRatio: 1e-3 }\n    profile: { period: 1ms, deadline: 3ms, execution: { max: 700us } }\n    adapt: { interval: 5s }\n"),
        "s.yaml",
    )
    .unwrap();
    assert_eq!(s.workloads[0].adapt.unwrap().interval, Duration::from_secs(5));

    // With a reservation the loop adapts, the SLO is its target and needs no profile.
    let s = parse(&spec("    demand: { reservation: { runtime: 400us, period: 1ms } }\n    slo: { deadlineMissRatio: 1e-3 }\n    adapt: { min: 200us }\n"), "s.yaml").unwrap();
    assert_eq!(s.workloads[0].slo, Some(Slo::DeadlineMissRatio(1e-3)));
    let e = errors(&spec("    demand: { reservation: { runtime: 400us, period: 1ms } }\n    slo: { deadlineMissRatio: 1e-3 }\n"));
    assert!(e.contains("an SLO needs the workload's demand"), "{e}");
    let e = errors(&spec("    adapt: { min: 200us }\n"));
    assert!(e.contains("s.yaml:5:12: workloads[0].adapt: the loop resizes a reservation"), "{e}");
    let e = errors(&spec("    demand: { reservation: { runtime: 400us, period: 1ms } }\n    adapt: { min: 500us, max: 300us }\n"));
    assert!(e.contains("min 500us is above max 300us") && e.contains("runtime 400us is outside [min, max]"), "{e}");
    let e = errors(&spec("    demand: { reservation: { runtime: 400us, period: 1ms } }\n    adapt: { max: 990us, interval: 100ms }\n"));
    assert!(e.contains("workloads[0].adapt.max: 990us is more than the period 1ms allows under the node's cap"), "{e}");
    assert!(e.contains("workloads[0].adapt.interval: 100ms is outside 500ms..1h"), "{e}");
    let e = errors(&spec("    demand: { reservation: { runtime: 400us, period: 1ms } }\n    adapt: { mim: 1us }\n"));
    assert!(e.contains("did you mean `min`"), "{e}");
}
