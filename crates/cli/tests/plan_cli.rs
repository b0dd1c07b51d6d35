//! The shipped examples, planned by the real `rtslice` binary: exit codes, cpusets, pins, JSON schema.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rtslice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtslice")).args(args).current_dir(root()).output().expect("run rtslice")
}

/// Plans an example as JSON on an 8-CPU host (the examples' node), whatever this machine has.
fn plan_json(example: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["plan", example, "--json", "--online", "0-7"];
    if !extra.contains(&"--isolcpus") {
        args.extend_from_slice(&["--isolcpus", ""]);
    }
    args.extend_from_slice(extra);
    let out = rtslice(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("{example}: not JSON ({e}): {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code().unwrap(), json)
}

fn workload<'a>(plan: &'a Value, name: &str) -> &'a Value {
    plan["workloads"].as_array().unwrap().iter().find(|w| w["name"] == name).unwrap_or_else(|| panic!("{name} not admitted: {plan:#}"))
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array().unwrap_or_else(|| panic!("not a list: {v}")).iter().map(|x| x.as_u64().unwrap()).collect()
}

fn thread_cpus(w: &Value, pattern: &str) -> Value {
    w["threads"].as_array().unwrap().iter().find(|t| t["pattern"] == pattern).unwrap()["cpus"].clone()
}

#[test]
fn study_b_worst_fit_reproduces_the_paper() {
    let (code, p) = plan_json("examples/study-b-worst-fit.yaml", &[]);
    assert_eq!(code, 1, "a rejection exits 1");
    assert_eq!(ids(&workload(&p, "container1")["cpus"]), [0, 1]);
    assert_eq!(ids(&workload(&p, "container2")["cpus"]), [2]);
    assert_eq!(ids(&workload(&p, "container3")["cpus"]), [0, 2, 3]);
    let order: Vec<u64> = workload(&p, "container3")["allocation"]["per_cpu"].as_array().unwrap().iter().map(|r| r["cpu"].as_u64().unwrap()).collect();
    assert_eq!(order, [3, 2, 0], "worst-fit order of study B");
    let rej = &p["rejected"][0];
    assert_eq!(rej["name"], "container4");
    assert!(rej["reason"].as_str().unwrap().contains("75%"));
    let mv = &rej["defrag"]["moves"];
    assert_eq!(mv.as_array().unwrap().len(), 1);
    assert_eq!((mv[0]["workload"].as_str().unwrap(), mv[0]["from_cpu"].as_u64().unwrap(), mv[0]["to_cpu"].as_u64().unwrap()), ("container3", 3, 1));
    // The per-CPU map: CPU 0 carries 50% + 40%.
    let cpu0 = &p["node"]["per_cpu"][0];
    assert!((cpu0["reserved"].as_f64().unwrap() - 0.9).abs() < 1e-9, "{cpu0}");
}

#[test]
fn study_b_human_output_shows_map_and_proposal() {
    let out = rtslice(&["plan", "examples/study-b-worst-fit.yaml", "--online", "0-3"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("container1 50%, container3 40%"), "{text}");
    assert!(text.contains("move container3's 40% share from CPU 3 to CPU 1"), "{text}");
}

#[test]
fn study_a_wide_affinity() {
    let (code, p) = plan_json("examples/study-a-wa.yaml", &[]);
    assert_eq!(code, 0);
    let w = workload(&p, "vbbu");
    assert_eq!(ids(&w["cpus"]), [4, 5, 6, 7]);
    assert_eq!(w["isolation"]["wideAffinity"], true);
    assert_eq!(thread_cpus(w, "^ru-thread$")["kind"], "anywhere");
    assert!(w.get("irqs").is_none());
}

#[test]
fn study_a_thread_affinity() {
    let (code, p) = plan_json("examples/study-a-ta.yaml", &[]);
    assert_eq!(code, 0);
    let w = workload(&p, "vbbu");
    assert_eq!(ids(&thread_cpus(w, "^ru-thread$")["cpus"]), [4]);
    assert_eq!(ids(&thread_cpus(w, "^lte-softmodem$")["cpus"]), [5]);
    assert_eq!(ids(&thread_cpus(w, "^(fep_processing|feptx_thread)$")["cpus"]), [6]);
    assert_eq!(ids(&thread_cpus(w, "^TASK_")["cpus"]), [7]);
    assert_eq!(w["threads"][0]["sched"]["policy"], "fifo");
    assert_eq!(w["threads"][0]["sched"]["priority"], 95);
}

#[test]
fn study_a_irq_affinity_variants() {
    for (file, pinned_threads) in [("examples/study-a-ia.yaml", false), ("examples/study-a-ia-wa.yaml", false), ("examples/study-a-ia-ta.yaml", true)] {
        let (code, p) = plan_json(file, &[]);
        assert_eq!(code, 0, "{file}");
        let w = workload(&p, "vbbu");
        assert_eq!(ids(&w["irqs"][0]["cpus"]), [7], "{file}: NIC IRQs on C7");
        assert_eq!(ids(&w["net"][0]["rps_cpus"]), [7], "{file}");
        assert_eq!(ids(&w["net"][0]["xps_cpus"]), [7], "{file}");
        assert_eq!(thread_cpus(w, "^ru-thread$")["kind"] == "cpus", pinned_threads, "{file}");
    }
    let (_, p) = plan_json("examples/study-a-ia-wa.yaml", &[]);
    assert_eq!(workload(&p, "vbbu")["isolation"]["wideAffinity"], true);
}

#[test]
fn study_a_shielding_and_isolcpus() {
    let (code, p) = plan_json("examples/study-a-shield.yaml", &[]);
    assert_eq!(code, 0);
    let w = workload(&p, "vbbu");
    assert_eq!(w["allocation"]["kind"], "dedicated");
    assert_eq!(w["isolation"]["shield"], true);
    for c in 4..8 {
        assert_eq!(p["node"]["per_cpu"][c]["exclusive_to"], "vbbu");
    }
    // isolCPU: rejected on a host without isolcpus, admitted with isolcpus=4-7.
    let (code, p) = plan_json("examples/study-a-isolcpus.yaml", &[]);
    assert_eq!(code, 1);
    assert!(p["rejected"][0]["reason"].as_str().unwrap().contains("isolcpus"), "{p}");
    let (code, p) = plan_json("examples/study-a-isolcpus.yaml", &["--isolcpus", "4-7"]);
    assert_eq!(code, 0, "{p}");
    assert_eq!(ids(&workload(&p, "vbbu")["cpus"]), [4, 5, 6, 7]);
}

#[test]
fn study_a_cloud_ran_orthogonal_layout() {
    let (code, p) = plan_json("examples/study-a-cloud-ran.yaml", &[]);
    assert_eq!(code, 0, "{p}");
    assert_eq!(ids(&workload(&p, "vbbu1")["cpus"]), [4, 5, 6, 7]);
    assert_eq!(ids(&workload(&p, "vbbu2")["cpus"]), [2, 3]);
    assert_eq!(ids(&workload(&p, "container-a")["cpus"]), [1]);
    let irq = |w: &str, i: usize| ids(&workload(&p, w)["irqs"][i]["cpus"]);
    assert_eq!((irq("vbbu1", 0), irq("vbbu1", 1)), (vec![7], vec![7]), "VF1, VF4 -> C7");
    assert_eq!((irq("vbbu2", 0), irq("vbbu2", 1)), (vec![3], vec![3]), "VF2, VF5 -> C3");
    assert_eq!(irq("container-a", 0), vec![1], "VF3 -> C1");
    assert_eq!(p["node"]["per_cpu"][0]["housekeeping"], true);
}

#[test]
fn invalid_spec_exits_2_with_every_error_located() {
    let dir = tempfile_dir();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: rtslice/v1\nnode:\n  cpus: 0-3\n  colour: blue\nworkloads:\n  - name: a\n    demand:\n      reservation: {runtime: 2ms, period: 1ms}\n    threads:\n      - match: \"([\"\n        policy: fifo\n        priority: 120\n",
    )
    .unwrap();
    let out = rtslice(&["plan", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing planned");
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "bad.yaml:4:3: node.colour: unknown field",
        "bad.yaml:8:30: workloads[0].demand.reservation.runtime: runtime 2ms is longer than the period 1ms",
        "bad.yaml:10:16: workloads[0].threads[0].match:",
        "bad.yaml:12:19: workloads[0].threads[0].priority: 120 is out of range",
    ] {
        assert!(err.contains(needle), "missing `{needle}` in:\n{err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn tosca_import_prints_a_spec_that_plans() {
    let out = rtslice(&["import", "tosca", "examples/tosca/study-b-vnfd.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let spec = String::from_utf8(out.stdout).unwrap();
    assert!(spec.contains("runtime: 60ms") && spec.contains("count: 4"), "{spec}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("disk_size") && stderr.contains("CP1"), "unmapped things are reported: {stderr}");
    let dir = tempfile_dir();
    let f = dir.join("imported.yaml");
    std::fs::write(&f, &spec).unwrap();
    let (code, p) = plan_json(f.to_str().unwrap(), &[]);
    assert_eq!(code, 0, "{p}");
    assert_eq!(ids(&workload(&p, "VDU1")["cpus"]).len(), 4);
    assert_eq!(workload(&p, "VDU1")["allocation"]["runtime_ns"], 60_000_000);
    let strict = rtslice(&["import", "tosca", "--strict", "examples/tosca/study-b-vnfd.yaml"]);
    assert_eq!(strict.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn plan_is_deterministic_across_runs() {
    let a = rtslice(&["plan", "examples/study-b-worst-fit.yaml", "--json", "--online", "0-3"]).stdout;
    let b = rtslice(&["plan", "examples/study-b-worst-fit.yaml", "--json", "--online", "0-3"]).stdout;
    assert_eq!(a, b);
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("rtslice-plan-cli-{}-{:?}", std::process::id(), std::thread::current().id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn unreadable_spec_is_invalid_input() {
    let out = rtslice(&["plan", "does/not/exist.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read spec"));
}

#[test]
fn spec_from_stdin() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_rtslice"))
        .args(["plan", "-", "--json", "--online", "0-3"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"apiVersion: rtslice/v1\nworkloads:\n  - name: a\n    demand: { reservation: { runtime: 1ms, period: 2ms, count: 4 } }\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&workload(&p, "a")["cpus"]), [0, 1, 2, 3], "discovered CPUs come from --online");
}

#[test]
fn a_binary_spec_is_reported_as_not_utf8_text() {
    let dir = tempfile_dir();
    let f = dir.join("binary.yaml");
    std::fs::write(&f, b"apiVersion: rtslice/v1\n\x7fELF\x02\x01\x01\x00\xff\xfe\x00").unwrap();
    for args in [vec!["plan", f.to_str().unwrap()], vec!["import", "tosca", f.to_str().unwrap()]] {
        let out = rtslice(&args);
        assert_eq!(out.status.code(), Some(2), "invalid input exits 2");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("binary.yaml:2:9: not UTF-8 text: byte 31 (0xff)"), "{args:?}: {err}");
        assert!(!err.contains("permissions"), "{err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sol001_import_prints_a_spec_that_plans_and_a_template_without_vdu_fails() {
    let out = rtslice(&["import", "tosca", "examples/tosca/sol001-vnfd.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let spec = String::from_utf8(out.stdout).unwrap();
    assert!(spec.contains("name: du-2") && spec.contains("runtime: 700us") && spec.contains("memory: 4GiB"), "{spec}");
    let dir = tempfile_dir();
    let f = dir.join("sol001.yaml");
    std::fs::write(&f, &spec).unwrap();
    let (code, p) = plan_json(f.to_str().unwrap(), &[]);
    assert_eq!(code, 0, "{p}");
    assert_eq!(ids(&workload(&p, "du-1")["cpus"]).len(), 2);
    assert_eq!(workload(&p, "du-2")["allocation"]["runtime_ns"], 700_000);
    let none = dir.join("novdu.yaml");
    std::fs::write(&none, "topology_template:\n  node_templates:\n    cp: { type: tosca.nodes.nfv.VduCp }\n").unwrap();
    let out = rtslice(&["import", "tosca", none.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "an empty spec is not a successful import");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no VDU to import"));
    let _ = std::fs::remove_dir_all(dir);
}

/// The 2-socket SMT example: whole cores with held siblings, one NUMA node / LLC per workload, the
/// NIC's node first, best effort off `cu`'s siblings; the topology used is named (declared here; on
/// this host, without --online, the discovered one).
#[test]
fn two_socket_smt_example_places_by_topology() {
    let out = rtslice(&["plan", "examples/two-socket-smt.yaml", "--json", "--online", "0-63", "--isolcpus", ""]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["node"]["topology"]["source"], "declared");
    let node1 = |c: u64| (16..32).contains(&c) || (48..64).contains(&c);
    let du1 = ids(&workload(&p, "du1")["cpus"]);
    assert!(du1.len() == 4 && du1.iter().all(|&c| node1(c)), "du1 on the NIC's node 1: {du1:?}");
    for c in &du1 {
        assert_eq!(p["node"]["per_cpu"][(*c + 32) as usize]["held_for"], "du1", "sibling of {c}");
    }
    let cu = ids(&workload(&p, "cu")["cpus"]);
    assert!(cu.iter().all(|&c| !node1(c)), "cu on its accelerator's node 0: {cu:?}");
    assert_eq!(workload(&p, "cu")["devices"], serde_json::json!([{"pci": "0000:3b:00.0", "irq_cpus": cu}]));
    assert_eq!(p["node"]["topology"]["devices"]["0000:3b:00.0"], 0);
    let batch = ids(&workload(&p, "batch")["cpus"]);
    for c in &cu {
        let sibling = if *c < 32 { c + 32 } else { c - 32 };
        assert!(!batch.contains(&sibling), "best effort on {sibling}, the sibling of cu's CPU {c}");
    }
    let text = rtslice(&["plan", "examples/two-socket-smt.yaml", "--online", "0-63", "--isolcpus", ""]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("topology: declared in the spec: 32 SMT cores"), "{text}");
    assert!(text.contains("(held idle for du1: SMT sibling)"), "{text}");
    assert!(text.contains("device 0000:3b:00.0 -> passed to the workload, its IRQs -> CPU"), "{text}");
    // On this host, with no topology in the spec, the plan says it used the discovered one.
    let host = rtslice(&["plan", "examples/host-smoke.yaml"]);
    let host = String::from_utf8_lossy(&host.stdout);
    assert!(host.contains("topology: discovered on this host") || host.contains("topology: none known"), "{host}");
}

#[test]
fn cache_ways_are_planned_per_l3_and_the_default_group_narrowed() {
    let (code, p) = plan_json("examples/cache/two-vbs-l3.yaml", &[]);
    // cu asks for 6 of L3 0's ways after du1 took 4: 11 − 2 shareable − 4 leaves 5, so it is refused.
    assert_eq!(code, 1, "{p:#}");
    assert_eq!(workload(&p, "du1")["cache"]["l3"], serde_json::json!([{ "id": 0, "mask": "f" }]));
    assert_eq!(workload(&p, "du1")["cache"]["memory_bandwidth_percent"], 40);
    assert_eq!(workload(&p, "du2")["cache"]["l3"], serde_json::json!([{ "id": 1, "mask": "3f" }]));
    let reason = p["rejected"][0]["reason"].as_str().unwrap();
    assert_eq!(p["rejected"][0]["name"], "cu");
    assert!(reason.contains("6 way(s) of L3 0") && reason.contains("du1 holds f") && reason.contains("ask for fewer"), "{reason}");
    let cache = &p["cache"];
    assert_eq!(cache["domains"][0]["default_mask"], "7f0");
    assert_eq!(cache["domains"][1]["default_mask"], "7c0");
    assert_eq!(cache["closids_used"], 3);
    let out = rtslice(&["plan", "examples/cache/two-vbs-l3.yaml", "--online", "0-7", "--isolcpus", ""]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("resctrl group rtslice-du1: L3:0=f MB:0=40"), "{text}");
    assert!(text.contains("default group 7f0 (narrowed: best effort keeps only these ways)"), "{text}");
}

/// This host's online and isolated CPUs, as the kernel lists them: the tests below judge on any host.
fn host_cpus(file: &str) -> Vec<u64> {
    let text = std::fs::read_to_string(format!("/sys/devices/system/cpu/{file}")).unwrap_or_default();
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(a.parse::<u64>().unwrap()..=b.parse::<u64>().unwrap());
    }
    cpus
}

fn cpu_list(cpus: &[u64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    parts.join(",")
}

/// README's tour command, as written: the node the spec declares (4 CPUs) is planned whatever this
/// host has, and this host's view is reported beside it, judged from this host's online CPUs.
#[test]
fn study_b_plans_the_declared_node_on_any_host() {
    let online = host_cpus("online");
    let offline: Vec<u64> = (0..4).filter(|c| !online.contains(c)).collect();

    let out = rtslice(&["plan", "examples/study-b-worst-fit.yaml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "the 4th container is refused: {text}");
    assert!(text.starts_with("planned for the node the spec declares (CPUs 0-3)\n"), "{text}");
    assert!(text.contains("container1 50%, container3 40%"), "{text}");
    assert!(text.contains("container4: asks for 75% on each of 1 CPU(s)"), "{text}");
    assert!(text.contains("move container3's 40% share from CPU 3 to CPU 1"), "{text}");
    assert!(text.trim_end().ends_with("3 admitted, 1 rejected"), "{text}");
    let host_line = text.lines().find(|l| l.starts_with("this host: ")).unwrap_or_else(|| panic!("no `this host:` line: {text}"));
    assert!(host_line.starts_with(&format!("this host: CPUs {} online", cpu_list(&online))), "{host_line}");
    // Where this host's cgroups cannot be read, apply could not run at all; the verdict says that.
    let apply_runs_here = !text.contains("\n  → `rtslice apply` could not run here");
    if !offline.is_empty() {
        assert!(host_line.contains(&format!("the planned CPUs {} are not", cpu_list(&offline))), "{host_line}");
    }
    if !offline.is_empty() && apply_runs_here {
        assert!(text.contains(&format!("{host_line}\n  → `rtslice apply` here would refuse this spec")), "{text}");
        assert!(text.contains("refused here: it would get CPUs"), "each workload refused here, with the reason: {text}");
    }

    let out = rtslice(&["plan", "examples/study-b-worst-fit.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["planned_for"]["node"], "declared");
    assert_eq!(ids(&p["node"]["cpus"]), [0, 1, 2, 3]);
    assert_eq!(ids(&workload(&p, "container3")["cpus"]), [0, 2, 3]);
    assert_eq!(p["rejected"][0]["name"], "container4");
    assert_eq!(p["rejected"][0]["defrag"]["moves"][0]["from_cpu"], 3);
    assert!(p.get("warnings").is_none(), "the declared node's CPUs are its own, not this host's: {p:#}");
    let here = &p["this_host"];
    assert_eq!(here["applies"], false, "a plan with a rejection is never applied (all or nothing)");
    assert_eq!(ids(&here["online"]), online);
    assert!(here["verdict"].as_str().unwrap().starts_with("CPUs "), "{here}");
    if offline.is_empty() {
        assert!(here.get("offline").is_none(), "{here}");
    } else {
        assert_eq!(ids(&here["offline"]), offline);
    }
    if !offline.is_empty() && apply_runs_here {
        let refused_here: Vec<&Value> = here["differences"].as_array().unwrap().iter().filter(|d| d.get("here_cpus").is_none()).collect();
        assert!(!refused_here.is_empty(), "{here:#}");
        for d in refused_here {
            assert!(d["reason"].as_str().unwrap().contains("are not online on this host"), "{d}");
        }
    }
}

/// `--host` plans for this host as `rtslice apply` does: a workload lands only on CPUs online here,
/// and one that would need another is refused with that reason.
#[test]
fn host_flag_plans_for_this_hosts_cpus() {
    let online = host_cpus("online");
    let out = rtslice(&["plan", "examples/study-b-worst-fit.yaml", "--host", "--json"]);
    assert_eq!(out.status.code(), Some(1), "at least container4 is refused on any host");
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["planned_for"]["node"], "this_host");
    // Where this host's cgroups cannot be read, apply plans without a kernel (CPUs not online only
    // warned about) and could not run: the verdict says so instead.
    let apply_runs_here = p["this_host"].get("error").is_none();
    for w in p["workloads"].as_array().unwrap().iter().filter(|_| apply_runs_here) {
        assert!(ids(&w["cpus"]).iter().all(|c| online.contains(c)), "{} placed on a CPU not online here: {w}", w["name"]);
    }
    let reasons: Vec<&str> = p["rejected"].as_array().unwrap().iter().map(|r| r["reason"].as_str().unwrap()).collect();
    if !apply_runs_here {
        assert!(p["this_host"]["verdict"].as_str().unwrap().contains("`rtslice apply` could not run here"), "{p:#}");
    } else if (0..4).any(|c| !online.contains(&c)) {
        let why = format!("are not online on this host (online: {})", cpu_list(&online));
        assert!(reasons.iter().any(|r| r.contains(&why)), "a refusal says `{why}`: {reasons:?}");
        assert!(p["rejected"].as_array().unwrap().len() >= 2, "{reasons:?}");
    }
    assert_eq!(p["this_host"]["applies"], false);
    assert!(p["this_host"].get("differences").is_none(), "the plan is this host's own: {p:#}");

    let text = rtslice(&["plan", "examples/study-b-worst-fit.yaml", "--host"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("planned for this host (--host)"), "{text}");
    // Where this host's cgroups cannot be read, apply could not run at all; the plan says that instead.
    assert!(text.contains("\n  → `rtslice apply` here would refuse it") || text.contains("\n  → `rtslice apply` could not run here"), "{text}");

    let both = rtslice(&["plan", "examples/study-b-worst-fit.yaml", "--host", "--online", "0-3"]);
    assert_eq!(both.status.code(), Some(2), "--host and --online contradict each other");
    assert!(String::from_utf8_lossy(&both.stderr).contains("--online"), "{}", String::from_utf8_lossy(&both.stderr));
}

/// The declared node takes nothing from this host: its boot isolation only from --isolcpus.
#[test]
fn the_declared_node_is_isolated_only_as_asked() {
    let out = rtslice(&["plan", "examples/study-a-isolcpus.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(p["rejected"][0]["reason"].as_str().unwrap().contains("none are isolated on the node planned"), "{p:#}");
    let out = rtslice(&["plan", "examples/study-a-isolcpus.yaml", "--json", "--isolcpus", "4-7"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["planned_for"]["node"], "declared");
    assert_eq!(ids(&workload(&p, "vbbu")["cpus"]), [4, 5, 6, 7]);
    assert_eq!(ids(&p["this_host"]["isolcpus"]), host_cpus("isolated"));
}

/// A spec without node.cpus is planned for this host, and the plan says so.
#[test]
fn a_spec_without_cpus_is_planned_for_this_host() {
    use std::io::Write;
    let online = host_cpus("online");
    let isolated = host_cpus("isolated");
    let spec = b"apiVersion: rtslice/v1\nworkloads:\n  - name: batch\n    demand: { bestEffort: { weight: 100 } }\n";
    let run = |json: bool| {
        let mut args = vec!["plan", "-"];
        if json {
            args.push("--json");
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_rtslice"))
            .args(&args)
            .current_dir(root())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(spec).unwrap();
        child.wait_with_output().unwrap()
    };
    let out = run(true);
    assert_eq!(out.status.code(), Some(0));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["planned_for"]["node"], "this_host");
    assert!(p["planned_for"]["why"].as_str().unwrap().contains("declares no CPUs"), "{p:#}");
    assert_eq!(ids(&p["node"]["cpus"]), online);
    let shared: Vec<u64> = online.iter().copied().filter(|c| !isolated.contains(c)).collect();
    assert_eq!(ids(&workload(&p, "batch")["cpus"]), if shared.is_empty() { online.clone() } else { shared });
    let out = run(false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("planned for this host: the spec declares no CPUs (node.cpus: discovered)"), "{text}");
}

/// `--usage`: an eNB's threads as `rtslice trace --json` reports them, against their parts under
/// a fixed split (reclaim: false) and under the default (reclaim): the busy worker is named under
/// the first, nobody under the second; wrong input is exit 2 with what to do.
#[test]
fn usage_sets_each_threads_part_beside_its_use() {
    let dir = tempfile_dir();
    let spec = |reclaim: &str| {
        format!(
            "apiVersion: rtslice/v1\nnode: {{ cpus: [0, 1], housekeeping: 0 }}\nworkloads:\n  - name: enb\n    demand:\n      \
             reservation: {{ runtime: 7ms, period: 10ms, count: 1{reclaim} }}\n    threads:\n      \
             - {{ match: '^TXRX$', policy: fifo, priority: 95 }}\n      - {{ match: '^WORKER', policy: fifo, priority: 90 }}\n      \
             - {{ match: '^STACK$', policy: fifo, priority: 80 }}\n"
        )
    };
    let fixed = dir.join("enb-fixed.yaml");
    let pooled = dir.join("enb.yaml");
    std::fs::write(&fixed, spec(", reclaim: false")).unwrap();
    std::fs::write(&pooled, spec("")).unwrap();
    // A report as `rtslice trace --json --by name` writes it: the idle workers merged into one entry.
    let report = dir.join("enb-trace.json");
    let thread = |name: &str, pct: f64, n: u32| serde_json::json!({ "tid": 1, "tgid": 1, "name": name, "threads": n, "cpu_pct": pct });
    let json = serde_json::json!({ "duration_s": 30.0, "threads": [
        thread("TXRX", 6.0, 1), thread("WORKER0", 12.0, 1), thread("WORKER", 4.0, 2), thread("STACK", 4.0, 1), thread("enb-main", 0.1, 1)
    ]});
    std::fs::write(&report, json.to_string()).unwrap();
    let usage = format!("enb={}", report.display());
    let run = |spec: &PathBuf, extra: &[&str]| {
        let mut args = vec!["plan", spec.to_str().unwrap(), "--mechanism", "deadline", "--usage", usage.as_str()];
        args.extend_from_slice(extra);
        let out = rtslice(&args);
        (out.status.code().unwrap(), String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string())
    };

    let (code, stdout, stderr) = run(&fixed, &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let worker0 = stdout.lines().find(|l| l.trim_start().starts_with("WORKER0")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(worker0.contains("777.8µs every 10ms") && worker0.contains("used 12.0%") && worker0.contains("BELOW ITS USE"), "{worker0}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("thread ")).collect();
    assert_eq!(warnings.len(), 1, "only WORKER0 is below its use: {stderr}");
    assert!(warnings[0].contains("WORKER0") && warnings[0].contains("leave `reclaim` unset"), "{stderr}");
    assert!(stdout.contains("enb-main  no rule: no budget bounds it; used 0.1%"), "{stdout}");

    // The default reclaims: the pool split by this use covers every thread.
    let (code, stdout, stderr) = run(&pooled, &["--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let p: Value = serde_json::from_str(&stdout).unwrap();
    let threads = p["thread_shares"]["enb"]["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 6, "the merged entry counts as its two threads: {threads:#?}");
    let w0 = threads.iter().find(|t| t["thread"] == "WORKER0").unwrap();
    assert_eq!((w0["part"]["kind"].as_str(), w0["part"]["by_demand"].as_bool(), w0["short"].as_bool()), (Some("deadline"), Some(true), Some(false)), "{w0}");
    let total: f64 = threads.iter().filter_map(|t| Some(t["part"]["runtime_ns"].as_f64()? / t["part"]["period_ns"].as_f64()?)).sum();
    assert!(total <= 0.7 + 1e-9, "the parts never exceed the reservation: {total}");

    // Wrong input: exit 2, saying what to do.
    let declared = rtslice(&["plan", fixed.to_str().unwrap(), "--usage", usage.as_str()]);
    assert_eq!(declared.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&declared.stderr).contains("give --mechanism"), "{declared:?}");
    let (code, _, stderr) = run(&fixed, &["--usage", "vbs=/nonexistent.json"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot read /nonexistent.json"), "{stderr}");
    std::fs::write(dir.join("other.json"), "{\"threads\": []}").unwrap();
    let (code, _, stderr) = run(&fixed, &["--usage", &format!("enb={}", dir.join("other.json").display())]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not a `rtslice trace --json` report"), "{stderr}");
    let (code, _, stderr) = run(&fixed, &["--usage", &format!("vbs={}", report.display())]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no admitted workload"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
