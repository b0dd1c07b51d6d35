//! `rtslice top`: the live dashboard's data in a terminal — the node's CPUs with their reserved
//! bandwidth, each workload's status, wake-up latency percentiles, miss ratio, throughput and
//! throttling over the last seconds, and the latest events — read from the daemon's API and
//! redrawn with plain ANSI escapes. `--once` prints one frame without escapes (scripts).

use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::node_api::{call, failed, Socket};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub socket: Socket,
    /// Print one frame and exit (no terminal escapes)
    #[arg(long)]
    pub once: bool,
    /// Time between frames
    #[arg(long, default_value = "2s")]
    pub interval: String,
    /// Seconds the rates and percentiles look back
    #[arg(long, default_value_t = 10.0)]
    pub window: f64,
    /// Event lines shown
    #[arg(long, default_value_t = 8)]
    pub events: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let interval = match rtslice_spec::units::parse_duration(&args.interval) {
        Ok(d) if d >= Duration::from_millis(100) => d,
        Ok(_) => return super::invalid("--interval must be at least 100ms"),
        Err(e) => return super::invalid(format_args!("--interval {:?}: {e}", args.interval)),
    };
    if !(args.window.is_finite() && args.window > 0.0) {
        return super::invalid("--window must be a number of seconds > 0");
    }
    if args.once {
        return match frame(&args) {
            Ok(text) => {
                print!("{text}");
                Ok(ExitCode::SUCCESS)
            }
            Err(code) => Ok(code),
        };
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst));
    }
    let _keys = Keys::watch(stop.clone());
    let mut out = std::io::stdout().lock();
    // Alternate screen and hidden cursor while running; both undone on every way out.
    let _ = write!(out, "\x1b[?1049h\x1b[?25l");
    let result = loop {
        let text = match frame(&args) {
            Ok(t) => t,
            Err(code) => break Ok(code),
        };
        // A closed pipe or terminal ends `top` quietly.
        if write!(out, "\x1b[H\x1b[2J{}\n(q or Ctrl-C quits)", text.replace('\n', "\r\n")).and_then(|_| out.flush()).is_err() {
            break Ok(ExitCode::SUCCESS);
        }
        let t0 = Instant::now();
        while t0.elapsed() < interval && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if stop.load(Ordering::Relaxed) {
            break Ok(ExitCode::SUCCESS);
        }
    };
    let _ = write!(out, "\x1b[?25h\x1b[?1049l");
    let _ = out.flush();
    result
}

/// The terminal in single-key mode (`stty -icanon -echo`) so `q` quits without Enter; restored on drop.
struct Keys {
    saved: Option<String>,
}

impl Keys {
    fn watch(stop: Arc<AtomicBool>) -> Keys {
        if !std::io::stdin().is_terminal() {
            return Keys { saved: None };
        }
        let stty = |args: &[&str]| {
            std::process::Command::new("stty").args(args).stdin(std::process::Stdio::inherit()).output().ok().filter(|o| o.status.success())
        };
        let saved = stty(&["-g"]).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        if saved.is_some() {
            stty(&["-icanon", "-echo", "min", "1"]);
        }
        std::thread::spawn(move || {
            let mut b = [0u8; 1];
            let mut stdin = std::io::stdin();
            while let Ok(1) = stdin.read(&mut b) {
                if matches!(b[0], b'q' | b'Q') {
                    stop.store(true, Ordering::SeqCst);
                    return;
                }
            }
        });
        Keys { saved }
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        if let Some(s) = &self.saved {
            let _ = std::process::Command::new("stty").arg(s).stdin(std::process::Stdio::inherit()).status();
        }
    }
}

fn get(args: &Args, path: &str) -> Result<Value, ExitCode> {
    match call(&args.socket.socket, "GET", path, None) {
        Ok(r) if r.status == 200 => Ok(r.body),
        Ok(r) => Err(failed(&r)),
        Err(e) => {
            super::error(super::chain(&e));
            Err(ExitCode::from(super::EXIT_FAILURE))
        }
    }
}

fn lat(v: &Value) -> String {
    match v.as_f64() {
        None => "–".into(),
        Some(s) if s < 1e-3 => format!("{:.1}µs", s * 1e6),
        Some(s) => format!("{:.2}ms", s * 1e3),
    }
}

fn pct(v: &Value, decimals: usize) -> String {
    v.as_f64().map_or("–".into(), |x| format!("{:.*}%", decimals, x * 100.0))
}

fn num(v: &Value, decimals: usize) -> String {
    v.as_f64().map_or("–".into(), |x| format!("{x:.decimals$}"))
}

/// One frame of text from the API's answers (or the exit code after printing why not).
fn frame(args: &Args) -> Result<String, ExitCode> {
    let node = get(args, "/v1/node")?;
    let list = get(args, "/v1/workloads")?;
    let tel = get(args, &format!("/v1/telemetry?window={}&minutes=0", args.window))?;
    let events = get(args, "/v1/events")?;
    let mut s = String::new();
    use std::fmt::Write as _;
    let tracer = if tel["tracer"]["up"].as_bool() == Some(true) {
        format!("tracer on, {} lost events", tel["tracer"]["lost_events"])
    } else {
        format!("tracer off{}", tel["tracer"]["error"].as_str().map(|e| format!(" ({e})")).unwrap_or_default())
    };
    let _ = writeln!(
        s,
        "rtslice node {} · kernel {} · mechanism {} · cap {} · {} · reading #{} over {} s",
        node["name"].as_str().unwrap_or("-"),
        node["kernel"].as_str().unwrap_or("?"),
        node["mechanism"].as_str().unwrap_or("?"),
        pct(&node["cap"], 0),
        tracer,
        tel["seq"],
        num(&tel["window_s"], 0)
    );
    let _ = writeln!(s);
    let rates: std::collections::HashMap<u64, &Value> =
        tel["cpus"].as_array().map(|a| a.iter().filter_map(|c| Some((c["cpu"].as_u64()?, c))).collect()).unwrap_or_default();
    const BAR: usize = 40;
    for c in node["perCpu"].as_array().cloned().unwrap_or_default() {
        let reserved = c["reserved"].as_f64().unwrap_or(0.0);
        let filled = ((reserved.clamp(0.0, 1.0)) * BAR as f64).round() as usize;
        let who: Vec<String> = c["by"]
            .as_array()
            .map(|a| a.iter().map(|b| format!("{} {}", b["workload"].as_str().unwrap_or("?"), pct(&b["bandwidth"], 0))).collect())
            .unwrap_or_default();
        let cpu = c["cpu"].as_u64().unwrap_or(0);
        let irq = rates.get(&cpu).map(|r| format!(" · {} IRQ/s", num(&r["irqs_per_s"], 0))).unwrap_or_default();
        let _ = writeln!(
            s,
            "CPU {cpu:<3} [{}{}] {:>6} reserved {:>6} free{}{}{}",
            "#".repeat(filled),
            ".".repeat(BAR - filled),
            pct(&c["reserved"], 1),
            pct(&c["free"], 1),
            if c["housekeeping"].as_bool() == Some(true) { " (housekeeping)" } else { "" },
            if who.is_empty() { String::new() } else { format!(" · {}", who.join(", ")) },
            irq
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<16} {:<8} {:<6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7} {:>11} {:>8} {:>7}",
        "WORKLOAD", "STATUS", "CPUS", "P50", "P99", "P99.9", "PRE-P99", "MISS", "TTI/S", "MBIT/S", "THROT/S", "BUDGET"
    );
    let telw: std::collections::HashMap<&str, &Value> =
        tel["workloads"].as_array().map(|a| a.iter().filter_map(|w| Some((w["name"].as_str()?, w))).collect()).unwrap_or_default();
    let none = Value::Null;
    for w in list["workloads"].as_array().cloned().unwrap_or_default() {
        let name = w["name"].as_str().unwrap_or("?");
        let m = telw.get(name).copied().unwrap_or(&none);
        let _ = writeln!(
            s,
            "{:<16} {:<8} {:<6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7} {:>11} {:>8} {:>7}",
            name,
            w["phase"].as_str().unwrap_or("?"),
            w["cpus"].as_str().unwrap_or(""),
            lat(&m["wakeup"]["p50_s"]),
            lat(&m["wakeup"]["p99_s"]),
            lat(&m["wakeup"]["p999_s"]),
            lat(&m["preempt"]["p99_s"]),
            pct(&m["miss_ratio"], 2),
            num(&m["ttis_per_s"], 0),
            m["throughput_bps"].as_f64().map_or("–".into(), |b| format!("{:.2}", b / 1e6)),
            num(&m["throttled_per_s"], 1),
            pct(&m["budget_used"], 0),
        );
        if let Some(r) = w["reason"].as_str() {
            let _ = writeln!(s, "  pending: {r}");
        }
    }
    let _ = writeln!(s);
    let ev = events["events"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(s, "EVENTS ({} total, latest last)", ev.len());
    for e in ev.iter().rev().take(args.events).rev() {
        let _ = writeln!(
            s,
            "  #{:<5} {:<9} {:<16} {}",
            e["seq"],
            e["kind"].as_str().unwrap_or(""),
            e["workload"].as_str().unwrap_or("-"),
            e["message"].as_str().unwrap_or("")
        );
    }
    Ok(s)
}
