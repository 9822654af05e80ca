//! Per-pid file access below an injectable root, with reused buffers so a
//! full scan does not allocate per file.

use std::fmt::Write as _;
use std::io;
use std::path::PathBuf;

use super::kept::{fd_budget, pread_all, KeptFiles};
use crate::traced_probes::fs_root::{open_at, read_open_scratch, FsRoot, ReadErrors};

/// Reads `<root>/proc/<pid>/<file>`.
#[derive(Debug)]
pub struct ProcFs {
    proc_dir: PathBuf,
    /// `proc_dir` opened: per-pid files are opened relative to it, which
    /// spares the lookup of `/proc` itself for every file (~2 % of a scan).
    proc_dir_fd: Option<std::fs::File>,
    /// `proc_dir` as text, so per-file paths are built without re-encoding.
    proc_prefix: String,
    path: String,
    buf: Vec<u8>,
    /// Failures other than a process vanishing mid-scan.
    pub errors: ReadErrors,
    /// Pid files that disappeared because the task exited (not an error).
    pub vanished: u64,
    /// Files of the periodic stats poll, kept open (live /proc only).
    kept: KeptFiles,
}

impl ProcFs {
    pub fn new(root: &FsRoot) -> Self {
        let proc_dir = root.path("proc");
        // Fixture files may be replaced between polls; only procfs
        // regenerates a file on every read of an open fd.
        let budget = if proc_dir == std::path::Path::new("/proc") {
            fd_budget()
        } else {
            0
        };
        Self {
            kept: KeptFiles::new(budget),
            proc_prefix: proc_dir.to_string_lossy().into_owned(),
            proc_dir_fd: std::fs::File::open(&proc_dir).ok(),
            proc_dir,
            path: String::with_capacity(256),
            buf: Vec::with_capacity(4096),
            errors: ReadErrors::default(),
            vanished: 0,
        }
    }

    fn set_path(&mut self, pid: i32, file: &str) {
        self.path.clear();
        self.path.push_str(&self.proc_prefix);
        let _ = write!(self.path, "/{pid}/{file}");
    }

    /// Opens `<pid>/<rel>` below the proc directory.
    fn open_pid_file(
        &mut self,
        pid: i32,
        rel: std::fmt::Arguments<'_>,
    ) -> io::Result<std::fs::File> {
        self.path.clear();
        match &self.proc_dir_fd {
            Some(dir) => {
                let _ = write!(self.path, "{pid}/{rel}");
                open_at(dir, &self.path)
            }
            None => {
                self.path.push_str(&self.proc_prefix);
                let _ = write!(self.path, "/{pid}/{rel}");
                std::fs::File::open(&self.path)
            }
        }
    }

    /// Contents of `/proc/<pid>/<file>`, or `None` if it cannot be read. A
    /// missing file or ESRCH means the task is gone and is only tallied in
    /// `vanished`; anything else is counted as an error.
    pub fn read(&mut self, pid: i32, file: &str) -> Option<&[u8]> {
        let res = self
            .open_pid_file(pid, format_args!("{file}"))
            .and_then(|f| read_open_scratch(f, &mut self.buf, true));
        match res {
            Ok(n) => Some(&self.buf[..n]),
            Err(e) if is_gone(&e) => {
                self.vanished += 1;
                None
            }
            Err(e) => {
                self.errors.count_io(&e);
                None
            }
        }
    }

    /// Like [`Self::read`], for files read on every stats poll: the file
    /// stays open (within an fd budget) and is re-read with pread. Only for
    /// files procfs builds from the task at each read (status, stat,
    /// oom_score_adj), not those that pin the mm at open (smaps_rollup:
    /// after an exec it would describe the old mm).
    pub fn read_kept(&mut self, pid: i32, file: &'static str) -> Option<&[u8]> {
        match self.kept.read(pid, file, &mut self.buf) {
            Some(Ok(())) => return Some(&self.buf),
            Some(Err(e)) if is_gone(&e) => {
                self.vanished += 1;
                return None;
            }
            // Not kept yet, or failed otherwise (dropped): open it again.
            _ => {}
        }
        self.set_path(pid, file);
        let res =
            std::fs::File::open(&self.path).and_then(|f| pread_all(&f, &mut self.buf).map(|()| f));
        match res {
            Ok(f) => {
                self.kept.keep(pid, file, f);
                Some(&self.buf)
            }
            Err(e) => {
                self.note_dir_error(&e);
                None
            }
        }
    }

    /// Closes the kept files of processes not in `pids` (sorted).
    pub fn retain_kept(&mut self, pids: &[i32]) {
        self.kept.retain(|pid| pids.binary_search(&pid).is_ok());
    }

    /// Closes the kept `file` of `pid` (it will not be read again).
    pub fn forget_kept(&mut self, pid: i32, file: &str) {
        self.kept.forget(pid, file);
    }

    /// Replaces the kept files with an empty set of at most `budget` fds.
    pub fn set_kept_budget(&mut self, budget: usize) {
        self.kept = KeptFiles::new(budget);
    }

    /// Fds held by [`Self::read_kept`].
    pub fn kept_fds(&self) -> usize {
        self.kept.open_fds()
    }

    /// Name (comm) of thread `tid` of process `pid`, without the newline.
    /// Name (comm) of process `pid`'s main thread, without the newline.
    pub fn read_comm(&mut self, pid: i32) -> Option<String> {
        self.read(pid, "comm").map(comm_text)
    }

    pub fn read_task_comm(&mut self, pid: i32, tid: i32) -> Option<String> {
        let res = self
            .open_pid_file(pid, format_args!("task/{tid}/comm"))
            .and_then(|f| read_open_scratch(f, &mut self.buf, true));
        match res {
            Ok(n) => Some(comm_text(&self.buf[..n])),
            Err(e) => {
                self.note_dir_error(&e);
                None
            }
        }
    }

    /// Whether this reads the live system's `/proc` (not a fixture root),
    /// as mounted for our own pid namespace: only then do pids taken from
    /// it name the processes that pidfds and `/proc/self` see.
    pub fn is_own_live_proc(&self) -> bool {
        self.proc_dir == std::path::Path::new("/proc")
            && std::fs::read_link("/proc/self")
                .ok()
                .and_then(|l| l.to_str()?.parse::<u32>().ok())
                == Some(std::process::id())
    }

    /// Identity of the pid namespace of `pid` (the inode in the
    /// `pid:[N]` link of `/proc/<pid>/ns/pid`). `None` if unreadable (the
    /// task vanished, or we may not ptrace it); not counted: callers fall
    /// back to `status`, which counts.
    pub fn pid_ns(&mut self, pid: i32) -> Option<u64> {
        self.set_path(pid, "ns/pid");
        let link = std::fs::read_link(&self.path).ok()?;
        let s = link.to_str()?;
        s.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
    }

    /// Number of threads of `pid`: procfs reports it in the link count of
    /// `task/` (2 + threads), one stat instead of listing the directory.
    pub fn thread_count(&mut self, pid: i32) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        self.set_path(pid, "task");
        let nlink = std::fs::metadata(&self.path).ok()?.nlink();
        nlink.checked_sub(2).filter(|&n| n > 0)
    }

    /// Numeric entries of `/proc` (pids), ascending. Empty if `/proc` is
    /// unreadable (counted).
    pub fn list_pids(&mut self) -> Vec<i32> {
        let dir = self.proc_dir.clone();
        self.numeric_dirs(dir, true)
    }

    /// Thread ids of `pid` (`/proc/<pid>/task`), ascending.
    pub fn list_tids(&mut self, pid: i32) -> Vec<i32> {
        self.set_path(pid, "task");
        let dir = PathBuf::from(&self.path);
        self.numeric_dirs(dir, false)
    }

    /// Open fd numbers of `pid` with their link targets.
    pub fn list_fds(&mut self, pid: i32) -> Vec<(u64, String)> {
        self.set_path(pid, "fd");
        let rd = match std::fs::read_dir(&self.path) {
            Ok(rd) => rd,
            Err(e) => {
                self.note_dir_error(&e);
                return Vec::new();
            }
        };
        let mut out: Vec<(u64, String)> = rd
            .filter_map(|e| {
                let e = e.ok()?;
                let fd = e.file_name().to_str()?.parse::<u64>().ok()?;
                let target = std::fs::read_link(e.path()).ok()?;
                Some((fd, target.to_string_lossy().into_owned()))
            })
            .collect();
        // fds are unique: unstable gives the same order (one sort instance less).
        out.sort_unstable();
        out
    }

    fn note_dir_error(&mut self, e: &io::Error) {
        if is_gone(e) {
            self.vanished += 1;
        } else {
            self.errors.count_io(e);
        }
    }

    fn numeric_dirs(&mut self, dir: PathBuf, is_proc_root: bool) -> Vec<i32> {
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) => {
                if is_proc_root {
                    self.errors.count_io(&e);
                } else {
                    self.note_dir_error(&e);
                }
                return Vec::new();
            }
        };
        let mut ids: Vec<i32> = rd
            .filter_map(|e| {
                let e = e.ok()?;
                // d_type is available from readdir on procfs; no stat needed.
                if !e.file_type().ok()?.is_dir() {
                    return None;
                }
                let id = e.file_name().to_str()?.parse::<i32>().ok()?;
                (id > 0).then_some(id)
            })
            .collect();
        ids.sort_unstable();
        ids
    }
}

fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(3 /* ESRCH */)
}

/// A comm file's text without its newline.
fn comm_text(buf: &[u8]) -> String {
    let name = buf.strip_suffix(b"\n").unwrap_or(buf);
    String::from_utf8_lossy(name).into_owned()
}
