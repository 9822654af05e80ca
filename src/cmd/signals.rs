//! Ctrl-C and SIGTERM for the client: the first one stops the trace
//! gracefully (flush, disable, write the file); the second one kills, as
//! the default disposition is restored after the first.

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// Blocks SIGINT/SIGTERM and reads them from a signalfd instead. Create it
/// before any thread starts so every thread inherits the mask.
pub struct StopSignals {
    fd: SignalFd,
    mask: SigSet,
}

impl StopSignals {
    pub fn install() -> std::io::Result<Self> {
        let mut mask = SigSet::empty();
        mask.add(Signal::SIGINT);
        mask.add(Signal::SIGTERM);
        nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)?;
        let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        Ok(Self { fd, mask })
    }

    /// Readable when a stop signal is pending: wait on it with the socket.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// True once a stop signal arrived; unblocks the signals then, so the
    /// next one takes its default action.
    pub fn received(&mut self) -> bool {
        match self.fd.read_signal() {
            Ok(Some(_)) => {
                let _ = nix::sys::signal::pthread_sigmask(
                    SigmaskHow::SIG_UNBLOCK,
                    Some(&self.mask),
                    None,
                );
                true
            }
            _ => false,
        }
    }
}
