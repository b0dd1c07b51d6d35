//! Runs the emulator from the library without the CLI (handy for release-build measurements):
//! `cargo run --release -p rtslice-emu --example run -- PROFILE SECONDS [key=value ...]`
//! or `... --example run -- calibrate` for the per-kernel cost table.
//! keys: load (percent), prb, traffic (0..1), mcs, antennas, snr, sched (profile|other|fifo|rr),
//! cpus (comma list). Prints the summary JSON.

use rtslice_emu::{Class, Config, Profile, SchedMode};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("calibrate") {
        print!("{}", rtslice_emu::Calibration::measure().report());
        return;
    }
    let profile = args.first().and_then(|p| Profile::parse(p)).unwrap_or(Profile::OaiLte);
    let mut cfg = Config::new(profile);
    cfg.duration = std::time::Duration::from_secs_f64(args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5.0));
    cfg.live = true;
    for kv in args.iter().skip(2) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "load" => cfg.load_percent = v.parse().ok(),
            "prb" => cfg.prb = v.parse().ok(),
            "traffic" => cfg.traffic = v.parse().ok(),
            "mcs" => cfg.mcs = v.parse().ok(),
            "antennas" => cfg.antennas = v.parse().ok(),
            "snr" => cfg.snr_db = v.parse().unwrap_or(cfg.snr_db),
            "sched" => {
                cfg.sched = match v {
                    "other" => SchedMode::Force(Class::Other),
                    "fifo" => SchedMode::Force(Class::Fifo),
                    "rr" => SchedMode::Force(Class::Rr),
                    _ => SchedMode::Profile,
                }
            }
            "cpus" => cfg.cpus = Some(v.split(',').filter_map(|c| c.parse().ok()).collect()),
            other => eprintln!("ignoring unknown key {other}"),
        }
    }
    match rtslice_emu::run(cfg) {
        Ok(s) => println!("{}", serde_json::to_string_pretty(&s).expect("summary serialises")),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
