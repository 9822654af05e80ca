//! Integration tests: service. One binary; each module was its own file.

#[path = "../support/mod.rs"]
mod support;

mod daemon;
mod hostile_args;
mod limits;
mod session;
mod smb_to_trace_buffer;
mod smb_trace_writer;
mod trace_filter;
