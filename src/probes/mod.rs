//! Data sources of traced_probes.

pub mod ftrace;
