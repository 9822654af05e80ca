//! How long ftrace events may sit in the kernel before traced_probes reads
//! them: the rule traced_probes' readers follow and the end line states
//! when a traced_probes died with events still there.

use crate::pb::protos::TraceConfig;

/// A worker's longest sleep on a quiet cpu when no session set its own
/// drain period: data leaves the kernel at the fill level, or this often.
pub const QUIET_WAIT_MS: u64 = 2000;

/// The largest `drain_period_ms` honoured (upstream's range).
pub const MAX_DRAIN_MS: u32 = 60_000;

/// Slack for the drain that follows a read: main parses the pages and
/// commits them to traced within this after a worker took them.
pub const DELIVERY_SLACK_MS: u64 = 200;

/// Whether `drain_period_ms` is one the readers follow.
pub fn explicit_drain(drain_period_ms: Option<u32>) -> Option<u32> {
    drain_period_ms.filter(|ms| (1..=MAX_DRAIN_MS).contains(ms))
}

/// How old, at most, an event still in the kernel buffer can be (ms):
/// every older one has reached traced. With `drain_period_ms: P` that is
/// P plus the slack, else the quiet wait plus the slack.
pub fn kernel_window_ms(drain_period_ms: Option<u32>) -> u64 {
    let wait = explicit_drain(drain_period_ms).map_or(QUIET_WAIT_MS, u64::from);
    wait + DELIVERY_SLACK_MS
}

/// The longest [`kernel_window_ms`] of the config's `linux.ftrace` data
/// sources (`None`: it has none).
pub fn config_kernel_window_ms(config: &TraceConfig) -> Option<u64> {
    config
        .data_sources
        .iter()
        .filter_map(|d| d.config.as_ref())
        .filter(|c| c.name.as_deref() == Some("linux.ftrace"))
        .map(|c| kernel_window_ms(c.ftrace_config.as_ref().and_then(|f| f.drain_period_ms)))
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_the_period_or_the_quiet_wait_plus_slack() {
        assert_eq!(kernel_window_ms(Some(100)), 300);
        assert_eq!(kernel_window_ms(None), 2200);
        assert_eq!(kernel_window_ms(Some(0)), 2200);
        assert_eq!(kernel_window_ms(Some(60_001)), 2200);
    }
}
