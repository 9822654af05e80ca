//! SIGINT/SIGTERM as a readable fd for the event loop (signalfd). The
//! signals are blocked first thing in `main`, so one arriving during
//! startup waits in the kernel until the loop reads it.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

fn mask() -> SigSet {
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGINT);
    mask.add(Signal::SIGTERM);
    mask
}

/// Blocks SIGINT/SIGTERM in this thread and every thread or child it
/// creates afterwards.
pub fn block() -> io::Result<()> {
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&mask()), None)?;
    Ok(())
}

/// The pending stop signals, readable without blocking.
#[derive(Debug)]
pub struct StopSignals(SignalFd);

impl StopSignals {
    /// Blocks the signals (if not done yet) and opens the signalfd.
    pub fn open() -> io::Result<StopSignals> {
        block()?;
        let fd = SignalFd::with_flags(&mask(), SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        Ok(StopSignals(fd))
    }

    /// True if a stop signal was pending (consumes it).
    pub fn take(&mut self) -> bool {
        matches!(self.0.read_signal(), Ok(Some(_)))
    }
}

impl AsRawFd for StopSignals {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
