//! `linux.sys_stats`: periodic system-wide counters from /proc and /sys.
//!
//! Build a [`SysStatsPoller`] from [`SysStatsSettings`]; call
//! [`SysStatsPoller::poll`] at [`SysStatsPoller::next_wake_ms`] and write
//! the packet with [`write_sys_stats_packet`].

pub mod config;
pub mod counters;
pub mod data_source;
pub mod encode;
pub mod model;
pub mod parse;
pub mod poller;
pub mod schedule;
pub mod sysfs;

pub use config::{clamp_period, StatFields, SysStatsSettings, MAX_PERIOD_MS, MIN_PERIOD_MS};
pub use encode::write_sys_stats_packet;
pub use model::SysStatsPacket;
pub use poller::SysStatsPoller;
pub use schedule::{Scheduler, Source, SourceSet};
