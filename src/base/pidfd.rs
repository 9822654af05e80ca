//! Process identity from a pidfd: `pidfd_open` + `ioctl(PIDFD_GET_INFO)`
//! (Linux 6.13+). Gives pid, tgid, ppid and the real uid in three syscalls,
//! without having the kernel format /proc/<pid>/status (several times
//! cheaper). Older kernels answer ENOSYS (no pidfd_open, < 5.3), ENOTTY (no
//! ioctl) or EINVAL; callers probe once with [`pid_info_supported`] and fall
//! back to /proc.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::raw::c_ulong;
use std::sync::OnceLock;

/// What `PIDFD_GET_INFO` reports for one process, ids as seen from our pid
/// namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidInfo {
    pub pid: i32,
    pub tgid: i32,
    /// 0 for pid 1 and for kthreadd (their parent is the idle task).
    pub ppid: i32,
    /// Real uid, mapped into our user namespace.
    pub ruid: u32,
}

/// Why [`pid_info`] gave no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PidInfoError {
    /// The process no longer exists (ESRCH).
    Gone,
    /// `pid` is not a thread-group leader, or the kernel lacks the call
    /// (ENOENT, EINVAL, ENOSYS, ENOTTY).
    NotApplicable,
    /// Any other errno (EMFILE, EPERM from seccomp, ...).
    Other(i32),
}

/// Layout of the kernel's `struct pidfd_info`, first version (64 bytes).
#[repr(C)]
#[derive(Default)]
struct RawPidfdInfo {
    mask: u64,
    cgroupid: u64,
    pid: u32,
    tgid: u32,
    ppid: u32,
    ruid: u32,
    rgid: u32,
    euid: u32,
    egid: u32,
    suid: u32,
    sgid: u32,
    fsuid: u32,
    fsgid: u32,
    exit_code: i32,
}

const INFO_PID: u64 = 1;
const INFO_CREDS: u64 = 2;
const PIDFS_IOCTL_MAGIC: c_ulong = 0xFF;
const GET_INFO_NR: c_ulong = 11;

/// `_IOWR(0xFF, 11, struct pidfd_info)` in the architecture's ioctl encoding.
const fn get_info_request() -> c_ulong {
    let size = std::mem::size_of::<RawPidfdInfo>() as c_ulong;
    if cfg!(any(
        target_arch = "powerpc",
        target_arch = "powerpc64",
        target_arch = "mips",
        target_arch = "mips64",
        target_arch = "sparc",
        target_arch = "sparc64"
    )) {
        // 3 direction bits (read = 2, write = 4) above a 13-bit size.
        (6 << 29) | (size << 16) | (PIDFS_IOCTL_MAGIC << 8) | GET_INFO_NR
    } else {
        (3 << 30) | (size << 16) | (PIDFS_IOCTL_MAGIC << 8) | GET_INFO_NR
    }
}

const _: () = assert!(std::mem::size_of::<RawPidfdInfo>() == 64);

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn classify(err: i32) -> PidInfoError {
    match err {
        libc::ESRCH => PidInfoError::Gone,
        // Non-leaders get ENOENT (6.18) or EINVAL (older kernels).
        libc::ENOENT | libc::EINVAL | libc::ENOSYS | libc::ENOTTY => PidInfoError::NotApplicable,
        e => PidInfoError::Other(e),
    }
}

fn pidfd_open(pid: i32) -> Result<OwnedFd, PidInfoError> {
    // SAFETY: pidfd_open takes two integers and returns a new fd or -1;
    // no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(classify(errno()));
    }
    // SAFETY: the kernel just returned this fd to us; we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Identity of thread-group leader `pid` from a pidfd.
pub fn pid_info(pid: i32) -> Result<PidInfo, PidInfoError> {
    if pid <= 0 {
        return Err(PidInfoError::NotApplicable);
    }
    let fd = pidfd_open(pid)?;
    let mut raw = RawPidfdInfo {
        mask: INFO_PID | INFO_CREDS,
        ..Default::default()
    };
    use std::os::fd::AsRawFd;
    // SAFETY: `raw` is a live, writable 64-byte struct matching the size
    // encoded in the request; the kernel writes at most that many bytes.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            get_info_request() as _,
            &mut raw as *mut RawPidfdInfo,
        )
    };
    if rc < 0 {
        return Err(classify(errno()));
    }
    if raw.mask & (INFO_PID | INFO_CREDS) != INFO_PID | INFO_CREDS {
        return Err(PidInfoError::NotApplicable);
    }
    let as_i32 = |v: u32| i32::try_from(v).map_err(|_| PidInfoError::NotApplicable);
    Ok(PidInfo {
        pid: as_i32(raw.pid)?,
        tgid: as_i32(raw.tgid)?,
        ppid: as_i32(raw.ppid)?,
        ruid: raw.ruid,
    })
}

/// Whether [`pid_info`] works on this kernel (and is not blocked by a
/// seccomp policy). Probed once on our own process.
pub fn pid_info_supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let me = std::process::id() as i32;
        matches!(pid_info(me), Ok(info) if info.pid == me && info.tgid == me)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_matches_the_kernel_header_on_common_arches() {
        if cfg!(any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "arm",
            target_arch = "riscv64"
        )) {
            assert_eq!(get_info_request(), 0xC040_FF0B);
        }
    }

    #[test]
    fn own_process_and_errors() {
        assert_eq!(pid_info(0), Err(PidInfoError::NotApplicable));
        if !pid_info_supported() {
            eprintln!("PIDFD_GET_INFO unsupported here; only error paths tested");
            return;
        }
        let me = std::process::id() as i32;
        let info = pid_info(me).unwrap();
        assert_eq!((info.pid, info.tgid), (me, me));
        assert_eq!(info.ppid, nix::unistd::getppid().as_raw());
        assert_eq!(info.ruid, nix::unistd::getuid().as_raw());
        // A non-leader thread: pidfd_open refuses it without PIDFD_THREAD.
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw()).unwrap();
            std::thread::park();
        });
        let tid = rx.recv().unwrap();
        assert_eq!(pid_info(tid), Err(PidInfoError::NotApplicable));
        t.thread().unpark();
        t.join().unwrap();
        // A reaped child.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert_eq!(pid_info(pid), Err(PidInfoError::Gone));
    }
}
