//! Readers for what the runner's children print: the emulator's and tracer's JSON (the documented
//! fields of `rtslice emulate --json` and `rtslice trace --json`), stress-ng's metrics table,
//! ping's per-echo lines and the load generator's samples CSV.

use serde_json::Value;

use crate::results::{EmuSummary, ThreadLatency};

/// The last JSON object in `text` (tools may print progress lines before it).
pub fn last_json_object(text: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(text.trim()) {
        if v.is_object() {
            return Some(v);
        }
    }
    // Scan from the last line that starts an object.
    let lines: Vec<&str> = text.lines().collect();
    for start in (0..lines.len()).rev() {
        if lines[start].trim_start().starts_with('{') {
            let candidate = lines[start..].join("\n");
            if let Ok(v) = serde_json::from_str::<Value>(&candidate) {
                if v.is_object() {
                    return Some(v);
                }
            }
        }
    }
    None
}

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

pub fn emulator(text: &str) -> Result<EmuSummary, String> {
    let v = last_json_object(text).ok_or_else(|| "the emulator printed no JSON summary".to_string())?;
    let need = |k: &str| num(&v, k).ok_or_else(|| format!("the emulator's JSON has no numeric `{k}`"));
    let series = v
        .get("throughput_series_bps")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    Ok(EmuSummary {
        ttis: need("ttis")? as u64,
        deadline_misses: need("deadline_misses")? as u64,
        nacks: need("nacks")? as u64,
        throughput_bps: need("throughput_bps")?,
        proc_p99_us: need("proc_p99_us")?,
        throughput_series_bps: series,
        raw: v,
    })
}

/// `rtslice trace --json`: threads with log2 µs histograms, and the data source.
pub fn trace(text: &str) -> Result<(Vec<ThreadLatency>, String), String> {
    let v = last_json_object(text).ok_or_else(|| "the tracer printed no JSON".to_string())?;
    let source = v.get("source").and_then(Value::as_str).unwrap_or("unknown").to_string();
    let threads = v
        .get("threads")
        .and_then(Value::as_array)
        .ok_or_else(|| "the tracer's JSON has no `threads` list".to_string())?
        .iter()
        .map(|t| ThreadLatency {
            name: t.get("name").and_then(Value::as_str).unwrap_or("?").to_string(),
            tid: t.get("tid").and_then(Value::as_i64).unwrap_or(-1),
            events: t.get("events").and_then(Value::as_u64).unwrap_or(0),
            log2_us: t
                .get("log2_us")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0)).collect())
                .unwrap_or_default(),
            p99_us: t.get("p99_us").and_then(Value::as_f64),
            switches: t.get("switches").and_then(Value::as_u64),
        })
        .collect();
    Ok((threads, source))
}

/// Sum of `bogo ops/s (real time)` over the stressors of a `--metrics-brief` table.
pub fn stress_ng_ops(text: &str) -> Option<f64> {
    let mut in_table = false;
    let mut total = 0.0;
    let mut seen = false;
    for line in text.lines() {
        // Lines look like `stress-ng: metrc: [805] cpu  2211  2.00  1.54  0.00  1104.10  1429.43`.
        let body = match line.find(']') {
            Some(i) => &line[i + 1..],
            None => continue,
        };
        if body.contains("bogo ops/s") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let cols: Vec<&str> = body.split_whitespace().collect();
        if cols.len() >= 7 && cols[0].chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
            if let Ok(v) = cols[5].parse::<f64>() {
                total += v;
                seen = true;
            }
        }
    }
    seen.then_some(total)
}

/// Per-echo RTTs in µs from `ping -D` output (lines start with `[unix time]`), keeping the echoes
/// received inside `window` (unix seconds); without timestamps every echo is kept.
pub fn ping_rtts_us(text: &str, window: Option<(f64, f64)>) -> Vec<f64> {
    text.lines()
        .filter_map(|l| {
            let ms: f64 = l.split("time=").nth(1)?.split_whitespace().next()?.parse().ok()?;
            let ts: Option<f64> = l.strip_prefix('[').and_then(|r| r.split(']').next()).and_then(|t| t.parse().ok());
            let inside = match (window, ts) {
                (Some((from, to)), Some(t)) => t >= from && t <= to,
                _ => true,
            };
            inside.then_some(ms * 1000.0)
        })
        .collect()
}

/// RTTs in µs from `rtslice loadgen client --samples-out` (`id,send_s,rtt_s,compute_s`).
pub fn loadgen_rtts_us(csv: &str) -> Vec<f64> {
    csv.lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(2)?.trim().parse::<f64>().ok())
        .filter(|x| x.is_finite() && *x >= 0.0)
        .map(|s| s * 1e6)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_json_after_progress_lines() {
        let t = "warming up\n[1s] 1000 TTIs\n{\n  \"ttis\": 5000,\n  \"deadline_misses\": 3,\n  \"nacks\": 4,\n  \"throughput_bps\": 1.5e7,\n  \"proc_p99_us\": 812.5\n}\n";
        let e = emulator(t).unwrap();
        assert_eq!((e.ttis, e.deadline_misses, e.nacks), (5000, 3, 4));
        assert_eq!(e.miss_ratio(), Some(3.0 / 5000.0));
        assert!(emulator("no json here").unwrap_err().contains("no JSON"));
        assert!(emulator("{\"ttis\": 1}").unwrap_err().contains("deadline_misses"));
    }

    #[test]
    fn reads_trace_threads() {
        let t = r#"{"source":"bpf","threads":[{"tid":10,"name":"ru-thread","events":100,"log2_us":[90,9,1],"p99_us":3.0,"switches":120}]}"#;
        let (th, src) = trace(t).unwrap();
        assert_eq!(src, "bpf");
        assert_eq!(th[0].name, "ru-thread");
        assert_eq!(th[0].log2_us, vec![90, 9, 1]);
        assert_eq!(th[0].switches, Some(120));
    }

    #[test]
    fn reads_stress_ng_metrics() {
        let t = "stress-ng: info:  [805] dispatching hogs: 1 cpu\n\
stress-ng: metrc: [805] stressor       bogo ops real time  usr time  sys time   bogo ops/s     bogo ops/s\n\
stress-ng: metrc: [805]                           (secs)    (secs)    (secs)   (real time) (usr+sys time)\n\
stress-ng: metrc: [805] cpu                2211      2.00      1.54      0.00      1104.10        1429.43\n\
stress-ng: metrc: [805] vm                 100      2.00      1.54      0.00      50.00        60.00\n\
stress-ng: info:  [805] successful run completed in 2.00s\n";
        assert_eq!(stress_ng_ops(t), Some(1154.1));
        assert_eq!(stress_ng_ops("nothing"), None);
    }

    #[test]
    fn reads_ping_and_loadgen() {
        let p = "PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.\n[100.5] 64 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=0.045 ms\n[101.5] 64 bytes from 10.0.0.2: icmp_seq=2 ttl=64 time=0.100 ms\n";
        assert_eq!(ping_rtts_us(p, None), vec![45.0, 100.0]);
        assert_eq!(ping_rtts_us(p, Some((101.0, 102.0))), vec![100.0]);
        let c = "id,send_s,rtt_s,compute_s\n0,0.001,0.000500000,0.0002\n1,0.002,0.001000000,0.0003\n";
        assert_eq!(loadgen_rtts_us(c), vec![500.0, 1000.0]);
    }
}
