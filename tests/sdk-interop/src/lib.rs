//! Shared pieces of the sdk-interop binaries: argument parsing, the
//! deterministic test payload, a small protobuf reader for checking traces,
//! and process resource figures.

pub mod args;
pub mod payload;
pub mod pbread;
pub mod procstat;
pub mod quit;
pub mod trace_check;
