//! The `perfetto` consumer client: flags, config synthesis, session driving.

pub mod attach;
pub mod autostart;
pub mod flags;
pub mod kernel_loss;
pub mod light_check;
pub mod light_config;
pub mod list;
pub mod options;
pub mod output;
pub mod packet_writer;
pub mod pbtx;
pub mod query;
pub mod rotate;
pub mod rotate_plan;
pub mod rpc;
pub mod session;
pub mod signals;
pub mod snapshots;
pub mod start_problems;
pub mod status_line;
pub mod trace_faults;
pub mod triggers;
pub mod units;
