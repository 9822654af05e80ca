//! Small OS queries that fit nowhere else.

use std::path::Path;

/// `access(path, X_OK) == 0`: the directory exists and we may traverse it.
pub fn is_searchable(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
}

/// Makes large allocations (trace buffers) always come straight from
/// mmap, so freeing a session hands its memory back to the OS. glibc
/// otherwise raises its mmap threshold after the first such free and
/// serves later buffers from the heap, which stays resident; musl maps
/// large allocations anyway.
pub fn return_large_frees_to_os() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; no memory is touched.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

/// Makes a write past RLIMIT_FSIZE fail with EFBIG instead of killing the
/// process with SIGXFSZ, so traced can end the session with an error.
pub fn ignore_sigxfsz() -> nix::Result<()> {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: SIG_IGN installs no handler: no code runs on the signal.
    unsafe { signal(Signal::SIGXFSZ, SigHandler::SigIgn) }.map(|_| ())
}

/// Minutes east of UTC of the local time zone now (TZ, /etc/localtime).
pub fn utc_offset_minutes() -> Option<i32> {
    // SAFETY: time(NULL) only returns the clock; localtime_r writes the
    // zeroed `tm` we own and reads the `now` we pass, nothing else.
    let tm = unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            return None;
        }
        tm
    };
    i32::try_from(tm.tm_gmtoff / 60).ok()
}

/// CPUs the kernel configured (online or not), as upstream counts them.
pub fn cpus_configured() -> Option<u32> {
    let n = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_CONF).ok()??;
    u32::try_from(n).ok()
}

/// Physical memory in bytes (`_SC_PHYS_PAGES` pages of `_SC_PAGESIZE`), as
/// upstream fills `SystemInfo.system_ram_bytes`.
// `c_long` is i32 on 32-bit targets (armv7, i686): the conversions are real there.
#[allow(clippy::useless_conversion)]
pub fn system_ram_bytes() -> Option<u64> {
    use nix::unistd::{sysconf, SysconfVar};
    let pages = u64::try_from(i64::from(sysconf(SysconfVar::_PHYS_PAGES).ok()??)).ok()?;
    let size = u64::try_from(i64::from(sysconf(SysconfVar::PAGE_SIZE).ok()??)).ok()?;
    pages.checked_mul(size).filter(|&b| b > 0)
}

/// USER_HZ: the unit of /proc's tick counters.
// `c_long` is i32 on 32-bit targets (armv7, i686): the conversion is real there.
#[allow(clippy::useless_conversion)]
pub fn clock_ticks_per_second() -> Option<i64> {
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    Some(i64::from(hz))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_figures() {
        let n = cpus_configured().unwrap();
        assert!(n >= 1 && n as usize >= std::thread::available_parallelism().unwrap().get());
        assert!(clock_ticks_per_second().unwrap() > 0);
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let total_kb: u64 = meminfo
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let ram = system_ram_bytes().unwrap();
        // MemTotal leaves out what the kernel reserved at boot.
        assert!(
            ram >= total_kb * 1024 && ram < total_kb * 1024 * 2,
            "{ram} vs {total_kb} kB"
        );
        let off = utc_offset_minutes().unwrap();
        assert!((-14 * 60..=14 * 60).contains(&off), "{off}");
    }

    #[test]
    fn root_is_searchable_and_missing_dirs_are_not() {
        assert!(is_searchable(Path::new("/")));
        assert!(!is_searchable(Path::new("/nonexistent-tracebox-dir/")));
    }
}
