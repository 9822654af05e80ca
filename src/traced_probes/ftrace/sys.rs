//! The few raw system calls the ftrace reader needs that std does not wrap.
//! Only this file (and `cpu_reader`) touches libc in `traced_probes::ftrace`.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// Mounts tracefs on `target` (needs CAP_SYS_ADMIN).
pub fn mount_tracefs(target: &Path) -> io::Result<()> {
    let target = CString::new(target.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    let fstype = c"tracefs";
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the
    // call; a null `data` is allowed by mount(2).
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Flags for [`splice`].
pub const SPLICE_F_MOVE: u32 = libc::SPLICE_F_MOVE;
pub const SPLICE_F_NONBLOCK: u32 = libc::SPLICE_F_NONBLOCK;

/// Moves up to `len` bytes from `from` to `to` without copying through
/// userspace; one of them must be a pipe.
pub fn splice(from: &impl AsRawFd, to: &impl AsRawFd, len: usize, flags: u32) -> io::Result<usize> {
    // SAFETY: both fds are open for the duration of the call (borrowed);
    // null offsets mean "use and advance the file positions".
    let n = unsafe {
        libc::splice(
            from.as_raw_fd(),
            std::ptr::null_mut(),
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            flags,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> io::Result<(File, File)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both fds are new and owned by nobody else.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

/// Sets or clears O_NONBLOCK.
pub fn set_nonblocking(f: &impl AsRawFd, on: bool) -> io::Result<()> {
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a borrowed, open fd with integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Bytes waiting in a pipe (FIONREAD); 0 if the kernel will not say.
pub fn pipe_bytes(f: &impl AsRawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD on a borrowed, open fd writes one int into `n`.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::FIONREAD, &mut n) };
    if r < 0 {
        0
    } else {
        n.max(0) as usize
    }
}

/// Grows a pipe's capacity (best effort; returns the resulting size).
pub fn set_pipe_size(f: &impl AsRawFd, bytes: usize) -> io::Result<usize> {
    // SAFETY: fcntl on a borrowed, open fd with an integer argument.
    let n = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETPIPE_SZ, bytes as libc::c_int) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Opens `path` read-only, optionally non-blocking.
pub fn open_read(path: &Path, nonblocking: bool) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = if nonblocking { libc::O_NONBLOCK } else { 0 };
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
}

/// A wakeup counter a thread can sleep on in [`sleep_on`] (an eventfd).
pub struct Waker(nix::sys::eventfd::EventFd);

impl Waker {
    pub fn new() -> io::Result<Waker> {
        use nix::sys::eventfd::{EfdFlags, EventFd};
        let flags = EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK;
        Ok(Waker(EventFd::from_value_and_flags(0, flags)?))
    }

    /// Makes the current or the next [`sleep_on`] of this waker return.
    pub fn wake(&self) {
        // Fails only when the counter would overflow: it is set anyway.
        let _ = self.0.write(1);
    }
}

/// What ended a [`sleep_on`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    Waker,
    /// `file` polled readable.
    File,
    Timeout,
}

/// Sleeps until `waker` is woken, `file` (if any) polls readable, or `d`
/// passes (rounded up to whole milliseconds). Consumes the wakeup.
pub fn sleep_on(waker: &Waker, file: Option<&File>, d: Duration) -> Woken {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let ms = d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
    let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
    let mut fds = [
        PollFd::new(waker.0.as_fd(), PollFlags::POLLIN),
        PollFd::new(
            file.map_or(waker.0.as_fd(), |f| f.as_fd()),
            PollFlags::POLLIN,
        ),
    ];
    let n = if file.is_some() { 2 } else { 1 };
    match poll(&mut fds[..n], timeout) {
        Ok(0) | Err(_) => Woken::Timeout,
        Ok(_) => {
            let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
            if ready(&fds[0]) {
                // Reset the counter (non-blocking: never waits).
                let _ = waker.0.read();
                Woken::Waker
            } else if n == 2 && ready(&fds[1]) {
                Woken::File
            } else {
                Woken::Timeout
            }
        }
    }
}
