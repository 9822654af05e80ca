//! traced_perf's part of the producer both daemons run
//! ([`crate::traced_probes::producer`]): it connects as
//! `perfetto.traced_perf`, registers `linux.perf` and runs one
//! [`PerfSource`] per instance.

use std::time::Duration;

use super::data_source::PerfSource;
use crate::pb::protos::DataSourceConfig;
use crate::traced_probes::producer::{Daemon, Instances};
use crate::tracing::core::trace_writer::TraceWriter;

pub const NOTIFY_ENV: &str = "TRACED_PERF_NOTIFY_FD";
pub const PRODUCER_NAME: &str = "perfetto.traced_perf";
pub const DATA_SOURCE: &str = "linux.perf";

pub struct Perf;

pub type Producer = crate::traced_probes::producer::Producer<Perf>;

impl Daemon for Perf {
    type Source = PerfSource;
    const NOTIFY_ENV: &'static str = NOTIFY_ENV;
    const PRODUCER_NAME: &'static str = PRODUCER_NAME;
    /// A read pass writes many chunks: one CommitData for them.
    const BATCH_COMMITS: bool = true;

    fn data_sources(&self) -> &'static [&'static str] {
        &[DATA_SOURCE]
    }

    fn setup(
        &mut self,
        _id: u64,
        config: &DataSourceConfig,
        writer: TraceWriter,
    ) -> Result<PerfSource, String> {
        let bytes = config.perf_event_config.as_deref().unwrap_or(&[]);
        PerfSource::setup(bytes, writer, config.stop_timeout_ms.unwrap_or(0))
    }

    fn start(&mut self, ds: &mut PerfSource) -> Option<Duration> {
        ds.start()
    }

    fn tick(&mut self, ds: &mut PerfSource) -> Option<Duration> {
        ds.tick()
    }

    fn stop(&mut self, ds: &mut PerfSource) {
        ds.stop()
    }

    fn clear_incremental_state(&mut self, ds: &mut PerfSource) {
        ds.clear_incremental_state()
    }

    fn flush(&mut self, instances: &mut Instances<PerfSource>, ids: &[u64], stopping: bool) {
        for id in ids {
            if let Some(inst) = instances.get_mut(id) {
                inst.ds.flush(stopping);
            }
        }
    }
}
