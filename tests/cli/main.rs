//! Integration tests: cli. One binary; each module was its own file.

#[path = "../support/mod.rs"]
mod support;

mod clone;
mod compression;
mod crash;
mod faults;
mod flags;
mod kernel_loss;
mod multicall;
mod permissions;
mod probes_killed;
mod rotation;
mod service_version;
mod session;
mod signals;
mod snapshots;
