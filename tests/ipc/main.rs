//! Integration tests: ipc. One binary; each module was its own file.

#[path = "../support/mod.rs"]
mod support;

mod fuzz_corpus;
mod host_client;
mod robustness;
mod shm_cross_process;
