//! The few raw system calls the ftrace reader needs that std does not wrap.
//! Only this file (and `cpu_reader`) touches libc in `probes::ftrace`.

use std::ffi::CString;
use std::io;
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
