//! tracebox: Perfetto-compatible system tracing in one binary.
//!
//! Layering (enforced by `scripts/check-layering.sh`): `protozero`,
//! `tracing::core`, `tracing::service` and `probes::ftrace` parsers never
//! touch the OS; only `base` does.

pub mod base;
pub mod ipc;
pub mod pb;
pub mod protozero;
pub mod tracing;
