#![no_main]
//! cargo-fuzz entry; the target itself is `targets/probes_commands.rs`, shared with the
//! stable replay runner (tests/fuzz_replay.rs).

#[path = "../targets/probes_commands.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
