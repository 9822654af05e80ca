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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_searchable_and_missing_dirs_are_not() {
        assert!(is_searchable(Path::new("/")));
        assert!(!is_searchable(Path::new("/nonexistent-tracebox-dir/")));
    }
}
