//! Ctrl-C and SIGTERM for the client. The first one stops the trace
//! gracefully (flush, disable, write the file). Another one within
//! [`SAME_INTERRUPTION`] of it is the same interruption: coreutils'
//! `timeout` (without `--foreground`) signals the client and then its
//! whole process group, and a terminal's Ctrl-C reaches every process of
//! the foreground group. A later one exits at once: it cuts the file the
//! client is writing back to its last whole packet, writes `second
//! interrupt: exiting; OUT is incomplete` and dies of the signal.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// What the client says when a stop signal came before the trace started.
pub const BEFORE_START: &str = "interrupted before tracing started: nothing recorded";

/// Signals this close to the first one are the same interruption.
pub const SAME_INTERRUPTION: Duration = Duration::from_secs(1);

/// CLOCK_MONOTONIC of the first interrupt, in ns (0: none yet).
static FIRST_AT_NS: AtomicU64 = AtomicU64::new(0);
/// The trace file the client itself is writing (-1: none), and how many of
/// its leading bytes are whole packets.
static OUT_FD: AtomicI32 = AtomicI32::new(-1);
static OUT_WHOLE: AtomicU64 = AtomicU64::new(0);
/// The line a later interrupt writes, made before any handler can run.
static LATER_LINE: OnceLock<Vec<u8>> = OnceLock::new();

/// Names the output in the line a later interrupt writes (`-o` path, or
/// `stdout`). Call once, before the trace starts.
pub fn name_output(name: &str) {
    let _ =
        LATER_LINE.set(format!("second interrupt: exiting; {name} is incomplete\n").into_bytes());
}

/// The client writes the trace into `fd` from here on; `whole_bytes` of it
/// are whole packets (see [`whole_bytes`]).
pub fn writing_into(fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    OUT_WHOLE.store(0, Ordering::SeqCst);
    OUT_FD.store(fd.as_raw_fd(), Ordering::SeqCst);
}

/// `n` leading bytes of the file given to [`writing_into`] are whole
/// packets: a later interrupt cuts the file there.
pub fn whole_bytes(n: u64) {
    OUT_WHOLE.store(n, Ordering::SeqCst);
}

/// The client stopped writing into that file.
pub fn done_writing() {
    OUT_FD.store(-1, Ordering::SeqCst);
}

fn stop_mask() -> SigSet {
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGINT);
    mask.add(Signal::SIGTERM);
    mask
}

/// Holds SIGINT/SIGTERM pending from the client's first instruction, so
/// one that comes while it parses and checks its flags (before
/// [`StopSignals::install`]) is seen and said, not a silent death.
pub fn hold() {
    let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&stop_mask()), None);
}

/// Undoes [`hold`] for a command that does not trace: a held signal then
/// acts as usual (it ends the process).
pub fn release() {
    let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&stop_mask()), None);
}

/// Blocks SIGINT/SIGTERM and reads them from a signalfd instead. Create it
/// before any thread starts so every thread inherits the mask.
pub struct StopSignals {
    fd: SignalFd,
    mask: SigSet,
}

impl StopSignals {
    pub fn install() -> std::io::Result<Self> {
        let mask = stop_mask();
        nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)?;
        let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        Ok(Self { fd, mask })
    }

    /// Readable when a stop signal is pending: wait on it with the socket.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// True once a stop signal arrived. From then on a later one is handled
    /// by [`on_later_interrupt`] (ignored within [`SAME_INTERRUPTION`]).
    pub fn received(&mut self) -> bool {
        let Ok(Some(_)) = self.fd.read_signal() else {
            return false;
        };
        // Signals already queued came with this one.
        while let Ok(Some(_)) = self.fd.read_signal() {}
        FIRST_AT_NS.store(monotonic_ns().max(1), Ordering::SeqCst);
        if let Err(e) = install_later_handler() {
            eprintln!("signal setup failed: {e}");
        }
        let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&self.mask), None);
        true
    }

    /// Sleeps for `d` unless a stop signal comes first (then true).
    pub fn sleep_unless_interrupted(&mut self, d: Duration) -> bool {
        let _ = crate::base::unix_socket::wait_readable_any(&[self.fd()], Some(d));
        self.interrupted_before_start()
    }

    /// True if a stop signal came before the trace started (it is
    /// consumed; the signals stay blocked). The caller says so and exits:
    /// nothing was recorded.
    pub fn interrupted_before_start(&mut self) -> bool {
        self.fd.read_signal().is_ok_and(|s| s.is_some())
    }
}

fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC);
    t.map_or(0, |t| {
        (t.tv_sec() as u64).saturating_mul(1_000_000_000) + t.tv_nsec() as u64
    })
}

fn install_later_handler() -> nix::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler};
    // SA_NODEFER: the handler's raise() of its own signal is delivered at
    // once, with the default action it has restored.
    let act = SigAction::new(
        SigHandler::Handler(on_later_interrupt),
        SaFlags::SA_NODEFER,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only calls async-signal-safe functions
        // (clock_gettime, ftruncate, write, signal, raise, _exit) and reads
        // atomics and a OnceLock set before any signal was unblocked.
        unsafe { sigaction(sig, &act)? };
    }
    Ok(())
}

/// A stop signal after the first: the same interruption within
/// [`SAME_INTERRUPTION`], else exit now with the file cut to whole packets.
extern "C" fn on_later_interrupt(sig: libc::c_int) {
    let first = FIRST_AT_NS.load(Ordering::SeqCst);
    if monotonic_ns().saturating_sub(first) < SAME_INTERRUPTION.as_nanos() as u64 {
        return;
    }
    let fd = OUT_FD.load(Ordering::SeqCst);
    // SAFETY: async-signal-safe calls on an fd the client owns (a failed
    // ftruncate, e.g. on a pipe, changes nothing) and on stderr; the
    // process ends here.
    unsafe {
        if fd >= 0 {
            libc::ftruncate(fd, OUT_WHOLE.load(Ordering::SeqCst) as libc::off_t);
        }
        if let Some(line) = LATER_LINE.get() {
            libc::write(2, line.as_ptr().cast(), line.len());
        }
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
        libc::_exit(128 + sig);
    }
}
