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
    // One write_fmt on a locked handle keeps lines from interleaving.
    let _ = writeln!(std::io::stderr().lock(), "[{tag}] {letter}: {args}");
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
    fn parses_threshold_names_and_numbers() {
        assert_eq!(parse_threshold(None), 3);
        assert_eq!(parse_threshold(Some("debug")), 4);
        assert_eq!(parse_threshold(Some("WARN")), 2);
        assert_eq!(parse_threshold(Some("0")), 0);
        assert_eq!(parse_threshold(Some("bogus")), 3);
    }
}
