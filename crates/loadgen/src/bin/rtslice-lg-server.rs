//! The loadgen server as its own small program, for the crate's tests (which cannot start the
//! `rtslice` binary) and for hosts where only the server side is wanted. Same code as
//! `rtslice loadgen server`.

use std::sync::atomic::AtomicBool;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let stop = AtomicBool::new(false);
    match rtslice_loadgen::server::parse_server_args(&args).and_then(|m| rtslice_loadgen::server::server_main(&m, &stop)) {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rtslice-lg-server: {e}");
            std::process::ExitCode::from(3)
        }
    }
}
