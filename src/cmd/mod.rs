//! The `perfetto` consumer client: flags, config synthesis, session driving.

pub mod flags;
pub mod light_config;
pub mod options;
pub mod units;
