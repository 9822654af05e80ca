#![no_main]
//! cargo-fuzz entry; the target itself is `targets/websocket_wire.rs`, shared
//! with the stable replay runner (tests/fuzz_replay.rs).

#[path = "../targets/websocket_wire.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
