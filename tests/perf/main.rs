//! Integration tests: perf. One binary; each module was its own file.

#[path = "../support/mod.rs"]
mod support;

mod limits;
mod scope;
mod timebases;
mod traced_perf;
mod unwinding;
