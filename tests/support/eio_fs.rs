//! A file system whose writes fail with EIO past a given offset: a FUSE
//! mount served by this test process, files kept in memory. It stands in
//! for a failing disk where the kernel has no device-mapper (`error`
//! target) to make one: `write(2)` gets EIO exactly as from a dead block
//! device under a `sync` mount, while truncation (cutting the file back)
//! and reads keep working.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyEmpty, ReplyEntry,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};

/// Attributes are not cached: sizes change under the kernel's feet.
const TTL: Duration = Duration::ZERO;

struct Files {
    by_name: HashMap<String, u64>,
    data: HashMap<u64, Vec<u8>>,
    next_ino: u64,
}

struct EioFs {
    /// Bytes of a file from this offset on cannot be written (EIO).
    room: u64,
    files: Mutex<Files>,
}

fn attr(ino: u64, size: u64) -> FileAttr {
    let (kind, perm, nlink) = if ino == 1 {
        (FileType::Directory, 0o755, 2)
    } else {
        (FileType::RegularFile, 0o644, 1)
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm,
        nlink,
        uid: 0,
        gid: 0,
        rdev: 0,
        flags: 0,
        blksize: 4096,
    }
}

impl EioFs {
    fn attr_of(&self, ino: u64) -> Option<FileAttr> {
        if ino == 1 {
            return Some(attr(1, 0));
        }
        let f = self.files.lock().unwrap();
        f.data.get(&ino).map(|d| attr(ino, d.len() as u64))
    }
}

impl Filesystem for EioFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let f = self.files.lock().unwrap();
        match f.by_name.get(&*name.to_string_lossy()) {
            Some(&ino) if u64::from(parent) == 1 => {
                let size = f.data[&ino].len() as u64;
                reply.entry(&TTL, &attr(ino, size), Generation(0));
            }
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr_of(ino.into()) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if let Some(size) = size {
            let mut f = self.files.lock().unwrap();
            match f.data.get_mut(&u64::from(ino)) {
                Some(d) => d.resize(size as usize, 0),
                None => return reply.error(Errno::ENOENT),
            }
        }
        match self.attr_of(ino.into()) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if u64::from(parent) != 1 {
            return reply.error(Errno::ENOENT);
        }
        let mut f = self.files.lock().unwrap();
        let ino = f.next_ino;
        f.next_ino += 1;
        f.by_name.insert(name.to_string_lossy().into_owned(), ino);
        f.data.insert(ino, Vec::new());
        reply.created(
            &TTL,
            &attr(ino, 0),
            Generation(0),
            FileHandle(0),
            FopenFlags::empty(),
        );
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let f = self.files.lock().unwrap();
        let Some(d) = f.data.get(&u64::from(ino)) else {
            return reply.error(Errno::ENOENT);
        };
        let start = (offset as usize).min(d.len());
        let end = (start + size as usize).min(d.len());
        reply.data(&d[start..end]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // Like a disk whose bad sectors start at `room`: what fits before
        // them is written (a short write), the next write fails.
        if offset >= self.room {
            return reply.error(Errno::EIO);
        }
        let data = &data[..data.len().min((self.room - offset) as usize)];
        let mut f = self.files.lock().unwrap();
        let Some(d) = f.data.get_mut(&u64::from(ino)) else {
            return reply.error(Errno::ENOENT);
        };
        let end = offset as usize + data.len();
        if d.len() < end {
            d.resize(end, 0);
        }
        d[offset as usize..end].copy_from_slice(data);
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }
}

/// The mounted file system; unmounted when dropped.
pub struct EioMount {
    pub dir: PathBuf,
    _session: fuser::BackgroundSession,
}

impl Drop for EioMount {
    fn drop(&mut self) {
        // Lazily, so that it goes even while a file on it is still open
        // (a test that failed half way); the session's own unmount then
        // finds nothing to do.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status();
    }
}

/// Mounts at `dir` (created) a file system where the bytes of a file past
/// `room` cannot be written: a write is cut short there, the next one
/// fails with EIO. `None` if this kernel has no
/// FUSE (`/dev/fuse`).
pub fn mount(dir: &Path, room: u64) -> Option<EioMount> {
    if !Path::new("/dev/fuse").exists() {
        return None;
    }
    std::fs::create_dir_all(dir).unwrap();
    let fs = EioFs {
        room,
        files: Mutex::new(Files {
            by_name: HashMap::new(),
            data: HashMap::new(),
            next_ino: 2,
        }),
    };
    let mut cfg = Config::default();
    cfg.mount_options
        .push(MountOption::FSName("tbx-eio".to_string()));
    let session = fuser::spawn_mount(fs, dir, &cfg)
        .unwrap_or_else(|e| panic!("mounting the EIO file system on {}: {e}", dir.display()));
    Some(EioMount {
        dir: dir.to_path_buf(),
        _session: session,
    })
}
