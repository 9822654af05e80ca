//! Rotation of a streamed (write_into_file) trace into numbered files, a
//! tracebox extension. The client owns the files and the decision when to
//! cut; traced switches its output on `RotateOutputFile` (see
//! `tracing/service/rotate.rs`), so every file starts with its own header
//! and no packet is lost or written twice at a cut.
//!
//! Files: `OUT.000`, `OUT.001`, ... (three digits, more past 999) and `OUT`,
//! a symlink to the file being written, replaced atomically at each cut.
//! Every file but the one `OUT` names is complete.

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use super::kernel_loss::KernelLoss;
use super::options::Output;
use super::output;
use super::rotate_plan::RotatePlan;
use super::rpc::Port;
use crate::pb::protos::{RotateOutputFileRequest, RotateOutputFileResponse};

/// The consumer-port method; a real Perfetto traced does not offer it.
pub const METHOD: &str = "RotateOutputFile";

/// The longest a cut may take (the service flushes first, bounded by the
/// session's flush timeout, then drains its buffers into the old file).
const CUT_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest naming a failed cut in the trace may take.
const NOTE_TIMEOUT: Duration = Duration::from_secs(5);

/// How traced refuses a cut before the session started (its
/// `rotate::NOT_STARTED`).
const NOT_STARTED: &str = "has not started yet";

/// How traced refuses a cut because the session ended meanwhile.
const SESSION_ENDED: [&str; 3] = [
    "no longer writing",
    "stopped before the rotation",
    "destroyed while rotating",
];

pub struct Rotation {
    plan: RotatePlan,
    base: String,
    no_clobber: bool,
    /// Number of the file being written and our handle on it (for its size).
    index: u64,
    current: File,
    /// Numbers of the files on disk, oldest first.
    kept: VecDeque<u64>,
    file_started: Instant,
    /// How often the size is looked at.
    size_check: Duration,
    /// The file's size at the last look, and its latest growth between
    /// two looks (about one periodic write of traced's).
    last_len: u64,
    growth: u64,
    next_size_check: Instant,
    /// Why rotation stopped (the trace goes on in the current file).
    pub failed: Option<String>,
    pub removed: u64,
    /// Why `OUT` could not be pointed at the newest file (it was replaced
    /// by something that is not a link, e.g. a directory).
    link_error: Option<String>,
    /// The kernel's loss counters read from the first file before
    /// `--rotate-keep` removed it (it holds ftrace's start-of-trace stats).
    pub kernel: KernelLoss,
}

pub fn file_name(base: &str, index: u64) -> String {
    format!("{base}.{index:03}")
}

/// Whether `name` is `prefix` followed by a dot and digits only.
fn is_numbered(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|r| r.strip_prefix('.'))
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

impl Rotation {
    /// Checks the service can rotate, removes numbered files of an earlier
    /// run (unless --no-clobber), opens `OUT.000` and points `OUT` at it.
    /// Returns the file to hand to EnableTracing.
    pub fn start(
        plan: &RotatePlan,
        out: &Output,
        port: &Port,
        file_write_period_ms: u64,
    ) -> Result<(Rotation, File), String> {
        if port.service.method_id(METHOD).is_none() {
            return Err(
                "--rotate-*: this traced cannot rotate files (RotateOutputFile is a \
                        tracebox extension; a Perfetto traced does not have it)"
                    .into(),
            );
        }
        let Output::File { path, no_clobber } = out else {
            return Err("--rotate-* needs -o PATH".into());
        };
        if !no_clobber {
            remove_numbered(path);
        } else if std::fs::symlink_metadata(path).is_ok() {
            return Err(format!(
                "Failed to open {path}: it already exists (--no-clobber)"
            ));
        }
        let first = output::open(&Output::File {
            path: file_name(path, 0),
            no_clobber: *no_clobber,
        })?;
        let current = first
            .try_clone()
            .map_err(|e| format!("Could not duplicate the trace file: {e}"))?;
        let now = Instant::now();
        // The service appends once per write period: looking at the size
        // eight times per period finds each write soon after it (an fstat
        // each time), so the cut's drain adds little to the file.
        let size_check = Duration::from_millis((file_write_period_ms / 8).clamp(10, 1000));
        let r = Rotation {
            plan: plan.clone(),
            base: path.clone(),
            no_clobber: *no_clobber,
            index: 0,
            current,
            kept: VecDeque::from([0]),
            file_started: now,
            size_check,
            next_size_check: now + size_check,
            last_len: 0,
            growth: 0,
            failed: None,
            removed: 0,
            link_error: None,
            kernel: KernelLoss::default(),
        };
        r.relink()?;
        Ok((r, first))
    }

    /// When [`Self::poll`] next has something to look at.
    pub fn due(&self) -> Option<Instant> {
        if self.failed.is_some() {
            return None;
        }
        let by_time = self
            .plan
            .period_ms
            .map(|p| self.file_started + Duration::from_millis(p));
        let by_size = self.plan.max_bytes.map(|_| self.next_size_check);
        by_time.into_iter().chain(by_size).min()
    }

    /// Cuts if the file being written is full or old enough.
    pub fn poll(&mut self, port: &mut Port) {
        let now = Instant::now();
        if self.due().is_none_or(|d| now < d) {
            return;
        }
        self.next_size_check = now + self.size_check;
        let old = self
            .plan
            .period_ms
            .is_some_and(|p| now >= self.file_started + Duration::from_millis(p));
        let len = self.current.metadata().map_or(0, |m| m.len());
        let full = self
            .plan
            .max_bytes
            .is_some_and(|max| self.is_full(len, max));
        if old || full {
            match self.cut(port) {
                Ok(()) => {}
                // Nothing to cut yet (deferred start, START_TRACING
                // trigger): the file's age counts from now.
                Err(e) if e.contains(NOT_STARTED) => self.file_started = Instant::now(),
                Err(e) => {
                    if !SESSION_ENDED.iter().any(|w| e.contains(w)) {
                        self.name_in_trace(port, &e);
                    }
                    self.stop_rotating(e)
                }
            }
        }
    }

    /// Whether the file (`len` bytes now) must be cut for `max`: it is
    /// there, or the next write, as large as the latest one, would take it
    /// past (traced appends once per write period, so cutting after that
    /// write would leave up to a period's data more). Only once the file
    /// holds a write's worth: a file just started (its header) is not cut.
    fn is_full(&mut self, len: u64, max: u64) -> bool {
        if len > self.last_len {
            self.growth = len - self.last_len;
        }
        self.last_len = len;
        len >= max || (len >= self.growth && len.saturating_add(self.growth) > max)
    }

    /// Tells traced the cut could not happen, so that the trace names it
    /// too (a `rotation_stopped` service event). If that fails as well,
    /// only the end line's file list names it.
    fn name_in_trace(&self, port: &mut Port, e: &str) {
        let note = format!("{e} (the trace goes on in {})", self.current_name());
        let request = RotateOutputFileRequest {
            cut_failed: Some(note),
        };
        port.client.set_timeout(Some(NOTE_TIMEOUT));
        let _: Result<RotateOutputFileResponse, String> = port.call(METHOD, &request, None);
    }

    fn stop_rotating(&mut self, e: String) {
        // A session that just ended (duration, trigger) is not a failure:
        // its last file is complete.
        if !SESSION_ENDED.iter().any(|w| e.contains(w)) {
            eprintln!(
                "Rotation stopped, the trace goes on in {}: {e}",
                self.current_name()
            );
        }
        self.failed = Some(e);
    }

    fn cut(&mut self, port: &mut Port) -> Result<(), String> {
        let next = self.index + 1;
        let name = file_name(&self.base, next);
        let file = output::open(&Output::File {
            path: name.clone(),
            no_clobber: self.no_clobber,
        })?;
        let fd = file
            .try_clone()
            .map(OwnedFd::from)
            .map_err(|e| format!("Could not duplicate {name}: {e}"))?;
        port.client.set_timeout(Some(CUT_TIMEOUT));
        let reply: Result<RotateOutputFileResponse, String> =
            port.call(METHOD, &RotateOutputFileRequest::default(), Some(fd));
        let refused = match reply {
            Ok(r) if r.success == Some(true) => None,
            Ok(r) => Some(r.error.unwrap_or_else(|| "refused".into())),
            Err(e) => Some(e),
        };
        if let Some(e) = refused {
            let _ = std::fs::remove_file(&name);
            return Err(e);
        }
        self.index = next;
        self.current = file;
        self.last_len = 0;
        self.file_started = Instant::now();
        self.kept.push_back(next);
        // The cut happened: a link that cannot follow it does not stop
        // rotation, the end line names it.
        if let Err(e) = self.relink() {
            if self.link_error.is_none() {
                eprintln!("{e}");
            }
            self.link_error = Some(e);
        }
        self.remove_beyond_keep();
        Ok(())
    }

    /// Points `OUT` at the file being written (a relative link, replaced
    /// with a rename so a reader never finds it missing).
    fn relink(&self) -> Result<(), String> {
        let target = file_name(&self.base, self.index);
        let target = Path::new(&target)
            .file_name()
            .ok_or("bad output path")?
            .to_owned();
        let tmp = format!("{}.link-tmp", self.base);
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp)
            .and_then(|()| std::fs::rename(&tmp, &self.base))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                format!("Could not point {} at the newest file: {e}", self.base)
            })
    }

    /// Whether `OUT` is still our link to the file being written (anyone
    /// may have replaced it since the last cut).
    fn link_is_current(&self) -> bool {
        let target = file_name(&self.base, self.index);
        let target = Path::new(&target).file_name();
        std::fs::read_link(&self.base).is_ok_and(|l| Some(l.as_os_str()) == target)
    }

    fn remove_beyond_keep(&mut self) {
        let Some(keep) = self.plan.keep else {
            return;
        };
        while self.kept.len() > keep as usize {
            let oldest = self.kept.pop_front().expect("longer than keep >= 1");
            if oldest == 0 {
                // Read once: without its start stats the end line could
                // not tell what the kernel lost.
                if let Ok(f) = File::open(file_name(&self.base, 0)) {
                    let _ = self.kernel.scan_file(&f);
                }
            }
            match std::fs::remove_file(file_name(&self.base, oldest)) {
                Ok(()) => self.removed += 1,
                Err(e) => eprintln!("Could not remove {}: {e}", file_name(&self.base, oldest)),
            }
        }
    }

    pub fn current_name(&self) -> String {
        file_name(&self.base, self.index)
    }

    /// The files on disk, oldest first.
    pub fn files(&self) -> Vec<String> {
        self.kept
            .iter()
            .map(|&i| file_name(&self.base, i))
            .collect()
    }

    /// One line naming the files.
    pub fn report(&self) {
        eprintln!("{}", self.report_line());
    }

    fn report_line(&self) -> String {
        let files = self.files();
        let removed = match self.removed {
            0 => String::new(),
            n => format!(" ({n} older removed by --rotate-keep)"),
        };
        let link = if self.link_is_current() {
            format!("{} -> {}", self.base, self.current_name())
        } else {
            format!(
                "{} is not a link to {} (it was replaced)",
                self.base,
                self.current_name()
            )
        };
        // A cut that could not happen (not a session that simply ended):
        // the last file holds the rest of the trace, past --rotate-*.
        let stopped = match &self.failed {
            Some(e) if !SESSION_ENDED.iter().any(|w| e.contains(w)) => {
                format!("; rotation stopped, the last file holds the rest: {e}")
            }
            _ => String::new(),
        };
        format!(
            "Trace written into {} file(s): {} to {}{removed}; {link}{stopped}",
            files.len(),
            files.first().map_or("", String::as_str),
            files.last().map_or("", String::as_str),
        )
    }
}

/// Removes `PATH.NNN` files and the `PATH` link an earlier run left, so
/// the numbering cannot mix two traces.
fn remove_numbered(path: &str) {
    let p = Path::new(path);
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Some(prefix) = p.file_name().and_then(|n| n.to_str()) else {
        return;
    };
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name()
                .to_str()
                .is_some_and(|n| is_numbered(n, prefix))
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    if std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()) {
        let _ = std::fs::remove_file(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rotation_in(dir: &Path, keep: Option<u32>) -> Rotation {
        let base = dir.join("t").to_string_lossy().into_owned();
        let now = Instant::now();
        Rotation {
            plan: RotatePlan {
                max_bytes: Some(1 << 20),
                period_ms: None,
                keep,
            },
            no_clobber: false,
            index: 0,
            current: File::create(file_name(&base, 0)).unwrap(),
            base,
            kept: VecDeque::from([0]),
            file_started: now,
            size_check: Duration::from_secs(1),
            next_size_check: now,
            last_len: 0,
            growth: 0,
            failed: None,
            removed: 0,
            link_error: None,
            kernel: KernelLoss::default(),
        }
    }

    /// A cut that could not happen is named on the end line; a session
    /// that ended before its cut is not a failure.
    #[test]
    fn a_stopped_rotation_is_named_on_the_end_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = rotation_in(dir.path(), None);
        r.relink().unwrap();
        r.failed = Some("The session stopped before the rotation".into());
        assert!(!r.report_line().contains("rotation stopped"));
        r.failed = Some("Failed to open t.001: No space left on device".into());
        assert!(r.report_line().ends_with(
            "; rotation stopped, the last file holds the rest: Failed to open t.001: No \
             space left on device"
        ));
    }

    /// `OUT` replaced by a directory mid-trace: the cut still happens, no
    /// `.link-tmp` stays behind, and the end line does not claim a link.
    #[test]
    fn a_link_replaced_by_a_directory_is_named_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = rotation_in(dir.path(), None);
        r.relink().unwrap();
        let base = r.base.clone();
        assert!(r
            .report_line()
            .ends_with(&format!("; {base} -> {base}.000")));
        std::fs::remove_file(&base).unwrap();
        std::fs::create_dir(&base).unwrap();
        std::fs::write(Path::new(&base).join("x"), b"x").unwrap();
        File::create(file_name(&base, 1)).unwrap();
        r.index = 1;
        r.kept.push_back(1);
        assert!(r.relink().is_err());
        assert!(!Path::new(&format!("{base}.link-tmp")).exists());
        assert_eq!(
            r.report_line(),
            format!(
                "Trace written into 2 file(s): {base}.000 to {base}.001; \
                 {base} is not a link to {base}.001 (it was replaced)"
            )
        );
    }

    /// The cut comes before the write that would take the file past the
    /// size, once the file holds a write's worth.
    #[test]
    fn a_file_is_cut_before_the_write_that_would_cross_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = rotation_in(dir.path(), None);
        let max = 1000;
        // A header, then writes of 300 bytes.
        assert!(!r.is_full(50, max));
        assert!(!r.is_full(350, max));
        assert!(!r.is_full(350, max));
        assert!(!r.is_full(650, max));
        assert!(r.is_full(950, max), "the next write would make 1250");
        // A new file: its header alone is not cut, the first write is not
        // either (650 + 300 fits), the size itself is.
        r.last_len = 0;
        assert!(!r.is_full(40, max));
        assert!(!r.is_full(340, max));
        assert!(r.is_full(1000, max));
        // Writes larger than the size: each file holds one.
        let mut r = rotation_in(dir.path(), None);
        assert!(!r.is_full(30, 100));
        assert!(r.is_full(300, 100));
    }

    #[test]
    fn keep_n_removes_the_oldest_and_the_link_follows() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = rotation_in(dir.path(), Some(2));
        for next in 1..=4 {
            File::create(file_name(&r.base, next)).unwrap();
            r.index = next;
            r.kept.push_back(next);
            r.relink().unwrap();
            r.remove_beyond_keep();
        }
        assert_eq!(r.files(), [file_name(&r.base, 3), file_name(&r.base, 4)]);
        assert_eq!(r.removed, 3);
        assert!(!Path::new(&file_name(&r.base, 2)).exists());
        let link = std::fs::read_link(&r.base).unwrap();
        assert_eq!(link, Path::new("t.004"));
    }

    #[test]
    fn an_earlier_runs_numbered_files_go_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["t.000", "t.1234", "t.0x", "tt.001", "t.pftrace", "t"] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        remove_numbered(&dir.path().join("t").to_string_lossy());
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        // Only numbered files and a link go here (a regular file at the
        // link's path is replaced by the link, as -o truncates a file).
        assert_eq!(left, ["t", "t.0x", "t.pftrace", "tt.001"]);
    }

    #[test]
    fn numbered_names() {
        assert_eq!(file_name("t", 7), "t.007");
        assert_eq!(file_name("t", 1234), "t.1234");
        assert!(is_numbered("t.000", "t") && is_numbered("t.1234", "t"));
        assert!(!is_numbered("t.", "t") && !is_numbered("t.0a", "t") && !is_numbered("tt.0", "t"));
    }
}
