//! Client and server over loopback, both protocols: every request answered, and the round trip
//! includes the requested CPU work (it can never be shorter than the work).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rtslice_loadgen::client::{self, ClientConfig};
use rtslice_loadgen::dist::Dist;
use rtslice_loadgen::server::{Server, ServerConfig};
use rtslice_loadgen::stats::RttSummary;
use rtslice_loadgen::work::Spinner;
use rtslice_loadgen::Protocol;

fn round_trip(protocol: Protocol) {
    let _lock = rtslice_testkit::KernelLock::acquire(); // timing-dependent
    let spinner = Spinner::calibrate(Duration::from_millis(30));
    let server = Server::bind(ServerConfig { bind: "127.0.0.1:0".parse().unwrap(), protocol, spinner, max_requests: None }).unwrap();
    let addr = server.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let handle = std::thread::spawn(move || server.serve(&s2));

    let cfg = ClientConfig {
        server: addr,
        protocol,
        interarrival: Dist::Exponential { mean: Duration::from_micros(1000) },
        compute: Dist::Constant(Duration::from_micros(200)),
        request_bytes: 512,
        reply_bytes: 256,
        count: 300,
        seed: 3,
        drain: Duration::from_secs(10),
        fifo_priority: None,
        netns: None,
        cpus: None,
    };
    let run = client::run(&cfg).unwrap();
    assert_eq!(run.sent, 300);
    // TCP never loses; UDP may drop only if the (CFS) server is starved long enough to overflow its
    // socket buffer on this shared 2-CPU VM, so only gross loss fails.
    match protocol {
        Protocol::Tcp => assert_eq!(run.lost, 0, "tcp lost {}", run.lost),
        Protocol::Udp => assert!(run.lost <= 15, "udp lost {} of 300", run.lost),
    }
    let s = RttSummary::of(&run.rtts_s()).unwrap();
    // The work is real: no round trip is shorter than the CPU time it asked for.
    assert!(s.min_s >= 200e-6, "{protocol}: a round trip ({} µs) shorter than its 200 µs of work", s.min_s * 1e6);
    assert!(run.samples.windows(2).all(|w| w[0].id < w[1].id));
    assert!(run.samples.iter().all(|x| (x.compute_s - 200e-6).abs() < 1e-9));

    client::stop_server(addr, protocol, None).unwrap();
    let stats = handle.join().unwrap().unwrap();
    assert_eq!(stats.requests, 300);
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn udp_round_trip() {
    round_trip(Protocol::Udp);
}

#[test]
fn tcp_round_trip() {
    round_trip(Protocol::Tcp);
}

#[test]
fn unreachable_server_is_an_error_that_says_where() {
    // TCP to a closed loopback port: refused at once.
    let cfg = ClientConfig {
        server: "127.0.0.1:1".parse().unwrap(),
        protocol: Protocol::Tcp,
        interarrival: Dist::Constant(Duration::from_millis(1)),
        compute: Dist::Constant(Duration::ZERO),
        request_bytes: 64,
        reply_bytes: 64,
        count: 1,
        seed: 0,
        drain: Duration::from_millis(100),
        fifo_priority: None,
        netns: None,
        cpus: None,
    };
    let e = client::run(&cfg).unwrap_err().to_string();
    assert!(e.contains("127.0.0.1:1"), "{e}");
}
