//! tracebox: Perfetto-compatible system tracing in one binary.
//!
//! Layering (enforced by `scripts/check-layering.sh`): `protozero`,
//! `tracing::core`, `tracing::service` and `probes::ftrace` parsers never
//! touch the OS; only `base` does.

pub mod applets;
pub mod base;
pub mod cmd;
pub mod ipc;
pub mod pb;
pub mod probes;
pub mod protozero;
pub mod schema;
pub mod traced;
pub mod traced_probes;
pub mod tracing;
