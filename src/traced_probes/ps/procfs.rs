//! Per-pid file access below an injectable root, with reused buffers so a
//! full scan does not allocate per file.

use std::io;
use std::path::PathBuf;

use super::kept::{fd_budget, pread_all, KeptFiles};
use crate::traced_probes::fs_root::{
    list_numeric_dirs_at, open_at, read_open_scratch, FsRoot, ReadErrors,
};

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
    /// `getdents64` buffer of the pid and tid listings.
    dir_buf: Vec<u8>,
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
            dir_buf: Vec::new(),
            errors: ReadErrors::default(),
            vanished: 0,
        }
    }

    fn set_path(&mut self, pid: i32, file: &str) {
        self.path.clear();
        self.path.push_str(&self.proc_prefix);
        self.path.push('/');
        push_i32(&mut self.path, pid);
        self.path.push('/');
        self.path.push_str(file);
    }

    /// Opens `self.path`, a path relative to the proc directory.
    fn open_rel(&mut self) -> io::Result<std::fs::File> {
        match &self.proc_dir_fd {
            Some(dir) => open_at(dir, &self.path),
            None => {
                self.path.insert(0, '/');
                self.path.insert_str(0, &self.proc_prefix);
                std::fs::File::open(&self.path)
            }
        }
    }

    /// Reads the open file into the scratch buffer; its length.
    fn read_rel(&mut self) -> io::Result<usize> {
        self.open_rel()
            .and_then(|f| read_open_scratch(f, &mut self.buf, true))
    }

    /// Contents of `/proc/<pid>/<file>`, or `None` if it cannot be read. A
    /// missing file or ESRCH means the task is gone and is only tallied in
    /// `vanished`; anything else is counted as an error.
    pub fn read(&mut self, pid: i32, file: &str) -> Option<&[u8]> {
        self.path.clear();
        push_i32(&mut self.path, pid);
        self.path.push('/');
        self.path.push_str(file);
        match self.read_rel() {
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
        self.path.clear();
        push_i32(&mut self.path, pid);
        self.path.push_str("/task/");
        push_i32(&mut self.path, tid);
        self.path.push_str("/comm");
        match self.read_rel() {
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

    /// The proc directory, open; opened again if that failed at start.
    fn proc_dir_fd(&mut self) -> io::Result<&std::fs::File> {
        if self.proc_dir_fd.is_none() {
            self.proc_dir_fd = Some(std::fs::File::open(&self.proc_dir)?);
        }
        Ok(self.proc_dir_fd.as_ref().expect("opened above"))
    }

    /// Numeric entries of `/proc` (pids), ascending. Empty if `/proc` is
    /// unreadable (counted).
    pub fn list_pids(&mut self) -> Vec<i32> {
        let mut ids = Vec::new();
        let mut dir_buf = std::mem::take(&mut self.dir_buf);
        let res = self
            .proc_dir_fd()
            .and_then(|dir| list_numeric_dirs_at(dir, ".", &mut dir_buf, &mut ids));
        self.dir_buf = dir_buf;
        if let Err(e) = res {
            self.errors.count_io(&e);
            ids.clear();
        }
        ids.sort_unstable();
        ids
    }

    /// Thread ids of `pid` (`/proc/<pid>/task`), ascending.
    pub fn list_tids(&mut self, pid: i32) -> Vec<i32> {
        let mut ids = Vec::new();
        let mut dir_buf = std::mem::take(&mut self.dir_buf);
        let mut rel = std::mem::take(&mut self.path);
        rel.clear();
        push_i32(&mut rel, pid);
        rel.push_str("/task");
        let res = self
            .proc_dir_fd()
            .and_then(|dir| list_numeric_dirs_at(dir, &rel, &mut dir_buf, &mut ids));
        (self.dir_buf, self.path) = (dir_buf, rel);
        if let Err(e) = res {
            self.note_dir_error(&e);
            ids.clear();
        }
        ids.sort_unstable();
        ids
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
}

/// Appends `v` in decimal (paths are built per file on the scan's hot
/// path; `write!` costs a formatting call per number).
fn push_i32(s: &mut String, v: i32) {
    if v < 0 {
        s.push('-');
    }
    let mut digits = [0u8; 10];
    let mut n = v.unsigned_abs();
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    s.push_str(std::str::from_utf8(&digits[at..]).unwrap_or_default());
}

fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(3 /* ESRCH */)
}

/// A comm file's text without its newline.
fn comm_text(buf: &[u8]) -> String {
    let name = buf.strip_suffix(b"\n").unwrap_or(buf);
    String::from_utf8_lossy(name).into_owned()
}

#[cfg(test)]
mod tests {
    use super::push_i32;

    #[test]
    fn decimal_paths() {
        for v in [0, 7, 10, 1234, -5, i32::MAX, i32::MIN] {
            let mut s = String::from("x/");
            push_i32(&mut s, v);
            assert_eq!(s, format!("x/{v}"));
        }
    }
}
