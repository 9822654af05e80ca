//! `--background` for every daemon applet: fork and detach, log to syslog
//! or the log file from then on, and have the caller's process print the
//! daemon's pid only once the daemon says it is ready (init scripts start
//! the next daemon right after).

use std::os::fd::OwnedFd;
use std::time::Duration;

use crate::base::daemonize::{background, report_status, wait_status, Side};

/// How long the caller waits for the daemon to report ready.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The daemon's promise to its waiting parent. Dropping it unreported
/// (the daemon failed before it was ready) makes the parent fail.
#[derive(Debug)]
pub struct Readiness(Option<OwnedFd>);

impl Readiness {
    /// Lets the parent print the pid and exit 0. A no-op in the foreground
    /// or when already reported.
    pub fn report(&mut self) {
        if let Some(fd) = self.0.take() {
            report_status(fd, 0);
        }
    }
}

/// Goes to the background when `enabled`. In the caller's process it
/// waits for the daemon's report, prints its pid and returns `Err(status)`
/// to exit with; in the daemon (or without `enabled`) it returns the
/// [`Readiness`] to report. Must run before any thread is started.
pub fn go_background(applet: &str, enabled: bool) -> Result<Readiness, i32> {
    if !enabled {
        return Ok(Readiness(None));
    }
    match background() {
        Ok(Side::Parent { child_pid, status }) => {
            if matches!(wait_status(status, READY_TIMEOUT), Ok(Some(0))) {
                println!("{child_pid}");
                Err(0)
            } else {
                eprintln!("{applet}: the daemon failed to start (see its log)");
                Err(1)
            }
        }
        Ok(Side::Child { status }) => {
            if let Some(to) = crate::base::log::use_background_sink() {
                crate::log_info!("started in the background, logging to {to}");
            }
            Ok(Readiness(Some(status)))
        }
        Err(e) => {
            eprintln!("{applet}: --background: {e}");
            Err(1)
        }
    }
}
