//! Service-side IPC adapters: `ProducerPort` and `ConsumerPort` over the
//! IPC host, driving the sans-IO [`TracingService`] core.
//!
//! The daemon owns one [`TracedState`] and two hosts (producer sockets,
//! consumer sockets). On every host event it calls the host with
//! [`ProducerPort`] / [`ConsumerPort`], then [`TracedState::dispatch`] to
//! turn core outputs into replies (SetupTracing carries the SMB fd), file
//! writes and notifications, and re-arms its timer for
//! [`TracingService::next_deadline`].
//!
//! [`TracingService`]: crate::tracing::service::TracingService
//! [`TracingService::next_deadline`]: crate::tracing::service::TracingService::next_deadline

mod clone_file;
pub mod consumer_port;
pub mod env;
pub mod producer_port;
pub mod relay_port;
pub mod trace_file;
pub mod traced_state;

pub use consumer_port::ConsumerPort;
pub use producer_port::ProducerPort;
pub use traced_state::TracedState;
