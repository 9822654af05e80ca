//! The tracing system: what producers and the service share (`core`) and
//! the service's transport-free logic (`service`).
pub mod core;
pub mod ipc;
pub mod service;
