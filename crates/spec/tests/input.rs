//! What a user can feed the parser besides well-formed specs: anchors and aliases, merge keys,
//! binary files, and pairs of values of which only one is wrong.

use std::time::Duration;

use rtslice_spec::*;

fn errors(text: &str) -> Vec<String> {
    match parse(text, "t.yaml") {
        Ok(s) => panic!("expected errors, got {s:?}"),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn an_invalid_period_is_the_only_error_of_its_runtime_period_pair() {
    let text = "apiVersion: rtslice/v1
flavors:
  f1: { vcpus: 1, runtime: 500ms, period: 10s }
  f2: { vcpus: 1, runtime: 10ms, period: 20ms }
workloads:
  - name: a
    demand: { reservation: { runtime: 500ms, period: 10s } }
  - name: b
    flavor: f2
    hints: { runtime: 300ms, period: 9s }
  - name: c
    flavor: f1
    hints: { runtime: 300ms }
";
    assert_eq!(
        errors(text),
        [
            "t.yaml:3:43: flavors.f1.period: period 10s is outside the kernel's range 100us–4194304us",
            "t.yaml:7:54: workloads[0].demand.reservation.period: period 10s is outside the kernel's range 100us–4194304us",
            "t.yaml:10:38: workloads[1].hints.period: period 9s is outside the kernel's range 100us–4194304us",
        ],
        "no `runtime is longer than the period 100ms` against the default that stood in, and no \
         `no flavor named f1` for a flavor that has errors"
    );
}

#[test]
fn an_invalid_default_period_is_reported_once() {
    let text = "apiVersion: rtslice/v1
node: { defaultPeriod: 1h }
workloads:
  - name: a
    demand: { reservation: { runtime: 500ms } }
";
    assert_eq!(errors(text), ["t.yaml:2:24: node.defaultPeriod: period 3600s is outside the kernel's range 100us–4194304us"]);
}

#[test]
fn an_invalid_runtime_is_the_only_error_of_its_pair() {
    let text = "apiVersion: rtslice/v1
workloads:
  - name: a
    demand: { reservation: { runtime: 5, period: 1ms } }
";
    assert_eq!(errors(text), ["t.yaml:4:39: workloads[0].demand.reservation.runtime: `5` has no unit; write e.g. `5us`, `5ms` or `5s`"]);
}

#[test]
fn a_valid_pair_is_still_checked_against_each_other_and_the_default() {
    let e = errors("apiVersion: rtslice/v1\nworkloads:\n  - name: a\n    demand: { reservation: { runtime: 500ms } }\n");
    assert_eq!(e, ["t.yaml:4:39: workloads[0].demand.reservation.runtime: runtime 500ms is longer than the period 100ms; a CPU cannot give more than 100% (use more CPUs)"]);
}

const WITH_ALIASES: &str = "apiVersion: rtslice/v1
node: { cpus: 0-7, housekeeping: [0] }
workloads:
  - name: du1
    demand: { reservation: &rt { runtime: 600us, period: 1ms, count: 2 } }
    threads: &du-threads
      - { match: '^ru-thread$', policy: fifo, priority: 90, slots: [0] }
      - { match: '^phy-', policy: fifo, priority: 80 }
  - name: du2
    demand: { reservation: *rt }
    threads: *du-threads
";

#[test]
fn anchors_and_aliases_read_as_the_values_written_out() {
    let written_out = WITH_ALIASES
        .replace("&rt ", "")
        .replace(" &du-threads", "")
        .replace("*rt", "{ runtime: 600us, period: 1ms, count: 2 }")
        .replace(
            "    threads: *du-threads\n",
            "    threads:\n      - { match: '^ru-thread$', policy: fifo, priority: 90, slots: [0] }\n      - { match: '^phy-', policy: fifo, priority: 80 }\n",
        );
    let aliased = parse(WITH_ALIASES, "a.yaml").unwrap();
    assert_eq!(aliased, parse(&written_out, "b.yaml").unwrap());
    assert_eq!(aliased.workloads[1].threads.len(), 2);
    assert!(matches!(&aliased.workloads[1].demand, Some(Demand::Reservation(r)) if r.runtime == Duration::from_micros(600)));
}

#[test]
fn an_error_inside_an_aliased_value_names_the_path_where_it_is_used() {
    let text = "apiVersion: rtslice/v1
flavors:
  f: { vcpus: 1 }
workloads:
  - name: a
    demand: { reservation: &rt { runtime: 2ms, period: 1ms } }
  - name: b
    demand: { reservation: *rt }
";
    let e = errors(text);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].starts_with("t.yaml:6:43: workloads[0].demand.reservation.runtime: runtime 2ms is longer"), "{e:?}");
    assert!(e[1].starts_with("t.yaml:6:43: workloads[1].demand.reservation.runtime: runtime 2ms is longer"), "{e:?}");
}

#[test]
fn merge_keys_are_explained() {
    let text = "apiVersion: rtslice/v1
workloads:
  - name: a
    demand: { reservation: { runtime: 1ms, period: 10ms } }
  - <<: {demand: {bestEffort: {}}}
    name: b
";
    let e = errors(text);
    assert!(
        e.iter().any(|l| l.starts_with("t.yaml:5:5: workloads[1].<<: unknown field `<<`; merge keys (`<<: *anchor`) are not part of YAML 1.2")),
        "{e:?}"
    );
}

#[test]
fn binary_bytes_are_not_utf8_text() {
    let e = utf8_text(b"apiVersion: rtslice/v1\n\x00\x01\xc0\xaf", "bin.yaml").unwrap_err();
    assert_eq!(e.to_string(), "bin.yaml:2:3: not UTF-8 text: byte 25 (0xc0) is not valid UTF-8; is this a binary file? save it as UTF-8 YAML");
    assert_eq!(utf8_text("node: ünïcode\n".as_bytes(), "u.yaml").unwrap(), "node: ünïcode\n");
}

#[test]
fn the_restart_policy_is_a_word_or_a_mapping_with_its_backoff() {
    let spec = |restart: &str| {
        format!("apiVersion: rtslice/v1\nworkloads:\n  - name: du\n    launch: {{ command: [sleep, \"1\"] }}\n    restart: {restart}\n")
    };
    let w = |restart: &str| rtslice_spec::parse(&spec(restart), "t.yaml").unwrap().workloads.remove(0).restart;
    assert_eq!(w("on-failure").policy, rtslice_spec::RestartPolicy::OnFailure);
    assert_eq!(w("on-failure").backoff, rtslice_spec::DEFAULT_BACKOFF);
    let r = w("{ policy: always, backoff: 200ms, maxBackoff: 2s }");
    assert_eq!((r.policy, r.backoff, r.max_backoff), (rtslice_spec::RestartPolicy::Always, Duration::from_millis(200), Duration::from_secs(2)));
    // 200 ms, 400 ms, 800 ms, 1.6 s, then capped at 2 s.
    let delays: Vec<u128> = (1..=6).map(|n| r.delay(n).as_millis()).collect();
    assert_eq!(delays, [200, 400, 800, 1600, 2000, 2000]);
    assert_eq!(r.delay(200), Duration::from_secs(2), "no overflow after many restarts");
    // Every error is located at the value it is about.
    assert_eq!(errors(&spec("on-failur")), ["t.yaml:5:14: workloads[0].restart: unknown value `on-failur`; did you mean `on-failure`?"]);
    let e = errors(&spec("{ policy: always, backoff: 0s }"));
    assert!(e.len() == 1 && e[0].contains("workloads[0].restart.backoff: must be more than 0"), "{e:?}");
    let e = errors(&spec("{ policy: always, backoff: 10s, maxBackoff: 1s }"));
    assert!(e.len() == 1 && e[0].contains("workloads[0].restart.maxBackoff:") && e[0].contains("shorter"), "{e:?}");
    let e = errors(&spec("{ backoff: 1s }"));
    assert!(e.len() == 1 && e[0].contains("workloads[0].restart.policy: missing"), "{e:?}");
    let e = errors(&spec("{ policy: always, tries: 3 }"));
    assert!(e.len() == 1 && e[0].contains("tries"), "{e:?}");
    // Only a launched workload can be started again.
    let attach = "apiVersion: rtslice/v1\nworkloads:\n  - name: du\n    launch: { pid: 1 }\n    restart: always\n";
    let e = errors(attach);
    assert!(e.len() == 1 && e[0].contains("workloads[0].restart: only a workload rtslice launches"), "{e:?}");
    // Round trip through serde (desired.json, the API) keeps it.
    let parsed = rtslice_spec::parse(&spec("{ policy: on-failure, backoff: 2s }"), "t.yaml").unwrap();
    let back = rtslice_spec::parse(&rtslice_spec::to_yaml(&parsed), "t.yaml").unwrap();
    assert_eq!(parsed.workloads[0].restart, back.workloads[0].restart);
}
