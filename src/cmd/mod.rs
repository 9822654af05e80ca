//! The `perfetto` consumer client: flags, config synthesis, session driving.

pub mod autostart;
pub mod flags;
pub mod light_config;
pub mod options;
pub mod output;
pub mod packet_writer;
pub mod pbtx;
pub mod units;
