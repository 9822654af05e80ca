//! Android's atrace binary, run off the main loop.
//!
//! "Is this Android" is decided by whether the binary exists at its path
//! (`/system/bin/atrace`, or `$TRACED_PROBES_ATRACE` so tests can point it
//! at a script). A worker thread owns the [`AtraceMux`] and runs its
//! commands in order, each as a child process (argv[0] `atrace`, stdin and
//! stdout on /dev/null, stderr collected) killed after [`TIMEOUT`]. What a
//! data source's setup commands printed on stderr, plus a note when one
//! failed, comes back as that source's `atrace_errors`. Failures are
//! logged and reported, never fatal.

use crate::mem::small_map::SmallMap;
use std::collections::BTreeSet;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::base::unix_socket::wait_ready;
use crate::traced_probes::ftrace::parse::atrace::{AtraceMux, AtraceRequest};

/// Overrides the atrace path (read when traced_probes starts).
pub const ATRACE_ENV: &str = "TRACED_PROBES_ATRACE";
pub const DEFAULT_ATRACE: &str = "/system/bin/atrace";
/// How long one atrace command may take (upstream's limit).
pub const TIMEOUT: Duration = Duration::from_secs(20);
/// Stderr kept per command; the rest is read and dropped.
const MAX_STDERR: usize = 16 * 1024;
/// How long exit waits for queued commands (the stop of the last
/// session): a normal one takes milliseconds, and SIGTERM must end
/// traced_probes within a second even while an atrace hangs.
pub const EXIT_WAIT: Duration = Duration::from_millis(500);

/// The atrace path for this process.
pub fn configured_path() -> PathBuf {
    std::env::var_os(ATRACE_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_ATRACE))
}

/// One finished command: success, and what to report (stderr, plus a note
/// saying why it failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub ok: bool,
    pub errors: String,
}

/// Runs `bin` as `atrace ARGS`, waiting at most `timeout`.
pub fn run_atrace(bin: &Path, args: &[String], timeout: Duration) -> Outcome {
    let cmdline = format!("atrace {}", args.join(" "));
    let fail = |errors: String| Outcome { ok: false, errors };
    let spawn = || {
        Command::new(bin)
            .arg0("atrace")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
    };
    // ETXTBSY: a script just written may still be open for writing in a
    // child another thread forked; that passes in a moment.
    let mut tries = 0;
    let mut child = loop {
        match spawn() {
            Ok(c) => break c,
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 5 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return fail(format!("cannot run {}: {e}\n", bin.display())),
        }
    };
    let deadline = Instant::now() + timeout;
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let mut text = Vec::new();
    let mut note = None;
    let mut buf = [0u8; 4096];
    // Stderr until EOF (the child closed it, normally by exiting).
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            note = Some(format!("Timed out waiting for atrace (cmdline: {cmdline})"));
            break;
        }
        match wait_ready(stderr.as_fd(), true, false, Some(left)) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(e) => {
                note = Some(format!("cannot poll atrace's stderr: {e}"));
                break;
            }
        }
        match stderr.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let keep = n.min(MAX_STDERR.saturating_sub(text.len()));
                text.extend_from_slice(&buf[..keep]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                note = Some(format!("cannot read atrace's stderr: {e}"));
                break;
            }
        }
    }
    // Then its exit, within the same deadline.
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if note.is_none() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(None) | Err(_) => {
                if note.is_none() {
                    note = Some(format!("Timed out waiting for atrace (cmdline: {cmdline})"));
                }
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut errors = String::from_utf8_lossy(&text).into_owned();
    let ok = note.is_none() && status.is_some_and(|s| s.success());
    if !ok {
        if !errors.is_empty() && !errors.ends_with('\n') {
            errors.push('\n');
        }
        let why = match (note, status) {
            (Some(n), _) => n,
            (None, Some(st)) => format!("{cmdline} failed: {st}"),
            (None, None) => format!("{cmdline} failed"),
        };
        errors.push_str(&why);
        errors.push('\n');
    }
    Outcome { ok, errors }
}

enum Msg {
    Add(u64, AtraceRequest),
    Remove(u64),
}

/// The worker side: applies requests in order, replies to each `Add` with
/// the errors of the commands it ran.
fn worker(bin: PathBuf, rx: Receiver<Msg>, replies: Sender<(u64, String)>) {
    let mut mux = AtraceMux::default();
    for msg in rx {
        let mut errors = String::new();
        let mut run = |args: &[String]| {
            let o = run_atrace(&bin, args, TIMEOUT);
            if !o.ok {
                crate::log_error!("atrace: {}", o.errors.trim_end());
            }
            errors.push_str(&o.errors);
            o.ok
        };
        match msg {
            Msg::Add(id, req) => {
                mux.add(id, &req, &mut run);
                let _ = replies.send((id, errors));
            }
            // Upstream does not report errors of later updates to anyone.
            Msg::Remove(id) => mux.remove(id, &mut run),
        }
    }
}

struct Worker {
    tx: Sender<Msg>,
    replies: Receiver<(u64, String)>,
}

/// The handle the ftrace mux keeps. The thread starts on first use.
pub struct AtraceRunner {
    bin: PathBuf,
    worker: Option<Worker>,
    /// Sources whose setup reply has not arrived (and is still waited for).
    pending: BTreeSet<u64>,
    /// Sources handed to the worker.
    added: BTreeSet<u64>,
    errors: SmallMap<u64, String>,
}

impl std::fmt::Debug for AtraceRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtraceRunner")
            .field("bin", &self.bin)
            .field("added", &self.added)
            .finish()
    }
}

impl AtraceRunner {
    pub fn new(bin: PathBuf) -> AtraceRunner {
        AtraceRunner {
            bin,
            worker: None,
            pending: BTreeSet::new(),
            added: BTreeSet::new(),
            errors: SmallMap::new(),
        }
    }

    /// Whether there is an atrace binary to run (Android).
    pub fn available(&self) -> bool {
        self.bin.is_file()
    }

    fn send(&mut self, msg: Msg) {
        let w = self.worker.get_or_insert_with(|| {
            let (tx, rx) = mpsc::channel();
            let (reply_tx, replies) = mpsc::channel();
            let bin = self.bin.clone();
            std::thread::Builder::new()
                .name("atrace".into())
                .spawn(move || worker(bin, rx, reply_tx))
                .expect("spawn the atrace thread");
            Worker { tx, replies }
        });
        let _ = w.tx.send(msg);
    }

    /// Data source `id` wants `req` (atrace runs in the background).
    pub fn add(&mut self, id: u64, req: AtraceRequest) {
        self.added.insert(id);
        self.pending.insert(id);
        self.send(Msg::Add(id, req));
    }

    /// Data source `id` is gone.
    pub fn remove(&mut self, id: u64) {
        self.pending.remove(&id);
        self.errors.remove(&id);
        if self.added.remove(&id) {
            self.send(Msg::Remove(id));
        }
    }

    /// The atrace errors of `id`'s setup. If its reply is still due, waits
    /// for it up to `wait` (once: later calls do not wait again).
    pub fn errors(&mut self, id: u64, wait: Duration) -> Option<&str> {
        if let Some(w) = &self.worker {
            let deadline = Instant::now() + wait;
            loop {
                let r = if self.pending.contains(&id) {
                    w.replies
                        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                } else {
                    w.replies.try_recv().map_err(|e| match e {
                        mpsc::TryRecvError::Empty => RecvTimeoutError::Timeout,
                        mpsc::TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                    })
                };
                match r {
                    Ok((from, text)) => {
                        self.pending.remove(&from);
                        if self.added.contains(&from) && !text.is_empty() {
                            self.errors
                                .get_or_insert_with(from, String::new)
                                .push_str(&text);
                        }
                    }
                    Err(_) => break,
                }
            }
        }
        self.pending.remove(&id);
        self.errors.get(&id).map(String::as_str)
    }
}

impl Drop for AtraceRunner {
    /// Lets queued commands (e.g. the stop of the last session) finish,
    /// for at most [`EXIT_WAIT`].
    fn drop(&mut self) {
        let Some(Worker { tx, replies }) = self.worker.take() else {
            return;
        };
        drop(tx);
        let deadline = Instant::now() + EXIT_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match replies.recv_timeout(left) {
                Ok(_) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {
                    crate::log_warn!(
                        "atrace still running at exit; not waiting for it (if it was \
                         `atrace --async_stop`, the atrace categories may stay on until \
                         the next one)"
                    );
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, body: &str) -> PathBuf {
        let p = dir.join("atrace.sh");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn success_keeps_stderr_warnings() {
        let dir = tempfile::tempdir().unwrap();
        let bin = script(
            dir.path(),
            r#"echo "argv: $*" >"$(dirname "$0")/argv"; echo "no category foo" >&2"#,
        );
        let o = run_atrace(&bin, &args(&["--async_start", "foo"]), TIMEOUT);
        assert_eq!(
            o,
            Outcome {
                ok: true,
                errors: "no category foo\n".into()
            }
        );
        let argv = std::fs::read_to_string(dir.path().join("argv")).unwrap();
        assert_eq!(argv, "argv: --async_start foo\n");
    }

    #[test]
    fn failures_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let bin = script(dir.path(), "printf 'bad' >&2; exit 3");
        let o = run_atrace(&bin, &args(&["--async_stop"]), TIMEOUT);
        assert!(!o.ok);
        assert_eq!(
            o.errors,
            "bad\natrace --async_stop failed: exit status: 3\n"
        );
        let o = run_atrace(&dir.path().join("missing"), &[], TIMEOUT);
        assert!(!o.ok);
        assert!(o.errors.starts_with("cannot run "), "{}", o.errors);
    }

    /// A hung atrace is killed; the same for one that closes stderr and
    /// hangs on.
    #[test]
    fn a_hung_atrace_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let t = Duration::from_millis(200);
        for body in ["exec sleep 30", "exec 2>&-; exec sleep 30"] {
            let bin = script(dir.path(), body);
            let o = run_atrace(&bin, &args(&["--async_start"]), t);
            assert!(!o.ok);
            assert!(
                o.errors
                    .contains("Timed out waiting for atrace (cmdline: atrace --async_start)"),
                "{}",
                o.errors
            );
        }
    }

    #[test]
    fn runner_reports_setup_errors_per_source() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls");
        let bin = script(
            dir.path(),
            &format!(
                r#"echo "$*" >>{}; case "$*" in *bogus*) echo "unknown bogus" >&2; exit 1;; esac"#,
                log.display()
            ),
        );
        let mut r = AtraceRunner::new(bin);
        assert!(r.available());
        let req = |c: &str| AtraceRequest {
            categories: vec![c.to_string()],
            ..Default::default()
        };
        r.add(1, req("gfx"));
        r.add(2, req("bogus"));
        assert_eq!(r.errors(1, TIMEOUT), None);
        let e = r.errors(2, TIMEOUT).unwrap().to_string();
        assert!(e.starts_with("unknown bogus\n"), "{e}");
        assert!(e.contains("failed: exit status: 1"), "{e}");
        r.remove(2);
        r.remove(1);
        drop(r); // Waits for the queued commands.
        let calls = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            calls,
            "--async_start --only_userspace gfx\n\
             --async_start --only_userspace bogus gfx\n\
             --async_stop --only_userspace\n"
        );
        assert!(!AtraceRunner::new(dir.path().join("none")).available());
    }
}
