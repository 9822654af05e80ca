//! What the integration tests share: daemons on private sockets, CLI
//! runners, fake services, generated inputs, ftrace fixtures. Each
//! test binary (`tests/GROUP/main.rs`) declares this module once.
#![allow(dead_code)]

pub mod cli;
pub mod common;
pub mod eio_fs;
pub mod exec_file;
pub mod ftrace;
pub mod ipc_peer;
pub mod probes;
pub mod traced;
