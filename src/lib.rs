//! tracebox: Perfetto-compatible system tracing in one binary.
//!
//! Layering (enforced by `scripts/check-layering.sh`): `protozero`,
//! `tracing::core`, `tracing::service` and `traced_probes::ftrace::parse`
//! never touch the OS; only `base` and the reader files named in README's
//! layer map do.

pub mod applets;
pub mod base;
pub mod cmd;
pub mod ipc;
pub mod pb;
pub mod protozero;
pub mod schema;
pub mod traced;
pub mod traced_perf;
pub mod traced_probes;
pub mod tracing;
