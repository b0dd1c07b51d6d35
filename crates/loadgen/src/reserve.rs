//! The server under a real reservation, made by rtslice's own apply machinery (rtslice-host).

use crate::experiment::Experiment;
use crate::validate::{Launcher, RunningServer};
use crate::{LoadgenError, Result};

/// Starts the server as an rtslice workload with the experiment's reservation and mechanism.
pub struct HostLauncher;

impl HostLauncher {
    pub fn new() -> HostLauncher {
        HostLauncher
    }
}

impl Default for HostLauncher {
    fn default() -> Self {
        HostLauncher::new()
    }
}

impl Launcher for HostLauncher {
    fn launch(&self, exp: &Experiment, _command: &[String]) -> Result<Box<dyn RunningServer>> {
        Err(LoadgenError::Reservation(format!(
            "mechanism `{}` goes through rtslice-host's apply, which this build does not have yet; \
             run with `--mechanism none` meanwhile",
            exp.mechanism
        )))
    }
}
