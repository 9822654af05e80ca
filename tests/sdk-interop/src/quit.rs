//! "Stop now" requests: SIGINT/SIGTERM or a flag file appearing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
}

/// Routes SIGINT and SIGTERM to a flag instead of killing the process.
pub fn install_signal_handlers() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    // SAFETY: the handler only stores to an atomic, which is signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
    }
}

pub fn signalled() -> bool {
    SIGNALLED.load(Ordering::SeqCst)
}

/// Why a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub enum WaitEnd {
    Signal,
    StopFile,
    Timeout,
    Condition,
}

/// Sleeps in small steps until a signal, the stop file, `deadline`, or `cond`.
pub fn wait_until(
    stop_file: Option<&PathBuf>,
    deadline: Option<Instant>,
    mut cond: impl FnMut() -> bool,
) -> WaitEnd {
    loop {
        if cond() {
            return WaitEnd::Condition;
        }
        if signalled() {
            return WaitEnd::Signal;
        }
        if stop_file.is_some_and(|p| p.exists()) {
            return WaitEnd::StopFile;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return WaitEnd::Timeout;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
