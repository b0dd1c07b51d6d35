//! A real Prometheus for tests (Debian's `prometheus`, installed by `make deps`) and plain HTTP on
//! loopback: the helpers the metrics tests share.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::KillOnDrop;

/// A TCP port free on loopback now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn percent_encode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

/// GET over plain HTTP/1.0 on loopback, with extra header lines: (status, body).
pub fn http_get_with(port: u16, path: &str, headers: &[&str]) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, body.to_string()))
}

/// GET over plain HTTP/1.0 on loopback: (status, body).
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    http_get_with(port, path, &[])
}

pub fn now_unix() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Polls `ok` every 200 ms; panics naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A Prometheus server scraping `targets` (host:port) every second, killed on drop.
pub struct Prometheus {
    pub port: u16,
    _proc: KillOnDrop,
}

impl Prometheus {
    /// Starts Debian's Prometheus with its data in `dir`, and waits until it is ready. Panics with the
    /// fix when it is not installed.
    pub fn start(dir: &Path, targets: &[String]) -> Prometheus {
        let bin = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"].into_iter().map(Path::new).find(|p| p.exists()).expect(
            "Prometheus is not installed: `sudo make deps` (or `sudo apt-get install prometheus`) installs Debian's package, which this test runs",
        );
        let port = free_port();
        let config = dir.join("prometheus.yml");
        let list = targets.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: rtslice\n    static_configs:\n      - targets: [{list}]\n"
            ),
        )
        .unwrap();
        let proc = KillOnDrop(
            Command::new(bin)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start prometheus"),
        );
        wait_for("Prometheus ready", Duration::from_secs(60), || http_get(port, "/-/ready").is_ok_and(|(s, _)| s == 200));
        Prometheus { port, _proc: proc }
    }

    /// An instant PromQL query at `time` (unix seconds): the result vector.
    pub fn query(&self, query: &str, time: f64) -> Vec<Value> {
        let (status, body) =
            http_get(self.port, &format!("/api/v1/query?query={}&time={time:.3}", percent_encode(query))).expect("Prometheus HTTP API");
        assert_eq!(status, 200, "{query}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{query}: {body}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The targets' scrape health: (scrape URL, "up"/"down", last error).
    pub fn targets(&self) -> Vec<(String, String, String)> {
        let (_, body) = http_get(self.port, "/api/v1/targets").expect("Prometheus HTTP API");
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        v["data"]["activeTargets"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|t| {
                        (
                            t["scrapeUrl"].as_str().unwrap_or("").into(),
                            t["health"].as_str().unwrap_or("").into(),
                            t["lastError"].as_str().unwrap_or("").into(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The value of one sample of a PromQL result vector.
pub fn value_of(sample: &Value) -> f64 {
    sample["value"][1].as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN)
}

/// The p-quantile of merged fine buckets (lo_ns, hi_ns, count) as `rtslice trace` computes it (the
/// upper bucket edge, rtslice-trace's hist::quantile_ns).
pub fn trace_quantile_ns(buckets: &[(u64, u64, u64)], q: f64) -> u64 {
    let n: u64 = buckets.iter().map(|b| b.2).sum();
    let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
    let mut seen = 0;
    for b in buckets {
        seen += b.2;
        if seen >= rank {
            return b.1 - 1;
        }
    }
    unreachable!()
}

/// Where a PromQL `histogram_quantile` of the same threads may lie, given the trace's quantile
/// `trace_ns` and the Prometheus histogram's bucket `bounds` (ns, ascending): histogram_quantile
/// interpolates inside the bucket holding the rank, the trace reports the fine bucket's upper edge
/// (≤ 6.25 % above the true value), and the two windows differ by up to a scrape interval at each
/// end, which may move the rank into a neighbouring bucket. So: from the lower edge of the bucket
/// below the trace's to the upper edge of the bucket above it, in ns.
pub fn promql_quantile_band_ns(bounds: &[u64], trace_ns: f64) -> (f64, f64) {
    let i = bounds.partition_point(|&b| (b as f64) < trace_ns);
    let lo = if i >= 2 { bounds[i - 2] as f64 } else { 0.0 };
    let hi = bounds.get(i + 1).map(|&b| b as f64).unwrap_or(f64::INFINITY);
    (lo, hi)
}

/// The merged wake-up fine histogram of every thread of an `rtslice trace --json` report.
pub fn trace_wakeup_buckets(report: &Value) -> Vec<(u64, u64, u64)> {
    let mut merged: Vec<(u64, u64, u64)> = Vec::new();
    // (A thread's wake-up statistics are at the top of its JSON object, `preempt` holds the others.)
    for t in report["threads"].as_array().expect("threads in the trace report") {
        for b in t["fine_ns"].as_array().expect("fine_ns in the trace's thread object") {
            let (lo, hi, n) = (b["lo_ns"].as_u64().unwrap(), b["hi_ns"].as_u64().unwrap(), b["count"].as_u64().unwrap());
            match merged.binary_search_by_key(&lo, |m| m.0) {
                Ok(i) => merged[i].2 += n,
                Err(i) => merged.insert(i, (lo, hi, n)),
            }
        }
    }
    merged
}
