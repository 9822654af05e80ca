//! Shared memory for the SMB: a sealed memfd mapped `MAP_SHARED`.
//!
//! * [`Shm::create`] (service, or a producer that brings its own SMB):
//!   `memfd_create("perfetto_shmem", MFD_CLOEXEC | MFD_ALLOW_SEALING)`,
//!   `ftruncate`, seals `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`, then
//!   `mmap(PROT_READ | PROT_WRITE, MAP_SHARED)`. Without memfd support it
//!   falls back to an unlinked temp file (unsealed).
//! * [`Shm::attach`] (the other side, from a received fd): optionally
//!   requires the shrink and grow seals (so the peer cannot truncate the
//!   file under our mapping and make us SIGBUS), takes the size from
//!   `fstat`, checks it, and maps it.
//!
//! The mapping is handed to [`SharedMem`], through which all reads and
//! writes go; it is unmapped when the last `Arc<SharedMem>` drops.

use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};

use crate::mem::shared_mem::SharedMem;
use crate::mem::shared_mem::{MAX_SHM_SIZE, MIN_PAGE_SIZE};

/// Why an SMB fd was refused.
#[derive(Debug)]
pub enum ShmError {
    /// The fd lacks `F_SEAL_SHRINK | F_SEAL_GROW` (or is not a memfd).
    NotSealed,
    /// Size zero, not a multiple of 4 KiB, above 32 MiB, or not the size
    /// the caller expected.
    BadSize(u64),
    Io(io::Error),
}

impl std::fmt::Display for ShmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShmError::NotSealed => write!(f, "shared memory fd is not sealed against resizing"),
            ShmError::BadSize(n) => {
                write!(f, "shared memory fd has an unacceptable size ({n} bytes)")
            }
            ShmError::Io(e) => write!(f, "shared memory: {e}"),
        }
    }
}

impl std::error::Error for ShmError {}

impl From<nix::Error> for ShmError {
    fn from(e: nix::Error) -> Self {
        ShmError::Io(e.into())
    }
}

/// Options for [`Shm::attach`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AttachOptions {
    /// Refuse fds without the shrink+grow seals (on kernels with memfd).
    /// The service sets this for producer-provided SMBs; producers
    /// attaching the service's SMB may not.
    pub require_seals: bool,
    /// If set, the fd must be exactly this many bytes.
    pub expected_size: Option<usize>,
}

/// A mapped shared-memory buffer and the fd behind it.
#[derive(Debug)]
pub struct Shm {
    fd: OwnedFd,
    mem: Arc<SharedMem>,
    sealed: bool,
}

/// Keeps a mapping alive; unmaps on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `Mapping` only stores the address to unmap it once; it never
// dereferences it.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr/len` is exactly the range returned by our `mmap`, and
        // this owner is dropped only after the `SharedMem` that used it.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

const SEALS: SealFlag = SealFlag::F_SEAL_SHRINK
    .union(SealFlag::F_SEAL_GROW)
    .union(SealFlag::F_SEAL_SEAL);

fn check_size(size: u64) -> Result<usize, ShmError> {
    let ok = size > 0 && size.is_multiple_of(MIN_PAGE_SIZE as u64) && size <= MAX_SHM_SIZE as u64;
    if ok {
        Ok(size as usize)
    } else {
        Err(ShmError::BadSize(size))
    }
}

impl Shm {
    /// Creates, sizes, seals and maps a new SMB of `size` bytes (a non-zero
    /// multiple of 4 KiB, at most 32 MiB).
    pub fn create(size: usize) -> Result<Shm, ShmError> {
        let size = check_size(size as u64)?;
        let (fd, is_memfd) = match memfd_create(
            c"perfetto_shmem",
            MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING,
        ) {
            Ok(fd) => (fd, true),
            Err(_) => (OwnedFd::from(tempfile_unlinked()?), false),
        };
        nix::unistd::ftruncate(&fd, size as libc::off_t)?;
        if is_memfd {
            fcntl(fd.as_raw_fd(), FcntlArg::F_ADD_SEALS(SEALS))?;
        }
        let mem = map(&fd, size)?;
        Ok(Shm {
            fd,
            mem,
            sealed: is_memfd,
        })
    }

    /// Maps an SMB fd received from a peer, after checking seals and size.
    pub fn attach(fd: OwnedFd, opts: AttachOptions) -> Result<Shm, ShmError> {
        let seals = fcntl(fd.as_raw_fd(), FcntlArg::F_GET_SEALS).ok();
        let sealed = seals.is_some_and(|s| {
            let need = (SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW).bits();
            s & need == need
        });
        // Like Perfetto, seals can only be demanded where memfd exists.
        if opts.require_seals && !sealed && memfd_supported() {
            return Err(ShmError::NotSealed);
        }
        let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
        let size = check_size(st.st_size.max(0) as u64)?;
        if opts.expected_size.is_some_and(|want| want != size) {
            return Err(ShmError::BadSize(size as u64));
        }
        let mem = map(&fd, size)?;
        Ok(Shm { fd, mem, sealed })
    }

    /// The memory, to build an `SmbAbi` (in `tracing::core`).
    pub fn mem(&self) -> &Arc<SharedMem> {
        &self.mem
    }

    /// The fd, to send to the peer (SCM_RIGHTS).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn size(&self) -> usize {
        self.mem.len()
    }

    /// Whether the fd carries the shrink+grow seals.
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }
}

/// Whether this kernel has memfd_create (probed once).
pub fn memfd_supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| memfd_create(c"perfetto_probe", MemFdCreateFlag::MFD_CLOEXEC).is_ok())
}

fn tempfile_unlinked() -> Result<std::fs::File, ShmError> {
    let dir = std::env::temp_dir();
    for attempt in 0..16u32 {
        let path = dir.join(format!("tracebox-shm-{}-{attempt}", std::process::id()));
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => {
                let _ = std::fs::remove_file(&path);
                return Ok(f);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(ShmError::Io(e)),
        }
    }
    Err(ShmError::Io(io::Error::from(io::ErrorKind::AlreadyExists)))
}

fn map(fd: &OwnedFd, size: usize) -> Result<Arc<SharedMem>, ShmError> {
    let len = NonZeroUsize::new(size).ok_or(ShmError::BadSize(0))?;
    // SAFETY: a fresh shared mapping of `size` bytes of a file we checked is
    // at least that large (its size is fixed by seals, or it is ours); no
    // existing memory is affected (addr = None).
    let ptr = unsafe {
        mmap(
            None,
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
            fd,
            0,
        )
    }?;
    let ptr: NonNull<u8> = ptr.cast();
    let owner = Box::new(Mapping { ptr, len: size });
    // SAFETY:
    // * `ptr..ptr+size` is mapped RW and page aligned, and stays mapped until
    //   `owner` (which unmaps it) is dropped by the `SharedMem`;
    // * nothing else in this process references the fresh mapping.
    Ok(Arc::new(unsafe {
        SharedMem::from_raw_mapping(ptr, size, owner)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dup(fd: BorrowedFd<'_>) -> OwnedFd {
        fd.try_clone_to_owned().unwrap()
    }

    #[test]
    fn create_is_sealed_and_attach_shares_bytes() {
        let a = Shm::create(64 * 1024).unwrap();
        assert!(a.is_sealed());
        let b = Shm::attach(
            dup(a.fd()),
            AttachOptions {
                require_seals: true,
                expected_size: Some(65536),
            },
        )
        .unwrap();
        assert!(a.mem().write(4096, b"hello"));
        let mut got = [0u8; 5];
        assert!(b.mem().read(4096, &mut got));
        assert_eq!(&got, b"hello");
        // Seals really stop resizing.
        assert!(nix::unistd::ftruncate(a.fd(), 4096).is_err());
        assert!(nix::unistd::ftruncate(a.fd(), 1 << 20).is_err());
    }

    #[test]
    fn unsealed_and_badly_sized_fds_are_rejected() {
        let raw = memfd_create(
            c"test",
            MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING,
        )
        .unwrap();
        nix::unistd::ftruncate(&raw, 8192).unwrap();
        let strict = AttachOptions {
            require_seals: true,
            expected_size: None,
        };
        assert!(matches!(
            Shm::attach(dup(raw.as_fd()), strict),
            Err(ShmError::NotSealed)
        ));
        // Lenient attach works and reports the fd as unsealed.
        let lenient = Shm::attach(dup(raw.as_fd()), AttachOptions::default()).unwrap();
        assert!(!lenient.is_sealed());
        let want = AttachOptions {
            require_seals: false,
            expected_size: Some(4096),
        };
        assert!(matches!(
            Shm::attach(dup(raw.as_fd()), want),
            Err(ShmError::BadSize(8192))
        ));
        nix::unistd::ftruncate(&raw, 5000).unwrap();
        assert!(matches!(
            Shm::attach(dup(raw.as_fd()), AttachOptions::default()),
            Err(ShmError::BadSize(5000))
        ));
        nix::unistd::ftruncate(&raw, 0).unwrap();
        assert!(matches!(
            Shm::attach(raw, AttachOptions::default()),
            Err(ShmError::BadSize(0))
        ));
        assert!(matches!(Shm::create(1000), Err(ShmError::BadSize(1000))));
        assert!(matches!(Shm::create(64 << 20), Err(ShmError::BadSize(_))));
    }
}
