//! `linux.process_stats`: process tree and per-process stats from /proc.
//!
//! * [`ProcessStatsPoller::scan_all`]: full scan at start.
//! * [`ProcessStatsPoller::on_pids`] / [`ProcessStatsPoller::on_renames`]:
//!   on-demand scans driven by pids seen in ftrace.
//! * [`ProcessStatsPoller::poll_stats`]: every `proc_stats_poll_ms`.
//! * [`encode`]: writes the resulting packets into a protozero stream.

pub mod data_source;
pub mod encode;
mod kept;
pub mod model;
pub mod parse;
mod pidfd_scan;
pub mod poller;
pub mod procfs;
mod stats;
mod tree;

pub use encode::{write_process_stats_packet, write_process_tree_packet};
pub use model::{
    Argv, ProcStatsSample, ProcessStatsPacket, ProcessTreePacket, TreeProcess, TreeThread,
};
pub use poller::{
    cache_ttl_ticks, clamp_poll_ms, next_poll_delay_ms, Clock, ProcessStatsPoller,
    ProcessStatsSettings, ScanSource, MIN_POLL_MS,
};
