//! What every traced_probes data source instance looks like to the
//! producer: created on SetupDataSource with its own TraceWriter, started,
//! ticked on its own timer, flushed, stopped.

use std::time::Duration;

use super::ftrace::mux::FtraceMux;
use crate::pb::protos::DataSourceConfig;

/// Data source names we register, in registration order.
pub const FTRACE: &str = "linux.ftrace";
pub const PROCESS_STATS: &str = "linux.process_stats";
pub const SYS_STATS: &str = "linux.sys_stats";
pub const SYSTEM_INFO: &str = "linux.system_info";
pub const SYSFS_POWER: &str = "linux.sysfs_power";
pub const ALL: [&str; 5] = [FTRACE, PROCESS_STATS, SYS_STATS, SYSTEM_INFO, SYSFS_POWER];

/// Shared producer state a data source may use.
pub struct Env<'a> {
    pub ftrace: &'a mut FtraceMux,
}

/// One data source instance. Ticks are driven by one-shot timers: `start`
/// and `tick` return the delay until the next tick, if any.
pub trait DataSource {
    fn start(&mut self, env: &mut Env<'_>) -> Option<Duration>;
    fn tick(&mut self, _env: &mut Env<'_>) -> Option<Duration> {
        None
    }
    /// Writes out everything buffered and returns the writer's chunks.
    fn flush(&mut self, env: &mut Env<'_>);
    /// Last call before the instance is dropped.
    fn stop(&mut self, env: &mut Env<'_>) {
        self.flush(env);
    }
    fn clear_incremental_state(&mut self, _env: &mut Env<'_>) {}
    /// What setup could not give as asked (unknown events, an instance
    /// another process owns), told to traced when the instance starts.
    fn setup_problems(&self, _env: &Env<'_>) -> Vec<String> {
        Vec::new()
    }
    /// Pids seen by ftrace in the same tracing session (process_stats).
    fn on_pids(&mut self, _pids: &[i32]) {}
}

/// Session of a config (pids flow between instances of one session).
pub fn session_of(config: &DataSourceConfig) -> u64 {
    config.tracing_session_id.unwrap_or(0)
}

/// For sessions with a duration: if the service has not stopped the
/// instance after max(2 × (5 s + duration + stop timeout), 5 min), we stop
/// it ourselves (upstream aborts the process), so a lost StopDataSource
/// cannot leave ftrace running forever.
pub fn watchdog_delay(config: &DataSourceConfig) -> Option<Duration> {
    let duration = config.trace_duration_ms.filter(|&d| d > 0)? as u64;
    let stop_timeout = config.stop_timeout_ms.unwrap_or(0) as u64;
    let ms = (2 * (5_000 + duration + stop_timeout)).max(5 * 60 * 1000);
    Some(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchdog_only_for_timed_sessions() {
        let mut c = DataSourceConfig::default();
        assert_eq!(watchdog_delay(&c), None);
        c.trace_duration_ms = Some(10_000);
        assert_eq!(watchdog_delay(&c), Some(Duration::from_secs(300)));
        c.trace_duration_ms = Some(600_000);
        c.stop_timeout_ms = Some(20_000);
        assert_eq!(watchdog_delay(&c), Some(Duration::from_millis(1_250_000)));
        c.trace_duration_ms = Some(u32::MAX);
        assert!(watchdog_delay(&c).is_some(), "no overflow");
    }
}
