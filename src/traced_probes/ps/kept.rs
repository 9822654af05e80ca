//! Per-pid /proc files kept open between periodic stats polls.
//!
//! A pread at offset 0 makes procfs generate the file afresh, so a kept fd
//! saves the path walk, open and close of every poll (about half the CPU of
//! reading status, stat and oom_score_adj). A kept fd names the process it
//! was opened for: once that process is reaped, reads fail (ESRCH) even if
//! its pid is reused, so a stale fd can never report another process.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::traced_probes::fs_root::MAX_READ_LEN;

/// Open files by pid, within a budget of fds.
#[derive(Debug)]
pub struct KeptFiles {
    files: HashMap<i32, Vec<(&'static str, File)>>,
    open: usize,
    budget: usize,
}

impl KeptFiles {
    /// Keeps at most `budget` fds open.
    pub fn new(budget: usize) -> Self {
        Self {
            files: HashMap::new(),
            open: 0,
            budget,
        }
    }

    /// Number of fds held.
    pub fn open_fds(&self) -> usize {
        self.open
    }

    /// Reads the kept `name` of `pid` into `buf` from offset 0. `None` if
    /// not kept; `Some(Err)` drops the fd (the caller reopens or gives up).
    pub fn read(&mut self, pid: i32, name: &str, buf: &mut Vec<u8>) -> Option<io::Result<()>> {
        let list = self.files.get_mut(&pid)?;
        let i = list.iter().position(|(n, _)| *n == name)?;
        let res = pread_all(&list[i].1, buf);
        if res.is_err() {
            list.swap_remove(i);
            self.open -= 1;
        }
        Some(res)
    }

    /// Keeps `file` as `name` of `pid` if the budget allows.
    pub fn keep(&mut self, pid: i32, name: &'static str, file: File) {
        if self.open < self.budget {
            self.files.entry(pid).or_default().push((name, file));
            self.open += 1;
        }
    }

    /// Closes `name` of `pid`, if kept.
    pub fn forget(&mut self, pid: i32, name: &str) {
        if let Some(list) = self.files.get_mut(&pid) {
            let before = list.len();
            list.retain(|(n, _)| *n != name);
            self.open -= before - list.len();
        }
    }

    /// Closes the files of pids for which `alive` is false.
    pub fn retain(&mut self, mut alive: impl FnMut(i32) -> bool) {
        let open = &mut self.open;
        self.files.retain(|&pid, list| {
            let keep = alive(pid);
            if !keep {
                *open -= list.len();
            }
            keep
        });
    }
}

/// Whole file from offset 0; a short read ends it (as for fresh reads).
pub(super) fn pread_all(f: &File, buf: &mut Vec<u8>) -> io::Result<()> {
    const CHUNK: usize = 4096;
    buf.clear();
    loop {
        let len = buf.len();
        buf.resize(len + CHUNK, 0);
        match f.read_at(&mut buf[len..], len as u64) {
            Ok(n) => {
                buf.truncate(len + n);
                if n < CHUNK || buf.len() >= MAX_READ_LEN {
                    return Ok(());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => buf.truncate(len),
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        }
    }
}

/// Fds to spend on kept files: a quarter of our open-files limit (from
/// /proc/self/limits), at most 8192; 0 if the limit is unknown.
pub fn fd_budget() -> usize {
    let Ok(limits) = std::fs::read_to_string("/proc/self/limits") else {
        return 0;
    };
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<usize>().ok())
        .map_or(0, |soft| (soft / 4).min(8192))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_file_rereads_fresh_content_and_respects_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"one").unwrap();
        let mut kept = KeptFiles::new(1);
        let mut buf = Vec::new();
        assert!(kept.read(7, "f", &mut buf).is_none());
        kept.keep(7, "f", File::open(&path).unwrap());
        kept.keep(8, "f", File::open(&path).unwrap()); // Over budget.
        assert_eq!(kept.open_fds(), 1);
        assert!(kept.read(8, "f", &mut buf).is_none());
        std::fs::write(&path, b"two!").unwrap();
        kept.read(7, "f", &mut buf).unwrap().unwrap();
        assert_eq!(buf, b"two!");
        kept.forget(7, "other");
        assert_eq!(kept.open_fds(), 1);
        kept.retain(|pid| pid != 7);
        assert_eq!(kept.open_fds(), 0);
        assert!(kept.read(7, "f", &mut buf).is_none());
        kept.keep(9, "f", File::open(&path).unwrap());
        kept.forget(9, "f");
        assert_eq!(kept.open_fds(), 0);
    }

    #[test]
    fn kept_status_of_a_reaped_process_fails_instead_of_lying() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let mut kept = KeptFiles::new(4);
        kept.keep(
            pid,
            "status",
            File::open(format!("/proc/{pid}/status")).unwrap(),
        );
        let mut buf = Vec::new();
        kept.read(pid, "status", &mut buf).unwrap().unwrap();
        let text = String::from_utf8_lossy(&buf);
        assert!(text.contains(&format!("\nPid:\t{pid}\n")), "{text}");
        child.kill().unwrap();
        child.wait().unwrap();
        let err = kept.read(pid, "status", &mut buf).unwrap().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ESRCH));
        assert_eq!(kept.open_fds(), 0);
    }
}
