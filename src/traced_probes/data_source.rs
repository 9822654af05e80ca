//! What every traced_probes data source instance looks like to the
//! producer: created on SetupDataSource with its own TraceWriter, started,
//! ticked on its own timer, flushed, stopped.

use std::time::Duration;

use super::ftrace_mux::FtraceMux;
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
    fn clear_incremental_state(&mut self) {}
    /// Pids seen by ftrace in the same tracing session (process_stats).
    fn on_pids(&mut self, _pids: &[i32]) {}
}

/// Session of a config (pids flow between instances of one session).
pub fn session_of(config: &DataSourceConfig) -> u64 {
    config.tracing_session_id.unwrap_or(0)
}
