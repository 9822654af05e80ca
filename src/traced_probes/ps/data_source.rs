//! `linux.process_stats`: full scan at start, periodic stats, and process
//! tree packets for pids that ftrace saw in the same session.

use std::time::Duration;

use crate::pb::protos::DataSourceConfig;
use crate::traced_probes::clock::boot_time_ns;
use crate::traced_probes::data_source::{DataSource, Env};
use crate::traced_probes::fs_root::FsRoot;
use crate::traced_probes::ps::{
    write_process_stats_packet, write_process_tree_packet, ProcessStatsPacket, ProcessStatsPoller,
    ProcessStatsSettings, ProcessTreePacket,
};
use crate::tracing::core::trace_writer::TraceWriter;

pub struct ProcessStatsSource {
    poller: ProcessStatsPoller,
    writer: TraceWriter,
}

impl ProcessStatsSource {
    pub fn new(config: &DataSourceConfig, writer: TraceWriter) -> Self {
        let cfg = config.process_stats_config.clone().unwrap_or_default();
        let settings = ProcessStatsSettings::from_config(&cfg);
        let poller = ProcessStatsPoller::new(settings, &FsRoot::host(), Box::new(boot_time_ns));
        ProcessStatsSource { poller, writer }
    }

    fn write(&mut self, tree: Option<ProcessTreePacket>, stats: Option<ProcessStatsPacket>) {
        if let Some(t) = tree {
            write_process_tree_packet(&mut self.writer.new_packet(), &t);
        }
        if let Some(s) = stats {
            write_process_stats_packet(&mut self.writer.new_packet(), &s);
        }
    }

    fn period(&self) -> Option<Duration> {
        match self.poller.poll_period_ms() {
            0 => None,
            ms => Some(Duration::from_millis(ms as u64)),
        }
    }
}

impl DataSource for ProcessStatsSource {
    fn start(&mut self, _env: &mut Env<'_>) -> Option<Duration> {
        if self.poller.settings().scan_all_processes_on_start {
            let (tree, stats) = self.poller.scan_all();
            self.write(tree, stats);
        }
        // Like upstream, the first periodic poll happens now, not one
        // period later: a short trace still gets its samples.
        let period = self.period();
        if period.is_some() {
            let (stats, tree) = self.poller.poll_stats();
            self.write(tree, stats);
        }
        period
    }

    fn tick(&mut self, _env: &mut Env<'_>) -> Option<Duration> {
        let (stats, tree) = self.poller.poll_stats();
        self.write(tree, stats);
        self.period()
    }

    fn flush(&mut self, _env: &mut Env<'_>) {
        self.writer.flush();
    }

    fn clear_incremental_state(&mut self, _env: &mut Env<'_>) {
        self.poller.clear_incremental_state();
        // A rotated-in file (or a reader joining at a clear) gets the
        // whole tree again, not only the processes that show up later.
        if self.poller.settings().scan_all_processes_on_start {
            let (tree, stats) = self.poller.scan_all();
            self.write(tree, stats);
        }
    }

    fn on_pids(&mut self, pids: &[i32]) {
        let tree = self.poller.on_pids(pids);
        self.write(tree, None);
    }
}
