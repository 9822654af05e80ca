//! Perfetto-compatible RPC over UNIX sockets. Knows nothing about tracing.
//!
//! * [`frame`]: the length-prefixed `IPCFrame` codec (pure).
//! * [`wire_check`]: structural protobuf check run before quick-protobuf.
//! * [`conn`]: one framed connection (send queue, fd passing).
//! * [`host`]: the server side; services plug in through [`host::Services`]
//!   (or as independent trait objects through [`service::ServiceList`]).
//! * [`client`]: the client side, event-loop driven or blocking.
//! * [`default_sockets`]: where traced listens by default.

pub mod client;
pub mod conn;
pub mod default_sockets;
pub mod frame;
pub mod host;
pub mod service;
pub use crate::schema::wire_check;
