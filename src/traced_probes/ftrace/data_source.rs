//! `linux.ftrace`: a handle on this instance's state inside the shared
//! [`FtraceMux`](crate::traced_probes::ftrace::mux::FtraceMux), which owns
//! its writer and does the reading for every session at once.

use std::time::Duration;

use crate::pb::protos::DataSourceConfig;
use crate::traced_probes::data_source::{session_of, DataSource, Env};
use crate::tracing::core::trace_writer::TraceWriter;

pub struct FtraceSource {
    id: u64,
}

impl FtraceSource {
    pub fn setup(
        id: u64,
        config: &DataSourceConfig,
        writer: TraceWriter,
        env: &mut Env<'_>,
    ) -> Result<Self, String> {
        let cfg = config.ftrace_config.clone().unwrap_or_default();
        env.ftrace.setup(id, &cfg, session_of(config), writer);
        Ok(FtraceSource { id })
    }
}

impl DataSource for FtraceSource {
    fn start(&mut self, env: &mut Env<'_>) -> Option<Duration> {
        if let Err(e) = env.ftrace.start(self.id) {
            crate::log_error!("linux.ftrace {}: {e}", self.id);
        }
        // The producer drives reading with its own drain timer.
        None
    }

    fn setup_problems(&self, env: &Env<'_>) -> Vec<String> {
        env.ftrace.setup_problems(self.id)
    }

    fn flush(&mut self, env: &mut Env<'_>) {
        env.ftrace.flush(&[self.id]);
    }

    fn stop(&mut self, env: &mut Env<'_>) {
        env.ftrace.stop(self.id);
    }

    /// Kernel symbols are interned again from the next bundle on (a
    /// rotated-in file, or a ring buffer that wrapped, gets their names).
    fn clear_incremental_state(&mut self, env: &mut Env<'_>) {
        env.ftrace.clear_incremental_state(self.id);
    }
}
