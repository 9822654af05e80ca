//! The few raw system calls the ftrace reader needs that std does not wrap.
//! Only this file (and `cpu_reader`) touches libc in `probes::ftrace`.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

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
