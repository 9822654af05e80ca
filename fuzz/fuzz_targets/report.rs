#![no_main]
//! cargo-fuzz entry; the target itself is `targets/report.rs`, shared
//! with the stable replay runner (tests/fuzz_replay.rs).

#[path = "../targets/report.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
