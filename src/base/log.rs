//! Minimal stderr logging shared by every applet.
//!
//! Lines look like `[traced] E: message`. The applet tag is set once with
//! [`set_tag`]; the threshold comes from env `TRACEBOX_LOG`
//! (`error`, `warn`, `info` (default), `debug`, or `0`..`4`, where `0` mutes).
//!
//! ```
//! tracebox::base::log::set_tag("traced");
//! tracebox::log_info!("listening on {}", "/tmp/perfetto-producer");
//! ```

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// Severity of a log line; larger is chattier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    /// Something failed; the process usually carries on.
    Error = 1,
    /// Unexpected but handled (bad peer input, dropped client).
    Warn = 2,
    /// Lifecycle events.
    Info = 3,
    /// Verbose diagnostics.
    Debug = 4,
}

const UNSET: u8 = u8::MAX;
static THRESHOLD: AtomicU8 = AtomicU8::new(UNSET);
static TAG: OnceLock<&'static str> = OnceLock::new();

/// Sets the applet tag printed on every line. Only the first call wins.
pub fn set_tag(tag: &'static str) {
    let _ = TAG.set(tag);
}

/// Overrides the threshold from `TRACEBOX_LOG` (mainly for tests and `-v`).
pub fn set_threshold(level: u8) {
    THRESHOLD.store(level, Ordering::Relaxed);
}

fn parse_threshold(value: Option<&str>) -> u8 {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        Some("0") | Some("off") | Some("none") => 0,
        Some("1") | Some("error") => 1,
        Some("2") | Some("warn") | Some("warning") => 2,
        Some("4") | Some("debug") | Some("verbose") => 4,
        _ => Level::Info as u8,
    }
}

fn threshold() -> u8 {
    let t = THRESHOLD.load(Ordering::Relaxed);
    if t != UNSET {
        return t;
    }
    let t = parse_threshold(std::env::var("TRACEBOX_LOG").ok().as_deref());
    THRESHOLD.store(t, Ordering::Relaxed);
    t
}

/// True if lines of `level` are printed.
pub fn enabled(level: Level) -> bool {
    level as u8 <= threshold()
}

/// Writes one line; use the `log_*!` macros instead.
pub fn write(level: Level, args: std::fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let letter = match level {
        Level::Error => 'E',
        Level::Warn => 'W',
        Level::Info => 'I',
        Level::Debug => 'D',
    };
    let tag = TAG.get().copied().unwrap_or("tracebox");
    if let Some(sink) = SINK.get() {
        if let Ok(mut sink) = sink.lock() {
            return sink.write(level, tag, letter, args);
        }
    }
    // One write_fmt on a locked handle keeps lines from interleaving.
    let _ = writeln!(std::io::stderr().lock(), "[{tag}] {letter}: {args}");
}

/// Where a daemon started with `--background` logs (its stderr is
/// /dev/null then).
enum Sink {
    /// syslogd's datagram socket: one message per line.
    Syslog(UnixDatagram),
    /// A file that never grows past `max` bytes: when a line would cross
    /// the bound, the file starts over with a note saying so.
    File { file: std::fs::File, max: u64 },
}

static SINK: OnceLock<std::sync::Mutex<Sink>> = OnceLock::new();

/// syslog severities (RFC 5424) with facility `daemon` (3).
fn syslog_priority(level: Level) -> u8 {
    3 * 8
        + match level {
            Level::Error => 3,
            Level::Warn => 4,
            Level::Info => 6,
            Level::Debug => 7,
        }
}

impl Sink {
    fn write(&mut self, level: Level, tag: &str, letter: char, args: std::fmt::Arguments<'_>) {
        match self {
            Sink::Syslog(sock) => {
                let msg = format!(
                    "<{}>{tag}[{}]: {letter}: {args}",
                    syslog_priority(level),
                    std::process::id()
                );
                let _ = sock.send(msg.as_bytes());
            }
            Sink::File { file, max } => {
                let now = utc_timestamp(std::time::SystemTime::now());
                let line = format!("{now} [{tag}] {letter}: {args}\n");
                let len = file.metadata().map_or(0, |m| m.len());
                if len + line.len() as u64 > *max {
                    let _ = file.set_len(0);
                    let _ = writeln!(
                        file,
                        "[{tag}] I: log restarted: it reached its {} KB bound \
                         (TRACEBOX_LOG_MAX_KB)",
                        *max / 1024
                    );
                }
                let _ = file.write_all(line.as_bytes());
            }
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC) for a log file's lines (syslog
/// stamps its own).
fn utc_timestamp(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Default bound of the log file.
const DEFAULT_LOG_MAX_KB: u64 = 256;

/// For a daemon gone to the background: log to syslog when its socket
/// (`$TRACEBOX_SYSLOG_SOCKET`, default /dev/log) answers, else append to
/// `$TRACEBOX_LOG_FILE` (bounded by `$TRACEBOX_LOG_MAX_KB`), else nowhere.
/// Returns where, for a first log line.
pub fn use_background_sink() -> Option<String> {
    let syslog = std::env::var("TRACEBOX_SYSLOG_SOCKET").unwrap_or_else(|_| "/dev/log".into());
    if let Ok(sock) = UnixDatagram::unbound() {
        if sock.connect(&syslog).is_ok() {
            let _ = SINK.set(std::sync::Mutex::new(Sink::Syslog(sock)));
            return Some(format!("syslog ({syslog})"));
        }
    }
    let path = std::env::var("TRACEBOX_LOG_FILE")
        .ok()
        .filter(|p| !p.is_empty())?;
    let max = std::env::var("TRACEBOX_LOG_MAX_KB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(DEFAULT_LOG_MAX_KB)
        .max(1)
        * 1024;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(&path)
        .ok()?;
    // Panics and stray prints land there too.
    let _ = nix::unistd::dup2(std::os::fd::AsRawFd::as_raw_fd(&file), 2);
    let _ = SINK.set(std::sync::Mutex::new(Sink::File { file, max }));
    Some(path)
}

/// Logs at [`Level::Error`].
#[macro_export]
macro_rules! log_error {
    ($($arg:tt)*) => { $crate::base::log::write($crate::base::log::Level::Error, format_args!($($arg)*)) };
}
/// Logs at [`Level::Warn`].
#[macro_export]
macro_rules! log_warn {
    ($($arg:tt)*) => { $crate::base::log::write($crate::base::log::Level::Warn, format_args!($($arg)*)) };
}
/// Logs at [`Level::Info`].
#[macro_export]
macro_rules! log_info {
    ($($arg:tt)*) => { $crate::base::log::write($crate::base::log::Level::Info, format_args!($($arg)*)) };
}
/// Logs at [`Level::Debug`].
#[macro_export]
macro_rules! log_debug {
    ($($arg:tt)*) => { $crate::base::log::write($crate::base::log::Level::Debug, format_args!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_sink_stays_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let mut sink = Sink::File { file, max: 300 };
        for i in 0..50 {
            sink.write(Level::Info, "t", 'I', format_args!("line number {i}"));
            assert!(std::fs::metadata(&path).unwrap().len() <= 300);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("log restarted"), "{text}");
        assert!(text.ends_with("Z [t] I: line number 49\n"), "{text}");
    }

    #[test]
    fn log_file_lines_are_stamped_in_utc() {
        use std::time::{Duration, UNIX_EPOCH};
        let at = |s: u64, ms: u64| UNIX_EPOCH + Duration::from_millis(s * 1000 + ms);
        assert_eq!(utc_timestamp(at(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            utc_timestamp(at(951_827_696, 7)),
            "2000-02-29T12:34:56.007Z"
        );
        assert_eq!(
            utc_timestamp(at(1_795_825_096, 358)),
            "2026-11-28T00:18:16.358Z"
        );
    }

    #[test]
    fn parses_threshold_names_and_numbers() {
        assert_eq!(parse_threshold(None), 3);
        assert_eq!(parse_threshold(Some("debug")), 4);
        assert_eq!(parse_threshold(Some("WARN")), 2);
        assert_eq!(parse_threshold(Some("0")), 0);
        assert_eq!(parse_threshold(Some("bogus")), 3);
    }
}
