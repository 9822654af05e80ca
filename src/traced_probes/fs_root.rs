//! Reading procfs/sysfs files below an injectable root directory.
//!
//! Pollers never hard-code `/proc` or `/sys`: they ask an [`FsRoot`] for
//! paths relative to it. Production uses [`FsRoot::host`] (`/`); tests use a
//! fixture directory. Failures are never fatal: callers count them in a
//! [`ReadErrors`] and move on.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Counts of files a poller could not use. Missing files are normal on many
/// kernels (e.g. no PSI, no batteries) but still worth reporting in stats.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReadErrors {
    /// File or directory absent (ENOENT/ENOTDIR).
    pub missing: u64,
    /// Present but could not be read (permissions, EIO, ...).
    pub unreadable: u64,
    /// Read but content did not parse.
    pub malformed: u64,
}

impl ReadErrors {
    /// Counts a failed open/read by its kind.
    pub fn count_io(&mut self, e: &io::Error) {
        match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => self.missing += 1,
            _ => self.unreadable += 1,
        }
    }

    pub fn total(&self) -> u64 {
        self.missing + self.unreadable + self.malformed
    }
}

/// Root directory that `proc/...` and `sys/...` paths are resolved against.
#[derive(Debug, Clone)]
pub struct FsRoot {
    root: PathBuf,
}

impl FsRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The real system (`/`).
    pub fn host() -> Self {
        Self::new("/")
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Absolute path of `rel` (e.g. `"proc/meminfo"`).
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Reads `rel` into `buf` (cleared first). Returns the number of bytes.
    pub fn read_into(&self, rel: &str, buf: &mut Vec<u8>) -> io::Result<usize> {
        read_path_into(&self.path(rel), buf)
    }

    /// Reads `rel` as text with one trailing newline removed; `None` (and a
    /// counted error) if it is missing, unreadable or not UTF-8.
    pub fn read_trimmed(&self, rel: &str, errors: &mut ReadErrors) -> Option<String> {
        let mut buf = Vec::new();
        if let Err(e) = self.read_into(rel, &mut buf) {
            errors.count_io(&e);
            return None;
        }
        match String::from_utf8(buf) {
            Ok(mut s) => {
                if s.ends_with('\n') {
                    s.pop();
                }
                Some(s)
            }
            Err(_) => {
                errors.malformed += 1;
                None
            }
        }
    }

    /// Reads `rel` as one decimal integer (surrounding whitespace allowed).
    pub fn read_i64(&self, rel: &str, errors: &mut ReadErrors) -> Option<i64> {
        let s = self.read_trimmed(rel, errors)?;
        match s.trim().parse::<i64>() {
            Ok(v) => Some(v),
            Err(_) => {
                errors.malformed += 1;
                None
            }
        }
    }

    /// Names of the entries of directory `rel`, sorted. Unreadable names
    /// (not UTF-8) are skipped.
    pub fn list_dir(&self, rel: &str, errors: &mut ReadErrors) -> Vec<String> {
        let rd = match std::fs::read_dir(self.path(rel)) {
            Ok(rd) => rd,
            Err(e) => {
                errors.count_io(&e);
                return Vec::new();
            }
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort_unstable();
        names
    }
}

/// Reads a whole file into `buf` (cleared first). procfs files report size 0,
/// so this reads until EOF rather than trusting metadata (std's
/// `read_to_end` would also spend a statx and an lseek per file asking).
pub fn read_path_into(path: &Path, buf: &mut Vec<u8>) -> io::Result<usize> {
    read_file_into(path, buf, false)
}

/// Largest file the pollers read; the rest is dropped. Bounds memory when a
/// process has an enormous argv (cmdline is the only large per-pid file).
pub const MAX_READ_LEN: usize = 1 << 20;

/// Like [`read_path_into`]; with `short_read_is_eof`, a read that does not
/// fill the buffer ends the file. That holds for seq_file and the other
/// generated /proc/<pid> files (they fill the caller's buffer until their
/// end) and saves one syscall per file on the hot scan path.
pub fn read_file_into(
    path: &Path,
    buf: &mut Vec<u8>,
    short_read_is_eof: bool,
) -> io::Result<usize> {
    read_open_into(File::open(path)?, buf, short_read_is_eof)
}

/// Opens `rel` (relative) below the open directory `dir`, read-only: one
/// `openat` that does not walk the directory's own path again.
pub fn open_at(dir: &File, rel: &str) -> io::Result<File> {
    use nix::fcntl::{openat, OFlag};
    use std::os::fd::{AsRawFd, FromRawFd};
    let fd = openat(
        Some(dir.as_raw_fd()),
        rel,
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    // SAFETY: openat succeeded, so `fd` is a new descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Appends to `ids` the positive decimal names of the subdirectories of
/// `rel` below the open directory `dir` (pids in `/proc`, tids in
/// `PID/task`), unsorted. Straight `getdents64` into the reused `buf`
/// (grown to 32 KiB once): `std::fs::read_dir` allocates two strings per
/// entry, thousands per /proc scan.
pub fn list_numeric_dirs_at(
    dir: &File,
    rel: &str,
    buf: &mut Vec<u8>,
    ids: &mut Vec<i32>,
) -> io::Result<()> {
    use nix::fcntl::{openat, OFlag};
    use std::os::fd::{AsRawFd, FromRawFd};
    let fd = openat(
        Some(dir.as_raw_fd()),
        rel,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    // SAFETY: openat succeeded, so `fd` is a new descriptor nobody else owns.
    let listed = unsafe { File::from_raw_fd(fd) };
    if buf.len() < 32 * 1024 {
        buf.resize(32 * 1024, 0);
    }
    loop {
        // SAFETY: getdents64 writes at most `buf.len()` bytes into `buf`,
        // which is valid and writable for that long.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                listed.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        let n = match usize::try_from(n) {
            Ok(0) => return Ok(()),
            Ok(n) => n.min(buf.len()),
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
        };
        for (name, d_type) in dirents(&buf[..n]) {
            let Some(id) = positive_decimal(name) else {
                continue;
            };
            let is_dir = match d_type {
                libc::DT_DIR => true,
                // Filesystems without d_type (some fixture roots): ask.
                libc::DT_UNKNOWN => is_dir_at(&listed, name),
                _ => false,
            };
            if is_dir {
                ids.push(id);
            }
        }
    }
}

/// The (name, d_type) of each `linux_dirent64` record in `buf`; stops at
/// the first record that does not fit.
fn dirents(buf: &[u8]) -> impl Iterator<Item = (&[u8], u8)> {
    // d_ino u64, d_off i64, d_reclen u16, d_type u8, then the name + NUL.
    const NAME_AT: usize = 19;
    let mut rest = buf;
    std::iter::from_fn(move || {
        let reclen = usize::from(u16::from_ne_bytes([*rest.get(16)?, *rest.get(17)?]));
        if reclen <= NAME_AT || reclen > rest.len() {
            return None;
        }
        let (rec, tail) = rest.split_at(reclen);
        rest = tail;
        let name = &rec[NAME_AT..];
        let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        Some((&name[..len], rec[18]))
    })
}

/// `name` as a decimal number > 0 that fits an i32 (no sign, no blanks).
fn positive_decimal(name: &[u8]) -> Option<i32> {
    if name.is_empty() || name.len() > 10 {
        return None;
    }
    let mut v: i64 = 0;
    for &b in name {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(b - b'0');
    }
    i32::try_from(v).ok().filter(|&v| v > 0)
}

fn is_dir_at(dir: &File, name: &[u8]) -> bool {
    use nix::fcntl::AtFlags;
    use nix::sys::stat::{fstatat, SFlag};
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::OsStr::from_bytes(name);
    fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)
}

/// [`read_file_into`] of a file already open.
pub fn read_open_into(f: File, buf: &mut Vec<u8>, short_read_is_eof: bool) -> io::Result<usize> {
    let n = read_open_scratch(f, buf, short_read_is_eof)?;
    buf.truncate(n);
    Ok(n)
}

/// Like [`read_open_into`], but the contents are `buf[..n]` and `buf`
/// keeps its length: it is scratch space, zeroed only where it grows. A
/// scan that reads thousands of small files this way no longer clears
/// 4 KiB before each read (at opt-level "z" a byte loop: ~15 % of a full
/// /proc scan's CPU).
pub fn read_open_scratch(
    mut f: File,
    buf: &mut Vec<u8>,
    short_read_is_eof: bool,
) -> io::Result<usize> {
    const CHUNK: usize = 4096;
    let mut len = 0;
    loop {
        if buf.len() < len + CHUNK {
            buf.resize(len + CHUNK, 0);
        }
        let n = loop {
            match f.read(&mut buf[len..len + CHUNK]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        len += n;
        if n == 0 || (short_read_is_eof && n < CHUNK) || len >= MAX_READ_LEN {
            return Ok(len);
        }
    }
}

/// Parses the leading unsigned decimal number of `s` after skipping leading
/// blanks, ignoring any suffix ("92 kB" -> 92). `None` if there is no digit.
pub fn leading_u64(s: &[u8]) -> Option<u64> {
    let mut i = 0;
    while i < s.len() && (s[i] == b' ' || s[i] == b'\t') {
        i += 1;
    }
    let start = i;
    let mut v: u64 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        v = v.checked_mul(10)?.checked_add((s[i] - b'0') as u64)?;
        i += 1;
    }
    (i > start).then_some(v)
}

/// Like [`leading_u64`] but accepts a leading `-`.
pub fn leading_i64(s: &[u8]) -> Option<i64> {
    let mut i = 0;
    while i < s.len() && (s[i] == b' ' || s[i] == b'\t') {
        i += 1;
    }
    let neg = s.get(i) == Some(&b'-');
    let v = leading_u64(&s[i + neg as usize..])?;
    let v = i64::try_from(v).ok()?;
    Some(if neg { -v } else { v })
}

/// Kernel USER_HZ (clock ticks per second used in /proc/*/stat and
/// /proc/stat), converted to nanoseconds per tick.
pub fn ns_per_clock_tick() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        10_000_000 // USER_HZ is 100 on every Linux ABI.
    } else {
        1_000_000_000 / hz as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_numbers() {
        assert_eq!(leading_u64(b"  92 kB"), Some(92));
        assert_eq!(leading_u64(b"\t1000 2000"), Some(1000));
        assert_eq!(leading_u64(b"kB"), None);
        assert_eq!(leading_u64(b""), None);
        assert_eq!(leading_u64(b"99999999999999999999999"), None);
        assert_eq!(leading_i64(b" -1000\n"), Some(-1000));
        assert_eq!(leading_i64(b"-"), None);
    }

    #[test]
    fn numeric_dirs_are_listed_without_files_links_or_odd_names() {
        let dir = tempfile::tempdir().unwrap();
        for d in [
            "1",
            "42",
            "007",
            "2147483647",
            "2147483648",
            "0",
            "-3",
            "+4",
            "x1",
            "self",
        ] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        std::fs::write(dir.path().join("5"), "a file").unwrap();
        std::os::unix::fs::symlink("42", dir.path().join("6")).unwrap();
        // Enough entries that getdents64 needs several calls.
        for i in 1000..3000 {
            std::fs::create_dir(dir.path().join(format!("{i}"))).unwrap();
        }
        let root = File::open(dir.path()).unwrap();
        let (mut buf, mut ids) = (Vec::new(), Vec::new());
        list_numeric_dirs_at(&root, ".", &mut buf, &mut ids).unwrap();
        ids.sort_unstable();
        let mut want = vec![1, 7, 42];
        want.extend(1000..3000);
        want.push(i32::MAX);
        assert_eq!(ids, want);
        let err = list_numeric_dirs_at(&root, "absent", &mut buf, &mut ids).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let err = list_numeric_dirs_at(&root, "5", &mut buf, &mut ids).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotADirectory);
    }

    #[test]
    fn dirent_records_that_do_not_fit_end_the_listing() {
        let mut rec = vec![0u8; 24];
        rec[16] = 24; // d_reclen
        rec[18] = libc::DT_DIR;
        rec[19..21].copy_from_slice(b"12");
        let mut buf = rec.clone();
        buf.extend_from_slice(&rec[..20]); // a torn second record
        assert_eq!(
            dirents(&buf).collect::<Vec<_>>(),
            vec![(&b"12"[..], libc::DT_DIR)]
        );
        rec[16] = 3; // shorter than its own header
        assert_eq!(dirents(&rec).count(), 0);
        assert_eq!(dirents(&[]).count(), 0);
    }

    #[test]
    fn missing_and_malformed_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("num"), "abc\n").unwrap();
        std::fs::write(dir.path().join("good"), " 42\n").unwrap();
        let root = FsRoot::new(dir.path());
        let mut errors = ReadErrors::default();
        assert_eq!(root.read_i64("good", &mut errors), Some(42));
        assert_eq!(root.read_i64("num", &mut errors), None);
        assert_eq!(root.read_i64("absent", &mut errors), None);
        assert!(root.list_dir("absent_dir", &mut errors).is_empty());
        assert_eq!(
            errors,
            ReadErrors {
                missing: 2,
                unreadable: 0,
                malformed: 1
            }
        );
    }

    #[test]
    fn reads_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; MAX_READ_LEN + 3 * 4096 + 5]).unwrap();
        let mut buf = Vec::new();
        assert_eq!(read_path_into(&big, &mut buf).unwrap(), MAX_READ_LEN);
        let small = dir.path().join("small");
        std::fs::write(&small, b"hello").unwrap();
        assert_eq!(read_file_into(&small, &mut buf, true).unwrap(), 5);
        assert_eq!(buf, b"hello");
    }

    #[test]
    fn clock_tick_is_sane() {
        let ns = ns_per_clock_tick();
        assert!(ns > 0 && ns <= 1_000_000_000);
    }
}
