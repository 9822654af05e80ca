//! Integration tests: cli. One binary; each module was its own file.

#[path = "../support/mod.rs"]
mod support;

mod clone;
mod compression;
mod flags;
mod kernel_loss;
mod multicall;
mod session;
mod signals;
mod snapshots;
