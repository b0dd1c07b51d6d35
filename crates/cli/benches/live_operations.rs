//! Issue 12's live operations, measured: three emulated vBS (OAI LTE, 1 ms TTIs) under RT-group
//! reservations on CPU 1 (CPU 0 is housekeeping); a fourth is deployed, one resized up and back,
//! another removed, each operation in a window of its own between quiet windows. Prints each
//! vBS's deadline misses per window (from the daemon's `/metrics`) with the host's stalls a FIFO 99
//! sentinel saw on CPU 1, and compares each operation's window with the quiet windows on either
//! side beyond counting noise. The budgets are sized from one vBS measured alone on this host.
//! Root, RT groups, ~2 min: `sudo cargo bench -p rtslice --bench live_operations`; the table is in
//! docs/api.md ("Live operations"). The functional half — the others keep their processes, cgroup
//! files and thread policies — is the test `tests/node_cli.rs`.

use std::process::{Command, Output};
use std::time::Duration;

use rtslice_testkit::KernelLock;

#[path = "../tests/live/mod.rs"]
mod live;

use live::{bin, rtslice, sli_counters, start_three_vbs, untouched, Untouched, EMU};

fn main() {
    if !rtslice_testkit::is_root() {
        rtslice_testkit::skip::skip(rtslice_testkit::skip::ROOT, "the benchmark runs a daemon that applies RT-group reservations");
        return;
    }
    if !rtslice_testkit::skip::cpus_or_skip(2) {
        return;
    }
    if !rtslice_host::doctor().mechanisms.contains(&rtslice_host::Mechanism::RtGroup) {
        rtslice_testkit::skip::skip(rtslice_testkit::skip::RT_GROUPS, "four vBS share CPU 1 through RT-group budgets");
        return;
    }
    let _lock = KernelLock::acquire();
    let dir = tempfile::tempdir().unwrap();
    // The vBS (live::EMU): its CPU cost is mostly per-TTI (FFTs of the whole carrier, 4-5 thread hand-offs
    // a millisecond) and differs ~2.5x between the VMs this test has run on (10 % PHY load on 25
    // PRBs cost ~10 % of a CPU on one, 26 % on another), so a fixed budget was either generous or
    // below the need: under 4 ms every 20 ms a vBS needing 5 ms was throttled for the rest of each
    // period and missed 5-50 % of its TTIs in every window, operation or not, which says nothing
    // about isolation. The budget is sized from this host's measurement instead.
    let solo = Command::new(bin()).arg("emulate").args(EMU).args(["--duration", "4s", "--quiet", "--json"]).output().unwrap();
    let solo: serde_json::Value = serde_json::from_slice(&solo.stdout).unwrap_or_else(|e| panic!("emulate --json: {e}: {}", String::from_utf8_lossy(&solo.stderr)));
    let share = solo["cpu_percent_total"].as_f64().expect("cpu_percent_total") / 100.0;
    // RT groups (v1) hold every group's runtime/period against one 95 % (plan: "reservations sum
    // to … above the kernel's cap"): four vBS and du1 grown by 10 % must sum to at most 0.95, so a
    // budget is at most 0.95 / 4.1 = 23 % of the period. Twice the measured need where that fits.
    const PERIOD_US: u64 = 20_000;
    let budget = (2.0 * share).min(0.23);
    if budget < 1.25 * share {
        println!(
            "live operations: one emulated vBS costs {:.1} % of a CPU on this host; four of them under RT groups' single 95 % \
             would get at most 23 % each, less than 1.25x the need — they would be throttled whatever the daemon does: nothing to measure",
            100.0 * share
        );
        return;
    }
    let runtime_us = ((budget * PERIOD_US as f64 / 100.0).ceil() as u64) * 100;
    let grown_us = runtime_us + runtime_us / 10;
    eprintln!("MEASURED: one vBS alone uses {:.1} % of CPU 1; budget {runtime_us} µs every {PERIOD_US} µs ({:.1}x), grown {grown_us} µs", 100.0 * share, runtime_us as f64 / (share * PERIOD_US as f64));
    let live = start_three_vbs(dir.path(), runtime_us, PERIOD_US);
    let (socket, full, vbs) = (&live.socket, |n: &str| live.full(n), |n: &str| live.vbs(n, runtime_us, PERIOD_US));
    let ok = |o: Output| assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));

    // Windows of WINDOW each: quiet ones, and ones that begin with an operation.
    const WINDOW: Duration = Duration::from_secs(6);
    struct Window {
        label: String,
        operated: Option<String>,
        /// The node's configuration (which vBS run, with which budgets) when the window began and
        /// when it ended: the same for a quiet window.
        states: (&'static str, &'static str),
        counts: std::collections::BTreeMap<String, (u64, u64)>,
        /// CPU 1's stalls under the sentinel that can show in this window's counters.
        stalls: rtslice_testkit::sentinel::Stalls,
    }
    // Every CPU 1 stall seen by a FIFO 99 thread there (rtslice_testkit::sentinel): a stall the
    // highest priority suffers too is the host's, not the daemon's.
    let sentinel = rtslice_testkit::sentinel::Sentinel::start(&[1]);
    if let Some(why) = &sentinel.failed {
        eprintln!("no sentinel ({why}): every miss counts against the operations");
    }
    let mut windows: Vec<Window> = Vec::new();
    let mut last = sli_counters(&socket);
    let mut last_ns = rtslice_sys::time::monotonic_ns();
    let mut run_window = |label: &str, operated: Option<&str>, states: (&'static str, &'static str), op: &dyn Fn()| {
        let started = std::time::Instant::now();
        op();
        let took = started.elapsed();
        assert!(took < WINDOW, "{label} took {took:?}, longer than a window");
        std::thread::sleep(WINDOW - took);
        let now = sli_counters(&socket);
        let now_ns = rtslice_sys::time::monotonic_ns();
        let counts = now
            .iter()
            .filter_map(|(w, c)| last.get(w).map(|l| (w.clone(), (c.0.saturating_sub(l.0), c.1.saturating_sub(l.1)))))
            .collect();
        // The emulators report once a second: a miss shows up to a second after it happened.
        // 1 ms TTIs with 3 TTIs of HARQ budget in flight.
        let stalls = sentinel.between(last_ns.saturating_sub(1_500_000_000), now_ns, 1_000_000, 3);
        last = now;
        last_ns = now_ns;
        windows.push(Window { label: format!("{label} ({} ms)", took.as_millis()), operated: operated.map(|n| full(n)), states, counts, stalls });
    };
    // One operation on `operated`; the others' kernel view must be the same after it.
    let mut checked = Vec::new();
    let mut operate = |label: &str, operated: &str, others: &[&str], states: (&'static str, &'static str), op: &dyn Fn(), run_window: &mut dyn FnMut(&str, Option<&str>, (&'static str, &'static str), &dyn Fn())| {
        let before: Vec<Untouched> = others.iter().map(|n| untouched(&full(n))).collect();
        run_window(label, Some(operated), states, op);
        for (n, b) in others.iter().zip(before) {
            let a = untouched(&full(n));
            assert_eq!(a, b, "{n} changed during «{label}»");
            checked.push(format!("{label}: {n} kept {} processes, {} threads, {} cgroup files", a.procs.len(), a.threads.len(), a.cgroup_files.len()));
        }
    };
    // The node's configurations: three vBS; four; four with du1 grown; three without du2. Each
    // is observed quiet twice, so every operation's window has a quiet baseline on either side.
    let (three, four, grown_cfg, removed) = ("du1-du3", "du1-du4", "du1-du4, du1 grown", "du1, du3, du4");
    let nothing = || {};
    run_window("quiet", None, (three, three), &nothing);
    run_window("quiet", None, (three, three), &nothing);
    operate("deploy du4", "du4", &["du1", "du2", "du3"], (three, four), &|| ok(rtslice(&socket, &["deploy", "-"], Some(&format!("apiVersion: rtslice/v1\nworkloads:\n{}", vbs("du4"))))), &mut run_window);
    run_window("quiet", None, (four, four), &nothing);
    let du1 = untouched(&full("du1"));
    let (grown, back) = (format!("{grown_us}us"), format!("{runtime_us}us"));
    operate(&format!("resize du1 to {grown}"), "du1", &["du2", "du3", "du4"], (four, grown_cfg), &|| ok(rtslice(&socket, &["resize", &full("du1"), "--runtime", &grown], None)), &mut run_window);
    assert_eq!(untouched(&full("du1")).procs, du1.procs, "a resize keeps du1's processes running");
    assert_eq!(std::fs::read_to_string(format!("/sys/fs/cgroup/cpu/rtslice/{}/cpu.rt_runtime_us", full("du1"))).unwrap().trim(), grown_us.to_string());
    run_window("quiet", None, (grown_cfg, grown_cfg), &nothing);
    run_window("quiet", None, (grown_cfg, grown_cfg), &nothing);
    operate(&format!("resize du1 back to {back}"), "du1", &["du2", "du3", "du4"], (grown_cfg, four), &|| ok(rtslice(&socket, &["resize", &full("du1"), "--runtime", &back], None)), &mut run_window);
    assert_eq!(untouched(&full("du1")), du1, "grown and shrunk back, du1 is as it was");
    run_window("quiet", None, (four, four), &nothing);
    operate("remove du2", "du2", &["du1", "du3", "du4"], (four, removed), &|| ok(rtslice(&socket, &["remove", &full("du2")], None)), &mut run_window);
    run_window("quiet", None, (removed, removed), &nothing);
    run_window("quiet", None, (removed, removed), &nothing);

    // The bound. Under "the operation changes nothing" a workload's m misses in the n TTIs of an
    // operation's window are Binomial(n, p), p its miss probability in the node's configuration,
    // estimated by p̂ = M/N from its M misses in the N TTIs of the quiet windows of that
    // configuration. An operation moves the node from one configuration to another (a fourth vBS
    // adds load to the shared CPU: the others' queueing behind it is the new configuration's, not
    // the operation's doing), so its window is compared with the quiet windows on either side and
    // must be within the bound of at least one of them. m/n − p̂ has variance p(1−p)(1/n + 1/N).
    // Host stalls (the ms of jitter this VM sees) make misses come in bursts: those the sentinel
    // saw on CPU 1 are taken out of every window first; the rest inflate that variance by a
    // dispersion factor φ, φ̂ = Pearson's χ²/dof of the quiet windows within each configuration
    // (pooled over workloads and configurations, at least 1). Accepted: m/n ≤ p̂ + z·sqrt(φ̂
    // p̄(1−p̄)(1/n + 1/N)) with z = 4 (one-sided, ≈3e-5 false alarms per comparison, ≈4e-4 for the
    // test's ~12) and p̄ = max(p̂, 1/N) so that a workload with no quiet misses still has a non-zero
    // noise floor. An operation that disturbed its neighbours — restarted them, reset or shared
    // out their budgets, moved their threads — shows as percents of misses, far outside it.
    let counted = |win: &Window, w: &str| win.counts.get(w).map(|(m, n)| (m.saturating_sub(win.stalls.explained_misses), *n));
    let quiet: Vec<&Window> = windows.iter().filter(|w| w.operated.is_none()).collect();
    let pooled = |w: &str, state: &str| quiet.iter().filter(|q| q.states.0 == state).filter_map(|q| counted(q, w)).fold((0u64, 0u64), |a, c| (a.0 + c.0, a.1 + c.1));
    let (mut chi2, mut dof) = (0.0f64, 0usize);
    let names: std::collections::BTreeSet<String> = windows.iter().flat_map(|w| w.counts.keys().cloned()).collect();
    let configurations: std::collections::BTreeSet<&str> = quiet.iter().map(|q| q.states.0).collect();
    for w in &names {
        for state in &configurations {
            let (m, n) = pooled(w, state);
            let p = (m as f64 / n.max(1) as f64).max(1.0 / n.max(1) as f64);
            let cells: Vec<(u64, u64)> = quiet.iter().filter(|q| q.states.0 == *state).filter_map(|q| counted(q, w)).filter(|c| c.1 > 0).collect();
            for (mi, ni) in &cells {
                let e = *ni as f64 * p;
                chi2 += (*mi as f64 - e).powi(2) / (e * (1.0 - p));
            }
            dof += cells.len().saturating_sub(1);
        }
    }
    let phi = (chi2 / dof.max(1) as f64).max(1.0);
    let mut table = format!("{:<32}", "window");
    for w in &names {
        table += &format!(" {:>20}", w.trim_start_matches(&full("")));
    }
    table += "   CPU 1 stalls (sentinel)\n";
    for win in &windows {
        table += &format!("{:<32}", win.label);
        for w in &names {
            table += &match win.counts.get(w) {
                Some((m, n)) if *n > 0 => format!(" {:>20}", format!("{m}/{n} {:.2}%", 100.0 * *m as f64 / *n as f64)),
                _ => format!(" {:>20}", "–"),
            };
        }
        let st = win.stalls;
        table += &if st.count == 0 {
            "   none\n".to_string()
        } else {
            let handoffs = if st.handoffs_only > 0 { format!("; {} only in its hand-offs", st.handoffs_only) } else { String::new() };
            format!("   {} ({:.1} ms; explain ≤{} misses each{handoffs})\n", st.count, st.total_ms, st.explained_misses)
        };
    }
    println!("LIVE OPERATIONS (misses/TTIs per {} s window, from /metrics; dispersion φ̂ = {phi:.2} over {dof} dof):\n{table}", WINDOW.as_secs());
    let mut above = Vec::new();
    for win in windows.iter().filter(|w| w.operated.is_some()) {
        for w in win.counts.keys() {
            let Some((m, n)) = counted(win, w) else { continue };
            if Some(w) == win.operated.as_ref() || n == 0 {
                continue;
            }
            let ratio = m as f64 / n as f64;
            // The configuration before and after the operation, each with its quiet windows.
            let baselines: Vec<(&str, u64, u64, f64)> = [win.states.0, win.states.1]
                .into_iter()
                .filter_map(|state| {
                    let (qm, qn) = pooled(w, state);
                    (qn > 0).then(|| {
                        let p_hat = qm as f64 / qn as f64;
                        let p_bar = p_hat.max(1.0 / qn as f64);
                        (state, qm, qn, p_hat + 4.0 * (phi * p_bar * (1.0 - p_bar) * (1.0 / n as f64 + 1.0 / qn as f64)).sqrt())
                    })
                })
                .collect();
            assert!(!baselines.is_empty(), "{w} had quiet windows before or after {}", win.label);
            let said: Vec<String> = baselines.iter().map(|(s, qm, qn, b)| format!("{s}: quiet {qm}/{qn}, bound {:.3}%", 100.0 * b)).collect();
            eprintln!("  {:<32} {w}: {:.3}% ({})", win.label, 100.0 * ratio, said.join("; "));
            if baselines.iter().all(|(_, _, _, bound)| ratio > *bound) {
                above.push(format!("{w} during {}: {m}/{n} = {:.3}% above both configurations' bounds ({})", win.label, 100.0 * ratio, said.join("; ")));
            }
            // The others kept running through the operation: they completed TTIs in its window.
            assert!(n as f64 > 0.5 * WINDOW.as_millis() as f64, "{w} ran only {n} TTIs in the {} window", win.label);
        }
    }
    for c in &checked {
        eprintln!("  {c}");
    }
    if above.is_empty() {
        println!("live operations: every neighbour's miss ratio in every operation's window within counting noise of its quiet windows");
    } else {
        println!("live operations: miss ratios above the quiet windows' beyond counting noise:\n{}", above.join("\n"));
    }
    live.stop();
}
