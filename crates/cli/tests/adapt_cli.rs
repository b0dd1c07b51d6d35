//! Issue 16, part 3: the node service's closed loop on the real kernel (root, SCHED_DEADLINE in a
//! partition, the real tracer and report channel), as a user runs it: `rtslice daemon`, then
//! `rtslice deploy` of emulated vBS (OAI LTE, 1 ms TTIs, ~370 µs of CPU per TTI at 20 % load here)
//! whose reservations state `adapt:`.
//!
//! Everything under SCHED_DEADLINE (a partition shared by the workloads on CPU 1: the only
//! mechanism holding a 1 ms period on this HZ=250 kernel without HRTICK, and the one cgroup v2
//! kernels have).
//!
//! 1. Lending: `big` is given 850 µs every 1 ms — more than twice what it uses. `small` (250 µs on
//!    the same CPU) does not fit beside it under the 90 % cap (95 % less the fair server's 5 %) and
//!    stays pending. The loop sees `big` mostly idle, shrinks it a bounded step at a time, never
//!    below its `min` (600 µs), and the bandwidth it frees admits `small` without anyone asking;
//!    `big` meets its SLO all the while.
//! 2. Growing: `starved` states an SLO with a profile that understates its demand (max 180 µs per
//!    TTI), so the planner sizes it ~200 µs; the loop sees the budget run full (or misses) and grows
//!    it within a few intervals to cover what it uses.
//!
//! What is judged is the loop's mechanism — it shrinks an idle budget a bounded step at a time and
//! never below `min`, the freed bandwidth admits the pending workload, it grows a budget that runs
//! full within `max` — not how well the vBS does on this host: the SLO is a loose 50 %, so that the
//! hypervisor's stalls (a lone, unreserved vBS missed 1-15 % of its TTIs on this VM) never decide
//! the loop's steps. How many misses a lending budget adds is a benchmark's question
//! (docs/results.md, density at an SLO), with intervals.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rtslice_testkit::{root_or_skip, skip::cpus_or_skip, KernelLock};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_rtslice");
/// Misses below half of it never make the loop grow a budget (adapt::MISS_MARGIN): the loop's steps
/// here follow the budgets' use, which the test controls, not the host's stalls.
const LOOSE_SLO: f64 = 0.5;

/// The daemon, stopped (SIGTERM, `--reset-on-exit` undoes the node) when the test ends, also on panic.
struct Daemon {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Daemon {
    fn start(state: &Path, socket: &Path, mechanism: &str) -> Daemon {
        let log_path = state.with_extension("log");
        let log = std::fs::File::create(&log_path).unwrap();
        // CPU 0 for the house, CPU 1 for the reservations: what fits beside what is decided on one CPU.
        let node = state.with_extension("node.yaml");
        std::fs::write(&node, "apiVersion: rtslice/v1\nnode: { housekeeping: [0] }\n").unwrap();
        let child = Command::new(BIN)
            .args(["daemon", "--grace", "1", "--reset-on-exit", "--mechanism", mechanism, "--state-dir"])
            .arg(state)
            .arg("--socket")
            .arg(socket)
            .arg("--node")
            .arg(&node)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let d = Daemon { child, socket: socket.to_path_buf(), log: log_path };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            assert!(Instant::now() < deadline, "the daemon did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    fn get(&self, path: &str) -> Value {
        let out = Command::new("curl")
            .args(["-sf", "--unix-socket"])
            .arg(&self.socket)
            .arg(format!("http://rtslice{path}"))
            .output()
            .expect("curl (make deps)");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("GET {path}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
    }

    fn deploy(&self, spec: &str) -> (i32, Value) {
        let mut c = Command::new(BIN)
            .args(["deploy", "-", "--json"])
            .env("RTSLICE_SOCKET", &self.socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        c.stdin.take().unwrap().write_all(spec.as_bytes()).unwrap();
        let out = c.wait_with_output().unwrap();
        let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("deploy: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code().unwrap_or(-1), v)
    }

    /// The runtime (µs) the host holds for a workload now, and its phase.
    fn in_force(&self, name: &str) -> (String, Option<f64>) {
        let w = self.get(&format!("/v1/workloads/{name}"));
        let phase = w["phase"].as_str().unwrap_or_default().to_string();
        let d = if w["inForce"].is_null() { &w["demand"] } else { &w["inForce"] };
        let runtime = d["reservation"]["runtime"].as_str().map(|t| rtslice_spec::units::parse_duration(t).unwrap().as_secs_f64() * 1e6);
        (phase, runtime)
    }

    fn events(&self, name: &str) -> Vec<String> {
        self.get("/v1/events")["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["workload"] == name)
            .map(|e| format!("{}: {}", e["kind"].as_str().unwrap(), e["message"].as_str().unwrap()))
            .collect()
    }

    /// (misses, TTIs) a workload reported, from `/v1/telemetry`'s totals.
    fn sli(&self, name: &str) -> (u64, u64) {
        let t = self.get("/v1/telemetry");
        let w = t["workloads"].as_array().unwrap().iter().find(|w| w["name"] == name).cloned().unwrap_or_default();
        (w["totals"]["deadline_misses"].as_u64().unwrap_or(0), w["totals"]["ttis"].as_u64().unwrap_or(0))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A failed test shows what the daemon said (its log lives in the test's temporary directory).
        if std::thread::panicking() {
            let status = self.child.try_wait().ok().flatten().map(|s| format!("exited: {s}")).unwrap_or_else(|| "alive".into());
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("daemon ({status}), last lines of its log:\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

/// The miss ratio of this vBS with no reservation (SCHED_FIFO, alone on CPU 1, 6 s): what the host
/// itself costs it now.
/// One emulated vBS at `load` whose real-time threads are SCHED_DEADLINE shares of one reclaiming pool.
fn vbs(name: &str, load: &str, demand: &str, adapt: &str) -> String {
    let rules = "      - { match: ^lte-softmodem$, policy: deadline, share: 0.55 }\n      - { match: ^fep_processing$, policy: deadline, share: 0.20 }\n      - { match: ^feptx_thread$, policy: deadline, share: 0.15 }\n      - { match: ^ru-thread$, policy: deadline, share: 0.10 }\n";
    format!(
        "  - name: {name}\n    launch:\n      command: [{BIN}, emulate, --profile, oai-lte, --load, \"{load}\", --sched, other, --duration, 10m, -q]\n{demand}    adapt: {adapt}\n    threads:\n{rules}"
    )
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            eprintln!("{what}: after {:.1} s", t.elapsed().as_secs_f64());
            return true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    false
}

#[test]
fn the_loop_lends_an_idle_budget_and_grows_a_starved_one() {
    root_or_skip!();
    // The scenario's arithmetic (what fits beside what) is for one reserved CPU beside CPU 0.
    if !cpus_or_skip(2) {
        return;
    }
    let _k = KernelLock::acquire();
    let slo = LOOSE_SLO;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("state"), &dir.path().join("api.sock"), "deadline");

    // 1. Lending.

    let header = "apiVersion: rtslice/v1\nworkloads:\n";
    // `big` runs at 10 %: the loop shrinks a budget only while it is less than 60 % used, so `small`
    // fits beside `big` only if big's CPU time per TTI is well under 0.6 × 650 µs. At 20 % the
    // emulator used 410 µs per TTI on a quiet evening and 508 µs on a slow one (the same host, 2.2×
    // slower that day): the loop stopped at 730 µs (70 % used) and `small` never fit. At 10 % it is
    // about half that, so the scenario's arithmetic holds on a host twice as slow again.
    let big = vbs(
        "big",
        "10%",
        &format!("    demand: {{ reservation: {{ runtime: 850us, period: 1ms, reclaim: true }} }}\n    slo: {{ deadlineMissRatio: {slo:.4} }}\n    profile: {{ period: 1ms, deadline: 3ms, execution: {{ p50: 370us, p99: 500us, max: 650us }} }}\n"),
        "{ min: 600us, interval: 2s }",
    );
    let (code, out) = d.deploy(&format!("{header}{big}"));
    assert_eq!(code, 0, "big: {out}");
    let small = "  - name: small\n    launch: { command: [sleep, \"600\"] }\n    demand: { reservation: { runtime: 250us, period: 1ms } }\n    threads:\n      - { match: ^sleep$, policy: deadline }\n";
    let (code, out) = d.deploy(&format!("{header}{small}"));
    assert_eq!(code, 1, "small must wait for bandwidth: {out}");
    assert_eq!(d.in_force("small").0, "pending");

    let mut lowest = f64::MAX;
    let admitted = wait_for("small admitted", Duration::from_secs(60), || {
        if let (_, Some(r)) = d.in_force("big") {
            lowest = lowest.min(r);
        }
        d.in_force("small").0 == "running"
    });
    let ev = d.events("big");
    eprintln!("big's events:\n  {}", ev.join("\n  "));
    assert!(admitted, "small was never admitted; big holds {:?}; small: {:?}", d.in_force("big"), d.events("small"));
    assert!(ev.iter().any(|e| e.starts_with("adapted: shrunk")), "{ev:?}");
    let (_, held) = d.in_force("big");
    let held = held.unwrap();
    assert!(lowest >= 600.0 && held >= 600.0, "big went below its min: lowest {lowest} µs, now {held} µs");
    assert!(held + 250.0 <= 900.0 + 1e-6, "small fits only beside ≤ 650 µs: big holds {held} µs");
    // It keeps running while lending (its misses, for the log: how well is the benchmark's).
    std::thread::sleep(Duration::from_secs(2));
    let (misses, ttis) = d.sli("big");
    eprintln!("big: {misses} of {ttis} TTIs missed; holds {:?} µs", d.in_force("big").1);
    assert!(ttis > 5_000, "{ttis} TTIs reported");

    // 2. Growing: `starved` alone on CPU 1.
    for n in ["big", "small"] {
        let rm = Command::new(BIN).args(["remove", n]).env("RTSLICE_SOCKET", &d.socket).output().unwrap();
        assert!(rm.status.success(), "{}", String::from_utf8_lossy(&rm.stderr));
    }
    let starved = vbs(
        "starved",
        "20%",
        &format!("    slo: {{ deadlineMissRatio: {slo:.4} }}\n    profile: {{ period: 1ms, deadline: 3ms, execution: {{ p50: 120us, p99: 150us, max: 180us }} }}\n"),
        "{ max: 800us, interval: 2s }",
    );
    let (code, out) = d.deploy(&format!("{header}{starved}"));
    assert_eq!(code, 0, "starved: {out}");
    let (_, sized) = d.in_force("starved");
    let sized = sized.expect("an SLO workload's sized reservation is shown in force");
    eprintln!("starved sized at {sized} µs");
    assert!(sized < 300.0, "the understated profile should size it small: {sized} µs");
    let grown = wait_for("starved grown", Duration::from_secs(30), || d.in_force("starved").1.is_some_and(|r| r >= 450.0));
    let ev = d.events("starved");
    eprintln!("starved's events:\n  {}", ev.join("\n  "));
    assert!(grown, "starved still holds {:?} µs", d.in_force("starved").1);
    assert!(ev.iter().any(|e| e.starts_with("adapted: grown")), "{ev:?}");
    // The tracer counted its threads' SCHED_DEADLINE throttles and the loop saw them. Zero throttles
    // is a true count only when the threads ran past their budget without running out, which their
    // reclaiming pool (SCHED_FLAG_RECLAIM: GRUB lends them the CPU's idle bandwidth) does when CPU 1
    // is otherwise idle: then the loop grows it on use above 100 % of the budget.
    let counted = |e: &&String| {
        let Some((_, after)) = e.split_once("ran out ") else { return false };
        let throttles: u64 = after.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0);
        let use_pct: f64 = e
            .split_once("% of the budget")
            .and_then(|(before, _)| before.rsplit('(').next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0.0);
        throttles > 0 || use_pct > 100.0
    };
    assert!(ev.iter().filter(|e| e.starts_with("adapted: grown")).any(|e| counted(&e)), "{ev:?}");
    assert!(d.in_force("starved").1.unwrap() <= 800.0, "above its max");
}
