//! The kernel side of sampling: `perf_event_open`, the ioctls that start
//! and stop an event, and the shared ring it writes records into.
//!
//! Every unsafe block of traced_perf lives here.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// `struct perf_event_attr` up to `sample_max_stack` (PERF_ATTR_SIZE_VER5),
/// kept as bytes with the offsets of the uapi header.
#[derive(Clone, Copy)]
pub struct Attr(pub [u8; ATTR_SIZE]);

pub const ATTR_SIZE: usize = 112;

pub const TYPE_HARDWARE: u32 = 0;
pub const TYPE_SOFTWARE: u32 = 1;
pub const TYPE_TRACEPOINT: u32 = 2;

pub const SAMPLE_TID: u64 = 1 << 1;
pub const SAMPLE_TIME: u64 = 1 << 2;
pub const SAMPLE_READ: u64 = 1 << 4;
pub const SAMPLE_CALLCHAIN: u64 = 1 << 5;
pub const SAMPLE_CPU: u64 = 1 << 7;
pub const SAMPLE_PERIOD: u64 = 1 << 8;
pub const SAMPLE_REGS_USER: u64 = 1 << 12;
pub const SAMPLE_STACK_USER: u64 = 1 << 13;
/// read_format: the leader's sample reads every member of its group.
pub const FORMAT_GROUP: u64 = 1 << 3;
/// read_format: each value comes with the records the kernel could not
/// write for that event (Linux 6.0+). A ring still full at stop never gets
/// the LOST record of its last losses; this count has them.
pub const FORMAT_LOST: u64 = 1 << 4;

// Bits of the flags word at offset 40.
pub const FLAG_DISABLED: u64 = 1 << 0;
pub const FLAG_EXCLUDE_USER: u64 = 1 << 4;
pub const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
pub const FLAG_EXCLUDE_HV: u64 = 1 << 6;
/// COMM records (exec sets MISC_COMM_EXEC in them).
pub const FLAG_COMM: u64 = 1 << 9;
pub const FLAG_FREQ: u64 = 1 << 10;
pub const FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;
pub const FLAG_EXCLUDE_CALLCHAIN_KERNEL: u64 = 1 << 21;
pub const FLAG_EXCLUDE_CALLCHAIN_USER: u64 = 1 << 22;
/// comm_exec: COMM records written by exec say so in `misc`.
pub const FLAG_COMM_EXEC: u64 = 1 << 24;
pub const FLAG_USE_CLOCKID: u64 = 1 << 25;

impl Attr {
    pub fn new(type_: u32, config: u64) -> Attr {
        let mut a = Attr([0; ATTR_SIZE]);
        a.put32(0, type_);
        a.put32(4, ATTR_SIZE as u32);
        a.put64(8, config);
        a
    }
    pub fn put32(&mut self, off: usize, v: u32) {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }
    pub fn put64(&mut self, off: usize, v: u64) {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    }
    pub fn get32(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.0[off..off + 4].try_into().unwrap())
    }
    pub fn get64(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.0[off..off + 8].try_into().unwrap())
    }
    pub fn set_flags(&mut self, bits: u64) {
        let f = self.get64(40) | bits;
        self.put64(40, f);
    }
    pub fn set_period_or_freq(&mut self, v: u64) {
        self.put64(16, v);
    }
    pub fn set_sample_type(&mut self, v: u64) {
        self.put64(24, v);
    }
    pub fn set_read_format(&mut self, v: u64) {
        self.put64(32, v);
    }
    pub fn set_config1(&mut self, v: u64) {
        self.put64(56, v);
    }
    pub fn set_config2(&mut self, v: u64) {
        self.put64(64, v);
    }
    pub fn set_clockid(&mut self, id: i32) {
        self.set_flags(FLAG_USE_CLOCKID);
        self.0[92..96].copy_from_slice(&id.to_ne_bytes());
    }
    /// PERF_SAMPLE_REGS_USER: the registers each sample copies.
    pub fn set_sample_regs_user(&mut self, mask: u64) {
        self.put64(80, mask);
    }
    /// PERF_SAMPLE_STACK_USER: bytes of user stack each sample copies.
    pub fn set_sample_stack_user(&mut self, bytes: u32) {
        self.0[88..92].copy_from_slice(&bytes.to_ne_bytes());
    }
    pub fn set_max_stack(&mut self, n: u16) {
        self.0[108..110].copy_from_slice(&n.to_ne_bytes());
    }
}

/// `perf_event_open(attr, pid = -1, cpu, group, FD_CLOEXEC)`: every task
/// on one CPU, alone or as a member of `group`'s leader.
pub fn open_cpu(attr: &Attr, cpu: u32, group: Option<&OwnedFd>) -> io::Result<OwnedFd> {
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
    // SAFETY: attr points to ATTR_SIZE readable bytes whose size field says
    // ATTR_SIZE; the kernel only reads them. The other arguments are plain
    // integers (the group fd is borrowed, so open for the call).
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.0.as_ptr(),
            -1 as libc::pid_t,
            cpu as libc::c_int,
            group.map_or(-1, |g| g.as_raw_fd()) as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// read(2) of an event: its read_format values into `buf`; the bytes read.
pub fn read_values(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    Ok(nix::unistd::read(fd.as_raw_fd(), buf)?)
}

/// PERF_EVENT_IOC_ENABLE / PERF_EVENT_IOC_DISABLE.
pub fn set_enabled(fd: &OwnedFd, on: bool) -> io::Result<()> {
    let req: libc::c_ulong = if on { 0x2400 } else { 0x2401 };
    // SAFETY: these ioctls take no pointer argument.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// The metadata page plus 2^n data pages the kernel writes records into.
/// We only read the data and move `data_tail` forward.
pub struct Ring {
    base: *mut u8,
    len: usize,
    data_size: usize,
    page: usize,
}

// SAFETY: the mapping is owned by this value; nothing else aliases it in
// this process, and the kernel synchronises through head/tail.
unsafe impl Send for Ring {}

const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;

impl Ring {
    pub fn map(fd: &OwnedFd, data_pages: usize) -> io::Result<Ring> {
        let page = page_size();
        let len = page * (data_pages + 1);
        // SAFETY: a fresh shared mapping of the event fd; the kernel
        // validates the length (1 + 2^n pages).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Ring {
            base: p as *mut u8,
            len,
            data_size: page * data_pages,
            page,
        })
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        // SAFETY: off is DATA_HEAD or DATA_TAIL, 8-aligned, inside the
        // metadata page that lives as long as self.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    /// Bytes written so far (kernel side), read with acquire so the
    /// records before it are visible.
    pub fn head(&self) -> u64 {
        self.word(DATA_HEAD).load(Ordering::Acquire)
    }

    pub fn tail(&self) -> u64 {
        self.word(DATA_TAIL).load(Ordering::Relaxed)
    }

    /// Gives bytes up to `tail` back to the kernel.
    pub fn set_tail(&self, tail: u64) {
        self.word(DATA_TAIL).store(tail, Ordering::Release);
    }

    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// The data area (between head and tail it is stable until set_tail).
    pub fn data(&self) -> &[u8] {
        // SAFETY: the data pages follow the metadata page inside the
        // mapping; the kernel writes only outside [tail, head).
        unsafe { std::slice::from_raw_parts(self.base.add(self.page), self.data_size) }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base/len is our mapping, unmapped once.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

/// CPUs the kernel may run tasks on (`/sys/devices/system/cpu/online`).
pub fn online_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut out = Vec::new();
    for part in text.trim().split(',') {
        let mut it = part.splitn(2, '-');
        let a = it.next().and_then(|s| s.parse::<u32>().ok());
        let b = it.next().and_then(|s| s.parse::<u32>().ok());
        match (a, b) {
            (Some(a), Some(b)) if b >= a && b < 4096 => out.extend(a..=b),
            (Some(a), None) if a < 4096 => out.push(a),
            _ => {}
        }
    }
    if out.is_empty() {
        out.push(0);
    }
    out
}

/// PERF_EVENT_IOC_SET_FILTER: a tracepoint filter expression.
pub fn set_filter(fd: &OwnedFd, filter: &str) -> io::Result<()> {
    let c = std::ffi::CString::new(filter).map_err(|_| io::ErrorKind::InvalidInput)?;
    // _IOW('$', 6, char *)
    let req: libc::c_ulong =
        (1 << 30) | ((std::mem::size_of::<usize>() as libc::c_ulong) << 16) | (0x24 << 8) | 6;
    // SAFETY: c is a NUL-terminated string alive for the call; the kernel
    // copies it.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, c.as_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
