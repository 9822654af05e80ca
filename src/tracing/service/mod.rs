//! The tracing service (`traced`) logic, free of I/O.
//!
//! Building blocks: the central trace buffer, the producer packet
//! validator, the trusted trailer and sequence ids.
//!
//! The service core ([`TracingService`]) is a sans-IO state machine: the
//! adapter (`tracing::ipc` service side) calls its methods with an explicit
//! `now` (boot clock, ns), drains [`Output`]s with
//! [`TracingService::take_outputs`], arms a timer for
//! [`TracingService::next_deadline`] and calls
//! [`TracingService::on_timer`]. Clocks, randomness, system info and SMB
//! creation come from a [`ServiceEnv`] the adapter implements.
//!
//! Where things live: `enable` (EnableTracing/StartTracing/ChangeTraceConfig),
//! `data_sources` (matching, SetupDataSource with the raw config rewritten
//! by `ds_config_bytes`, lazy SMBs), `commit` (CommitData, ACLs), `flush`,
//! `stop` (DisableTracing, stop acks, FreeBuffers), `triggers`, `scrape`,
//! `read_pass` (ReadBuffers / write_into_file), `read_frames` (encoding
//! ReadBuffers responses without per-packet allocations), `service_packets`,
//! `stats`, `consumer_ops` (stats, queries, observe, detach/attach, clone),
//! `rotate` (a write_into_file session moving on to a new file).
//!
//! What a session asked for and did not get (vanished producers,
//! unoffered data sources, ignored config fields...) is written into its
//! trace by `faults`.
//!
//! Not implemented (accepted, and named in the trace by `faults`, unless
//! noted): session_semaphores / exclusive_prio, trace_filter string rules
//! (refused), zstd compression, trigger max_per_24_h and skip_probability,
//! Android's statsd / traceur / persistence plumbing, wall-clock alignment
//! of periodic flushes and file writes, extension descriptors /
//! trace_provenance packets, bugreport plumbing.

pub mod packet_validator;
pub mod sequence_ids;
pub mod trace_buffer;
pub mod trace_filter;
pub mod trusted_trailer;

mod commit;
mod compress;
pub mod config_validation;
mod consumer_ops;
mod data_sources;
pub mod ds_config_bytes;
mod enable;
pub mod faults;
mod filter_sink;
mod flush;
pub mod machines;
pub mod name_matcher;
pub mod producer;
pub mod read_frames;
pub mod read_pass;
pub mod relay_commit;
mod rotate;
mod rotate_divert;
mod scrape;
#[allow(clippy::module_inception)]
pub mod service;
pub mod service_packets;
pub mod session;
mod stats;
mod stop;
pub mod timers;
mod triggers;
pub mod types;

#[cfg(test)]
mod service_tests;
#[cfg(test)]
mod service_tests_acl;
#[cfg(test)]
mod service_tests_faults;
#[cfg(test)]
mod service_tests_filter;
#[cfg(test)]
mod service_tests_machines;
#[cfg(test)]
mod service_tests_rotate;
#[cfg(test)]
mod service_tests_timing;
#[cfg(test)]
mod test_env;

pub use consumer_ops::{CloneOptions, CloneSelector};
pub use read_frames::{FrameSink, FrameWriter, FRAME_HEAD_ROOM};
pub use service::TracingService;
pub use types::*;
