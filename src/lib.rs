//! tracebox: Perfetto-compatible system tracing in one binary.
//!
//! Layering (enforced by `scripts/check-layering.sh`): `protozero`,
//! `tracing::core`, `tracing::service` and `traced_probes::ftrace::parse`
//! never touch the OS; only `base` and the reader files named in README's
//! layer map do.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod applets;
pub mod base;
pub mod cmd;
pub mod codec;
pub mod ipc;
pub mod mem;
pub mod pb;
pub mod protozero;
pub mod report;
pub mod schema;
pub mod traced;
pub mod traced_perf;
pub mod traced_probes;
pub mod traced_relay;
pub mod tracing;
pub mod websocket_bridge;

/// What every applet, the service and the producers report as their version.
pub const VERSION: &str = concat!("tracebox ", env!("CARGO_PKG_VERSION"));

/// The service's `tracing_service_version` (SystemInfo and the service
/// state): upstream's form first, so trace_processor knows a service that
/// flushes on every `write_into_file` write (it reads the major number of
/// `Perfetto vNN.` and stops warning `config_write_into_file_no_flush` from
/// v54 on), then what it really is.
pub const SERVICE_VERSION: &str =
    concat!("Perfetto v54.0 (tracebox ", env!("CARGO_PKG_VERSION"), ")");
