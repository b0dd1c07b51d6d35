//! Process-wide signal dispositions.

use nix::sys::signal::{signal, SigHandler, Signal};

/// Gives SIGPIPE back its default action (terminate quietly), undoing the Rust runtime's `SIG_IGN`.
///
/// Why: Rust ignores SIGPIPE at start, so a write to a closed pipe returns `EPIPE` and `println!`
/// panics with a backtrace (exit 101) when a reader such as `head` goes away. A command-line tool
/// should end like `cat` does there: silently, killed by SIGPIPE. Sockets are unaffected (the standard
/// library sends with `MSG_NOSIGNAL`), and children spawned by `std::process::Command` get the
/// default disposition anyway. Call it once, first thing in `main`, before any thread starts.
pub fn restore_default_sigpipe() -> std::io::Result<()> {
    // SAFETY: installing SIG_DFL runs no handler code, so there is nothing async-signal-unsafe to
    // guard against; `signal` is only unsafe because arbitrary handlers could be.
    unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) }.map(|_| ()).map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigSet};

    #[test]
    fn sigpipe_is_default_afterwards() {
        restore_default_sigpipe().unwrap();
        // Read the disposition back by swapping in the same value (sigaction has no pure query in nix).
        let dfl = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
        // SAFETY: installs SIG_DFL again, which runs no handler code.
        let old = unsafe { sigaction(Signal::SIGPIPE, &dfl) }.unwrap();
        assert!(matches!(old.handler(), SigHandler::SigDfl), "SIGPIPE is not back to its default action");
    }
}
