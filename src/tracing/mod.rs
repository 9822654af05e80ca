//! The tracing system: what producers and the service share (`core`).
pub mod core;
