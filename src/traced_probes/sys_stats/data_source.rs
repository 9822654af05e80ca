//! `linux.sys_stats`: one packet per wake-up with every source due then.

use std::time::Duration;

use crate::pb::protos::DataSourceConfig;
use crate::traced_probes::clock::{boot_time_ms, boot_time_ns};
use crate::traced_probes::data_source::{DataSource, Env};
use crate::traced_probes::fs_root::FsRoot;
use crate::traced_probes::sys_stats::{write_sys_stats_packet, SysStatsPoller, SysStatsSettings};
use crate::tracing::core::trace_writer::TraceWriter;

pub struct SysStatsSource {
    poller: SysStatsPoller,
    writer: TraceWriter,
}

impl SysStatsSource {
    pub fn new(config: &DataSourceConfig, writer: TraceWriter) -> Self {
        let cfg = config.sys_stats_config.clone().unwrap_or_default();
        let settings = SysStatsSettings::from_config(&cfg);
        let poller = SysStatsPoller::new(&settings, &FsRoot::host(), Box::new(boot_time_ns));
        SysStatsSource { poller, writer }
    }

    fn poll(&mut self) -> Option<Duration> {
        let now = boot_time_ms();
        if let Some(p) = self.poller.poll(now) {
            write_sys_stats_packet(&mut self.writer.new_packet(), &p);
        }
        let next = self.poller.next_wake_ms()?;
        Some(Duration::from_millis(
            next.saturating_sub(boot_time_ms()).max(1),
        ))
    }
}

impl DataSource for SysStatsSource {
    fn start(&mut self, _env: &mut Env<'_>) -> Option<Duration> {
        if !self.poller.is_active() {
            return None;
        }
        self.poll()
    }

    fn tick(&mut self, _env: &mut Env<'_>) -> Option<Duration> {
        self.poll()
    }

    fn flush(&mut self, _env: &mut Env<'_>) {
        self.writer.flush();
    }
}
