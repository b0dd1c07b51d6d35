//! The spec parser: full-featured input, every kind of error located, examples round-trip,
//! and no input (arbitrary or mutated) makes it panic.

use std::time::Duration;

use proptest::prelude::*;
use rtslice_spec::*;

const FULL: &str = r#"
apiVersion: rtslice/v1
node:
  name: edge-1
  cpus: 0-7
  housekeeping: [0]
  cap: 90%
  defaultPeriod: 2ms
  policy: best-fit
flavors:
  rt.small: { vcpus: 1, runtime: 100ms, period: 200ms, memory: 1GiB }
  rt.quad: { vcpus: 4, runtime: 60ms, period: 100ms, memory: 4096MB }
  web: { vcpus: 2 }
workloads:
  - name: ims
    flavor: rt.small
    hints: { runtime: 1.4ms, period: 2ms }
    launch:
      command: [kamailio, -DD, -f, /etc/kamailio.cfg]
      env: { THREADS: 4, DEBUG: false }
      cwd: /var/run
  - name: du1
    launch: { oci: /var/lib/bundles/du1 }
    demand:
      reservation: { runtime: 500us, count: 2 }
    isolation: { shield: true, wideAffinity: true }
    threads:
      - match: ^L1_rx
        policy: deadline
        share: 60%
      - match: ^L1_tx
        policy: deadline
      - match: ^ru_thread$
        policy: deadline
        runtime: 100us
        deadline: 500us
        period: 1ms
        slots: 1
      - match: ^Tpool
        policy: rr
        priority: 50
        slots: 0-1
      - match: .
        policy: batch
        nice: 5
    irqs:
      - match: ^iavf-vf1-
        slots: 1
    net:
      - interface: ^veth-du1$
        rps: any
        xps: [0]
  - name: logger
    launch: { pid: 4242 }
    demand:
      bestEffort: { weight: 50, cap: 50% }
  - name: monitor
    launch: { cgroup: /sys/fs/cgroup/cpu/monitor }
  - name: cu
    demand:
      dedicated: { cpus: 6-7 }
"#;

#[test]
fn full_spec_parses() {
    let s = parse(FULL, "full.yaml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.node.cpus, NodeCpus::List((0..8).collect()));
    assert_eq!(s.node.housekeeping, vec![0]);
    assert!((s.node.cap - 0.9).abs() < 1e-12);
    assert_eq!(s.node.default_period, Duration::from_millis(2));
    assert_eq!(s.node.policy, FitPolicy::BestFit);
    assert_eq!(s.flavors["rt.quad"].memory, Some(4096 * 1024 * 1024));
    let ims = &s.workloads[0];
    // A hint wins over the flavor, the rest comes from the flavor.
    match s.effective_demand(ims).unwrap() {
        Demand::Reservation(r) => {
            assert_eq!(r.runtime, Duration::from_micros(1400));
            assert_eq!(r.period, Some(Duration::from_millis(2)));
            assert_eq!(r.count, Some(1));
        }
        d => panic!("{d:?}"),
    }
    assert_eq!(s.effective_memory(ims), Some(1 << 30));
    match ims.launch.as_ref().unwrap() {
        Launch::Command { command, env, cwd } => {
            assert_eq!(command[0], "kamailio");
            assert_eq!(env["THREADS"], "4");
            assert_eq!(env["DEBUG"], "false");
            assert_eq!(cwd.as_deref(), Some("/var/run"));
        }
        l => panic!("{l:?}"),
    }
    let du = &s.workloads[1];
    assert_eq!(du.launch, Some(Launch::Oci { bundle: "/var/lib/bundles/du1".into() }));
    assert!(du.isolation.shield && du.isolation.wide_affinity && !du.isolation.isolcpus);
    assert_eq!(du.threads.len(), 5);
    assert_eq!(du.threads[0].policy, SchedPolicy::Deadline { runtime: None, deadline: None, period: None, share: Some(0.6) });
    assert_eq!(du.threads[3].slots, Slots::List(vec![0, 1]));
    assert_eq!(du.threads[4].policy, SchedPolicy::Batch { nice: Some(5) });
    assert_eq!(du.net[0].rps, Some(Slots::Any));
    assert_eq!(du.net[0].xps, Some(Slots::List(vec![0])));
    assert_eq!(s.workloads[2].launch, Some(Launch::Pid { pid: 4242 }));
    assert_eq!(s.workloads[2].demand, Some(Demand::BestEffort(BestEffort { weight: Some(50), cap: Some(0.5), cpus: None })));
    assert_eq!(s.effective_demand(&s.workloads[3]), Some(Demand::BestEffort(BestEffort::default())));
    assert_eq!(s.workloads[4].demand, Some(Demand::Dedicated(Dedicated { count: None, cpus: Some(vec![6, 7]) })));
}

#[test]
fn yaml_and_json_round_trip() {
    let s = parse(FULL, "full.yaml").unwrap();
    let again = parse(&to_yaml(&s), "again.yaml").unwrap_or_else(|e| panic!("{e}\n{}", to_yaml(&s)));
    assert_eq!(again, s);
    let json = serde_json::to_string(&s).unwrap();
    let back: Spec = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s);
}

#[test]
fn shipped_examples_parse_and_round_trip() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.extension().is_some_and(|e| e == "yaml") && (name.starts_with("study-") || name == "two-socket-smt.yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let s = parse(&text, &path.display().to_string()).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(parse(&to_yaml(&s), "rt").unwrap(), s, "{}", path.display());
            n += 1;
        }
    }
    assert!(n >= 10, "study A and B examples and the 2-socket one present ({n})");
}

/// Parses and returns the errors as `line:col path: reason` strings.
fn errors(text: &str) -> Vec<String> {
    match parse(text, "t.yaml") {
        Ok(s) => panic!("expected errors, got {s:?}"),
        Err(e) => e.iter().map(|e| format!("{}:{} {}: {}", e.line, e.column, e.path, e.reason)).collect(),
    }
}

fn has(errs: &[String], needle: &str) {
    assert!(errs.iter().any(|e| e.contains(needle)), "no error containing `{needle}` in {errs:#?}");
}

#[test]
fn several_errors_at_once_with_positions_and_paths() {
    let e = errors(
        "apiVersion: rtslice/v1
node:
  cpus: 0-3
  housekeeping: 5
  cap: 0
workloads:
  - name: a
    demand:
      reservation: { runtime: 10, period: 50us }
  - name: a
    demand:
      dedicated: { cpus: 2-4, count: 2 }
    threads:
      - match: x
        policy: fifo
        nice: 3
  - name: b c
    flavor: missing
    demand:
      bestEffort: { weight: 0 }
    isolation: { shield: yes }
",
    );
    has(&e, "4:17 node.housekeeping: CPU 5 is not on the node");
    has(&e, "5:8 node.cap: the cap must be above 0");
    has(&e, "9:31 workloads[0].demand.reservation.runtime: `10` has no unit");
    has(&e, "9:43 workloads[0].demand.reservation.period: period 50us is outside the kernel's range 100us–4194304us");
    has(&e, "workloads[1].name: `a` is already the name of workloads[0]");
    has(&e, "workloads[1].demand.dedicated.cpus: CPU 4 is not on the node");
    has(&e, "workloads[1].demand.dedicated.cpus: 3 CPU(s) listed but count is 2");
    has(&e, "workloads[1].threads[0].priority: missing; fifo needs a priority");
    has(&e, "workloads[1].threads[0].nice: `nice` does not apply to policy `fifo`");
    has(&e, "workloads[2].name: `b c` cannot name a cgroup");
    has(&e, "workloads[2].flavor: no flavor named `missing`");
    has(&e, "workloads[2].demand: give either `demand` or `flavor`");
    has(&e, "workloads[2].demand.bestEffort.weight: 0 is out of range");
    has(&e, "workloads[2].isolation.shield: expected true or false");
    // Reported in file order.
    let lines: Vec<usize> = parse("x", "t").err().into_iter().flat_map(|e| e.0).map(|e| e.line).collect();
    assert!(lines.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn unknown_fields_are_rejected_everywhere() {
    let e = errors(
        "apiVersion: rtslice/v1
extra: 1
node: { cpus: 0-1, polcy: worst-fit }
flavors:
  f: { vcpus: 1, runtme: 1ms }
workloads:
  - name: w
    lauch: { pid: 1 }
    flavor: f
    hints: { vcpu: 2 }
    threads:
      - match: a
        prio: 3
    irqs:
      - match: b
        cpu: 1
",
    );
    has(&e, "2:1 extra: unknown field `extra`");
    has(&e, "3:20 node.polcy: unknown field `polcy`; did you mean `policy`?");
    has(&e, "5:18 flavors.f.runtme: unknown field `runtme`; did you mean `runtime`?");
    has(&e, "8:5 workloads[0].lauch: unknown field `lauch`; did you mean `launch`?");
    has(&e, "workloads[0].hints.vcpu: unknown field `vcpu`; did you mean `vcpus`?");
    has(&e, "workloads[0].threads[0].prio: unknown field `prio`; did you mean `priority`?");
    has(&e, "workloads[0].irqs[0].cpu: unknown field");
}

#[test]
fn impossible_values() {
    let base = "apiVersion: rtslice/v1\nnode: { cpus: 0-3, housekeeping: 0 }\nworkloads:\n";
    let cases: &[(&str, &str)] = &[
        ("  - name: w\n    demand: { reservation: { runtime: 20ms, period: 10ms } }\n", "longer than the period"),
        ("  - name: w\n    demand: { reservation: { runtime: 1ms, period: 5s } }\n", "outside the kernel's range"),
        ("  - name: w\n    demand: { reservation: { runtime: 1ms, cpus: 0 } }\n", "housekeeping CPU"),
        ("  - name: w\n    demand: { reservation: { runtime: 0ms } }\n", "runtime above 0"),
        ("  - name: w\n    demand: { reservation: { runtime: 1 parsec } }\n", "unknown unit"),
        ("  - name: w\n    demand: { dedicated: {} }\n", "how many CPUs"),
        ("  - name: w\n    demand: { dedicated: { count: 1 }, bestEffort: {} }\n", "exclude each other"),
        ("  - name: w\n    demand: { reservation: { runtime: 1ms, count: 2 } }\n    threads: [{ match: a, slots: 2 }]\n", "slot 2 does not exist"),
        ("  - name: w\n    threads: [{ match: a, policy: rr, priority: 0 }]\n", "0 is out of range"),
        ("  - name: w\n    threads: [{ match: a, policy: other, nice: 20 }]\n", "20 is out of range"),
        ("  - name: w\n    threads: [{ match: a, policy: realtime }]\n", "unknown policy `realtime`"),
        ("  - name: w\n    threads: [{ match: a, policy: deadline, runtime: 2ms, deadline: 1ms, period: 4ms }]\n", "exceeds the deadline"),
        ("  - name: w\n    threads: [{ match: a, policy: deadline, runtime: 1ms, deadline: 5ms, period: 4ms }]\n", "deadline 5ms exceeds the period 4ms"),
        ("  - name: w\n    threads: [{ match: a, policy: deadline, runtime: 500ns, period: 1ms }]\n", "at least 1024ns"),
        ("  - name: w\n    threads: [{ match: a, policy: deadline, share: 70% }, { match: b, policy: deadline, share: 40% }]\n", "add up to 110%"),
        ("  - name: w\n    threads: [{ match: a, policy: fifo, priority: 9, period: 50us }]\n", "outside the kernel's range"),
        ("  - name: w\n    demand: { reservation: { runtime: 1ms } }\n    threads: [{ match: a, policy: other, period: 1ms }]\n", "give the rule a `share` too"),
        ("  - name: w\n    demand: { reservation: { runtime: 1ms } }\n    threads: [{ match: a, share: 30%, period: 500us }]\n", "outside the kernel's range 1ms–1s"),
        ("  - name: w\n    demand: { reservation: { runtime: 1ms } }\n    threads: [{ match: a, share: 0 }]\n", "a share must be above 0"),
        (
            "  - name: w\n    demand: { reservation: { runtime: 1ms } }\n    threads: [{ match: a, share: 20%, period: 5ms }, { match: b, share: 20%, period: 10ms }]\n",
            "workloads[0].threads[1].period: the workload's `other` rules share one CFS pool with one period, and workloads[0].threads[0] gives it 5ms",
        ),
        ("  - name: w\n    demand: { reservation: { runtime: 1ms } }\n    threads: [{ match: a, share: 100% }]\n", "leave its real-time threads nothing"),
        ("  - name: w\n    demand: { reservation: { runtime: 1ms } }\n    threads: [{ match: a, policy: deadline, share: 70% }, { match: b, share: 40% }]\n", "deadline and `other` shares add up to 110%"),
        ("  - name: w\n    demand: { bestEffort: {} }\n    threads: [{ match: a, share: 40% }]\n", "this workload has none"),
        ("  - name: w\n    threads: [{ match: a, policy: batch, share: 40% }]\n", "`share` does not apply to policy `batch`"),
        ("  - name: w\n    threads: [{ match: \"a{2,1}\" }]\n", "not a valid regular expression"),
        ("  - name: w\n    irqs: [{ slots: 0 }]\n", "action-name regex"),
        ("  - name: w\n    net: [{ interface: eth0 }]\n", "give `rps`, `xps` or both"),
        ("  - name: w\n    launch: { command: [] }\n", "the command is empty"),
        ("  - name: w\n    launch: { pid: 3, cgroup: /x }\n", "exclude each other"),
        ("  - name: w\n    launch: { oci: /b, env: { A: b } }\n", "applies to `command` only"),
        ("  - name: w\n    launch: { command: [x], args: [y] }\n", "`args` applies to `podman` only"),
        ("  - name: w\n    launch: { podman: \"\" }\n", "an empty image reference"),
        ("  - name: w\n    launch: { podman: img, options: --rm }\n", "expected a list of strings"),
        ("  - name: w\n    launch: { podman: img, oci: /b }\n", "exclude each other"),
        ("  - name: w\n    isolation: { shield: true }\n", "not best-effort"),
        ("  - name: w\n    hints: { runtime: 1ms }\n", "has no `flavor`"),
        ("  - name: w\n    memory: lots\n", "not a number"),
        ("  - name: w\n    demand: { bestEffort: { cpus: 7 } }\n", "CPU 7 is not on the node"),
    ];
    for (body, needle) in cases {
        let e = errors(&format!("{base}{body}"));
        has(&e, needle);
    }
}

#[test]
fn document_level_errors() {
    has(&errors(""), "the file is empty");
    has(&errors("workloads: []"), "apiVersion: missing");
    has(&errors("apiVersion: rtslice/v9"), "`rtslice/v9` is not supported");
    has(&errors("- a\n- b"), "the spec must be a mapping");
    has(&errors("apiVersion: rtslice/v1\n---\napiVersion: rtslice/v1\n"), "more than one YAML document");
    has(&errors("apiVersion: [unclosed"), "not valid YAML");
    has(&errors("apiVersion: rtslice/v1\napiVersion: rtslice/v1\n"), "not valid YAML");
    has(&errors("apiVersion: rtslice/v1\nnode: &n { cpus: 0-1 }\nworkloads:\n  - name: w\n    launch: *n\n"), "unknown field `cpus`");
}

#[test]
fn defaults() {
    let s = parse("apiVersion: rtslice/v1\n", "min.yaml").unwrap();
    assert_eq!(s.node, rtslice_spec::Node::default());
    assert_eq!(s.node.cpus, NodeCpus::Discovered);
    assert_eq!(s.node.cap, 0.95);
    assert!(s.workloads.is_empty());
}

/// Text the parser is likely to meet: the examples with bytes deleted, duplicated or replaced.
fn mutated_example() -> impl Strategy<Value = String> {
    let sources: Vec<String> = [
        include_str!("../../../examples/study-b-worst-fit.yaml"),
        include_str!("../../../examples/study-a-ia-ta.yaml"),
        include_str!("../../../examples/study-a-cloud-ran.yaml"),
        FULL,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    (0..sources.len(), proptest::collection::vec((any::<prop::sample::Index>(), 0u8..4, any::<char>()), 1..8)).prop_map(
        move |(i, edits)| {
            let mut chars: Vec<char> = sources[i].chars().collect();
            for (at, op, c) in edits {
                if chars.is_empty() {
                    break;
                }
                let k = at.index(chars.len());
                match op {
                    0 => {
                        chars.remove(k);
                    }
                    1 => chars.insert(k, c),
                    2 => chars[k] = c,
                    _ => {
                        // Duplicate a slice: repeats keys, breaks indentation.
                        let end = (k + 12).min(chars.len());
                        let piece: Vec<char> = chars[k..end].to_vec();
                        chars.splice(k..k, piece);
                    }
                }
            }
            chars.into_iter().collect()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,200}") {
        let _ = parse(&s, "fuzz.yaml");
        let _ = import_tosca(&s, "fuzz.yaml");
    }

    #[test]
    fn yaml_shaped_text_never_panics(s in "(apiVersion|node|cpus|workloads|demand|reservation|runtime|  |- |: |\\{|\\}|\\[|\\]|,|\n|0-3|1ms|name|x|&a|\\*a|!!str|\"|')*") {
        let _ = parse(&s, "fuzz.yaml");
    }

    #[test]
    fn mutated_examples_never_panic_and_errors_are_located(text in mutated_example()) {
        match parse(&text, "m.yaml") {
            Ok(spec) => {
                // Whatever parses must survive a write/read cycle unchanged.
                prop_assert_eq!(parse(&to_yaml(&spec), "rt").unwrap(), spec);
            }
            Err(errs) => {
                prop_assert!(!errs.is_empty());
                for e in errs.iter() {
                    prop_assert!(e.line >= 1 && e.column >= 1, "{}", e);
                    prop_assert!(!e.reason.is_empty());
                }
            }
        }
    }
}

#[test]
fn rust_built_specs_write_valid_yaml() {
    let spec = Spec {
        node: rtslice_spec::Node { cpus: NodeCpus::List((0..8).collect()), housekeeping: vec![0], ..Default::default() },
        workloads: vec![
            Workload::new("vbbu")
                .with_demand(Demand::dedicated(vec![4, 5, 6, 7]))
                .with_launch(Launch::Command { command: vec!["emu".into()], env: Default::default(), cwd: None })
                .with_thread(ThreadRule::new("^ru$", SchedPolicy::fifo(90), Slots::List(vec![0])))
                .with_irq("^eth1-", Slots::List(vec![3])),
            Workload::new("rt").with_demand(Demand::reservation(Duration::from_micros(500), Duration::from_millis(1), 2)),
            Workload::new("be").with_demand(Demand::best_effort(None)),
        ],
        ..Spec::default()
    };
    let text = to_yaml(&spec);
    assert_eq!(parse(&text, "generated.yaml").unwrap_or_else(|e| panic!("{e}\n{text}")), spec);
}

#[test]
fn a_two_socket_topology_in_a_few_lines() {
    let s = parse(include_str!("../../../examples/two-socket-smt.yaml"), "two-socket-smt.yaml").unwrap();
    let t = s.node.topology.clone().expect("declared");
    assert_eq!(t.smt, Smt::Offset(32));
    let cores = t.cores(&(0..64).collect::<Vec<u32>>());
    assert_eq!(cores.len(), 32);
    assert_eq!(cores[1], vec![1, 33]);
    assert_eq!(t.numa[1], (16..32).chain(48..64).collect::<Vec<u32>>());
    assert_eq!(t.nics["ens1f0"], 1);
    let du1 = &s.workloads[0].isolation;
    assert_eq!((du1.smt, du1.locality), (SmtIsolation::WholeCore, Locality::Numa));
    // Interleaved numbering pairs neighbours; a listed core form and `none` read too.
    let one = Topology { smt: Smt::Offset(1), ..Topology::default() };
    assert_eq!(one.cores(&[0, 1, 2, 3, 4]), vec![vec![0, 1], vec![2, 3], vec![4]]);
    let text = "apiVersion: rtslice/v1\nnode:\n  cpus: 0-3\n  topology: { smt: [\"0,2\", \"1,3\"] }\n";
    assert_eq!(parse(text, "t.yaml").unwrap().node.topology.unwrap().smt, Smt::Cores(vec![vec![0, 2], vec![1, 3]]));
}

#[test]
fn topology_errors_are_located() {
    let e = errors(
        "apiVersion: rtslice/v1
node:
  cpus: 0-7
  topology:
    smt: \"*2\"
    llc: [\"0-4\", \"4-8\"]
    numa: [\"0-3\"]
    nics: { eth0: 1 }
workloads:
  - name: be
    isolation: { smt: whole-core, locality: rack }
",
    );
    has(&e, "5:10 node.topology.smt: `*2` is not an SMT layout; write `+N`");
    has(&e, "6:18 node.topology.llc[1]: CPU 4 (also in node.topology.llc[0]): a CPU belongs to one LLC group");
    has(&e, "node.topology.llc[1]: CPU 8 is not on the node");
    has(&e, "7:11 node.topology.numa: CPU 4-7 is in no NUMA node; list every node CPU");
    has(&e, "11:23 workloads[0].isolation.smt: `whole-core` keeps real-time work apart from best-effort siblings; this workload is best-effort");
    has(&e, "workloads[0].isolation.locality: unknown value `rack`");
    let e = errors("apiVersion: rtslice/v1\nnode:\n  cpus: 0-7\n  topology: { numa: [\"0-7\"], nics: { eth0: 1 } }\n");
    has(&e, "4:44 node.topology.nics.eth0: NUMA node 1 has no CPUs in `numa` (1 node(s) listed)");
    let e = errors("apiVersion: rtslice/v1\nnode:\n  topology: { nics: { eth0: 0 } }\n");
    has(&e, "node.topology.nics.eth0: a NIC's NUMA node means something only with `numa`");
}

#[test]
fn devices_parse_in_canonical_form_and_round_trip() {
    let text = r#"apiVersion: rtslice/v1
node:
  cpus: 0-7
  topology:
    numa: ["0-3", "4-7"]
    devices: { "0000:3B:02.1": 1, "af:00.0": 0 }
workloads:
  - name: du1
    launch: { oci: /var/lib/bundles/du1 }
    demand: { reservation: { runtime: 500us, period: 1ms, count: 2 } }
    devices:
      - pci: "3b:02.1"
      - pci: 0000:af:00.0
        irqs: 1
  - name: du2
    devices: [{ pci: "0000:d8:00.0", irqs: keep }]
"#;
    let s = parse(text, "d.yaml").unwrap_or_else(|e| panic!("{e}"));
    let du1 = &s.workloads[0].devices;
    assert_eq!(du1[0].pci.to_string(), "0000:3b:02.1");
    assert_eq!((du1[0].irqs.clone(), du1[1].irqs.clone()), (DeviceIrqs::Slots(Slots::Any), DeviceIrqs::Slots(Slots::List(vec![1]))));
    assert_eq!(s.workloads[1].devices[0].irqs, DeviceIrqs::Keep);
    let t = s.node.topology.as_ref().unwrap();
    assert_eq!(t.devices.iter().map(|(a, n)| (a.as_str(), *n)).collect::<Vec<_>>(), vec![("0000:3b:02.1", 1), ("0000:af:00.0", 0)]);
    let yaml = to_yaml(&s);
    assert!(yaml.contains("pci: \"0000:3b:02.1\"") && yaml.contains("irqs: keep"), "{yaml}");
    assert_eq!(parse(&yaml, "again.yaml").unwrap_or_else(|e| panic!("{e}\n{yaml}")), s);
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(serde_json::from_str::<Spec>(&json).unwrap(), s);
}

#[test]
fn device_errors_are_located() {
    let e = errors(
        r#"apiVersion: rtslice/v1
node:
  cpus: 0-3
  topology: { numa: ["0-3"], devices: { "0000:3b:02.1": 1, "3b:2.9": 0 } }
workloads:
  - name: a
    demand: { reservation: { runtime: 100us, period: 1ms } }
    devices:
      - pci: "0000:3b:02.1"
      - pci: "3b:02.1"
      - pci: "0000:3b:32.1"
      - { pci: "0000:3b:03.0", irqs: 2 }
      - { irqs: 0 }
      - { pci: "0000:3b:04.0", bar: 1 }
  - name: b
    devices: [{ pci: "0000:3B:02.1" }]
"#,
    );
    has(&e, "4:57 node.topology.devices.0000:3b:02.1: NUMA node 1 has no CPUs in `numa`");
    has(&e, "node.topology.devices: `3b:2.9` is not a PCI address: the function is one digit 0-7");
    has(&e, "10:14 workloads[0].devices[1].pci: 0000:3b:02.1 is already workloads[0].devices[0]");
    has(&e, "workloads[0].devices[2].pci: `0000:3b:32.1` is not a PCI address: the device number is at most 1f");
    has(&e, "workloads[0].devices[3].irqs: slot 2 does not exist: the workload has 1 CPU(s)");
    has(&e, "workloads[0].devices[4].pci: missing; give the device's PCI address");
    has(&e, "workloads[0].devices[5].bar: unknown field");
    has(&e, "16:22 workloads[1].devices[0].pci: 0000:3b:02.1 is already passed to workloads[0]; a device serves one workload");
}

#[test]
fn a_podman_launch_with_its_arguments_and_options() {
    let text = "apiVersion: rtslice/v1\nworkloads:\n  - name: du\n    launch:\n      podman: oci:/srv/images/vbs\n      args: [--profile, oai-lte]\n      options: [--env, A=b]\n    restart: {policy: on-failure}\n";
    let s = rtslice_spec::parse(text, "t.yaml").unwrap();
    assert_eq!(
        s.workloads[0].launch,
        Some(Launch::Podman { image: "oci:/srv/images/vbs".into(), args: vec!["--profile".into(), "oai-lte".into()], options: vec!["--env".into(), "A=b".into()] })
    );
}

/// An `other` rule's `share` (and its CFS period) is read as given and located when wrong
/// (`impossible_values` has the refusals).
#[test]
fn an_other_rule_with_a_share_is_a_cfs_pool() {
    let s = parse(
        "apiVersion: rtslice/v1\nnode: { cpus: 0-3, housekeeping: 0 }\nworkloads:\n  - name: gnb\n    demand: { reservation: { runtime: 900us, period: 1ms } }\n    threads:\n      - { match: ^ru$, policy: fifo, priority: 90 }\n      - { match: ^Tpool, share: 25%, period: 5ms }\n",
        "pool.yaml",
    )
    .unwrap();
    let w = &s.workloads[0];
    assert_eq!(w.threads[1].policy, SchedPolicy::Other { nice: None, share: Some(0.25), period: Some(std::time::Duration::from_millis(5)) });
    assert_eq!(rtslice_spec::pool_share(&w.threads), Some(0.25));
    // Two pool rules may name its one period alike, or only one of them name it.
    for rules in ["[{ match: a, share: 20%, period: 5ms }, { match: b, share: 20%, period: 5ms }]", "[{ match: a, share: 20% }, { match: b, share: 20%, period: 5ms }]"] {
        let s = parse(&format!("apiVersion: rtslice/v1\nnode: {{ cpus: 0-3, housekeeping: 0 }}\nworkloads:\n  - name: w\n    demand: {{ reservation: {{ runtime: 1ms }} }}\n    threads: {rules}\n"), "pool.yaml");
        assert!(s.is_ok(), "{rules}: {:?}", s.err());
    }
    let e = errors("apiVersion: rtslice/v1\nnode: { cpus: 0-3, housekeeping: 0 }\nworkloads:\n  - name: w\n    threads:\n      - { match: a, share: 40% }\n");
    has(&e, "workloads[0].threads[0].share");
}
